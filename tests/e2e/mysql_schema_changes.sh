# tests/e2e/mysql_schema_changes.sh - `schema_changes: evolve | freeze | fail` of the mysql
# source's binlog CDC, against one real MariaDB 10.11 (tests/mysql/mysql.sh) into PostgreSQL
# (merge). DDL arrives mid-stream (between changes the same run streams): under evolve an ADD
# COLUMN (the stream stops after the DDL, the next run, started at once by `ferry run`, adds
# the column and streams the rest), a widening (int -> bigint: the destination column
# altered), a DROP COLUMN of a NOT NULL column (the destination lets go of NOT NULL; rows
# after it have NULL there); `freeze` (an added column's values are not written, a dropped
# column is NULL from then on, the stream does not stop); `fail` (the run stops naming the
# table, the statement and the policy, nothing after it written, again on the next run); a DDL that
# changes nothing ferry sees (an index) goes on; TRUNCATE applied in stream order under evolve
# and freeze, stopping the run under fail; the schema.changed events. The server logs
# column names (binlog_row_metadata = FULL); without them, see e2e/mysql_cdc (DDL section).
. "$FERRY_SRC/tests/e2e/lib.sh"
. "$FERRY_SRC/tests/mysql/mysql.sh"
my_pg_start
export PGTZ=UTC
# column names in the binary log's table maps: changes logged before a DDL map by name
myq -e "SET GLOBAL binlog_row_metadata = 'FULL'"

