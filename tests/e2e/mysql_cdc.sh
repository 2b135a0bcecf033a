# tests/e2e/mysql_cdc.sh - `mode: cdc` of the mysql source against one real MariaDB 10.11
# (tests/mysql/mysql.sh), read by the least-privilege user: bad server settings refused at
# plan time naming the setting; snapshot then stream of every type into PostgreSQL (merge),
# compared column by column; several tables changed concurrently (inserts, updates,
# deletes, a key update) while ferry streams, into PostgreSQL and SQLite (merge), set-equal
# afterwards; a 200 000-row transaction with kill -9 in the middle, resumed: exact; the
# binary log purged past the saved position -> "resnapshot required"; positions carry the GTID
# position and a stream whose saved file is gone resumes by GTID (MariaDB's
# @slave_connect_state), also when nothing is new (the run ends at a heartbeat); server_id
# refusals; DDL mid-stream -> a clear error naming the table; a failover to a GTID replica
# (its own binlog files) between the attempts of a run killed inside a 20 000-row
# transaction: every row once; a change log (`write: append`) refuses the new server's positions.
. "$FERRY_SRC/tests/e2e/lib.sh"
. "$FERRY_SRC/tests/mysql/mysql.sh"
my_pg_start
export PGTZ=UTC

pipeline() { # FILE NAME SINK TABLES...
  local f=$1 n=$2 sink=$3; shift 3
  { printf 'version: 1\nname: %s\nsource:\n  type: mysql\n  url: env:FERRY_MY_READER_URL\n  resources:\n' "$n"
    for t in "$@"; do printf '    - table: %s\n      mode: cdc\n' "$t"; done
    printf 'sink: %s\n' "$sink"
    printf 'batch: {rows: 5000}\n'
  } > "$f"
}
PG_SINK="{type: postgres, url: env:FERRY_PG_URL, write: merge}"

# ---- bad server settings ----------------------------------------------------------------
myq -e "CREATE TABLE s1 (id int PRIMARY KEY, v text); INSERT INTO s1 VALUES (1, 'a')"
pipeline bad.yaml mybad "$PG_SINK" s1
myq -e "SET GLOBAL binlog_row_image = 'MINIMAL'"
expect_exit 2 ferry run bad.yaml
case $OUT in *"binlog_row_image = FULL"*MINIMAL*) ;; *) fail "row image refused by name: $OUT" ;; esac
myq -e "SET GLOBAL binlog_row_image = 'FULL'; SET GLOBAL binlog_format = 'STATEMENT'"
expect_exit 2 ferry run bad.yaml
case $OUT in *"binlog_format = ROW"*STATEMENT*) ;; *) fail "binlog format refused by name: $OUT" ;; esac
myq -e "SET GLOBAL binlog_format = 'ROW'; SET GLOBAL log_bin_compress = ON"
expect_exit 2 ferry run bad.yaml
case $OUT in *"log_bin_compress = OFF"*ON*) ;; *) fail "compressed binlog events refused by name: $OUT" ;; esac
myq -e "SET GLOBAL log_bin_compress = OFF"
pass "cdc refused at plan time naming binlog_row_image, binlog_format and log_bin_compress"

# ---- every type: snapshot then stream ----------------------------------------------------
myq <<'SQL'
CREATE TABLE every (
  id int PRIMARY KEY, ti tinyint, tu tinyint unsigned, si smallint, su smallint unsigned,
  mi mediumint, mu mediumint unsigned, i int, iu int unsigned, bi bigint, bu bigint unsigned,
  d65 decimal(65,30), d38 decimal(38,10), d52 decimal(5,2), f float, db double,
  b1 bit(1), b13 bit(13), bo bool, c4 char(4), vc varchar(50), tx mediumtext,
  l1 varchar(30) CHARACTER SET latin1, bn binary(4),
  vb varbinary(10), bl mediumblob, dt date, dtm datetime(6), dt0 datetime, ts timestamp(3) NULL,
  tm time(6), t3 time(3), y year, e enum('a','b c','ü', 'it''s'), st set('x','y','z'), j json,
  g geometry, pt point);
