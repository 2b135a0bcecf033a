# tests/e2e/verify.sh - `ferry verify` against a real PostgreSQL 15 (tests/pg/pg.sh) and
# shared: pg
# labels: asan smoke
# real SQLite files: identical tables report zero differences (exit 0); in a 1-million-row
# table one row deleted, one added, one value changed, a NULL vs '' change and a -0 vs 0
# float change are reported as exactly those keys (exit 8); --repair re-copies only them
# and a fresh verify is clean (checked independently with EXCEPT); PG->SQLite with every
# type of DESIGN §2, SQLite->PG with a two-column unicode text key split into chunks,
# hostile identifiers (quotes, spaces, unicode, 63-byte names), and transforms (drop,
# rename, hash sha256 compared as written; hmac listed as not compared).
. "$FERRY_SRC/tests/e2e/lib.sh"
. "$FERRY_SRC/tests/pg/pg.sh"
pg_start

vjson() { # vjson FILE [args]: runs verify --json, keeps the JSON in $J and the status in $RC
  local f=$1; shift
  set +e
  J=$("$FERRY_BIN" verify "$f" --json "$@" 2>verify.err)
  RC=$?
  set -e
}
keys() { printf '%s\n' "$J" | jq -r "[.resources[0].$1.keys[]] | join(\",\")"; }
cnt() { printf '%s\n' "$J" | jq -r ".resources[0].$1.count"; }

# ---- PG -> PG, 1M rows -------------------------------------------------------------------
pgq <<'SQL'
CREATE TABLE public.big (id bigint PRIMARY KEY, name text, amount numeric(12,2), f float8,
                         ts timestamptz, u uuid, flag bool);
INSERT INTO public.big SELECT g, 'name ' || g, (g % 100000) / 100.0, g * 1.5,
  '2024-01-01'::timestamptz + g * interval '1 second', md5(g::text)::uuid, g % 3 = 0
  FROM generate_series(1, 1000000) g;
CREATE SCHEMA copy;
CREATE TABLE copy.big (LIKE public.big INCLUDING ALL);
INSERT INTO copy.big SELECT * FROM public.big;
ANALYZE public.big; ANALYZE copy.big;
SQL
cat > pp.yaml <<EOF
version: 1
name: big-pg
source:
  type: postgres
  url: env:FERRY_PG_URL
  resources:
    - table: public.big
      mode: full
sink:
  type: postgres
  url: env:FERRY_PG_URL
  schema: copy
  write: upsert
EOF
vjson pp.yaml
[ "$RC" = 0 ] || fail "identical 1M-row tables: exit $RC: $J $(cat verify.err)"
[ "$(printf '%s' "$J" | jq -r '.equal')" = true ] || fail "identical tables not equal: $J"
[ "$(printf '%s' "$J" | jq -r '.resources[0].source_rows')" = 1000000 ] || fail "row count: $J"
bytes=$(printf '%s' "$J" | jq -r '.resources[0].source_bytes + .resources[0].dest_bytes')
[ "$bytes" -lt 100000 ] || fail "equal tables moved $bytes bytes"
pass "PG->PG: identical 1M-row tables, exit 0, $bytes bytes read"

pgq <<'SQL'
DELETE FROM copy.big WHERE id = 500000;
INSERT INTO copy.big VALUES (2000000, 'extra', 1, 1, now(), NULL, true);
UPDATE copy.big SET amount = amount + 0.01 WHERE id = 123456;
UPDATE public.big SET name = NULL WHERE id = 777777;
UPDATE copy.big SET name = '' WHERE id = 777777;
UPDATE public.big SET f = 0 WHERE id = 333333;
UPDATE copy.big SET f = '-0' WHERE id = 333333;
SQL
vjson pp.yaml
[ "$RC" = 8 ] || fail "differences: exit $RC (want 8): $J $(cat verify.err)"
[ "$(keys missing)" = 500000 ] || fail "missing keys: $J"
[ "$(keys extra)" = 2000000 ] || fail "extra keys: $J"
[ "$(keys different)" = "123456,333333,777777" ] || fail "different keys: $J"
[ "$(cnt changed_during_check)" = 0 ] || fail "changed during check: $J"
pass "PG->PG: deleted, added, changed, NULL vs '' and -0 vs 0 reported as exactly those keys"

