# tests/e2e/mysql_sink.sh - the mysql sink against a real MariaDB 10.11 (tests/mysql/mysql.sh)
# with a real PostgreSQL (tests/pg/pg.sh):
#   1. every MySQL type's edge values MariaDB -> PostgreSQL -> MariaDB, each column compared
#      with the original (MD5 of one canonical text per value);
#   1b. append by LOAD DATA LOCAL INFILE and by INSERT: the same values; LOAD DATA's warnings
#      are errors; local_infile OFF falls back to INSERT;
#   2. PostgreSQL -> MariaDB append (INSERT, and LOAD DATA) killed with SIGKILL mid-run and
#      resumed: equal set and not one duplicate (the checkpoint is written in the rows'
#      transaction: exactly-once); the checkpoint table, first without its run counts (as an
#      older ferry made it), gets them, and the run counts every row once;
#   3. upsert (incremental with updates) and merge from PostgreSQL CDC (inserts, updates, key
#      moves, deletes): the destination equals the source;
#   4. replace twice: the second run's table whole, no leftover staging table;
#   5. hostile identifiers as destination names; a value MySQL cannot hold (NaN) stops the run
#      naming table, column and row, with nothing of that batch written;
#   6. ferry verify with MySQL as the destination (equal, then missing/different/extra rows).
# Every sink runs as the least-privilege `ferry_writer` (SELECT, INSERT, UPDATE, DELETE, CREATE,
# DROP, ALTER on the database); a user without DROP and ALTER fails `replace` with a clear
# message and the previous table intact.
. "$FERRY_SRC/tests/e2e/lib.sh"
. "$FERRY_SRC/tests/mysql/mysql.sh"
my_pg_start
export PGTZ=UTC

# ---- 1. round trip MariaDB -> PostgreSQL -> MariaDB ---------------------------------------
myq <<'SQL'
CREATE TABLE every (
  id int PRIMARY KEY, ti tinyint, tu tinyint unsigned, si smallint, su smallint unsigned,
  mi mediumint, mu mediumint unsigned, i int, iu int unsigned, bi bigint, bu bigint unsigned,
  d65 decimal(65,30), d38 decimal(38,10), d52 decimal(5,2), f float, db double,
  b1 bit(1), b13 bit(13), c4 char(4), vc varchar(50), tx mediumtext,
  l1 varchar(30) CHARACTER SET latin1, bn binary(4), vb varbinary(10), bl mediumblob, dt date,
  dtm datetime(6), ts timestamp(3) NULL, tm time(6), y year, e enum('a','b c','ü'),
  st set('x','y','z'), j json, g geometry);
INSERT INTO every VALUES
 (1, -128, 255, -32768, 65535, -8388608, 16777215, -2147483648, 4294967295,
  -9223372036854775808, 18446744073709551615,
  '12345678901234567890123456789012345.123456789012345678901234567890',
  '-1234567890123456789012345678.0123456789', -999.99, 3.40282e38, 1.7976931348623157e308,
  b'1', b'1010101010101', 'ab', 'héllo "q" ''s'' `b` \\', 'line1\nline2 ☃ 😀', 'café ÿ',
  X'00ff1000', X'', X'deadbeef', '1000-01-01', '9999-12-31 23:59:59.999999',
  '2038-01-19 03:14:07.999', '-838:59:59.000000', 1901, 'ü', 'x,z',
  '{"a": [1, 2.5, "é"]}', ST_GeomFromText('POLYGON((0 0,1 0,1 1,0 0))')),
 (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
  NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
  NULL, NULL),
 (3, 127, 0, 32767, 0, 8388607, 0, 2147483647, 0, 9223372036854775807, 9223372036854775808,
  '-0.000000000000000000000000000001', '0', 0, 1.17549e-38, -2.2250738585072014e-308,
  b'0', b'0', '', '', '', '', X'00000000', X'00', X'', '2024-02-29',
  '0001-01-01 00:00:00.000001', '1970-01-01 00:00:01', '838:59:59.999999', 2155, 'a', '', '[]',
  POINT(0, 0)),
 (4, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, '0.000000000000000000000000000001',
  '99999999999999999999999999.9999999999', 999.99, -0.1, 0.1, b'1', b'1111111111111', 'abcd',
  repeat('v', 50), repeat('long ', 20000), 'x', X'ffffffff', X'ffffffffffffffffffff',
  repeat(X'00ff', 40000), '2000-02-29', '1969-12-31 23:59:59.999999', '2000-01-01 00:00:00',
  '00:00:00.000001', 0, 'b c', 'x,y,z', '{"x": {"y": [true, null, {"z": "é"}]}}', POINT(3, 4));