CREATE TABLE every_src LIKE every;
INSERT INTO every_src VALUES
 (1, -128, 255, -32768, 65535, -8388608, 16777215, -2147483648, 4294967295,
  -9223372036854775808, 18446744073709551615,
  '12345678901234567890123456789012345.123456789012345678901234567890',
  '-1234567890123456789012345678.0123456789', -999.99, 3.40282e38, 1.7976931348623157e308,
  b'1', b'1010101010101', true, 'ab', 'héllo "q" ''s'' `b` \\', 'line1\nline2 ☃ 😀', 'café ÿ €',
  X'00ff1000', X'', X'deadbeef', '1000-01-01', '9999-12-31 23:59:59.999999',
  '1970-01-01 00:00:00', '2038-01-19 03:14:07.999', '-838:59:59.000000', '-00:00:00.5', 1901, 'ü', 'x,z',
  '{"a": [1, 2.5, "é"]}', ST_GeomFromText('POLYGON((0 0,1 0,1 1,0 0))'), POINT(1.5, -2)),
 (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
  NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
  NULL, NULL, NULL, NULL, NULL, NULL),
 (3, 127, 0, 32767, 0, 8388607, 0, 2147483647, 0, 9223372036854775807, 9223372036854775808,
  '-0.000000000000000000000000000001', '0', 0, 1.17549e-38, -2.2250738585072014e-308,
  b'0', b'0', false, '', '', '', '', X'00000000', X'00', X'', '2024-02-29',
  '0001-01-01 00:00:00.000001', '2000-01-01 12:34:56', '1970-01-01 00:00:01',
  '838:59:59.999999', '12:00:00', 2155, 'it''s', '', '[]', ST_GeomFromText('LINESTRING(0 0, 1 1)'), POINT(0, 0)),
 (4, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, '0.000000000000000000000000000001', '99999999999999999999999999.9999999999',
  999.99, -0.1, 0.1, b'1', b'1111111111111', 2, 'abcd', repeat('v', 50), repeat('long ', 20000),
  'x', X'ffff0000', X'ffffffffffffffffffff', repeat(X'00ff', 40000), '2000-02-29',
  '1969-12-31 23:59:59.999999', '1969-07-20 20:17:40', '2000-01-01 00:00:00', '00:00:00.000001', '-01:02:03.004', 0,
  'b c', 'x,y,z', '{"x": {"y": [true, null, {"z": "é"}]}}', POINT(-1e300, 1e-300), POINT(3, 4));
INSERT INTO every SELECT * FROM every_src WHERE id IN (1, 2);
SQL
pipeline types.yaml mytypes "$PG_SINK" every
expect_exit 0 ferry run types.yaml
[ "$(pgq -c 'SELECT count(*) FROM every')" = 2 ] || fail "snapshot: 2 rows expected: $OUT"
# the stream: inserts, an update of every column, a delete, a key change
myq <<'SQL'
INSERT INTO every SELECT * FROM every_src WHERE id IN (3, 4);
UPDATE every e JOIN every_src s ON s.id = 4 SET e.ti = s.ti, e.tu = s.tu, e.si = s.si, e.su = s.su,
  e.mi = s.mi, e.mu = s.mu, e.i = s.i, e.iu = s.iu, e.bi = s.bi, e.bu = s.bu, e.d65 = s.d65,
  e.d38 = s.d38, e.d52 = s.d52, e.f = s.f, e.db = s.db, e.b1 = s.b1, e.b13 = s.b13, e.bo = s.bo,
  e.c4 = s.c4, e.vc = s.vc, e.tx = s.tx, e.l1 = s.l1, e.bn = s.bn, e.vb = s.vb, e.bl = s.bl,
  e.dt = s.dt, e.dtm = s.dtm, e.dt0 = s.dt0, e.ts = s.ts, e.tm = s.tm, e.t3 = s.t3, e.y = s.y,
  e.e = s.e, e.st = s.st, e.j = s.j, e.g = s.g, e.pt = s.pt WHERE e.id = 2;
INSERT INTO every SELECT 5, ti, tu, si, su, mi, mu, i, iu, bi, bu, d65, d38, d52, f, db, b1, b13,
  bo, c4, vc, tx, l1, bn, vb, bl, dt, dtm, dt0, ts, tm, t3, y, e, st, j, g, pt FROM every_src WHERE id = 1;
DELETE FROM every WHERE id = 5;
INSERT INTO every SELECT 6, ti, tu, si, su, mi, mu, i, iu, bi, bu, d65, d38, d52, f, db, b1, b13,
  bo, c4, vc, tx, l1, bn, vb, bl, dt, dtm, dt0, ts, tm, t3, y, e, st, j, g, pt FROM every_src WHERE id = 3;
