# tests/e2e/pg_source.sh - the postgres source against a real PostgreSQL 15 (tests/pg/pg.sh):
# shared: pg
# labels: asan
# every type with edge values to sqlite and to the null sink, compared column by column with
# psql's text of the source; multi-shard full copy killed with SIGKILL and resumed (set
# equality, zero duplicates); incremental runs with many rows sharing one cursor value
# across batch boundaries; clear messages for a wrong password, an unreachable host and a
# missing table, never showing the (canary) password; parallelism 3 over 10 shards (equal
# set, a version hash without it), one exported snapshot shared by every reader while a
# concurrent session updates and inserts rows, kill -9 during a parallel copy and resume.
. "$FERRY_SRC/tests/e2e/lib.sh"
. "$FERRY_SRC/tests/pg/pg.sh"
pg_start

# ---- every type ------------------------------------------------------------------------
pgq >/dev/null <<'SQL'
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE TABLE public.every (
  id bigint PRIMARY KEY, b bool, i2 smallint, i4 int, f4 real, f8 float8,
  n numeric, n2 numeric(12,2), t text, vc varchar(20), bc char(5), by bytea,
  d date, tm time, ts timestamp, tstz timestamptz, u uuid, j json, jb jsonb, m mood, arr int[]);
INSERT INTO every VALUES
 (1, true, -32768, 2147483647, 1.5, 'Infinity', 123456789012345678901234567890.123456789, -12.34,
  E'h\u00e9llo "q" \'s\'\nline2 \u2603', '', 'ab', '\x00ff10', '1969-07-20', '23:59:59.999999',
  '1900-01-01 00:00:00.000001', '2999-12-31 23:59:59+05', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
  '{"a": [1, 2]}', '{"x": {"y": [true, null, {"z": "\u00e9"}]}}', 'happy', '{1,2,NULL}'),
 (2, NULL, NULL, NULL, NULL, '-Infinity', -0.000000000000000000000000000000001, NULL, NULL, NULL,
  NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
 (3, false, 0, 0, -2.5, -1e300, -98765432109876543210987654321098765.4321, 9999999999.99, 'x',
  'y', 'z', '', '0001-01-01', '00:00', '1970-01-01', '1970-01-01 00:00+00',
  '00000000-0000-0000-0000-000000000000', 'null', '"s"', 'sad', '{}'),
 (4, true, 32767, -2147483648, 3.25, 'NaN', 'NaN', -0.01, repeat('long', 5000), 'v', 'abcde',
  decode(repeat('deadbeef', 300000), 'hex'), '2262-04-11', '12:00:00.5', '1066-10-14 09:00:00',
  '1850-06-01 12:00:00-03', 'ffffffff-ffff-ffff-ffff-ffffffffffff', '[]', '{}', 'ok',
  '{-1,2147483647}');
SQL
cat > types.yaml <<EOF
version: 1
name: pgtypes
source:
  type: postgres
  url: env:FERRY_PG_URL
  resources:
    - table: public.every
      mode: full
sink:
  type: sqlite
  path: $T/types.db
  write: append
EOF
expect_exit 0 ferry run types.yaml --json
[ "$(q types.db 'SELECT count(*) FROM every')" = 4 ] || fail "4 rows of every type: $OUT"

# For each column: psql's text of the source vs sqlite3's text of the destination, with the
# sqlite sink's documented forms normalised on the PostgreSQL side (booleans 1/0, times with
# 6 fraction digits, timestamptz in UTC with +00:00, bytea as hex, floats as numbers).
export PGTZ=UTC
cols=$(pgq -c "SELECT string_agg(attname, ' ' ORDER BY attnum) FROM pg_attribute
               WHERE attrelid = 'public.every'::regclass AND attnum > 0")
for c in $cols; do
  case $c in
    b) pexpr="CASE WHEN b THEN '1' WHEN NOT b THEN '0' END"; sexpr=b ;;
    f4|f8) pexpr="CASE WHEN $c::text IN ('NaN','Infinity','-Infinity') THEN $c::text ELSE ($c::float8)::text END"
           sexpr="CASE WHEN typeof($c) = 'real' AND $c > 1e308 THEN 'Infinity' WHEN typeof($c) = 'real' AND $c < -1e308 THEN '-Infinity' WHEN $c IS NULL THEN NULL ELSE $c END" ;;
    by) pexpr="encode(by, 'hex')"; sexpr="CASE WHEN by IS NOT NULL THEN lower(hex(by)) END" ;;
    tm) pexpr="to_char('2000-01-01'::date + tm, 'HH24:MI:SS.US')"; sexpr=tm ;;
    ts) pexpr="to_char(ts, 'YYYY-MM-DD HH24:MI:SS.US')"; sexpr=ts ;;
    tstz) pexpr="to_char(tstz, 'YYYY-MM-DD HH24:MI:SS.US') || '+00:00'"; sexpr=tstz ;;
    jb) pexpr="jb::text"; sexpr=jb ;;
    bc) pexpr="CASE WHEN bc IS NOT NULL THEN format('%s', bc) END"; sexpr=bc ;; # padded, as psql shows it
    *) pexpr="$c::text"; sexpr=$c ;;
  esac
  pgq -c "SELECT id, coalesce($pexpr, '<NULL>') FROM every ORDER BY id" > "src_$c.txt"
  q types.db "SELECT id, coalesce($sexpr, '<NULL>') FROM every ORDER BY id" | tr '|' '|' > "dst_$c.txt"
  # psql -A separates with '|' too; both sides print id|value, newlines inside values alike.
  if ! cmp -s "src_$c.txt" "dst_$c.txt"; then
    # float columns: sqlite prints REAL with its own digits; compare numerically instead.
    if [ "$c" = f4 ] || [ "$c" = f8 ]; then
      paste -d'\n' "src_$c.txt" "dst_$c.txt" | awk -F'|' 'NR%2==1{a=$2; next} { if (a != $2 && (a+0) != ($2+0)) { print "row " $1 ": " a " vs " $2; bad=1 } } END { exit bad }' \
        || fail "column $c differs: $(diff "src_$c.txt" "dst_$c.txt" | head -5)"
    else
      fail "column $c differs: $(diff "src_$c.txt" "dst_$c.txt" | head -10)"
    fi
  fi