SQL
cat > there.yaml <<EOF
version: 1
name: there
source:
  type: mysql
  url: env:FERRY_MY_URL
  resources:
    - table: every
sink:
  type: postgres
  url: env:FERRY_PG_URL
  write: append
EOF
cat > back.yaml <<EOF
version: 1
name: back
source:
  type: postgres
  url: env:FERRY_PG_URL
  resources:
    - table: public.every
      target: every_back
sink:
  type: mysql
  url: env:FERRY_MY_WRITER_URL
  write: append
EOF
expect_exit 0 ferry run there.yaml
expect_exit 0 ferry run back.yaml --json
[ "$(myq -e 'SELECT count(*) FROM every_back')" = 4 ] || fail "4 rows back: $OUT"
# The same canonical text from the original column and from the one that came back.
orig_expr() {
  case $1 in
    f) echo "CAST(f + 0e0 AS CHAR)" ;;
    b1) echo "IF(b1 = b'1', 't', 'f')" ;;
    b13) echo "LOWER(LPAD(HEX(b13), 4, '0'))" ;;
    y) echo "CAST(y + 0 AS CHAR)" ;;
    bn|vb|bl) echo "LOWER(HEX($1))" ;;
    g) echo "LOWER(HEX(ST_AsBinary(g)))" ;;
    dtm|ts) echo "DATE_FORMAT($1, '%Y-%m-%d %H:%i:%s.%f')" ;;
    *) echo "CAST($1 AS CHAR)" ;;
  esac
}
back_expr() {
  case $1 in
    f) echo "CAST(f + 0e0 AS CHAR)" ;;
    b1) echo "IF(b1, 't', 'f')" ;;
    b13|bn|vb|bl|g) echo "LOWER(HEX($1))" ;;
    y) echo "CAST(y + 0 AS CHAR)" ;;
    dtm|ts) echo "DATE_FORMAT($1, '%Y-%m-%d %H:%i:%s.%f')" ;;
    *) echo "CAST($1 AS CHAR)" ;;
  esac
}
cols=$(myq -e "SELECT GROUP_CONCAT(COLUMN_NAME ORDER BY ORDINAL_POSITION SEPARATOR ' ')
               FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = 'ferry' AND TABLE_NAME = 'every'")
ol="id" bl="id"
for c in $cols; do
  ol="$ol, COALESCE(MD5(CONVERT($(orig_expr "$c") USING utf8mb4)), 'NULL')"
  bl="$bl, COALESCE(MD5(CONVERT($(back_expr "$c") USING utf8mb4)), 'NULL')"
done
myq -e "SET time_zone = '+00:00'; SELECT CONCAT_WS('|', $ol) FROM every ORDER BY id" > orig.txt
myq -e "SET time_zone = '+00:00'; SELECT CONCAT_WS('|', $bl) FROM every_back ORDER BY id" > back.txt
if ! cmp -s orig.txt back.txt; then
  set -- id $cols
  bad=$(paste -d'\n' orig.txt back.txt | awk -F'|' 'NR%2==1 { for (i = 1; i <= NF; i++) a[i] = $i; next }
        { for (i = 1; i <= NF; i++) if (a[i] != $i) print i }' | sort -un | head -1)
  c=${!bad}
  myq -e "SET time_zone = '+00:00'; SELECT id, LEFT($(orig_expr "$c"), 100) FROM every ORDER BY id" >&2
  myq -e "SET time_zone = '+00:00'; SELECT id, LEFT($(back_expr "$c"), 100) FROM every_back ORDER BY id" >&2
  fail "column $c changed on the way MariaDB -> PostgreSQL -> MariaDB"
fi
pass "every MySQL type's edge values MariaDB -> PostgreSQL -> MariaDB: each column equal"

# ---- 1b. both append methods: LOAD DATA LOCAL INFILE and multi-row INSERT write the same ---
for m in load_data insert; do
  sed "s/^name: back$/name: back_$m/; s/target: every_back$/target: every_back_$m/; s/^  write: append$/  write: append\n  append_method: $m/" back.yaml > back_$m.yaml
  expect_exit 0 ferry run back_$m.yaml
  printf '%s\n' "$OUT" | grep -q "refuses LOAD DATA" && fail "append_method $m fell back: $OUT"
  myq -e "SET time_zone = '+00:00'; SELECT CONCAT_WS('|', $bl) FROM every_back_$m ORDER BY id" > back_$m.txt
  cmp -s back.txt back_$m.txt || fail "append_method $m wrote other values than the default: $(diff back.txt back_$m.txt | head -3)"
done
# LOCAL makes the server's data errors warnings: ferry turns any into an error, nothing kept
myq -e "CREATE TABLE narrow (id int PRIMARY KEY, v varchar(3))"
pgq -c "CREATE TABLE narrow (id int PRIMARY KEY, v text); INSERT INTO narrow VALUES (1, 'abc'), (2, 'abcd')" >/dev/null
for m in load_data insert; do
  printf 'version: 1\nname: narrow_%s\nsource: {type: postgres, url: env:FERRY_PG_URL, resources: [{table: public.narrow}]}\nsink: {type: mysql, url: env:FERRY_MY_WRITER_URL, write: append, append_method: %s}\n' "$m" "$m" > narrow_$m.yaml
  expect_exit 1 ferry run narrow_$m.yaml
  case $OUT in *'`ferry`.`narrow`'*) ;; *) fail "$m: a value too long for the column: $OUT" ;; esac
  if [ $m = load_data ]; then
    case $OUT in *"LOAD DATA into"*"2 rows sent, 2 written, 1 warning"*"Data truncated for column 'v'"*|\
                 *"LOAD DATA into"*"2 rows sent"*"warning"*"for column 'v'"*) ;;
      *) fail "load_data: the warning is not named: $OUT" ;; esac
  fi
  [ "$(myq -e 'SELECT count(*) FROM narrow')" = 0 ] || fail "$m: rows of the failed batch were kept"