UPDATE every SET id = 7 WHERE id = 6;
SQL
expect_exit 0 ferry run types.yaml
[ "$(pgq -c 'SELECT string_agg(id::text, $$,$$ ORDER BY id) FROM every')" = "1,2,3,4,7" ] ||
  fail "stream: ids 1,2,3,4,7 expected: $(pgq -c 'SELECT id FROM every ORDER BY id' | tr '\n' ' ')"

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
               FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = 'ferry' AND TABLE_NAME = 'every'")
my_list="id" pg_list="id"
for c in $cols; do
  my_list="$my_list, COALESCE(MD5(CONVERT($(my_expr "$c") USING utf8mb4)), 'NULL')"
  pg_list="$pg_list, coalesce(md5($(pg_expr "$c")), 'NULL')"
done
myq -e "SET time_zone = '+00:00'; SELECT CONCAT_WS('|', $my_list) FROM every ORDER BY id" > src_md5.txt
pgq -c "SELECT concat_ws('|', $pg_list) FROM every ORDER BY id" > dst_md5.txt
[ "$(wc -l < src_md5.txt)" = 5 ] || fail "5 source rows expected"
if ! cmp -s src_md5.txt dst_md5.txt; then
  set -- id $cols
  bad=$(paste -d'\n' src_md5.txt dst_md5.txt | awk -F'|' 'NR%2==1 { for (i = 1; i <= NF; i++) a[i] = $i; next }
        { for (i = 1; i <= NF; i++) if (a[i] != $i) print i }' | sort -un | head -1)
  c=${!bad}
  myq -e "SET time_zone = '+00:00'; SELECT id, LEFT($(my_expr "$c"), 120) FROM every ORDER BY id" >&2
  pgq -c "SELECT id, left($(pg_expr "$c"), 120) FROM every ORDER BY id" >&2
  fail "column $c differs between MariaDB and PostgreSQL after the stream"
fi
pass "snapshot then stream of every type -> PostgreSQL (merge): each column equal"

# ---- several tables changed while ferry streams -> PostgreSQL and SQLite ------------------
myq <<'SQL'
CREATE TABLE a (id int PRIMARY KEY, v varchar(40), n bigint);
CREATE TABLE b (k varchar(20) PRIMARY KEY, amount decimal(12,2), at datetime(3));
INSERT INTO a SELECT seq, CONCAT('a', seq), seq FROM seq_1_to_2000;
INSERT INTO b SELECT CONCAT('k', seq), seq / 100, '2024-01-01 00:00:00.000' + INTERVAL seq SECOND FROM seq_1_to_500;
SQL
pipeline multi_pg.yaml mymulti_pg "$PG_SINK" a b
pipeline multi_lite.yaml mymulti_lite "{type: sqlite, path: $PWD/lite.db, write: merge}" a b
writer() {
  local i
  for i in $(seq 1 40); do
    myq -e "START TRANSACTION;
      INSERT INTO a SELECT 2000 + $i * 100 + seq, CONCAT('new', seq), $i FROM seq_1_to_50;
      UPDATE a SET v = CONCAT(v, '+'), n = n + 1 WHERE id % 40 = $i % 40;
      DELETE FROM a WHERE id = $i * 7;
      INSERT INTO b VALUES (CONCAT('w', $i), $i * 1.25, NOW(3)) ON DUPLICATE KEY UPDATE amount = amount + 1;
      UPDATE b SET amount = amount * 2 WHERE k = CONCAT('k', $i);
      DELETE FROM b WHERE k = CONCAT('k', $i + 100);
      COMMIT;"
    [ $((i % 10)) = 0 ] && myq -e "UPDATE a SET id = id + 100000 WHERE id = $i"
  done
}
writer &
wpid=$!
for f in multi_pg multi_lite; do expect_exit 0 ferry run $f.yaml; done # during the writes
wait $wpid
for f in multi_pg multi_lite; do expect_exit 0 ferry run $f.yaml; done # the rest
myq -e "SELECT COUNT(*) FROM a" > /dev/null
for t in a b; do
  case $t in
    a) my_sql="SELECT CONCAT_WS('|', id, v, n) FROM a ORDER BY id"
       pg_sql="SELECT concat_ws('|', id, v, n) FROM a ORDER BY id"
       lite_sql="SELECT id || '|' || v || '|' || n FROM a ORDER BY id" ;;
    b) my_sql="SELECT CONCAT_WS('|', k, amount, DATE_FORMAT(at, '%Y-%m-%d %H:%i:%s.%f')) FROM b ORDER BY k"
       pg_sql="SELECT concat_ws('|', k, amount, to_char(at, 'YYYY-MM-DD HH24:MI:SS.US')) FROM b ORDER BY k"
       lite_sql="" ;;
  esac
  myq -e "$my_sql" > my_$t.txt
  pgq -c "$pg_sql" > pg_$t.txt
  cmp -s my_$t.txt pg_$t.txt || { diff my_$t.txt pg_$t.txt | head >&2; fail "table $t: PostgreSQL differs from MariaDB"; }
  if [ -n "$lite_sql" ]; then
    q lite.db "$lite_sql" > lite_$t.txt
    cmp -s my_$t.txt lite_$t.txt || { diff my_$t.txt lite_$t.txt | head >&2; fail "table $t: SQLite differs from MariaDB"; }
  fi
