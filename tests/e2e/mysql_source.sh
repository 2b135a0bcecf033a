# tests/e2e/mysql_source.sh - the mysql source against a real MariaDB 10.11 (tests/mysql/mysql.sh)
# shared: pg mysql
# labels: asan
# read by the least-privilege user: every type's edge values to PostgreSQL (compared column by
# column, as MD5s of one canonical text on both sides) and to Parquet (read back by DuckDB);
# `ferry verify` against the PostgreSQL copy; hostile identifiers; zero dates (null: counted;
# error: named); incremental runs with many rows sharing one cursor value across batches.
# Resumption: mysql_resume.sh; errors, secrets and TLS: mysql_security.sh.
. "$FERRY_SRC/tests/e2e/lib.sh"
. "$FERRY_SRC/tests/mysql/mysql.sh"
my_pg_start
export PGTZ=UTC

# ---- every type ------------------------------------------------------------------------
myq <<'SQL'
CREATE TABLE every (
  id int PRIMARY KEY, ti tinyint, tu tinyint unsigned, si smallint, su smallint unsigned,
  mi mediumint, mu mediumint unsigned, i int, iu int unsigned, bi bigint, bu bigint unsigned,
  d65 decimal(65,30), d38 decimal(38,10), d52 decimal(5,2), f float, db double,
  b1 bit(1), b13 bit(13), bo bool, c4 char(4), vc varchar(50), tx mediumtext,
  l1 varchar(30) CHARACTER SET latin1, g2 varchar(30) CHARACTER SET greek, bn binary(4),
  vb varbinary(10), bl mediumblob, dt date, dtm datetime(6), dt0 datetime, ts timestamp(3) NULL,
  tm time(6), y year, e enum('a','b c','ü'), st set('x','y','z'), j json, g geometry, pt point);
INSERT INTO every VALUES
 (1, -128, 255, -32768, 65535, -8388608, 16777215, -2147483648, 4294967295,
  -9223372036854775808, 18446744073709551615,
  '12345678901234567890123456789012345.123456789012345678901234567890',
  '-1234567890123456789012345678.0123456789', -999.99, 3.40282e38, 1.7976931348623157e308,
  b'1', b'1010101010101', true, 'ab', 'héllo "q" ''s'' `b` \\', 'line1\nline2 ☃ 😀', 'café ÿ',
  'αβγ', X'00ff1000', X'', X'deadbeef', '1000-01-01', '9999-12-31 23:59:59.999999',
  '1970-01-01 00:00:00', '2038-01-19 03:14:07.999', '-838:59:59.000000', 1901, 'ü', 'x,z',
  '{"a": [1, 2.5, "é"]}', ST_GeomFromText('POLYGON((0 0,1 0,1 1,0 0))'), POINT(1.5, -2)),
 (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
  NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
  NULL, NULL, NULL, NULL, NULL, NULL),
 (3, 127, 0, 32767, 0, 8388607, 0, 2147483647, 0, 9223372036854775807, 9223372036854775808,
  '-0.000000000000000000000000000001', '0', 0, 1.17549e-38, -2.2250738585072014e-308,
  b'0', b'0', false, '', '', '', '', '', X'00000000', X'00', X'', '2024-02-29',
  '0001-01-01 00:00:00.000001', '2000-01-01 12:34:56', '1970-01-01 00:00:01',
  '838:59:59.999999', 2155, 'a', '', '[]', ST_GeomFromText('LINESTRING(0 0, 1 1)'), POINT(0, 0)),
 (4, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, '0.000000000000000000000000000001', '99999999999999999999999999.9999999999',
  999.99, -0.1, 0.1, b'1', b'1111111111111', 2, 'abcd', repeat('v', 50), repeat('long ', 20000),
  'x', 'x', X'ffffffff', X'ffffffffffffffffffff', repeat(X'00ff', 40000), '2000-02-29',
  '1969-12-31 23:59:59.999999', '1969-07-20 20:17:40', '2000-01-01 00:00:00', '00:00:00.000001', 0,
  'b c', 'x,y,z', '{"x": {"y": [true, null, {"z": "é"}]}}', POINT(-1e300, 1e-300), POINT(3, 4));