done
# a server with local_infile = OFF (MySQL 8's default): the rows go by INSERT, said once
myq -e "SET GLOBAL local_infile = 0"
sed 's/^name: back_load_data$/name: back_off/; s/every_back_load_data/every_back_off/' back_load_data.yaml > back_off.yaml
expect_exit 0 ferry run back_off.yaml
myq -e "SET GLOBAL local_infile = 1"
printf '%s\n' "$OUT" | grep -q "refuses LOAD DATA LOCAL INFILE" || fail "local_infile off: no warning: $OUT"
myq -e "SET time_zone = '+00:00'; SELECT CONCAT_WS('|', $bl) FROM every_back_off ORDER BY id" > back_off.txt
cmp -s back.txt back_off.txt || fail "local_infile off: the INSERT fallback wrote other values"
pass "append by LOAD DATA LOCAL INFILE and by INSERT write the same values; LOAD DATA's warnings are errors (nothing kept); local_infile OFF falls back to INSERT, said"

# ---- 2. append, SIGKILL, resume: exactly once ------------------------------------------
pgq >/dev/null <<'SQL'
CREATE TABLE big (id bigint PRIMARY KEY, v text, amount numeric(12,2), at timestamptz);
INSERT INTO big SELECT g, md5(g::text), (g % 100000) / 100.0, '2024-01-01'::timestamptz + g * interval '1 second'
FROM generate_series(1, 100000) g;
SQL
pgq -c "SELECT id || '|' || v || '|' || amount::text || '|' || to_char(at, 'YYYY-MM-DD HH24:MI:SS') FROM big ORDER BY id" > big_src.txt
# The first run finds the checkpoint table as an older ferry made it (no run_* counts): the
# sink, as ferry_writer, adds them.
myq -e "ALTER TABLE _ferry_checkpoints DROP COLUMN run_rows, DROP COLUMN run_bytes, DROP COLUMN run_batches"
for m in insert load_data; do
  tb=big_$m
  cat > $tb.yaml <<EOF