done
[ "$(q lite.db 'SELECT count(*) FROM b')" = "$(myq -e 'SELECT COUNT(*) FROM b')" ] || fail "SQLite b count"
pass "two tables changed concurrently (inserts, updates, deletes, key updates): PostgreSQL and SQLite equal to MariaDB"

# ---- one 200 000-row transaction, kill -9 in the middle, resumed --------------------------
ROWS=${ROWS:-200000}
myq -e "CREATE TABLE big (id bigint PRIMARY KEY, payload varchar(40), n int);
        INSERT INTO big SELECT seq, 'seed', seq FROM seq_1_to_1000"
pipeline big_pg.yaml mybig_pg "$PG_SINK" big
pipeline big_lite.yaml mybig_lite "{type: sqlite, path: $PWD/big.db, write: merge}" big
for f in big_pg big_lite; do expect_exit 0 ferry run $f.yaml; done
myq -e "INSERT INTO big SELECT 1000 + seq, MD5(seq), seq FROM seq_1_to_$ROWS"
total=$((ROWS + 1000))
count_of() {
  case $1 in
    big_pg) pgq -c "SELECT count(*) FROM big" ;;
    big_lite) q big.db "SELECT count(*) FROM big" 2>/dev/null || echo 0 ;;
  esac
}
for f in big_pg big_lite; do
  before=$(count_of $f)
  FERRY_FAILPOINTS="before_sink_apply=sleep(150)" "$FERRY_BIN" run $f.yaml --quiet > kill-$f.log 2>&1 &
  pid=$!
  for _ in $(seq 1 600); do
    [ "$(count_of $f)" -ge $((before + 10000)) ] && break
    sleep 0.05
  done
  kill -9 $pid
  wait $pid 2>/dev/null || true
  at_kill=$(count_of $f)
  [ "$at_kill" -gt "$before" ] && [ "$at_kill" -lt $((before + ROWS)) ] ||
    fail "$f: the kill did not land inside the transaction ($before -> $at_kill rows)"
  expect_exit 0 ferry run $f.yaml
  pass "$f: killed with $((at_kill - before)) of $ROWS rows of one transaction written, resumed"
done
a=$(myq -e "SELECT CONCAT_WS('|', id, payload, n) FROM big ORDER BY id" | md5sum)
b=$(pgq -c "SELECT concat_ws('|', id, payload, n) FROM big ORDER BY id" | md5sum)
[ "$a" = "$b" ] || fail "big: PostgreSQL differs from MariaDB"
[ "$(pgq -c 'SELECT count(*), count(DISTINCT id) FROM big')" = "$total|$total" ] || fail "big: PostgreSQL count"
b=$(q big.db "SELECT id || '|' || payload || '|' || n FROM big ORDER BY id" | md5sum)
[ "$a" = "$b" ] || fail "big: SQLite differs from MariaDB"
# the killed run's attempts together wrote each row of the transaction once: the resumed
# attempt skipped the rows made durable before the kill (position file:offset + k rows)
for f in big_pg big_lite; do
  r=$(ferry runs --pipeline my$f --json | jq -r '.[0] | "\(.state) \(.attempt) \(.rows)"')
  [ "$r" = "completed 2 $ROWS" ] || fail "$f: the resumed run (state attempt rows) is $r, want completed 2 $ROWS"
done
pass "one $ROWS-row transaction killed mid-stream and resumed: all $total rows, none twice (PostgreSQL, SQLite)"

# ---- the binary log purged while ferry is down ----------------------------------------------
myq -e "CREATE TABLE p (id int PRIMARY KEY, v varchar(10)); INSERT INTO p VALUES (1, 'one')"
pipeline purge.yaml mypurge "$PG_SINK" p
expect_exit 0 ferry run purge.yaml
myq -e "FLUSH BINARY LOGS; INSERT INTO p VALUES (2, 'two'); FLUSH BINARY LOGS; UPDATE p SET v = 'uno' WHERE id = 1"
cur=$(myq -e "SHOW MASTER STATUS" | cut -f1)
# MariaDB keeps a file until its binlog checkpoint is written (after InnoDB's log flush):
# purge until only the current file is left.
for _ in $(seq 1 200); do
  myq -e "PURGE BINARY LOGS TO '$cur'"
  [ "$(myq -e "SHOW BINARY LOGS" | wc -l)" = 1 ] && break
  sleep 0.1