done
pass "every type: each column of the sqlite copy equals psql's text of the source"

sed -e 's/type: sqlite/type: null/' -e "/path: /d" -e 's/write: append/write: append/' types.yaml > null.yaml
sed -i 's/name: pgtypes/name: pgnull/' null.yaml
expect_exit 0 ferry run null.yaml --json
[ "$(json_field "$OUT" .rows)" = 4 ] || fail "null sink receives 4 rows: $OUT"
pass "every type to the null sink"

# ---- multi-shard full copy, SIGKILL, resume ----------------------------------------------
pgq >/dev/null <<'SQL'
CREATE TABLE public.big (id bigint PRIMARY KEY, v text, amount numeric(12,2), at timestamptz);
INSERT INTO big SELECT g, md5(g::text), (g % 100000) / 100.0, '2024-01-01'::timestamptz + g * interval '1 second'
FROM generate_series(1, 200000) g;
SQL
cat > big.yaml <<EOF
version: 1
name: pgbig
source:
  type: postgres
  url: env:FERRY_PG_URL
  shard_rows: 25000
  resources:
    - table: big
      mode: full
sink:
  type: sqlite
  path: $T/big.db
  write: append
batch: {rows: 2000}
EOF
"$FERRY_BIN" run big.yaml --quiet > big1.log 2>&1 &
pid=$!
for _ in $(seq 1 400); do
  got=$(q big.db "SELECT count(*) FROM big" 2>/dev/null || echo 0)
  [ "${got:-0}" -ge 30000 ] && break
  sleep 0.05
done
kill -9 $pid 2>/dev/null || true
wait $pid 2>/dev/null || true
partial=$(q big.db "SELECT count(*) FROM big" 2>/dev/null || echo 0)
[ "$partial" -lt 200000 ] || fail "the kill came after the copy ended ($partial rows): make the table bigger"
expect_exit 0 ferry run big.yaml --json
[ "$(json_field "$OUT" .resumed)" = true ] || fail "the killed run is resumed: $OUT"
pgq -c "SELECT id || '|' || v || '|' || amount::text FROM big ORDER BY id" > big_src.txt
q big.db "SELECT id || '|' || v || '|' || amount FROM big ORDER BY id" > big_dst.txt
cmp -s big_src.txt big_dst.txt || fail "big: set differs after resume: $(diff big_src.txt big_dst.txt | head -5)"
[ "$(q big.db 'SELECT count(*) - count(DISTINCT id) FROM big')" = 0 ] || fail "big: duplicates after resume"
pass "8-shard full copy killed at $partial rows and resumed: equal set, no duplicates"