SQL
cat > types.yaml <<EOF
version: 1
name: mytypes
source:
  type: mysql
  url: env:FERRY_MY_READER_URL
  resources:
    - table: every
      mode: full
sink:
  type: postgres
  url: env:FERRY_PG_URL
  write: append
EOF
expect_exit 0 ferry run types.yaml --json
[ "$(pgq -c 'SELECT count(*) FROM every')" = 4 ] || fail "4 rows of every type: $OUT"

# One canonical text per column on each side, compared as MD5s per row (values hold newlines).
my_expr() {
  case $1 in
    f) echo "CAST(f + 0e0 AS CHAR)" ;;
    b1) echo "IF(b1 = b'1', 't', 'f')" ;;
    y) echo "CAST(y + 0 AS CHAR)" ;;
    b13) echo "LOWER(LPAD(HEX(b13), 4, '0'))" ;;
    bn|vb|bl) echo "LOWER(HEX($1))" ;;
    g|pt) echo "LOWER(HEX(ST_AsBinary($1)))" ;;
    dtm|dt0|ts) echo "DATE_FORMAT($1, '%Y-%m-%d %H:%i:%s.%f')" ;;
    *) echo "CAST($1 AS CHAR)" ;;
  esac
}
pg_expr() {
  case $1 in
    f|db) echo "replace(($1::float8)::text, 'e+', 'e')" ;;
    b1) echo "CASE WHEN b1 THEN 't' ELSE 'f' END" ;;
    b13|bn|vb|bl|g|pt) echo "encode($1, 'hex')" ;;
    dtm|dt0|ts) echo "to_char($1, 'YYYY-MM-DD HH24:MI:SS.US')" ;;
    *) echo "$1::text" ;;
  esac
}
cols=$(myq -e "SELECT GROUP_CONCAT(COLUMN_NAME ORDER BY ORDINAL_POSITION SEPARATOR ' ')
               FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'every'")
[ "$(wc -w <<<"$cols")" -ge 20 ] || fail "the columns of every: [$cols]"
# One query a side: id then one MD5 per column; a difference names its column.
my_list="id" pg_list="id"
for c in $cols; do
  my_list="$my_list, COALESCE(MD5(CONVERT($(my_expr "$c") USING utf8mb4)), 'NULL')"
  pg_list="$pg_list, coalesce(md5($(pg_expr "$c")), 'NULL')"
done
myq -e "SET time_zone = '+00:00'; SELECT CONCAT_WS('|', $my_list) FROM every ORDER BY id" > src_md5.txt
pgq -c "SELECT concat_ws('|', $pg_list) FROM every ORDER BY id" > dst_md5.txt
[ "$(wc -l < src_md5.txt)" = 4 ] || fail "4 source rows expected"
if ! cmp -s src_md5.txt dst_md5.txt; then
  set -- id $cols
  bad=$(paste -d'\n' src_md5.txt dst_md5.txt | awk -F'|' 'NR%2==1 { for (i = 1; i <= NF; i++) a[i] = $i; next }
        { for (i = 1; i <= NF; i++) if (a[i] != $i) print i }' | sort -un | head -1)
  c=${!bad}
  myq -e "SET time_zone = '+00:00'; SELECT id, LEFT($(my_expr "$c"), 120) FROM every ORDER BY id" >&2
  pgq -c "SELECT id, left($(pg_expr "$c"), 120) FROM every ORDER BY id" >&2
  fail "column $c differs between MariaDB and PostgreSQL"
fi
types=$(pgq -c "SELECT string_agg(attname || ':' || format_type(atttypid, atttypmod), ' ' ORDER BY attnum)
                FROM pg_attribute WHERE attrelid = 'every'::regclass AND attnum > 0")
for want in bu:numeric\(20,0\) d65:numeric d38:numeric\(38,10\) f:real b1:boolean bl:bytea \
            dtm:"timestamp without time zone" ts:"timestamp with time zone" tm:text j:jsonb g:bytea; do
  case " $types " in *" $want"*) ;; *) fail "PostgreSQL column type $want expected, have: $types" ;; esac
done
pass "every MySQL type's edge values -> PostgreSQL: each column equal (MD5 of one canonical text)"

# ferry verify: MySQL read through ferry and hashed in C, PostgreSQL hashed in the database.
expect_exit 0 ferry verify types.yaml
pgq -c "UPDATE every SET vc = 'changed' WHERE id = 3; DELETE FROM every WHERE id = 4"
expect_exit 8 ferry verify types.yaml --json
[ "$(printf '%s' "$OUT" | jq -r '.resources[0].missing.count, .resources[0].different.count' | tr '\n' ' ')" = "1 1 " ] ||
  fail "verify finds one missing and one different row: $OUT"
pass "ferry verify: MySQL source equal to its PostgreSQL copy, then one missing and one changed row found"

# ---- every type -> Parquet, read back by DuckDB ----------------------------------------
cat > pq.yaml <<EOF
version: 1
name: myparquet
source:
  type: mysql
  url: env:FERRY_MY_READER_URL
  resources:
    - table: every
sink:
  type: files
  path: $T/pq
  format: parquet
  write: append
EOF
expect_exit 0 ferry run pq.yaml --json
part=$(ls pq/every/*.parquet | head -1)
[ -n "$part" ] || fail "no parquet part written: $OUT"
[ -d "$FERRY_SRC/tests/tools/node_modules" ] || fail "tests/tools/node_modules missing: run npm ci --prefix tests/tools"
DUCK="$FERRY_SRC/tests/tools/duckdb_exec.mjs"
duck_expr() {
  case $1 in
    f) echo "CAST(CAST(f AS DOUBLE) AS VARCHAR)" ;;
    b1) echo "CASE WHEN b1 THEN 't' ELSE 'f' END" ;;
    b13|bn|vb|bl|g|pt) echo "lower(hex($1))" ;;
    dtm|dt0) echo "strftime($1, '%Y-%m-%d %H:%M:%S.%f')" ;;
    ts) echo "strftime($1 AT TIME ZONE 'UTC', '%Y-%m-%d %H:%M:%S.%f')" ;;
    dt) echo "strftime($1, '%Y-%m-%d')" ;;
    *) echo "CAST($1 AS VARCHAR)" ;;
  esac
}
# The same MD5s from DuckDB (floats and doubles compared as values below: DuckDB prints
# them its own way).
duck_list="CAST(id AS VARCHAR)" my_list2="id"
for c in $cols; do
  case $c in db|f) continue ;; esac
  duck_list="$duck_list, coalesce(md5($(duck_expr "$c")), 'NULL')"
  my_list2="$my_list2, COALESCE(MD5(CONVERT($(my_expr "$c") USING utf8mb4)), 'NULL')"
done
myq -e "SET time_zone = '+00:00'; SELECT CONCAT_WS('|', $my_list2) FROM every ORDER BY id" > src_pq.txt
nodetool "$DUCK" "SELECT concat_ws('|', $duck_list) AS m FROM read_parquet('$T/$part') ORDER BY id" | jq -r '.[0]' > pq_md5.txt
if ! cmp -s src_pq.txt pq_md5.txt; then
  set -- id $(for c in $cols; do case $c in db|f) ;; *) echo "$c" ;; esac; done)
  bad=$(paste -d'\n' src_pq.txt pq_md5.txt | awk -F'|' 'NR%2==1 { for (i = 1; i <= NF; i++) a[i] = $i; next }
        { for (i = 1; i <= NF; i++) if (a[i] != $i) print i }' | sort -un | head -1)
  c=${!bad}
  nodetool "$DUCK" "SELECT id, left($(duck_expr "$c"), 120) AS v FROM read_parquet('$T/$part') ORDER BY id" >&2
  fail "column $c differs between MariaDB and the Parquet file read by DuckDB"
fi
# Floats: DuckDB compares the exact values with the literals MariaDB was given.
got=$(nodetool "$DUCK" "SELECT count(*) AS n FROM read_parquet('$T/$part') WHERE
  (id = 1 AND db = 1.7976931348623157e308 AND f = CAST(3.40282e38 AS FLOAT)) OR
  (id = 3 AND db = -2.2250738585072014e-308 AND f = CAST(1.17549e-38 AS FLOAT)) OR
  (id = 4 AND db = 0.1 AND f = CAST(-0.1 AS FLOAT)) OR (id = 2 AND db IS NULL AND f IS NULL)" | jq -r '.[0]')
[ "$got" = 4 ] || fail "float/double values in Parquet: $got of 4 rows exact"
pass "every MySQL type -> Parquet: DuckDB reads each column equal to MariaDB's"

# ---- hostile identifiers ---------------------------------------------------------------
myq <<'SQL'
CREATE TABLE `we"ird ``t``; drop é` (`a b` int PRIMARY KEY, `c"d` varchar(40), `é'; --` text);
INSERT INTO `we"ird ``t``; drop é` VALUES (1, 'x''); DROP TABLE every; --', 'ü'), (2, NULL, '`');
SQL
cat > hostile.yaml <<'EOF'
version: 1
name: myhostile
source:
  type: mysql
  url: env:FERRY_MY_READER_URL
  resources:
    - table: '`we"ird ``t``; drop é`'
      target: 'we"ird `t`; drop é'
sink:
  type: postgres
  url: env:FERRY_PG_URL
  write: append
EOF
expect_exit 0 ferry run hostile.yaml --json
got=$(pgq -c "SELECT string_agg(\"a b\" || '=' || coalesce(\"c\"\"d\", 'NULL') || '/' || \"é'; --\", ',' ORDER BY \"a b\") FROM \"we\"\"ird \`t\`; drop é\"")
[ "$got" = "1=x'); DROP TABLE every; --/ü,2=NULL/\`" ] || fail "hostile identifiers: got $got"
[ "$(myq -e 'SELECT count(*) FROM every')" = 4 ] || fail "the source's every table was touched"
pass "hostile table and column names read exactly; nothing else touched"

# ---- zero dates ------------------------------------------------------------------------
myq <<'SQL'
SET SESSION sql_mode = '';
CREATE TABLE zd (id int PRIMARY KEY, d date NOT NULL, t datetime NOT NULL);
INSERT INTO zd VALUES (1, '0000-00-00', '0000-00-00 00:00:00'), (2, '2024-00-10', '2024-01-01 00:00:00'), (3, '2024-05-06', '2024-05-06 07:08:09');
SQL
zd_yaml() { # NAME EXTRA_SOURCE_LINE
  cat <<EOF
version: 1
name: $1
source:
  type: mysql
  url: env:FERRY_MY_READER_URL
$2
  resources:
    - table: zd
sink:
  type: sqlite
  path: $T/$1.db
  write: append
EOF
}
zd_yaml myzero "" > zd.yaml
expect_exit 0 ferry run zd.yaml
[ "$(q myzero.db "SELECT group_concat(id || '=' || coalesce(d, 'NULL') || '/' || coalesce(substr(t, 1, 19), 'NULL'), ',') FROM (SELECT * FROM zd ORDER BY id)")" = \
  "1=NULL/NULL,2=NULL/2024-01-01 00:00:00,3=2024-05-06/2024-05-06 07:08:09" ] || fail "zero dates as NULL: $(q myzero.db 'SELECT * FROM zd')"
printf '%s' "$OUT" | grep -q "3 zero or invalid dates read as NULL" || fail "zero dates are counted in the run's output: $OUT"
zd_yaml myzero2 "  zero_dates: error" > zd2.yaml
expect_exit 1 ferry run zd2.yaml
printf '%s' "$OUT" | grep -q 'column "d"' || fail "zero_dates: error names the column: $OUT"
printf '%s' "$OUT" | grep -q 'zero or invalid date' || fail "zero_dates: error says why: $OUT"
[ "$(q myzero2.db 'SELECT count(*) FROM zd' 2>/dev/null || echo 0)" = 0 ] || fail "zero_dates: error wrote rows"
pass "zero dates: NULL and counted by default; zero_dates: error stops naming table, column and row"

# ---- incremental: ties across batches ---------------------------------------------------
myq <<'SQL'
CREATE TABLE inc (k1 varchar(10), k2 int, up datetime(6) NULL, v int, PRIMARY KEY (k1, k2));
INSERT INTO inc SELECT CONCAT('a', seq % 7), seq, '2024-01-01 00:00:00', seq FROM seq_1_to_3000;
INSERT INTO inc VALUES ('z', 1, NULL, 0);
SQL
cat > inc.yaml <<EOF
version: 1
name: myinc
source:
  type: mysql
  url: env:FERRY_MY_READER_URL
  resources:
    - table: inc
      mode: incremental
      cursor: [up]
sink:
  type: sqlite
  path: $T/inc.db
  write: upsert
batch: {rows: 128}
EOF
expect_exit 0 ferry run inc.yaml --json
[ "$(q inc.db 'SELECT count(*) FROM inc')" = 3000 ] || fail "incremental run 1: $(q inc.db 'SELECT count(*) FROM inc') rows"
# b-rows share the saved cursor value and sort after it only by key: they arrive.
myq <<'SQL'
INSERT INTO inc SELECT CONCAT('b', seq % 5), seq, '2024-01-01 00:00:00', seq FROM seq_1_to_500;
INSERT INTO inc SELECT 'c', seq, '2024-01-02 00:00:00.5', seq FROM seq_1_to_700;
UPDATE inc SET up = '2024-01-03', v = -v WHERE k1 = 'a3';
SQL
expect_exit 0 ferry run inc.yaml --json
myq -e "SELECT CONCAT(k1, '|', k2, '|', v) FROM inc WHERE up IS NOT NULL ORDER BY k1, k2" > inc_src.txt
q inc.db "SELECT k1 || '|' || k2 || '|' || v FROM inc ORDER BY k1, k2" > inc_dst.txt
cmp -s inc_src.txt inc_dst.txt || fail "incremental: sets differ: $(diff inc_src.txt inc_dst.txt | head -5)"
pass "incremental with 3000 rows on one cursor value across batches, later ties, updates: equal set"


# ---- incremental with lookback -------------------------------------------------------------
myq <<'SQL'
CREATE TABLE lb (id int PRIMARY KEY, up datetime(6) NOT NULL, d date NOT NULL, v int);
INSERT INTO lb SELECT seq, TIMESTAMP'2024-05-01 12:00:00' - INTERVAL (10 - seq) MINUTE,
  DATE'2024-01-10' - INTERVAL (10 - seq) DAY, seq FROM seq_1_to_10;
SQL
lb_yaml() { # name cursor lookback
  cat > "$1.yaml" <<EOF
version: 1
name: $1
source:
  type: mysql
  url: env:FERRY_MY_READER_URL
  resources:
    - {table: lb, mode: incremental, cursor: [$2], lookback: $3}
sink: {type: sqlite, path: $T/$1.db, write: upsert}
EOF
}
lb_yaml lbts up 1h
lb_yaml lbd d 36h
expect_exit 0 ferry run lbts.yaml --quiet
expect_exit 0 ferry run lbd.yaml --quiet
[ "$(q lbts.db 'SELECT count(*) FROM lb')" = 10 ] || fail "lookback: first run"
# late commits with older cursor values: inside and outside each window
myq <<'SQL'
INSERT INTO lb VALUES (100, '2024-05-01 11:30:00', '2024-01-08', 100),
                      (101, '2024-05-01 10:59:59.999999', '2024-01-07', 101);
UPDATE lb SET v = -1 WHERE id = 5;
SQL
expect_exit 0 ferry run lbts.yaml --quiet
[ "$(q lbts.db 'SELECT group_concat(id, ",") FROM (SELECT id FROM lb WHERE id >= 100 ORDER BY id)')" = 100 ] \
  || fail "lookback 1h on a datetime: late rows $(q lbts.db 'SELECT group_concat(id) FROM lb WHERE id >= 100')"
[ "$(q lbts.db 'SELECT v FROM lb WHERE id = 5')" = -1 ] || fail "lookback 1h: the update inside the window was not read again"
expect_exit 0 ferry run lbd.yaml --quiet
[ "$(q lbd.db 'SELECT group_concat(id, ",") FROM (SELECT id FROM lb WHERE id >= 100 ORDER BY id)')" = 100 ] \
  || fail "lookback 36h on a date: late rows $(q lbd.db 'SELECT group_concat(id) FROM lb WHERE id >= 100')"
lb_yaml lbbad v 1h
expect_exit 0 ferry run lbbad.yaml --quiet
expect_exit 2 ferry run lbbad.yaml
printf '%s\n' "$OUT" | grep -q 'lookback needs a date or timestamp first cursor column; "v" is int32' \
  || fail "lookback on an integer cursor: $OUT"
pass "lookback (1h on datetime(6), 36h on a date) re-reads late rows inside the window only; an int cursor is refused"