done
[ "$(myq -e "SHOW BINARY LOGS" | cut -f1)" = "$cur" ] || fail "the binary logs before $cur were not purged"
expect_exit 1 ferry run purge.yaml
case $OUT in *"table \`ferry\`.\`p\`"*"resnapshot required"*"and so were transactions after its GTID position"*) ;;
  *) fail "purged binlog: 'resnapshot required' naming the table (the file and the GTIDs gone) expected: $OUT" ;; esac
[ "$(pgq -c "SELECT string_agg(id || '=' || v, ',' ORDER BY id) FROM p")" = "1=one" ] ||
  fail "purged binlog: nothing may be written"
sed -i 's/^      mode: cdc$/      mode: cdc\n      on_position_lost: resnapshot/' purge.yaml
expect_exit 0 ferry run purge.yaml
[ "$(pgq -c "SELECT string_agg(id || '=' || v, ',' ORDER BY id) FROM p")" = "1=uno,2=two" ] ||
  fail "on_position_lost: resnapshot reads the table again: $(pgq -c 'SELECT * FROM p')"
myq -e "INSERT INTO p VALUES (3, 'three')"
expect_exit 0 ferry run purge.yaml
[ "$(pgq -c "SELECT count(*) FROM p")" = 3 ] || fail "the stream goes on after the resnapshot"
pass "binlog purged past the saved position: 'resnapshot required'; on_position_lost: resnapshot copies again, then streams"

# ---- GTID positions; resume by GTID where the saved file is gone -------------------------
purge_to_current() {
  local cur; cur=$(myq -e "SHOW MASTER STATUS" | cut -f1)
  for _ in $(seq 1 200); do
    myq -e "PURGE BINARY LOGS TO '$cur'"
    [ "$(myq -e "SHOW BINARY LOGS" | wc -l)" = 1 ] && break
    sleep 0.1
  done
  [ "$(myq -e "SHOW BINARY LOGS" | cut -f1)" = "$cur" ] || fail "the binary logs before $cur were not purged"
}
saved_pos() { # PIPELINE FIELD
  ferry checkpoints --json --pipeline "$1" | jq -r '.[] | select(.shard == 0) | .position' | jq -r ".$2"
}
gt_rows() { pgq -c "SELECT string_agg(id || '=' || v, ',' ORDER BY id) FROM gt"; }
myq -e "CREATE TABLE gt (id int PRIMARY KEY, v varchar(10)); INSERT INTO gt VALUES (1, 'a')"
pipeline gt.yaml mygt "$PG_SINK" gt
expect_exit 0 ferry run gt.yaml
[ "$(saved_pos mygt g)" = "$(myq -e 'SELECT @@global.gtid_binlog_pos')" ] ||
  fail "first run: the position's GTID $(saved_pos mygt g) is not the server's $(myq -e 'SELECT @@global.gtid_binlog_pos')"
myq -e "INSERT INTO gt VALUES (2, 'b')"
expect_exit 0 ferry run gt.yaml
[ "$(saved_pos mygt g)" = "$(myq -e 'SELECT @@global.gtid_binlog_pos')" ] ||
  fail "streamed: the position's GTID $(saved_pos mygt g) is not the server's $(myq -e 'SELECT @@global.gtid_binlog_pos')"