# ---- incremental with ties across batch boundaries -------------------------------------
pgq >/dev/null <<'SQL'
CREATE TABLE public.ev (id int PRIMARY KEY, updated_at timestamptz, note text);
INSERT INTO ev SELECT g, '2024-05-01 10:00:00+00', 'a' || g FROM generate_series(1, 5000) g;
INSERT INTO ev VALUES (5001, NULL, 'null cursor');
SQL
cat > inc.yaml <<EOF
version: 1
name: pginc
source:
  type: postgres
  url: env:FERRY_PG_URL
  resources:
    - table: ev
      mode: incremental
      cursor: [updated_at]
sink:
  type: sqlite
  path: $T/inc.db
  write: upsert
batch: {rows: 700}
EOF
expect_exit 0 ferry run inc.yaml --json
[ "$(json_field "$OUT" .rows)" = 5000 ] || fail "first incremental run reads the 5000 rows with a cursor: $OUT"
pgq >/dev/null <<'SQL'
INSERT INTO ev SELECT g, '2024-05-01 10:00:00+00', 'late tie ' || g FROM generate_series(5002, 6500) g;
INSERT INTO ev SELECT g, '2024-05-02 00:00:00+00', 'b' || g FROM generate_series(6501, 8000) g;
SQL
expect_exit 0 ferry run inc.yaml --json
[ "$(json_field "$OUT" .rows)" = 2999 ] || fail "second run reads the 2999 new rows (ties with higher keys included): $OUT"
expect_exit 0 ferry run inc.yaml --json
[ "$(json_field "$OUT" .rows)" = 0 ] || fail "third run reads nothing: $OUT"
[ "$(q inc.db 'SELECT count(*), count(DISTINCT id) FROM ev')" = "7999|7999" ] || fail "inc: rows $(q inc.db 'SELECT count(*) FROM ev')"
[ "$(q inc.db 'SELECT count(*) FROM ev WHERE id = 5001')" = 0 ] || fail "inc: a NULL cursor row was read"
pass "incremental: ties across 700-row batches, 3 runs, exact; NULL cursor rows skipped"

# ---- clear messages, no secret ---------------------------------------------------------
canary="Canary-$RANDOM-pw"
export BAD_URL="postgresql://ferry_admin:$canary@127.0.0.1:$PGPORT/$PGDATABASE"
sed -e 's/FERRY_PG_URL/BAD_URL/' -e 's/name: pgtypes/name: pgbad/' types.yaml > bad.yaml
expect_exit 1 ferry run bad.yaml
grep -q "password authentication failed" <<<"$OUT" || fail "wrong password: $OUT"
grep -q "127.0.0.1:$PGPORT/$PGDATABASE" <<<"$OUT" || fail "wrong password names the host: $OUT"
grep -q "$canary" <<<"$OUT" && fail "the password leaked: $OUT"
[ "$(grep -c "password authentication failed" <<<"$OUT")" = 1 ] || fail "one message: $OUT"
pass "wrong password: one message naming the host, no secret"

dead=$((PGPORT == 65000 ? 65001 : 65000))
export DEAD_URL="postgresql://ferry_admin:$canary@127.0.0.1:$dead/ferry?connect_timeout=3"
sed -e 's/FERRY_PG_URL/DEAD_URL/' -e 's/name: pgtypes/name: pgdead/' types.yaml > dead.yaml
expect_exit 1 ferry run dead.yaml
grep -q "cannot connect to 127.0.0.1:$dead" <<<"$OUT" || fail "unreachable host: $OUT"
grep -q "$canary" <<<"$OUT" && fail "the password leaked: $OUT"
pass "unreachable host: names host and port, no secret"

sed -e 's/public.every/public.nosuch/' -e 's/name: pgtypes/name: pgmissing/' types.yaml > missing.yaml
set +e
OUT=$("$FERRY_BIN" run missing.yaml 2>&1)
rc=$?
set -e
[ $rc -ne 0 ] || fail "missing table must fail"
grep -q 'table "public"."nosuch" not found' <<<"$OUT" || fail "missing table: $OUT"
grep -q "$PG_ADMIN_PASSWORD" <<<"$OUT" && fail "the password leaked: $OUT"
pass "missing table: names schema.table"