version: 1
name: mybigsink_$m
source:
  type: postgres
  url: env:FERRY_PG_URL
  shard_rows: 20000
  resources:
    - {table: public.big, target: $tb}
sink:
  type: mysql
  url: env:FERRY_MY_WRITER_URL
  write: append
  append_method: $m
batch: {rows: 1000}
EOF
  FERRY_FAILPOINTS="before_sink_apply=sleep(20)" "$FERRY_BIN" run $tb.yaml --quiet > $tb.log 2>&1 &
  pid=$!
  for _ in $(seq 1 600); do
    got=$(myq -e "SELECT count(*) FROM $tb" 2>/dev/null || echo 0)
    [ "${got:-0}" -ge 15000 ] && break
    sleep 0.05
  done
  kill -9 $pid 2>/dev/null || true
  wait $pid 2>/dev/null || true
  partial=$(myq -e "SELECT count(*) FROM $tb")
  [ "$partial" -lt 100000 ] || fail "$m: the kill came after the copy ended ($partial rows)"
  expect_exit 0 ferry run $tb.yaml --json
  [ "$(json_field "$OUT" .resumed)" = true ] || fail "$m: the killed run is resumed: $OUT"
  myq -e "SELECT CONCAT(id, '|', v, '|', amount, '|', DATE_FORMAT(at, '%Y-%m-%d %H:%i:%s')) FROM $tb ORDER BY id" > ${tb}_dst.txt
  cmp -s big_src.txt ${tb}_dst.txt || fail "$m: set differs after resume: $(diff big_src.txt ${tb}_dst.txt | head -5)"
  [ "$(myq -e "SELECT count(*) - count(DISTINCT id) FROM $tb")" = 0 ] || fail "$m: duplicates after resume"
  [ "$(myq -e "SELECT count(*) FROM _ferry_checkpoints WHERE pipeline LIKE 'mybigsink\_$m@%' AND resource = 'public.big'")" -ge 1 ] || fail "$m: no checkpoint rows in MariaDB: $(myq -e 'SELECT * FROM _ferry_checkpoints')"
  # the checkpoint rows sum what the run committed; the run counts each row once
  [ "$(myq -e "SELECT SUM(run_rows) FROM _ferry_checkpoints WHERE pipeline LIKE 'mybigsink\_$m@%' AND resource = 'public.big'")" = 100000 ] ||
    fail "$m: the checkpoint rows' run_rows: $(myq -e 'SELECT * FROM _ferry_checkpoints')"
  counted=$(ferry runs --pipeline "mybigsink_$m" --json | jq -r '.[0].rows')
  [ "$counted" = 100000 ] || fail "$m: the run counts $counted rows, the destination holds 100000"
  pass "PostgreSQL -> MariaDB append ($m) killed at $partial rows and resumed: equal set, no duplicate (exactly-once), $counted rows counted"
done