old_n=$(saved_pos mygt n)
# the saved file rotated away and purged; the transactions after the saved GTIDs are all in
# the current file: the stream resumes by GTID (nothing lost, nothing doubled)
myq -e "FLUSH BINARY LOGS"
myq -e "INSERT INTO gt VALUES (3, 'c'); UPDATE gt SET v = 'A' WHERE id = 1; DELETE FROM gt WHERE id = 2"
purge_to_current
expect_exit 0 ferry run gt.yaml
[ "$(gt_rows)" = "1=A,3=c" ] || fail "GTID resume: $(gt_rows)"
[ $(( $(saved_pos mygt n) >> 32 )) -gt $(( old_n >> 32 )) ] || fail "GTID resume: the position did not move to the current file"
[ "$(saved_pos mygt g)" = "$(myq -e 'SELECT @@global.gtid_binlog_pos')" ] || fail "GTID resume: the position's GTID"
[ "$(ferry runs --pipeline mygt --json | jq -r '.[0].rows')" = 3 ] || fail "GTID resume: 3 changes expected, $(ferry runs --pipeline mygt --json | jq -r '.[0].rows')"
# nothing new after the saved GTIDs and the file gone again: the run ends (at a heartbeat)
myq -e "FLUSH BINARY LOGS"
purge_to_current
expect_exit 0 ferry run gt.yaml
[ "$(gt_rows)" = "1=A,3=c" ] || fail "GTID resume with nothing new: $(gt_rows)"
myq -e "INSERT INTO gt VALUES (4, 'd')"
expect_exit 0 ferry run gt.yaml
[ "$(gt_rows)" = "1=A,3=c,4=d" ] || fail "after the GTID resumes: $(gt_rows)"
pass "positions carry the server's GTID position; the saved file purged: resumed by GTID, exact; nothing new: the run ends"

# ---- server_id: the server's own and a duplicate within the pipeline are refused ---------
myq -e "CREATE TABLE sid (id int PRIMARY KEY)"
pipeline sid.yaml mysid "$PG_SINK" sid
sed -i 's/^      mode: cdc$/      mode: cdc\n      server_id: 1/' sid.yaml
expect_exit 2 ferry run sid.yaml
case $OUT in *"server_id 1 is the source server's own"*) ;; *) fail "server_id of the server: $OUT" ;; esac
pipeline sid2.yaml mysid2 "$PG_SINK" sid gt
sed -i 's/^      mode: cdc$/      mode: cdc\n      server_id: 777/' sid2.yaml
expect_exit 2 ferry run sid2.yaml
case $OUT in *"server_id 777 is also the server_id of route"*) ;; *) fail "a duplicate server_id: $OUT" ;; esac
sed -i '0,/server_id: 777/s//server_id: 778/' sid2.yaml
expect_exit 0 ferry run sid2.yaml
pass "server_id: the source server's own and one shared by two resources are refused (exit 2); distinct ids run"

# ---- DDL mid-stream -----------------------------------------------------------------------
myq -e "CREATE TABLE d (id int PRIMARY KEY, v varchar(10)); INSERT INTO d VALUES (1, 'x')"
pipeline ddl.yaml myddl "$PG_SINK" d
sed -i 's/^version: 1$/version: 1\nschema_changes: fail/' ddl.yaml # (evolve: e2e/mysql_schema_changes)
expect_exit 0 ferry run ddl.yaml
# a DDL that keeps the columns: seen as the QUERY event, named with its statement
myq -e "INSERT INTO d VALUES (2, 'y'); ALTER TABLE d MODIFY v varchar(20); INSERT INTO d VALUES (3, 'z')"
expect_exit 1 ferry run ddl.yaml
case $OUT in *"table \`ferry\`.\`d\`"*"schema change (DDL)"*"ALTER TABLE d MODIFY v varchar(20)"*) ;;
  *) fail "DDL mid-stream: a clear error naming the table expected: $OUT" ;; esac
expect_exit 1 ferry run ddl.yaml # the same place again: never silently past it
case $OUT in *"schema change (DDL)"*) ;; *) fail "DDL: stops again at the same place: $OUT" ;; esac
[ "$(pgq -c 'SELECT count(*) FROM d WHERE id = 3')" = 0 ] || fail "DDL: no row after the change"
# a DDL that adds a column: the rows logged before it no longer match the table
myq -e "CREATE TABLE d2 (id int PRIMARY KEY, v varchar(10)); INSERT INTO d2 VALUES (1, 'x')"
pipeline ddl2.yaml myddl2 "$PG_SINK" d2
sed -i 's/^version: 1$/version: 1\nschema_changes: fail/' ddl2.yaml
expect_exit 0 ferry run ddl2.yaml
myq -e "INSERT INTO d2 VALUES (2, 'y'); ALTER TABLE d2 ADD COLUMN w int; INSERT INTO d2 VALUES (3, 'z', 1)"
expect_exit 1 ferry run ddl2.yaml
case $OUT in *"table \`ferry\`.\`d2\`"*"schema change"*) ;;
  *) fail "DDL (a new column) mid-stream: a clear error naming the table expected: $OUT" ;; esac
[ "$(pgq -c 'SELECT count(*) FROM d2')" = 1 ] || fail "DDL: nothing written past the change"
pass "DDL on a streamed table mid-stream: the run stops with an error naming the table (and the statement)"

