#!/usr/bin/env bash
# shared: pg mysql
# tests/e2e/mysql_verify.sh - `ferry verify` with MySQL as source or destination, chunk
# digests computed inside MariaDB 10.11 and PostgreSQL on verify's text_md5 form
# (docs/internals/verify.md), against real servers (tests/mysql/mysql.sh, tests/pg/pg.sh):
#   1. MariaDB -> PostgreSQL, 5000 rows of ints, BIGINT UNSIGNED, decimals, BIT, dates (a
#      zero date read as NULL), datetimes, timestamps, TIME, text in utf8mb4 and latin1,
#      enum, set, binary, spatial: equal, with only digests crossing (bytes asserted far below
#      the table's size); one changed value and one row missing in PostgreSQL are found and
#      named by key;
#   2. a composite text key with hostile names (backquotes, quotes, spaces, non-ASCII) in
#      byte order on both servers: equal, then a changed row found;
#   3. PostgreSQL -> MariaDB (bool, uuid, time, bytea, timestamptz, numeric, text as ferry's
#      DDL writes them): equal, then a changed value and a missing row found;
#   4. MariaDB -> MariaDB: equal, then one changed value found;
#   5. float and double columns both ways: digests of the IEEE bits in both servers (edge
#      values), equal; values one ULP apart found on either side;
#   6. --until-checkpoint with a MySQL incremental source: bounded by the saved cursor.
# The source is read as the least-privilege `ferry_reader`.
. "$FERRY_SRC/tests/e2e/lib.sh"
. "$FERRY_SRC/tests/mysql/mysql.sh"
my_pg_start
export PGTZ=UTC
counts() { printf '%s' "$OUT" | jq -r '.resources[0] | "\(.source_rows) \(.dest_rows) \(.missing.count) \(.different.count) \(.extra.count)"'; }
res() { printf '%s' "$OUT" | jq -r ".resources[0] | $1"; }

# ---- 1. MariaDB -> PostgreSQL ----------------------------------------------------------------
myq <<'SQL'
SET SESSION sql_mode = '';
CREATE TABLE t1 (id bigint PRIMARY KEY, ti tinyint, bu bigint unsigned, d65 decimal(65,30),
  d52 decimal(5,2), b1 bit(1), b13 bit(13), dt date, dtm datetime(6), ts timestamp(3) NULL,
  tm time(6), y year, vc varchar(60), l1 varchar(30) CHARACTER SET latin1, c4 char(4),
  e enum('a','b c','ü'), st set('x','y','z'), vb varbinary(10), g geometry);
INSERT INTO t1 SELECT seq, seq % 128, 18446744073709551615 - seq,
  CONCAT(seq, '.', LPAD(seq, 30, '0')), (CAST(seq AS SIGNED) % 99999) / 100 - 40, seq % 2, seq % 8192,
  '2000-01-01' + INTERVAL seq DAY, '2024-01-01' + INTERVAL seq * 1001 MICROSECOND,
  '2001-01-01' + INTERVAL seq SECOND, SEC_TO_TIME(CAST(seq AS SIGNED) * 400 - 1000000), 1901 + seq % 255,
  CONCAT('row ', seq, ' é ☃ 😀 ''q'' `b` \\'), CONCAT('café ÿ ', seq), IF(seq % 3 = 0, '', 'ab '),
  ELT(1 + seq % 3, 'a', 'b c', 'ü'), IF(seq % 4 = 0, '', 'x,z'), UNHEX(HEX(seq)),
  POINT(seq, -seq)
FROM seq_1_to_5000;
INSERT INTO t1 (id) VALUES (0);
INSERT INTO t1 (id, dt, dtm) VALUES (-1, '0000-00-00', '2024-00-10 00:00:00');
SQL
cat > a.yaml <<EOF
version: 1
name: a
source:
  type: mysql
  url: env:FERRY_MY_READER_URL
  resources:
    - table: t1
sink:
  type: postgres
  url: env:FERRY_PG_URL
  write: append