# ---- lookback: the next run re-reads the last hour before the saved cursor ----------------
sed -e 's/name: pginc/name: pglookback/' -e 's/cursor: \[updated_at\]/cursor: [updated_at]\n      lookback: 1h/' \
    -e "s|$T/inc.db|$T/lb.db|" inc.yaml > lb.yaml
expect_exit 0 ferry run lb.yaml --json
[ "$(json_field "$OUT" .rows)" = 7999 ] || fail "lookback: first run reads everything: $OUT"
expect_exit 0 ferry run lb.yaml --json
[ "$(json_field "$OUT" .rows)" = 1500 ] || fail "lookback: second run re-reads the 1500 rows of the last hour: $OUT"
[ "$(q lb.db 'SELECT count(*), count(DISTINCT id) FROM ev')" = "7999|7999" ] || fail "lookback: upsert converges"
pass "lookback 1h: re-read rows converge under upsert"

# ---- parallel readers sharing one snapshot -----------------------------------------------
# Even ids only, so that rows inserted later (odd ids) fall inside the frozen key ranges: a
# reader without the shared snapshot would see them. Read as the least-privilege role.
pgq >/dev/null <<'SQL'
CREATE TABLE public.par (id bigint PRIMARY KEY, v int NOT NULL, note text);
INSERT INTO par SELECT 2 * g, g % 1000, md5(g::text) FROM generate_series(1, 40000) g;
SQL
par_yaml() { # FILE NAME DB EXTRA_BATCH_YAML
  cat > "$1" <<EOF
version: 1
name: $2
source:
  type: postgres
  url: env:FERRY_PG_READER_URL
  shard_rows: 4000
  parallelism: 3
  resources:
    - table: par
      mode: full
sink:
  type: sqlite
  path: $T/$3
  write: append
batch: {rows: 2000$4}
EOF
}
par_yaml par.yaml pgpar par.db ""
expect_exit 0 ferry check par.yaml
grep -q "10 shards" <<<"$OUT" || fail "par: 10 shards planned: $OUT"
expect_exit 0 ferry run par.yaml --json
[ "$(json_field "$OUT" .rows)" = 40000 ] || fail "par: 40000 rows: $OUT"
pgq -c "SELECT id || '|' || v || '|' || note FROM par ORDER BY id" > par_src.txt
q par.db "SELECT id || '|' || v || '|' || note FROM par ORDER BY id" > par_dst.txt
cmp -s par_src.txt par_dst.txt || fail "par: set differs: $(diff par_src.txt par_dst.txt | head -5)"
pass "parallelism 3 over 10 shards: equal set"

# parallelism is tuning: the pipeline version does not change with it.
v3=$(grep -o 'version [0-9a-f]*' <<<"$(ferry check par.yaml 2>&1)")
sed -e '/parallelism: 3/d' par.yaml > par1.yaml
v1=$(grep -o 'version [0-9a-f]*' <<<"$(ferry check par1.yaml 2>&1)")
[ -n "$v1" ] && [ "$v1" = "$v3" ] || fail "parallelism changed the version: '$v1' vs '$v3'"
pass "parallelism is left out of the version hash"

# A writer changes every row and inserts rows inside the key ranges while a slow parallel
# copy holds its snapshot: the copy must see none of it (shards started after the change
# included).
par_yaml snap.yaml pgsnap snap.db ""
FERRY_FAILPOINTS="before_sink_apply=sleep(250)" "$FERRY_BIN" run snap.yaml --quiet > snap.log 2>&1 &
pid=$!
for _ in $(seq 1 400); do
  got=$(q snap.db "SELECT count(*) FROM par" 2>/dev/null || echo 0)
  [ "${got:-0}" -ge 1 ] && break
  sleep 0.05