# ---- zero dates in the stream: NULL and counted (zero_dates: null), never silent -----------
myq -e "CREATE TABLE z (id int PRIMARY KEY, d date, t datetime)"
pipeline zero.yaml myzero "$PG_SINK" z
expect_exit 0 ferry run zero.yaml
myq -e "SET SESSION sql_mode = ''; INSERT INTO z VALUES (1, '0000-00-00', '2024-00-10 00:00:00'), (2, '2024-01-02', '2024-01-02 03:04:05')"
expect_exit 0 ferry run zero.yaml
case $OUT in *"table \`ferry\`.\`z\`: 2 zero or invalid dates read as NULL"*) ;; *) fail "zero dates counted: $OUT" ;; esac
[ "$(pgq -c "SELECT string_agg(id || '=' || coalesce(d::text, 'null') || '/' || coalesce(t::text, 'null'), ',' ORDER BY id) FROM z")" = \
  "1=null/null,2=2024-01-02/2024-01-02 03:04:05" ] || fail "zero dates: $(pgq -c 'SELECT * FROM z')"
pass "zero dates in the stream: NULL, counted and named"

# ---- failover: the pipeline pointed at a replica (its own binlog files) resumes by GTID ----
# A second MariaDB replicates this one (GTID, log_slave_updates, binlog base replica-bin)
# from the current GTID position on; the table is created after that, so the replica has it.
RD=$MY_DIR/replica # (my_stop stops it and removes the folder)
mkdir -p "$RD"
chmod 755 "$RD"
[ "$(id -u)" = 0 ] && chown mysql "$RD"
if [ -n "${FERRY_MY_TEMPLATE:-}" ] && [ -d "$FERRY_MY_TEMPLATE/data/mysql" ]; then
  my_as cp -a "$FERRY_MY_TEMPLATE/data" "$RD/data"
else
  my_install "$RD"
fi
for _ in 1 2 3 4 5; do
  RPORT=$((20000 + RANDOM % 20000))
  my_as /usr/sbin/mariadbd --no-defaults --user=mysql --datadir="$RD/data" --socket="$RD/sock" \
    --port="$RPORT" --bind-address=127.0.0.1 --pid-file="$RD/pid" --tmpdir="$RD" \
    --log-bin="$RD/data/replica-bin" --log-slave-updates --binlog-format=ROW --binlog-row-image=FULL \
    --server-id=2 --innodb-buffer-pool-size=32M --innodb-log-file-size=16M --skip-name-resolve \
    --character-set-server=utf8mb4 --collation-server=utf8mb4_bin --log-error="$RD/server.log" >/dev/null 2>&1 &
  up=0
  for _ in $(seq 1 300); do
    mariadb-admin --no-defaults -S "$RD/sock" -uroot ping >/dev/null 2>&1 && { up=1; break; }
    grep -q "Do you already have another server running" "$RD/server.log" 2>/dev/null && break
    sleep 0.1
  done
  [ $up = 1 ] && break
done
[ $up = 1 ] || { cat "$RD/server.log" >&2; fail "the replica did not start"; }
rq() { mariadb --no-defaults --default-character-set=utf8mb4 -S "$RD/sock" -uroot -N -B "$@"; }
myq -e "CREATE USER 'ferry_repl'@'127.0.0.1' IDENTIFIED BY 'repl-pw'; GRANT REPLICATION SLAVE ON *.* TO 'ferry_repl'@'127.0.0.1'"
rq -e "SET SESSION sql_log_bin = 0; CREATE DATABASE ferry CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
       CREATE USER 'ferry_reader'@'127.0.0.1' IDENTIFIED BY '$MY_READER_PASSWORD';
       GRANT SELECT ON ferry.* TO 'ferry_reader'@'127.0.0.1';
       GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'ferry_reader'@'127.0.0.1';
       SET GLOBAL gtid_slave_pos = '$(myq -e 'SELECT @@global.gtid_binlog_pos')';
       CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = $MY_PORT, MASTER_USER = 'ferry_repl',
         MASTER_PASSWORD = 'repl-pw', MASTER_USE_GTID = slave_pos;
       START SLAVE"