EOF
expect_exit 0 ferry run a.yaml
expect_exit 0 ferry verify a.yaml --json
[ "$(counts)" = "5002 5002 0 0 0" ] || fail "verify of an equal MariaDB -> PostgreSQL copy: $OUT"
# digests only: a 5000-row table read through ferry costs hundreds of KB
[ "$(res .source_bytes)" -lt 4000 ] && [ "$(res .dest_bytes)" -lt 4000 ] ||
  fail "verify MariaDB -> PostgreSQL moved more than digests: $OUT"
myq -e "UPDATE t1 SET l1 = 'cafe' WHERE id = 4321"
pgq -c "DELETE FROM t1 WHERE id = 17"
expect_exit 8 ferry verify a.yaml --json
[ "$(counts)" = "5002 5001 1 1 0" ] || fail "verify finds one missing and one different row: $OUT"
[ "$(res '.missing.keys[0]') $(res '.different.keys[0]')" = "17 4321" ] ||
  fail "the missing and the different row named by key: $OUT"
# two leaf chunks of about 313 rows listed as (key, hash), plus statements: far below the
# table (about 1 MB)
[ "$(res .source_bytes)" -lt 150000 ] || fail "narrowing a mismatch read whole chunks: $OUT"
pass "verify MariaDB -> PostgreSQL (every non-float type): digests computed in both servers, equal; one changed value and one missing row found by key"