pipeline() { # FILE NAME POLICY TABLE
  printf 'version: 1\nname: %s\nschema_changes: %s\nsource:\n  type: mysql\n  url: env:FERRY_MY_READER_URL\n  resources:\n    - table: %s\n      mode: cdc\nsink: {type: postgres, url: env:FERRY_PG_URL, write: merge}\n' \
    "$2" "$3" "$4" > "$1"
}
pg_cols() { pgq -c "SELECT string_agg(column_name || ':' || data_type || ':' || is_nullable, ',' ORDER BY ordinal_position)
                    FROM information_schema.columns WHERE table_name = '$1'"; }
rows() { pgq -c "SELECT string_agg(concat_ws('|', $2), ',' ORDER BY id) FROM $1"; }

# ---- evolve: ADD COLUMN, a widening, DROP COLUMN, each mid-stream --------------------------
myq -e "CREATE TABLE ev (id int PRIMARY KEY, a varchar(20), b int NOT NULL);
        INSERT INTO ev VALUES (1, 'one', 10), (2, 'two', 20)"
pipeline ev.yaml myev evolve ev
expect_exit 0 ferry run ev.yaml
# held_run YAML SQL : a run held after its discover (failpoint cdc_before_end announces itself
# on stderr, then sleeps) while SQL changes the source: the DDL lands after discover and
# before the end the run streams to, so the stream meets it mid-stream.
held_run() {
  : > held.log # the last held run's "fired" line must not be read as this one's
  FERRY_FAILPOINTS="cdc_before_end=sleep(4000)@1" FERRY_LOG=info "$FERRY_BIN" run "$1" > held.log 2>&1 &
  local pid=$! i
  for i in $(seq 1 600); do
    grep -q 'failpoint cdc_before_end fired' held.log 2>/dev/null && break
    sleep 0.05
  done
  grep -q 'failpoint cdc_before_end fired' held.log || { kill $pid; fail "the run never reached cdc_before_end: $(cat held.log)"; }
  myq -e "$2"
  set +e; wait $pid; local rc=$?; set -e
  OUT=$(cat held.log)
  [ $rc = "${3:-0}" ] || fail "held run of $1: exit $rc, want ${3:-0}: $OUT"
}
held_run ev.yaml "INSERT INTO ev VALUES (3, 'three', 30);
        ALTER TABLE ev ADD COLUMN c varchar(10);
        INSERT INTO ev VALUES (4, 'four', 40, 'c4'); UPDATE ev SET c = 'c1' WHERE id = 1"
[ "$(pg_cols ev)" = "id:integer:NO,a:text:YES,b:integer:NO,c:text:YES" ] || fail "ADD COLUMN: destination columns $(pg_cols ev)"
[ "$(rows ev "id, a, b, c")" = "1|one|10|c1,2|two|20,3|three|30,4|four|40|c4" ] || fail "ADD COLUMN: rows $(rows ev "id, a, b, c")"
[ "$(ferry runs --pipeline myev --json | jq -r 'length')" = 3 ] || fail "ADD COLUMN: the stream stopped after the DDL and one more run took the rest: $(ferry runs --pipeline myev --json | jq -c '[.[] | .rows]')"
events() { # every schema.changed payload of the pipeline's runs, one JSON per line
  local run
  for run in $(ferry runs --pipeline "$1" --json | jq '.[].id'); do ferry events "$run" --json; done |
    jq -c 'select(.type == "schema.changed") | .payload | if type == "string" then fromjson else . end'
}
events myev > ev.txt
grep -qF '"column":"c","change":"added","old_type":null,"new_type":"utf8","policy":"evolve","action":"stop"' ev.txt ||
  fail "ADD COLUMN: a schema.changed event (added c, stop) expected: $(cat ev.txt)"
pass "evolve: ADD COLUMN mid-stream: the stream stops after it, the next run adds the column and streams the rest"

held_run ev.yaml "INSERT INTO ev VALUES (5, 'five', 50, NULL); ALTER TABLE ev MODIFY b bigint NOT NULL;
        INSERT INTO ev VALUES (6, 'six', 6000000000, 'c6')"
[ "$(pg_cols ev)" = "id:integer:NO,a:text:YES,b:bigint:NO,c:text:YES" ] || fail "widening: destination columns $(pg_cols ev)"
[ "$(rows ev "id, b")" = "1|10,2|20,3|30,4|40,5|50,6|6000000000" ] || fail "widening: rows $(rows ev "id, b")"
events myev > ev.txt
grep -qF '"column":"b","change":"widened","old_type":"int32","new_type":"int64","policy":"evolve","action":"stop"' ev.txt ||
  fail "widening: a schema.changed event expected: $(cat ev.txt)"
pass "evolve: int -> bigint mid-stream: the destination column widened, a value beyond int arrives"

held_run ev.yaml "INSERT INTO ev VALUES (7, 'seven', 70, 'c7'); ALTER TABLE ev DROP COLUMN b;
        INSERT INTO ev VALUES (8, 'eight', 'c8'); UPDATE ev SET a = 'ONE' WHERE id = 1"
[ "$(rows ev "id, a, coalesce(b::text, 'null'), c")" = "1|ONE|10|c1,2|two|20,3|three|30,4|four|40|c4,5|five|50,6|six|6000000000|c6,7|seven|70|c7,8|eight|null|c8" ] ||
  fail "DROP COLUMN: rows $(rows ev "id, a, coalesce(b::text, 'null'), c")"
myq -e "INSERT INTO ev VALUES (9, 'nine', 'c9')"
expect_exit 0 ferry run ev.yaml
[ "$(rows ev "id, a, c")" = "1|ONE|c1,2|two,3|three,4|four|c4,5|five,6|six|c6,7|seven|c7,8|eight|c8,9|nine|c9" ] ||
  fail "after DROP COLUMN: rows $(rows ev "id, a, c")"
myq -e "CREATE INDEX ev_a ON ev (a); INSERT INTO ev VALUES (10, 'ten', 'c10')"
expect_exit 0 ferry run ev.yaml
[ "$(pgq -c 'SELECT count(*) FROM ev')" = 10 ] || fail "a DDL that changes no column: the stream goes on"
pass "evolve: DROP COLUMN (NOT NULL) mid-stream: NOT NULL let go, later rows NULL there; an index DDL goes on"

# TRUNCATE (no rows in the log): applied in stream order into the merge sink, rows before it
# gone, rows after it kept; a TRUNCATE of another table that mentions ev is not ev's
myq -e "CREATE TABLE evo (id int PRIMARY KEY); INSERT INTO ev VALUES (11, 'eleven', 'c11');
        TRUNCATE TABLE ev; INSERT INTO ev VALUES (12, 'twelve', 'c12'); UPDATE ev SET a = 'TWELVE' WHERE id = 12;
        TRUNCATE evo /* not ev */; INSERT INTO ev VALUES (13, 'thirteen', NULL)"
expect_exit 0 ferry run ev.yaml
[ "$(rows ev "id, a, c")" = "12|TWELVE|c12,13|thirteen" ] || fail "TRUNCATE: rows $(rows ev "id, a, c")"
events myev | grep -F '"change":"truncated"' | grep -qF '"policy":"evolve","action":"apply"' ||
  fail "TRUNCATE: a schema.changed event (truncated, apply) expected: $(events myev)"
pass "evolve: TRUNCATE applied in stream order (rows before it gone, rows after it kept, a schema.changed event); another table's TRUNCATE passes"

# ---- freeze: the destination keeps its columns; the stream does not stop -----------------
myq -e "CREATE TABLE fr (id int PRIMARY KEY, a varchar(20), b int);
        INSERT INTO fr VALUES (1, 'one', 10)"
pipeline fr.yaml myfr freeze fr
expect_exit 0 ferry run fr.yaml
held_run fr.yaml "INSERT INTO fr VALUES (2, 'two', 20); ALTER TABLE fr ADD COLUMN c int;
        INSERT INTO fr VALUES (3, 'three', 30, 3); ALTER TABLE fr DROP COLUMN b;
        INSERT INTO fr VALUES (4, 'four', 4); UPDATE fr SET a = 'ONE' WHERE id = 1"
[ "$(pg_cols fr)" = "id:integer:NO,a:text:YES,b:integer:YES" ] || fail "freeze: destination columns $(pg_cols fr)"
[ "$(rows fr "id, a, coalesce(b::text, 'null')")" = "1|ONE|null,2|two|20,3|three|30,4|four|null" ] ||
  fail "freeze: rows $(rows fr "id, a, coalesce(b::text, 'null')")"
[ "$(ferry runs --pipeline myfr --json | jq -r 'length')" = 2 ] || fail "freeze: one run streams through both DDLs"
pass "freeze: ADD and DROP COLUMN mid-stream in one run: the new column not written, the dropped one NULL from then on"
myq -e "INSERT INTO fr VALUES (5, 'five', 5); TRUNCATE \`${MY_DB:-ferry}\`.\`fr\`; INSERT INTO fr VALUES (6, 'six', 6)"
expect_exit 0 ferry run fr.yaml
[ "$(rows fr "id, a")" = "6|six" ] || fail "freeze: TRUNCATE: rows $(rows fr "id, a")"
pass "freeze: TRUNCATE applied in stream order as under evolve (docs/pipeline-file.md)"

# ---- fail: the run stops at the DDL, naming table and statement --------------------------
myq -e "CREATE TABLE fa (id int PRIMARY KEY, a varchar(20)); INSERT INTO fa VALUES (1, 'one')"
pipeline fa.yaml myfa fail fa
expect_exit 0 ferry run fa.yaml
held_run fa.yaml "INSERT INTO fa VALUES (2, 'two'); ALTER TABLE fa ADD COLUMN c int; INSERT INTO fa VALUES (3, 'three', 3)" 1
case $OUT in *"table \`ferry\`.\`fa\`"*"schema change (DDL)"*"ALTER TABLE fa ADD COLUMN c int"*"schema_changes: fail"*) ;;
  *) fail "fail: an error naming the table, the statement and the policy expected: $OUT" ;; esac
expect_exit 1 ferry run fa.yaml
[ "$(pgq -c 'SELECT count(*) FROM fa WHERE id = 3')" = 0 ] || fail "fail: a change after the DDL was written: $(rows fa "id, a")"
pass "fail: the run stops at the DDL naming table, statement and policy, again on the next run; nothing after it written"

myq -e "CREATE TABLE fb (id int PRIMARY KEY); INSERT INTO fb VALUES (1)"
pipeline fb.yaml myfb fail fb
expect_exit 0 ferry run fb.yaml
myq -e "INSERT INTO fb VALUES (2); TRUNCATE TABLE fb; INSERT INTO fb VALUES (3)"
expect_exit 1 ferry run fb.yaml
case $OUT in *"table \`ferry\`.\`fb\`"*"TRUNCATE TABLE fb"*"schema_changes: fail"*) ;;
  *) fail "fail: TRUNCATE: an error naming the table, the statement and the policy expected: $OUT" ;; esac
[ "$(pgq -c 'SELECT count(*) FROM fb WHERE id IN (1, 3)')" = 1 ] || fail "fail: TRUNCATE: applied or passed: $(rows fb id)"
pass "fail: TRUNCATE stops the run naming table, statement and policy; not applied, nothing after it written"