replica_catch_up() {
  local g; g=$(myq -e 'SELECT @@global.gtid_binlog_pos')
  [ "$(rq -e "SELECT MASTER_GTID_WAIT('$g', 30)")" = 0 ] || { rq -e "SHOW SLAVE STATUS\G" >&2; fail "the replica did not reach $g"; }
}
myq -e "CREATE TABLE fo (id int PRIMARY KEY, v varchar(10)); INSERT INTO fo VALUES (1, 'a'), (2, 'b')"
pipeline fo.yaml myfo "$PG_SINK" fo
expect_exit 0 ferry run fo.yaml
# a change log of the same table, its position saved on this server (checked after the switch)
pgq -c "CREATE SCHEMA folog" >/dev/null
pipeline folog.yaml myfolog "{type: postgres, url: env:FERRY_PG_URL, schema: folog, write: append}" fo
expect_exit 0 ferry run folog.yaml
# a transaction interrupted by SIGKILL mid-way, then the switch: its remaining rows come
# from the replica (k rows skipped after the GTID), nothing doubled
myq -e "INSERT INTO fo SELECT 100 + seq, 'big' FROM seq_1_to_20000"
myq -e "UPDATE fo SET v = 'A' WHERE id = 1; DELETE FROM fo WHERE id = 2"
before=$(pgq -c "SELECT count(*) FROM fo")
FERRY_FAILPOINTS="before_sink_apply=sleep(150)" "$FERRY_BIN" run fo.yaml --quiet > kill-fo.log 2>&1 &
pid=$!
for _ in $(seq 1 600); do
  [ "$(pgq -c 'SELECT count(*) FROM fo')" -ge $((before + 5000)) ] && break
  sleep 0.05
done
kill -9 $pid; wait $pid 2>/dev/null || true
at_kill=$(pgq -c "SELECT count(*) FROM fo")
[ "$at_kill" -gt "$before" ] && [ "$at_kill" -lt $((before + 20000)) ] ||
  fail "failover: the kill did not land inside the transaction ($before -> $at_kill rows)"
myq -e "INSERT INTO fo VALUES (3, 'c')"
replica_catch_up
[ "$(rq -e 'SELECT @@global.gtid_binlog_pos')" = "$(myq -e 'SELECT @@global.gtid_binlog_pos')" ] ||
  fail "the replica's GTID position differs from the primary's"
export FERRY_MY_READER_URL="mysql://ferry_reader:$MY_READER_PASSWORD@127.0.0.1:$RPORT/ferry"
FERRY_LOG=info expect_exit 0 ferry run fo.yaml
case $OUT in *"resuming from GTID position"*) ;; *) fail "failover: the resume by GTID is not said: $OUT" ;; esac
[ "$(pgq -c "SELECT count(*), count(DISTINCT id) FROM fo")" = "20002|20002" ] || fail "failover: $(pgq -c 'SELECT count(*), count(DISTINCT id) FROM fo')"
[ "$(pgq -c "SELECT string_agg(id || '=' || v, ',' ORDER BY id) FROM fo WHERE id < 100")" = "1=A,3=c" ] ||
  fail "failover: $(pgq -c "SELECT string_agg(id || '=' || v, ',' ORDER BY id) FROM fo WHERE id < 100")"
r=$(ferry runs --pipeline myfo --json | jq -r '.[0] | "\(.state) \(.attempt) \(.rows)"')
[ "$r" = "completed 2 20003" ] || fail "failover: the interrupted run (state attempt rows) is $r, want completed 2 20003"
[ "$(saved_pos myfo g)" = "$(rq -e 'SELECT @@global.gtid_binlog_pos')" ] || fail "failover: the position's GTID"
rq -e "STOP SLAVE"
rq -e "INSERT INTO ferry.fo VALUES (4, 'd')"
expect_exit 0 ferry run fo.yaml
[ "$(pgq -c "SELECT v FROM fo WHERE id = 4")" = d ] || fail "failover: the stream goes on on the new server"
pass "failover to a replica with other binlog files, inside an interrupted 20000-row transaction: resumed by GTID, every row once"
# The change log orders by binlog positions (`_ferry_lsn`): the replica's files are numbered
# from 1 where the primary's were past it, so its changes would sort before the log's: refused.
[ $(( $(saved_pos myfolog n) >> 32 )) -gt 1 ] || fail "failover: the primary's saved file is its first (the refusal below needs a later one)"
n_log=$(pgq -c "SELECT count(*) FROM folog.fo")
expect_exit 1 ferry run folog.yaml
case $OUT in *"table"*"comes before the position the change log reached"*"another server"*) ;; *)
  fail "failover: the change log did not refuse the replica's positions: $OUT" ;; esac
[ "$(pgq -c "SELECT count(*) FROM folog.fo")" = "$n_log" ] || fail "failover: the refused change log was written"
pass "failover: a change log refuses the new server's binlog positions (they would sort before its rows), writing nothing"