# ---- 3. upsert and merge ----------------------------------------------------------------
pgq >/dev/null <<'SQL'
CREATE TABLE up (k1 text, k2 int, at timestamptz NOT NULL, v numeric(10,2), note text, PRIMARY KEY (k1, k2));
INSERT INTO up SELECT 'k' || (g % 9), g, '2024-01-01', g / 4.0, 'n' || g FROM generate_series(1, 2000) g;
CREATE TABLE ch (id int PRIMARY KEY, name text, amount float8, tag varchar(10));
INSERT INTO ch SELECT g, 'n' || g, g * 1.5, CASE WHEN g % 3 = 0 THEN 'x ' END FROM generate_series(1, 1500) g;
SQL
cat > up.yaml <<EOF
version: 1
name: myup
source:
  type: postgres
  url: env:FERRY_PG_URL
  resources:
    - {table: public.up, mode: incremental, cursor: [at]}
sink:
  type: mysql
  url: env:FERRY_MY_WRITER_URL
  write: upsert
batch: {rows: 300}
EOF
expect_exit 0 ferry run up.yaml
pgq -c "UPDATE up SET at = '2024-01-02', v = -v, note = NULL WHERE k2 % 5 = 0; INSERT INTO up VALUES ('k ', 1, '2024-01-03', 1, 'trailing space key')"
expect_exit 0 ferry run up.yaml
pgq -c "SELECT k1 || '|' || k2 || '|' || v || '|' || coalesce(note, 'NULL') FROM up ORDER BY 1" | LC_ALL=C sort > up_src.txt
myq -e "SELECT CONCAT(k1, '|', k2, '|', v, '|', COALESCE(note, 'NULL')) FROM up" | LC_ALL=C sort > up_dst.txt
cmp -s up_src.txt up_dst.txt || fail "upsert: sets differ: $(diff up_src.txt up_dst.txt | head -5)"
pass "upsert: incremental with updates (and a key differing only by a trailing space) equals the source"

cat > merge.yaml <<EOF
version: 1
name: mymerge
source:
  type: postgres
  url: env:FERRY_PG_URL
  resources:
    - {table: ch, mode: cdc}
sink:
  type: mysql
  url: env:FERRY_MY_WRITER_URL
  write: merge
batch: {rows: 200, flush_after: 200ms}
EOF
expect_exit 0 ferry run merge.yaml
pgq >/dev/null <<'SQL'
BEGIN;
INSERT INTO ch SELECT g, 'new' || g, g, 'y' FROM generate_series(2001, 2300) g;
UPDATE ch SET name = name || '+', amount = amount * 2 WHERE id % 7 = 0;
DELETE FROM ch WHERE id % 11 = 0;
UPDATE ch SET id = id + 5000 WHERE id BETWEEN 100 AND 120;
COMMIT;
INSERT INTO ch VALUES (9999, 'gone', 0, 'z');
DELETE FROM ch WHERE id = 9999;
INSERT INTO ch VALUES (9999, 'back', 1, 'z');
SQL
expect_exit 0 ferry run merge.yaml
pgq -c "SELECT id || '|' || name || '|' || amount::text || '|' || coalesce(tag, 'NULL') FROM ch ORDER BY id" > ch_src.txt
myq -e "SELECT CONCAT(id, '|', name, '|', CAST(amount AS CHAR), '|', COALESCE(tag, 'NULL')) FROM ch ORDER BY id" > ch_dst.txt
cmp -s ch_src.txt ch_dst.txt || fail "merge: sets differ: $(diff ch_src.txt ch_dst.txt | head -5)"
pass "merge from PostgreSQL CDC (inserts, updates, key moves, deletes, delete+reinsert): equal set"

# ---- 4. replace twice -------------------------------------------------------------------
pgq -c "CREATE TABLE rp AS SELECT g AS id, 'first' AS v FROM generate_series(1, 500) g; ALTER TABLE rp ADD PRIMARY KEY (id)"
cat > rp.yaml <<EOF
version: 1
name: myreplace
source:
  type: postgres
  url: env:FERRY_PG_URL
  resources:
    - table: public.rp