vjson pp.yaml --repair
[ "$RC" = 0 ] || fail "repair: exit $RC: $J $(cat verify.err)"
[ "$(printf '%s' "$J" | jq -r '.resources[0].repaired')" = 5 ] || fail "repaired rows: $J"
[ "$(printf '%s' "$J" | jq -r '.resources[0].repair_verified_equal')" = true ] || fail "re-verify: $J"
vjson pp.yaml
[ "$RC" = 0 ] || fail "after repair: exit $RC: $J"
[ "$(pgq -c "SELECT count(*) FROM copy.big WHERE id = 2000000")" = 0 ] || fail "extra row not deleted"
[ "$(pgq -c "SELECT name IS NULL FROM copy.big WHERE id = 777777")" = t ] || fail "NULL not restored"
[ "$(pgq -c "SELECT count(*) FROM (SELECT * FROM public.big EXCEPT SELECT * FROM copy.big) d")" = 0 ] ||
  fail "independent check: tables still differ after repair"
pass "PG->PG: --repair re-copied the 5 keys; verify and an independent EXCEPT agree"

# ---- PG -> SQLite: every type ------------------------------------------------------------
pgq <<'SQL'
CREATE TABLE public.every (
  id bigint PRIMARY KEY, b bool, i2 smallint, i4 int, f4 real, f8 float8,
  n numeric, n2 numeric(12,2), t text, vc varchar(20), bc char(5), by bytea,
  d date, tm time, ts timestamp, tstz timestamptz, u uuid, j json, jb jsonb);