# ---- 2. hostile composite text key -----------------------------------------------------------
myq <<'SQL'
CREATE TABLE `Tä ``b"le` (`k ``1"` varchar(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci,
  `ñ 2` int, v text, PRIMARY KEY (`k ``1"`, `ñ 2`));
INSERT INTO `Tä ``b"le` SELECT CONCAT(ELT(1 + seq % 5, 'a', 'B', 'é', 'Z', '_'), seq % 700), seq, REPEAT('v', seq % 50)
FROM seq_1_to_3000;
SQL
cat > b.yaml <<'EOF'
version: 1
name: b
source:
  type: mysql
  url: env:FERRY_MY_READER_URL
  resources:
    - table: "`Tä ``b\"le`"
      target: "hostile \"dst\""
sink:
  type: postgres
  url: env:FERRY_PG_URL
  write: append
EOF
expect_exit 0 ferry run b.yaml
expect_exit 0 ferry verify b.yaml --json
[ "$(counts)" = "3000 3000 0 0 0" ] || fail "verify of an equal hostile-named copy: $OUT"
myq -e "UPDATE \`Tä \`\`b\"le\` SET v = 'changed' WHERE \`ñ 2\` = 1234"
expect_exit 8 ferry verify b.yaml --json
[ "$(counts)" = "3000 3000 0 1 0" ] || fail "verify finds the changed row under a text key: $OUT"
pass "verify with a composite text key and hostile names: byte order on both servers, a changed row found"

# ---- 3. PostgreSQL -> MariaDB ----------------------------------------------------------------
pgq >/dev/null <<'SQL'
CREATE TABLE vt (id int PRIMARY KEY, i bigint, n numeric(12,3), t text, ts timestamptz,
  d date, b boolean, by bytea, u uuid, tm time);
INSERT INTO vt SELECT g, g::bigint * 1000000007, g / 7.0, 'row ' || g || ' é', TIMESTAMPTZ '2024-01-01 00:00:00+00' + g * INTERVAL '1.000001 second',
  DATE '2000-01-01' + g, g % 2 = 0, decode(lpad(to_hex(g), 8, '0'), 'hex'), md5(g::text)::uuid,
  TIME '00:00:00' + g * INTERVAL '1.5 second'
FROM generate_series(1, 3000) g;
INSERT INTO vt VALUES (0, NULL, NULL, '', NULL, NULL, NULL, '', NULL, NULL);
CREATE TABLE tk (at timestamp, d date, v text, PRIMARY KEY (at, d));
INSERT INTO tk SELECT TIMESTAMP '2024-01-01' + (g / 2) * INTERVAL '1.25 second', DATE '2001-01-01' + g % 2,
  'v' || g FROM generate_series(1, 2500) g;
SQL
cat > c.yaml <<EOF
version: 1
name: c
source:
  type: postgres
  url: env:FERRY_PG_URL
  resources:
    - table: public.vt
    - table: public.tk
sink:
  type: mysql
  url: env:FERRY_MY_WRITER_URL
  write: append
EOF
expect_exit 0 ferry run c.yaml
expect_exit 0 ferry verify c.yaml --resource public.vt --json
[ "$(counts)" = "3001 3001 0 0 0" ] || fail "verify of an equal PostgreSQL -> MariaDB copy: $OUT"
[ "$(res .dest_bytes)" -lt 4000 ] || fail "verify PostgreSQL -> MariaDB moved more than digests: $OUT"
myq -e "UPDATE vt SET tm = '00:00:01' WHERE id = 6; DELETE FROM vt WHERE id = 2999"
expect_exit 8 ferry verify c.yaml --resource public.vt --json
[ "$(counts)" = "3001 3000 1 1 0" ] || fail "verify finds a changed time and a missing row in MariaDB: $OUT"
[ "$(res '.missing.keys[0]') $(res '.different.keys[0]')" = "2999 6" ] ||
  fail "the missing and the different row named by key: $OUT"
pass "verify PostgreSQL -> MariaDB (bool, uuid, time, bytea, timestamptz, numeric, text): digests in both servers; a changed value and a missing row found"
# a (timestamp, date) key: split keys and range bounds travel as ferry's timestamp text
expect_exit 0 ferry verify c.yaml --resource public.tk --json
[ "$(counts)" = "2500 2500 0 0 0" ] && [ "$(res .dest_bytes)" -lt 30000 ] ||
  fail "verify of an equal table with a (timestamp, date) key: $OUT"
myq -e "UPDATE tk SET v = 'changed' WHERE v = 'v1001'"
expect_exit 8 ferry verify c.yaml --resource public.tk --json
[ "$(counts)" = "2500 2500 0 1 0" ] || fail "verify finds the changed row under a (timestamp, date) key: $OUT"
pass "verify with a (timestamp, date) key into MariaDB: equal, then the changed row found"

# ---- 4. MariaDB -> MariaDB -------------------------------------------------------------------
copy=$(my_db copy)
myq -e "GRANT ALL ON \`$copy\`.* TO '$MY_WRITER'@'127.0.0.1'"
cat > d.yaml <<EOF
version: 1
name: d
source:
  type: mysql
  url: env:FERRY_MY_READER_URL
  resources:
    - table: t1
sink:
  type: mysql
  url: env:COPY_URL
  write: append
EOF
export COPY_URL=${FERRY_MY_WRITER_URL%/*}/$copy
expect_exit 0 ferry run d.yaml
expect_exit 0 ferry verify d.yaml --json
[ "$(counts)" = "5002 5002 0 0 0" ] || fail "verify of an equal MariaDB -> MariaDB copy: $OUT"
[ "$(res .source_bytes)" -lt 4000 ] && [ "$(res .dest_bytes)" -lt 4000 ] ||
  fail "verify MariaDB -> MariaDB moved more than digests: $OUT"
myq -e "UPDATE \`$copy\`.t1 SET b13 = b'1' WHERE id = 77"
expect_exit 8 ferry verify d.yaml --json
[ "$(counts)" = "5002 5002 0 1 0" ] && [ "$(res '.different.keys[0]')" = 77 ] ||
  fail "verify finds the changed BIT value in the MariaDB destination: $OUT"
pass "verify MariaDB -> MariaDB: digests in the server, a changed BIT value found"

# ---- 5. floats: digests in the servers (the IEEE bits) -----------------------------------
# edge values: float and double extremes, subnormals, the neighbours of powers of two (where
# MySQL's LOG2 is one off), zeros and NULL
myq <<'SQL'
CREATE TABLE fl (id int PRIMARY KEY, f float, d double);
INSERT INTO fl SELECT seq, seq / 3, -seq / 7 FROM seq_1_to_2000;
INSERT INTO fl VALUES (0, NULL, NULL), (-1, 0, 0), (-2, 3.4028234663852886e38, 1.7976931348623157e308),
  (-3, 1.401298464324817e-45, 5e-324), (-4, 1.1754942106924411e-38, 2.225073858507201e-308),
  (-5, 1.1754943508222875e-38, 2.2250738585072014e-308), (-6, -1, 4.4501477170144023e-308),
  (-7, 16777216, 1023.9999999999999), (-8, 0.1, 0.30000000000000004),
  (-9, -3.4028234663852886e38, -1e-320), (-10, 100, 1.0000000000000002);
SQL
sed -e 's/t1/fl/; s/name: a/name: e/' a.yaml > e.yaml
expect_exit 0 ferry run e.yaml
expect_exit 0 ferry verify e.yaml --json
[ "$(counts)" = "2011 2011 0 0 0" ] || fail "verify of a float table: $OUT"
[ "$(res .source_bytes)" -lt 4000 ] && [ "$(res .dest_bytes)" -lt 4000 ] ||
  fail "verify of a float table moved more than digests: $OUT"
# one ULP off on each side: a double just below 2^-1021 in PostgreSQL, a float in MariaDB
pgq -c "UPDATE fl SET d = 4.450147717014403e-308 WHERE id = -6"
myq -e "UPDATE fl SET f = 100.00000762939453 WHERE id = -10"
expect_exit 8 ferry verify e.yaml --json
[ "$(counts)" = "2011 2011 0 2 0" ] && [ "$(res '.different.keys | sort | join(",")')" = "-10,-6" ] ||
  fail "verify finds a double and a float one ULP apart: $OUT"
pass "verify of float and double columns MariaDB -> PostgreSQL: digests of the IEEE bits in both servers (extremes, subnormals), equal; one ULP apart on either side found"
pgq >/dev/null <<'SQL'
CREATE TABLE fv (id int PRIMARY KEY, r real, d float8);
INSERT INTO fv SELECT g, g / 11.0, -g * 1e300 / 13 FROM generate_series(1, 1500) g;
INSERT INTO fv VALUES (0, NULL, NULL), (-1, '1e-45', '5e-324'), (-2, '-3.4028235e38', '-1.7976931348623157e308'),
  (-3, '1.17549435e-38', '2.2250738585072014e-308'), (-4, 0, '1e-320');
SQL
sed -e 's/public.vt/public.fv/; /public.tk/d; s/name: c/name: g/' c.yaml > g.yaml
expect_exit 0 ferry run g.yaml
expect_exit 0 ferry verify g.yaml --json
[ "$(counts)" = "1505 1505 0 0 0" ] && [ "$(res .dest_bytes)" -lt 4000 ] ||
  fail "verify of real and float8 columns PostgreSQL -> MariaDB: $OUT"
myq -e "UPDATE fv SET d = -2.225073858507201e-308 WHERE id = -3"
expect_exit 8 ferry verify g.yaml --json
[ "$(counts)" = "1505 1505 0 1 0" ] && [ "$(res '.different.keys[0]')" = -3 ] ||
  fail "verify finds a changed double in MariaDB: $OUT"
pass "verify of real and float8 columns PostgreSQL -> MariaDB: digests in both servers, equal; a changed double found"

# ---- 6. --until-checkpoint with a MySQL source ----------------------------------------------
myq -e "CREATE TABLE inc (id int PRIMARY KEY, up datetime(6) NOT NULL, v varchar(20));
        INSERT INTO inc SELECT seq, '2024-01-01' + INTERVAL seq SECOND, CONCAT('v', seq) FROM seq_1_to_1500"
cat > f.yaml <<EOF
version: 1
name: f
source:
  type: mysql
  url: env:FERRY_MY_READER_URL
  resources:
    - table: inc
      mode: incremental
      cursor: [up]
sink:
  type: postgres
  url: env:FERRY_PG_URL
  write: append
EOF
expect_exit 0 ferry run f.yaml
myq -e "INSERT INTO inc SELECT 1500 + seq, '2030-01-01' + INTERVAL seq SECOND, 'late' FROM seq_1_to_100"
expect_exit 8 ferry verify f.yaml --json
[ "$(counts)" = "1600 1500 100 0 0" ] || fail "rows added after the run are missing without --until-checkpoint: $OUT"
expect_exit 0 ferry verify f.yaml --until-checkpoint --json
[ "$(counts)" = "1500 1500 0 0 0" ] && [ "$(res .source_bytes)" -lt 4000 ] ||
  fail "--until-checkpoint with a MySQL source: digests up to the saved cursor: $OUT"
pass "verify --until-checkpoint with a MySQL source: the saved (cursor, key) bounds the digests in MySQL"