sink:
  type: mysql
  url: env:FERRY_MY_WRITER_URL
  write: replace
EOF
expect_exit 0 ferry run rp.yaml
[ "$(myq -e "SELECT CONCAT(count(*), '/', MIN(v)) FROM rp")" = "500/first" ] || fail "replace run 1"
pgq -c "DELETE FROM rp WHERE id > 200; UPDATE rp SET v = 'second'"
expect_exit 0 ferry run rp.yaml
[ "$(myq -e "SELECT CONCAT(count(*), '/', MIN(v), '/', MAX(v)) FROM rp")" = "200/second/second" ] || fail "replace run 2: $(myq -e 'SELECT count(*) FROM rp')"
[ "$(myq -e "SELECT count(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'ferry' AND TABLE_NAME LIKE 'rp\_\_ferry%'")" = 0 ] || fail "a staging table is left"
pass "replace twice: the destination holds exactly the second run's table; no staging table left"

# ---- 5. hostile destination names; a value MySQL cannot hold ------------------------------
pgq >/dev/null <<'SQL'
CREATE TABLE "we""ird `t`; drop é" ("a b" int PRIMARY KEY, "c`d" text, "é'; --" float8);
INSERT INTO "we""ird `t`; drop é" VALUES (1, 'x''); DROP TABLE every; --', 1.5), (2, NULL, -0.25);
CREATE TABLE nan (id int PRIMARY KEY, f float8);
INSERT INTO nan VALUES (1, 1), (2, 'NaN'), (3, 3);
SQL
cat > hostile.yaml <<'EOF'
version: 1
name: myhostile
source:
  type: postgres
  url: env:FERRY_PG_URL
  resources:
    - table: 'public."we""ird `t`; drop é"'
sink:
  type: mysql
  url: env:FERRY_MY_WRITER_URL
  write: upsert
EOF
expect_exit 0 ferry run hostile.yaml
got=$(myq -e 'SELECT GROUP_CONCAT(CONCAT(`a b`, "=", COALESCE(`c``d`, "NULL"), "/", `é'"'"'; --`) ORDER BY `a b`) FROM `we"ird ``t``; drop é`')
[ "$got" = "1=x'); DROP TABLE every; --/1.5,2=NULL/-0.25" ] || fail "hostile names: got $got"
[ "$(myq -e 'SELECT count(*) FROM every')" = 4 ] || fail "every was touched"
cat > nan.yaml <<EOF
version: 1
name: mynan
source:
  type: postgres
  url: env:FERRY_PG_URL
  resources:
    - table: public.nan
sink:
  type: mysql
  url: env:FERRY_MY_WRITER_URL
  write: append
EOF
expect_exit 1 ferry run nan.yaml
printf '%s' "$OUT" | grep -q 'column "f"' || fail "NaN: the message names the column: $OUT"
printf '%s' "$OUT" | grep -q '`ferry`.`nan`' || fail "NaN: the message names the table: $OUT"
[ "$(myq -e 'SELECT count(*) FROM nan')" = 0 ] || fail "NaN: rows of the failed batch were written"
pass "hostile destination names exact; NaN refused naming table and column, nothing of its batch written"

# ---- least privilege: replace needs DROP and ALTER ----------------------------------------
myq <<SQL
CREATE USER 'nodrop'@'127.0.0.1' IDENTIFIED BY 'nodrop-pw-$$';
GRANT SELECT, INSERT, UPDATE, DELETE, CREATE ON ferry.* TO 'nodrop'@'127.0.0.1';
SQL
export NODROP_URL="mysql://nodrop:nodrop-pw-$$@127.0.0.1:$MY_PORT/ferry"
sed 's/FERRY_MY_WRITER_URL/NODROP_URL/; s/^name: myreplace/name: myreplace2/' rp.yaml > rp2.yaml
pgq -c "UPDATE rp SET v = 'third'"
expect_exit 1 ferry run rp2.yaml
printf '%s' "$OUT" | grep -qi 'denied' || fail "replace without DROP: the message says access denied: $OUT"
[ "$(myq -e "SELECT CONCAT(count(*), '/', MIN(v), '/', MAX(v)) FROM rp")" = "200/second/second" ] || fail "replace without DROP changed the table"
pass "least privilege: a writer without DROP/ALTER fails replace clearly; the previous table is intact"

# ---- upsert into an existing table without a unique key: refused, nothing written ---------
myq -e "CREATE TABLE nokey (k1 varchar(10), k2 int, at datetime(6), v decimal(10,2), note text)"
sed 's/^name: myup$/name: myup2/; s/- {table: public.up, mode: incremental, cursor: \[at\]}/- {table: public.up, mode: incremental, cursor: [at], target: nokey}/' up.yaml > nokey.yaml
grep -q 'target: nokey' nokey.yaml || fail "nokey.yaml not made"
expect_exit 3 ferry run nokey.yaml
printf '%s' "$OUT" | grep -q 'without a primary key or unique index' || fail "upsert without a unique key: $OUT"
[ "$(myq -e 'SELECT count(*) FROM nokey')" = 0 ] || fail "upsert without a unique key wrote rows"
myq -e "ALTER TABLE nokey ADD UNIQUE KEY (k2, k1)"
expect_exit 0 ferry run nokey.yaml
[ "$(myq -e 'SELECT count(*) FROM nokey')" = "$(pgq -c 'SELECT count(*) FROM up')" ] || fail "upsert with a unique key (k2, k1)"
pass "upsert into an existing table: refused without a unique key on the key columns, works with one"

# ---- 6. ferry verify with MySQL as the destination ----------------------------------------
pgq >/dev/null <<'SQL'
CREATE TABLE vt (id int PRIMARY KEY, i bigint, n numeric(12,3), t text, ts timestamptz,
  d date, b boolean, by bytea, j jsonb, u uuid, tm time, f double precision);
INSERT INTO vt SELECT g, g::bigint * 1000000007, g / 7.0, 'row ' || g || ' é', TIMESTAMPTZ '2024-01-01 00:00:00+00' + g * INTERVAL '1 second',
  DATE '2000-01-01' + g, g % 2 = 0, decode(lpad(to_hex(g), 8, '0'), 'hex'), jsonb_build_object('g', g),
  md5(g::text)::uuid, TIME '00:00:00' + g * INTERVAL '1.5 second', g / 3.0
FROM generate_series(1, 3000) g;
INSERT INTO vt VALUES (0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
SQL
cat > vt.yaml <<EOF
version: 1
name: vt
source:
  type: postgres
  url: env:FERRY_PG_URL
  resources:
    - table: public.vt
sink:
  type: mysql
  url: env:FERRY_MY_WRITER_URL
  write: append
EOF
expect_exit 0 ferry run vt.yaml
expect_exit 0 ferry verify vt.yaml --json
[ "$(printf '%s' "$OUT" | jq -r '.resources[0] | "\(.source_rows) \(.dest_rows) \(.missing.count) \(.different.count) \(.extra.count)"')" = "3001 3001 0 0 0" ] ||
  fail "verify of an equal MySQL destination: $OUT"
myq -e "DELETE FROM vt WHERE id = 17; UPDATE vt SET u = '00000000-0000-0000-0000-000000000000' WHERE id = 5;
        UPDATE vt SET tm = '00:00:01' WHERE id = 6; INSERT INTO vt (id) VALUES (5000)"
expect_exit 8 ferry verify vt.yaml --json
[ "$(printf '%s' "$OUT" | jq -r '.resources[0] | "\(.missing.count) \(.different.count) \(.extra.count)"')" = "1 2 1" ] ||
  fail "verify finds one missing, two different (uuid, time) and one extra row in MySQL: $OUT"
pass "ferry verify: a MySQL destination equal to its PostgreSQL source (every written type), then a missing, two changed and an extra row found"