done
# 3 readers and the exporting session, all on one snapshot (one xmin).
sessions=$(pgq -c "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'ferry' AND usename = '$PG_READER'")
xmins=$(pgq -c "SELECT count(DISTINCT backend_xmin::text) FROM pg_stat_activity WHERE application_name = 'ferry' AND usename = '$PG_READER' AND backend_xmin IS NOT NULL")
pgq >/dev/null <<'SQL'
UPDATE par SET v = v + 1000;
INSERT INTO par SELECT 2 * g + 1, 5000, 'new' FROM generate_series(0, 39999) g;
SQL
at_change=$(q snap.db "SELECT count(*) FROM par" 2>/dev/null || echo 0)
wait $pid || fail "the snapshot copy failed: $(cat snap.log)"
[ "$at_change" -lt 20000 ] || fail "snapshot: the copy was too far ($at_change rows) when the rows changed"
[ "$sessions" = 4 ] || fail "snapshot: expected 3 readers + 1 exporting session, saw $sessions"
[ "$xmins" = 1 ] || fail "snapshot: the sessions hold $xmins different snapshots"
[ "$(q snap.db 'SELECT count(*), count(DISTINCT id) FROM par')" = "40000|40000" ] || fail "snapshot: rows $(q snap.db 'SELECT count(*) FROM par')"
[ "$(q snap.db 'SELECT count(*) FROM par WHERE v >= 1000')" = 0 ] || fail "snapshot: $(q snap.db 'SELECT count(*) FROM par WHERE v >= 1000') updated values copied"
[ "$(q snap.db 'SELECT count(*) FROM par WHERE id % 2 = 1')" = 0 ] || fail "snapshot: $(q snap.db 'SELECT count(*) FROM par WHERE id % 2 = 1') rows inserted later copied"
cmp -s par_src.txt <(q snap.db "SELECT id || '|' || v || '|' || note FROM par ORDER BY id") || fail "snapshot: the copy is not the table as it was"
pass "3 readers on one exported snapshot: a concurrent UPDATE of every row and 40000 inserts (at $at_change rows copied) are not seen"

# kill -9 during a parallel copy, then resume: equal set, no duplicates (the resumed attempt
# reads the table as it is now; nothing changes meanwhile).
pgq -c "SELECT id || '|' || v || '|' || note FROM par ORDER BY id" > par2_src.txt
par_yaml kill.yaml pgparkill kill.db ""
FERRY_FAILPOINTS="before_sink_apply=sleep(30)" "$FERRY_BIN" run kill.yaml --quiet > kill1.log 2>&1 &
pid=$!
for _ in $(seq 1 400); do
  got=$(q kill.db "SELECT count(*) FROM par" 2>/dev/null || echo 0)
  [ "${got:-0}" -ge 20000 ] && break
  sleep 0.05
done
kill -9 $pid 2>/dev/null || true
wait $pid 2>/dev/null || true
partial=$(q kill.db "SELECT count(*) FROM par" 2>/dev/null || echo 0)
[ "$partial" -lt 80000 ] || fail "parallel kill came after the copy ended ($partial rows)"
expect_exit 0 ferry run kill.yaml --json
[ "$(json_field "$OUT" .resumed)" = true ] || fail "the killed parallel run is resumed: $OUT"
q kill.db "SELECT id || '|' || v || '|' || note FROM par ORDER BY id" > par2_dst.txt
cmp -s par2_src.txt par2_dst.txt || fail "parallel kill: set differs after resume: $(diff par2_src.txt par2_dst.txt | head -5)"
[ "$(q kill.db 'SELECT count(*) - count(DISTINCT id) FROM par')" = 0 ] || fail "parallel kill: duplicates after resume"
pass "parallelism 3 killed at $partial of 80000 rows and resumed: equal set, no duplicates"

# The plan's rows_estimate (progress and ETA): the count of an analyzed table, in resource.started.
pgq -c "CREATE TABLE prog_t (id bigint PRIMARY KEY, v text)" \
  -c "INSERT INTO prog_t SELECT g, 'v' || g FROM generate_series(1, 5000) g" -c "ANALYZE prog_t" >/dev/null
cat > est.yaml <<YAML
version: 1
name: pgest
source:
  type: postgres
  url: env:FERRY_PG_URL
  resources:
    - table: prog_t
sink:
  type: sqlite
  path: est.db
YAML
expect_exit 0 ferry run est.yaml --json
est=$(ferry events "$(json_field "$OUT" .run_id)" --json | jq -c 'select(.type == "resource.started") | .payload.rows_estimate')
[ "$est" = 5000 ] || fail "rows_estimate of an analyzed table: $est"
pass "the plan's rows_estimate is the analyzed table's row count"