INSERT INTO every VALUES
 (1, true, -32768, 2147483647, 1.5, 'Infinity', 123456789012345678901234567890.123456789, -12.34,
  E'h\u00e9llo "q" \'s\'\nline2 \u2603', '', 'ab', '\x00ff10', '1969-07-20', '23:59:59.999999',
  '1900-01-01 00:00:00.000001', '2999-12-31 23:59:59+05', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
  '{"a": [1, 2]}', '{"x": {"y": [true, null, {"z": "\u00e9"}]}}'),
 (2, NULL, NULL, NULL, NULL, '-Infinity', -0.000000000000000000000000000000001, NULL, NULL, NULL,
  NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
 (3, false, 0, 0, -2.5, -1e300, -98765432109876543210987654321098765.4321, 9999999999.99, 'x',
  'y', 'z', '', '0001-01-01', '00:00', '1970-01-01', '1970-01-01 00:00+00',
  '00000000-0000-0000-0000-000000000000', 'null', '"s"'),
 (4, true, 32767, -2147483648, 3.25, 2.5, 'NaN', -0.01, repeat('long', 5000), 'v', 'abcde',
  decode(repeat('deadbeef', 3000), 'hex'), '2262-04-11', '12:00:00.5', '1066-10-14 09:00:00',
  '1850-06-01 12:00:00-03', 'ffffffff-ffff-ffff-ffff-ffffffffffff', '[]', '{}');
SQL
cat > ps.yaml <<EOF
version: 1
name: every-sqlite
source:
  type: postgres
  url: env:FERRY_PG_URL
  resources:
    - table: public.every
      mode: full
sink:
  type: sqlite
  path: $T/every.db
  write: upsert
EOF
expect_exit 0 ferry run ps.yaml --quiet
vjson ps.yaml
[ "$RC" = 0 ] || fail "PG->SQLite every type: exit $RC: $J $(cat verify.err)"
q every.db "UPDATE every SET t = NULL WHERE id = 3; UPDATE every SET ts = '1900-01-01 00:00:00.000002' WHERE id = 1;
            UPDATE every SET u = 'ffffffff-ffff-ffff-ffff-fffffffffffe' WHERE id = 4; DELETE FROM every WHERE id = 2;"
vjson ps.yaml
[ "$RC" = 8 ] || fail "PG->SQLite differences: exit $RC: $J"
[ "$(keys different)" = "1,3,4" ] && [ "$(keys missing)" = 2 ] || fail "PG->SQLite keys: $J"
vjson ps.yaml --repair
[ "$RC" = 0 ] || fail "PG->SQLite repair: exit $RC: $J $(cat verify.err)"
vjson ps.yaml
[ "$RC" = 0 ] || fail "PG->SQLite after repair: $J"
pass "PG->SQLite: every type equal; a NULL, a microsecond, a uuid byte and a deleted row found and repaired"

# A float NaN cannot live in SQLite (it stores NULL): verify says so instead of hiding it.
pgq -c "UPDATE every SET f8 = 'NaN' WHERE id = 2"
expect_exit 0 ferry run ps.yaml --quiet --fresh
vjson ps.yaml
[ "$RC" = 8 ] && [ "$(keys different)" = 2 ] || fail "NaN in SQLite: $J"
pgq -c "UPDATE every SET f8 = 0 WHERE id = 2"
pass "PG->SQLite: a NaN SQLite turned into NULL is reported"

# ---- SQLite -> PG, two-column text key ---------------------------------------------------
q src.db "CREATE TABLE events (region TEXT, code TEXT, n INTEGER, at TIMESTAMP, note TEXT, PRIMARY KEY (region, code));"
q src.db "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 20000)
          INSERT INTO events SELECT CASE i % 3 WHEN 0 THEN 'Zürich' WHEN 1 THEN 'apple' ELSE 'Oslo' END,
                 printf('c%05d', i), i, printf('2024-01-%02d 10:00:00.000000', 1 + i % 28),
                 CASE WHEN i % 7 = 0 THEN NULL ELSE 'note ' || i END FROM s;"
cat > sp.yaml <<EOF
version: 1
name: events-pg
source:
  type: sqlite
  path: $T/src.db
  resources:
    - table: events
      mode: full
sink:
  type: postgres
  url: env:FERRY_PG_URL
  schema: copy
  write: merge
EOF
expect_exit 0 ferry run sp.yaml --quiet
vjson sp.yaml --chunk-rows 200
[ "$RC" = 0 ] || fail "SQLite->PG: exit $RC: $J $(cat verify.err)"
pgq -c "DELETE FROM copy.events WHERE region = 'Zürich' AND code = 'c00300';
        UPDATE copy.events SET note = '' WHERE region = 'apple' AND code = 'c19999'"
q src.db "INSERT INTO events VALUES ('apple', 'c99999', 1, '2024-02-01 00:00:00.000000', 'new')"
vjson sp.yaml --chunk-rows 200
[ "$RC" = 8 ] || fail "SQLite->PG differences: $J"
[ "$(keys missing)" = "(Zürich, c00300),(apple, c99999)" ] || fail "SQLite->PG missing: $J"
[ "$(keys different)" = "(apple, c19999)" ] || fail "SQLite->PG different: $J"
vjson sp.yaml --repair --chunk-rows 200
[ "$RC" = 0 ] || fail "SQLite->PG repair: $J $(cat verify.err)"
pass "SQLite->PG: two-column unicode text key split into chunks, differences found and repaired"

# ---- hostile identifiers ---------------------------------------------------------------
long=$(printf 'c%.0s' $(seq 1 63))
pgq <<SQL
CREATE SCHEMA "sch ""q""";
CREATE TABLE "sch ""q"""."tab le ""ü"" ;--" (
  "i d" int PRIMARY KEY, "na""me; DROP TABLE x" text, "$long" int, "ünï" text);
INSERT INTO "sch ""q"""."tab le ""ü"" ;--" SELECT g, 'v' || g, g, 'é' || g FROM generate_series(1, 3000) g;
CREATE SCHEMA "dst ""q""";
CREATE TABLE canary (x int); INSERT INTO canary VALUES (1);
SQL
cat > hp.yaml <<EOF
version: 1
name: hostile
source:
  type: postgres
  url: env:FERRY_PG_URL
  resources:
    - table: '"sch ""q"""."tab le ""ü"" ;--"'
      mode: full
sink:
  type: postgres
  url: env:FERRY_PG_URL
  schema: 'dst "q"'
  write: upsert
EOF
expect_exit 0 ferry run hp.yaml --quiet
# the default destination is the table's own name, unquoted, without the schema
[ "$(pgq -c "SELECT string_agg(relname, '|') FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE nspname = 'dst \"q\"' AND relkind = 'r'")" = 'tab le "ü" ;--' ] \
  || fail "hostile identifiers: destination tables are not exactly the unquoted name"
vjson hp.yaml
[ "$RC" = 0 ] || fail "hostile identifiers: exit $RC: $J $(cat verify.err)"
pgq -c "UPDATE \"dst \"\"q\"\"\".\"tab le \"\"ü\"\" ;--\" SET \"$long\" = -1 WHERE \"i d\" = 42"
vjson hp.yaml
[ "$RC" = 8 ] && [ "$(keys different)" = 42 ] || fail "hostile identifiers difference: $J"
cat > hs.yaml <<EOF
version: 1
name: hostile-sqlite
source:
  type: postgres
  url: env:FERRY_PG_URL
  resources:
    - table: '"sch ""q"""."tab le ""ü"" ;--"'
      mode: full
sink:
  type: sqlite
  path: $T/hostile.db
  write: upsert
EOF
expect_exit 0 ferry run hs.yaml --quiet
[ "$(sqlite3 "$T/hostile.db" "SELECT group_concat(name, '|') FROM sqlite_master WHERE type = 'table' AND name NOT LIKE '\_ferry%' ESCAPE '\\'")" = 'tab le "ü" ;--' ] \
  || fail "hostile identifiers: SQLite destination tables: $(sqlite3 "$T/hostile.db" 'SELECT name FROM sqlite_master')"
vjson hs.yaml
[ "$RC" = 0 ] || fail "hostile identifiers to SQLite: $J $(cat verify.err)"
[ "$(pgq -c 'SELECT count(*) FROM canary')" = 1 ] || fail "canary table touched"
pass "hostile identifiers (quotes, spaces, unicode, 63-byte name) PG->PG and PG->SQLite"

# ---- transforms ------------------------------------------------------------------------
pgq <<'SQL'
CREATE TABLE public.people (id int PRIMARY KEY, email text, secret text, tel text, age int);
INSERT INTO public.people SELECT g, 'user' || g || '@example.com', 's' || g, '555-' || g, g % 90
  FROM generate_series(1, 5000) g;
SQL
cat > tp.yaml <<EOF
version: 1
name: people
source:
  type: postgres
  url: env:FERRY_PG_URL
  resources:
    - table: public.people
      mode: full
sink:
  type: sqlite
  path: $T/people.db
  write: upsert
transforms:
  - {resource: public.people, drop: [secret]}
  - {resource: public.people, rename: {age: years}}
  - {resource: public.people, column: email, hash: sha256}
  - {resource: public.people, column: tel, hash: hmac_sha256, key: env:HMAC_KEY}
EOF
export HMAC_KEY=k3y
expect_exit 0 ferry run tp.yaml --quiet
vjson tp.yaml
[ "$RC" = 0 ] || fail "transforms: exit $RC: $J $(cat verify.err)"
printf '%s' "$J" | jq -e '.resources[0].not_compared == ["tel (hash: hmac_sha256)"]' >/dev/null ||
  fail "hmac column not listed as not compared: $J"
q people.db "UPDATE people SET email = 'x' WHERE id = 7; UPDATE people SET years = 200 WHERE id = 8;"
vjson tp.yaml
[ "$(keys different)" = "7,8" ] || fail "transforms: changed hash and renamed column: $J"
pass "transforms: dropped, renamed and sha256-hashed columns compared as written"

# ---- verify: after_run -------------------------------------------------------------------
q people.db "DELETE FROM people WHERE id = 9"
(cat tp.yaml; echo "verify: after_run") > tpv.yaml
expect_exit 0 ferry run tpv.yaml --quiet --json
run=$(json_field "$OUT" '.run_id // .id')
show=$(ferry show "$run" --json)
printf '%s' "$show" | jq -e '.resources[0].verify.equal == true and .resources[0].verify.source_rows == 5000' >/dev/null ||
  fail "after_run verification not shown by ferry show: $show"
ferry events "$run" | grep -q 'verify.completed' || fail "no verify.completed event"
v1=$(ferry runs --json | jq -r "[.[] | select(.pipeline == \"people\")] | .[0].version")
v2=$(ferry runs --json | jq -r "[.[] | select(.pipeline == \"people\")] | .[1].version")
[ "$v1" = "$v2" ] || fail "verify: after_run changed the pipeline version ($v1 vs $v2)"
pass "verify: after_run publishes verify.completed, ferry show prints it, the version is unchanged"

# ---- files (CSV, JSON Lines) and sample sources: read through ferry, hashed in C ----------
python3 - <<'PY'
import random
random.seed(5)
with open("orders.csv", "w") as f:
    f.write("id,amount,note,created_at,ref\n")
    for i in range(1, 30001):
        note = "" if i % 11 == 0 else ("n\u00e9 %d" % i)
        f.write("%d,%d.%02d,%s,2024-03-%02dT10:00:00.%06dZ,%08x-0000-4000-8000-%012x\n" % (
            i, i % 1000, i % 100, note, 1 + i % 28, i, i, i))
with open("events.jsonl", "w") as f:
    for i in range(1, 5001):
        f.write('{"id": %d, "kind": "k%d", "v": %s}\n' % (i, i % 5, "null" if i % 4 == 0 else str(i * 0.25)))
PY
cat > fp.yaml <<EOF
version: 1
name: files-pg
source:
  type: files
  resources:
    - table: orders
      path: "$T/orders.csv"
      schema: {id: int64, amount: "decimal128(12,2)", note: utf8, created_at: timestamptz, ref: uuid}
      key: [id]
    - table: jevents
      path: "$T/events.jsonl"
      schema: {id: int64, kind: utf8, v: float64}
      key: [id]
sink:
  type: postgres
  url: env:FERRY_PG_URL
  schema: copy
  write: upsert
EOF
expect_exit 0 ferry run fp.yaml --quiet
vjson fp.yaml
[ "$RC" = 0 ] || fail "files->PG: exit $RC: $J $(cat verify.err)"
[ "$(printf '%s' "$J" | jq -r '[.resources[].source_rows] | join(",")')" = "30000,5000" ] || fail "files->PG rows: $J"
pgq -c "UPDATE copy.orders SET note = '' WHERE id = 22;
        UPDATE copy.orders SET created_at = created_at + interval '1 microsecond' WHERE id = 23;
        DELETE FROM copy.jevents WHERE id = 4000"
vjson fp.yaml --resource orders
[ "$RC" = 8 ] && [ "$(keys different)" = "22,23" ] || fail "files->PG: NULL vs '' and a microsecond: $J"
vjson fp.yaml --resource jevents
[ "$RC" = 8 ] && [ "$(keys missing)" = 4000 ] || fail "files->PG: missing JSON Lines row: $J"
# --repair from a source read through ferry: the source is read again, rows found by key
# keeping only the rows of the keys to fetch (memory follows the differences, not the source)
pgq -c "INSERT INTO copy.orders (id, note) VALUES (999999, 'extra')"
FERRY_LOG=info vjson fp.yaml --repair
[ "$RC" = 0 ] || fail "files->PG repair: exit $RC: $J $(cat verify.err)"
grep -q "source orders read again: 30000 rows, 2 kept for 2 keys to fetch" verify.err &&
  grep -q "source jevents read again: 5000 rows, 1 kept for 1 keys to fetch" verify.err ||
  fail "files->PG repair: the source read again should keep only the rows to fetch: $(grep 'read again' verify.err)"
[ "$(printf '%s' "$J" | jq -r '[.resources[].repaired] | join(",")')" = "3,1" ] || fail "files->PG repaired counts: $J"
[ "$(pgq -c "SELECT count(*) FROM copy.orders WHERE id = 999999 OR (id = 22 AND note = '')")" = 0 ] ||
  fail "files->PG repair: extra row or changed value left"
vjson fp.yaml
[ "$RC" = 0 ] || fail "files->PG after repair: exit $RC: $J"
pass "files (CSV, JSON Lines) -> PG: equal after a run; NULL vs '', a microsecond and a deleted row found; --repair fixes them, keeping only the fetched rows"

write_pipeline sv.yaml sample-verify 20000 "$T/sample.db" upsert
expect_exit 0 ferry run sv.yaml --quiet
vjson sv.yaml
[ "$RC" = 0 ] || fail "sample->SQLite: $J $(cat verify.err)"
q sample.db "DELETE FROM orders WHERE id = 77; UPDATE orders SET quantity = quantity + 1 WHERE id = 99"
vjson sv.yaml
[ "$RC" = 8 ] && [ "$(keys missing)" = 77 ] && [ "$(keys different)" = 99 ] || fail "sample->SQLite: $J"
vjson sv.yaml --repair
[ "$RC" = 0 ] && [ "$(printf '%s' "$J" | jq -r '.resources[0].repaired')" = 2 ] || fail "sample->SQLite repair: $J $(cat verify.err)"
[ "$(q sample.db 'SELECT count(*) FROM orders WHERE id = 77')" = 1 ] || fail "sample->SQLite: row 77 not re-copied"
pass "sample -> SQLite: read through the source connector, differences found and repaired"

# ---- a live source: rows that change between the two passes ---------------------------
pgq <<'SQL'
CREATE TABLE public.live (id int PRIMARY KEY, v text);
INSERT INTO public.live SELECT g, 'v' || g FROM generate_series(1, 5000) g;
CREATE TABLE copy.live (LIKE public.live INCLUDING ALL);
INSERT INTO copy.live SELECT * FROM public.live;
UPDATE copy.live SET v = 'stale' WHERE id IN (10, 20, 30);
SQL
sed -e 's/name: big-pg/name: live/' -e 's/public.big/public.live/' pp.yaml > live.yaml
# The failpoint holds verify between its passes; meanwhile the source catches up on key 10
# (now equal) and moves on key 20 (still different, but not the row the first pass saw).
set +e
FERRY_FAILPOINTS="verify_between_passes=sleep(6000)" "$FERRY_BIN" verify live.yaml --json > live.json 2>live.err &
vpid=$!
sleep 3
pgq -c "UPDATE public.live SET v = 'stale' WHERE id = 10; UPDATE public.live SET v = 'newer' WHERE id = 20"
wait $vpid
RC=$?
set -e
J=$(cat live.json)
[ "$RC" = 8 ] || fail "live source: exit $RC: $J $(cat live.err)"
[ "$(keys changed_during_check)" = "10,20" ] && [ "$(keys different)" = 30 ] ||
  fail "live source: keys changed during the check not told apart: $J"
pass "live source: rows changed between the passes reported as changed during check"

# ---- --until-checkpoint: an incremental resource, rows added after its last run ----------
pgq <<'SQL'
CREATE TABLE public.ev (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, note text);
INSERT INTO public.ev SELECT g, '2024-05-01 00:00:00+00'::timestamptz + g * interval '1 minute', 'e' || g
  FROM generate_series(1, 3000) g;
SQL
cat > inc.yaml <<EOF
version: 1
name: ev-inc
source:
  type: postgres
  url: env:FERRY_PG_URL
  resources:
    - table: public.ev
      mode: incremental
      cursor: [updated_at]
sink:
  type: sqlite
  path: $T/ev.db
  write: upsert
EOF
expect_exit 0 ferry run inc.yaml --quiet
pgq -c "INSERT INTO public.ev SELECT g, '2024-06-01 00:00:00+00'::timestamptz + g * interval '1 minute', 'late' FROM generate_series(3001, 3100) g"
vjson inc.yaml
[ "$RC" = 8 ] && [ "$(cnt missing)" = 100 ] || fail "new source rows not missing without --until-checkpoint: $J"
vjson inc.yaml --until-checkpoint
[ "$RC" = 0 ] && [ "$(printf '%s' "$J" | jq -r '.resources[0].source_rows')" = 3000 ] ||
  fail "--until-checkpoint compared past the saved position: $J $(cat verify.err)"
q ev.db "UPDATE ev SET note = 'x' WHERE id = 1500"
vjson inc.yaml --until-checkpoint
[ "$RC" = 8 ] && [ "$(keys different)" = 1500 ] || fail "--until-checkpoint missed a difference: $J"
expect_exit 0 ferry run inc.yaml --quiet
q ev.db "UPDATE ev SET note = 'e1500' WHERE id = 1500"
vjson inc.yaml --until-checkpoint
[ "$RC" = 0 ] && [ "$(printf '%s' "$J" | jq -r '.resources[0].source_rows')" = 3100 ] ||
  fail "--until-checkpoint after the next run: $J $(cat verify.err)"
pass "--until-checkpoint compares an incremental resource up to its saved route checkpoint"

# ---- clear errors ------------------------------------------------------------------------
sed -e "s|path: $T/every.db|path: $T/nothing-here.db|" ps.yaml > nodb.yaml
expect_exit 7 ferry verify nodb.yaml
printf '%s' "$OUT" | grep -q "nothing-here.db" || fail "missing database not named: $OUT"
sed -e 's/schema: copy/schema: nosuch/' pp.yaml > notab.yaml
expect_exit 7 ferry verify notab.yaml
printf '%s' "$OUT" | grep -q "nosuch.big not found" || fail "missing table not named: $OUT"
printf '%s' "$OUT" | grep -q "$PGPASSWORD" && fail "password in an error: $OUT"
expect_exit 2 ferry verify
pass "missing database or table: exit 7 naming it; usage: exit 2"

# ---- files destinations (CSV, JSON Lines), read back with the files source ---------------
for fmt in csv jsonl; do
  cat > pf-$fmt.yaml <<EOF
version: 1
name: every-files-$fmt
source:
  type: postgres
  url: env:FERRY_PG_URL
  resources:
    - table: public.every
      mode: full
sink:
  type: files
  path: $T/out-$fmt
  format: $fmt
  write: append
EOF
  expect_exit 0 ferry run pf-$fmt.yaml --quiet
  vjson pf-$fmt.yaml
  [ "$RC" = 0 ] || fail "PG->files $fmt, every type: exit $RC: $J $(cat verify.err)"
done
part=$(ls "$T"/out-csv/every/part-*.csv | head -n 1)
sed -i 's/,-12.34,/,-12.35,/' "$part"
vjson pf-csv.yaml
[ "$RC" = 8 ] && [ "$(keys different)" = 1 ] || fail "PG->CSV: an edited value: $J"
expect_exit 3 ferry verify pf-csv.yaml --repair
printf '%s' "$OUT" | grep -q "cannot upsert" || fail "repair into files not refused clearly: $OUT"
expect_exit 0 ferry run pf-jsonl.yaml --quiet --fresh
vjson pf-jsonl.yaml
[ "$RC" = 8 ] && [ "$(cnt extra)" = 4 ] || fail "PG->JSON Lines appended twice: duplicates not reported: $J"
pass "PG -> files (CSV, JSON Lines): every type equal; an edited CSV value and duplicated rows found; repair refused"

# ---- Parquet destinations (files sink, format: parquet), read by ferry's Parquet reader ----
pgq <<'SQL'
CREATE TABLE public.pqt (LIKE public.every INCLUDING ALL);
INSERT INTO public.pqt SELECT * FROM public.every;
INSERT INTO public.pqt (id, b, i4, n2, t, d, ts, tstz, u, j)
  SELECT g, g % 2 = 0, g % 7, (g % 100) / 4.0, 'row ' || (g % 50), DATE '2024-01-01' + g % 9,
         TIMESTAMP '2024-01-01' + g * interval '1 minute', TIMESTAMPTZ '2024-01-01Z' + g * interval '1 hour',
         md5(g::text)::uuid, json_build_object('g', g % 10)
  FROM generate_series(10, 4000) g;
SQL
for codec in zstd snappy gzip none; do
  cat > pq-$codec.yaml <<EOF
version: 1
name: every-parquet-$codec
source:
  type: postgres
  url: env:FERRY_PG_URL
  resources:
    - table: public.pqt
      mode: full
sink:
  type: files
  path: $T/out-pq-$codec
  format: parquet
  compression: $codec
  write: append
EOF
  expect_exit 0 ferry run pq-$codec.yaml --quiet
  vjson pq-$codec.yaml
  [ "$RC" = 0 ] && [ "$(printf '%s' "$J" | jq -r '.resources[0].dest_rows')" = 3995 ] ||
    fail "PG->Parquet ($codec), every type: exit $RC: $J $(cat verify.err)"
done
# a part no manifest lists is not part of the data set: a stray copy changes nothing
cp "$(ls "$T"/out-pq-zstd/pqt/part-*.parquet | head -n 1)" "$T/out-pq-zstd/pqt/part-999-1-0.parquet"
vjson pq-zstd.yaml
[ "$RC" = 0 ] || fail "PG->Parquet: an unlisted part was read: $J"
# differences are made at the source (a Parquet file is not edited in place)
pgq <<'SQL'
DELETE FROM public.pqt WHERE id = 3;
INSERT INTO public.pqt (id, t) VALUES (5000, 'new');
UPDATE public.pqt SET n2 = n2 + 0.01 WHERE id = 100;
UPDATE public.pqt SET t = NULL WHERE id = 1;
SQL
vjson pq-zstd.yaml
[ "$RC" = 8 ] && [ "$(keys different)" = "1,100" ] && [ "$(keys missing)" = 5000 ] &&
  [ "$(keys extra)" = 3 ] || fail "PG->Parquet differences: $J $(cat verify.err)"
# a damaged part (footer cut off): a clean error naming the file, not a crash
part=$(ls "$T"/out-pq-none/pqt/part-*.parquet | head -n 1)
truncate -s -20 "$part"
expect_exit 1 ferry verify pq-none.yaml
printf '%s' "$OUT" | grep -q "$(basename "$part")" || fail "damaged Parquet file not named: $OUT"
pass "PG -> Parquet (every codec): every type equal; deleted, added and changed source rows found"

q pqs.db "CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, price REAL, qty INTEGER, at TIMESTAMP, raw BLOB);"
q pqs.db "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 3000)
          INSERT INTO items SELECT i, CASE WHEN i % 5 = 0 THEN NULL ELSE 'item ' || (i % 40) || ' é' END,
                 i * 0.25, i % 13, printf('2024-02-%02d 08:30:00.000000', 1 + i % 28), randomblob(i % 9) FROM s;"
cat > sq-pq.yaml <<EOF
version: 1
name: items-parquet
source:
  type: sqlite
  path: $T/pqs.db
  resources:
    - table: items
      mode: full
sink:
  type: files
  path: $T/out-sq-pq
  format: parquet
  write: replace
EOF
expect_exit 0 ferry run sq-pq.yaml --quiet
vjson sq-pq.yaml
[ "$RC" = 0 ] || fail "SQLite->Parquet: exit $RC: $J $(cat verify.err)"
# (id 9's blob was randomblob(0): one random byte, which a one-byte value would equal once in
# 256 runs; three bytes always differ)
q pqs.db "DELETE FROM items WHERE id = 7; INSERT INTO items (id, name) VALUES (4000, 'x');
          UPDATE items SET price = 1e300 WHERE id = 8; UPDATE items SET raw = x'00ff00' WHERE id = 9;"
vjson sq-pq.yaml
[ "$RC" = 8 ] && [ "$(keys different)" = "8,9" ] && [ "$(keys missing)" = 4000 ] &&
  [ "$(keys extra)" = 7 ] || fail "SQLite->Parquet differences: $J $(cat verify.err)"
# replace: the data set manifest is the whole data set; a new run replaces the old parts
expect_exit 0 ferry run sq-pq.yaml --quiet
vjson sq-pq.yaml
[ "$RC" = 0 ] || fail "SQLite->Parquet after a replace run: exit $RC: $J $(cat verify.err)"
pass "SQLite -> Parquet: equal; deleted, added and changed source rows found; replace data set read from its manifest"
