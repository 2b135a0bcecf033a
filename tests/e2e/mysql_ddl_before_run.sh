# tests/e2e/mysql_ddl_before_run.sh - a DDL the server executed before a cdc run read the
# table's columns, while the binary log the run streams still holds changes logged before it
# (the run starts where the last one stopped): the columns the run reads from the catalog are
# not the ones of those changes. A column those changes have and the catalog lost (DROP
# COLUMN) must not vanish silently: the stream stops naming table and column, under freeze
# and under evolve, again on the next run, nothing after it written. A column the catalog has
# and the earlier changes lack (ADD COLUMN) is NULL in them, which is what they held. Real
# MariaDB 10.11 with binlog_row_metadata = FULL (column names in the table maps) into
# PostgreSQL (merge); then without names (MINIMAL): the positional guard stops the same DROP.
# See docs/internals/mysql.md ("Schema changes").
. "$FERRY_SRC/tests/e2e/lib.sh"
. "$FERRY_SRC/tests/mysql/mysql.sh"
my_pg_start
myq -e "SET GLOBAL binlog_row_metadata = 'FULL'"

pipeline() { # FILE NAME POLICY TABLE
  printf 'version: 1\nname: %s\nschema_changes: %s\nsource:\n  type: mysql\n  url: env:FERRY_MY_READER_URL\n  resources:\n    - table: %s\n      mode: cdc\nsink: {type: postgres, url: env:FERRY_PG_URL, write: merge}\n' \
    "$2" "$3" "$4" > "$1"
}
rows() { pgq -c "SELECT string_agg(concat_ws('|', $2), ',' ORDER BY id) FROM $1"; }

for policy in freeze evolve; do
  t=d_$policy
  myq -e "CREATE TABLE $t (id int PRIMARY KEY, a varchar(20), b int); INSERT INTO $t VALUES (1, 'one', 10)"
  pipeline $t.yaml p$t $policy $t
  expect_exit 0 ferry run $t.yaml
  # logged with b, then b dropped, all before the next run reads the catalog
  myq -e "INSERT INTO $t VALUES (2, 'two', 20); ALTER TABLE $t DROP COLUMN b; INSERT INTO $t VALUES (3, 'three')"
  expect_exit 1 ferry run $t.yaml
  case $OUT in *"table \`ferry\`.\`$t\`"*"column \"b\""*) ;;
    *) fail "$policy: a DROP COLUMN before the run: an error naming table and column b expected: $OUT" ;; esac
  [ "$(rows $t "id, a, coalesce(b::text, 'null')")" = "1|one|10" ] ||
    fail "$policy: rows written past the change whose column b was lost: $(rows $t "id, a, coalesce(b::text, 'null')")"
  expect_exit 1 ferry run $t.yaml
  case $OUT in *"column \"b\""*) ;; *) fail "$policy: the next run must stop again: $OUT" ;; esac
  pass "$policy: a column dropped before the run while earlier changes in the log still carry it: the stream stops naming table and column, nothing lost silently"
done

# ADD COLUMN before the run: the earlier change has no c (NULL there), the later one has it
myq -e "CREATE TABLE d_add (id int PRIMARY KEY, a varchar(20)); INSERT INTO d_add VALUES (1, 'one')"
pipeline d_add.yaml pd_add evolve d_add
expect_exit 0 ferry run d_add.yaml
myq -e "INSERT INTO d_add VALUES (2, 'two'); ALTER TABLE d_add ADD COLUMN c int; INSERT INTO d_add VALUES (3, 'three', 3)"
expect_exit 0 ferry run d_add.yaml
[ "$(rows d_add "id, a, coalesce(c::text, 'null')")" = "1|one|null,2|two|null,3|three|3" ] ||
  fail "ADD COLUMN before the run: rows $(rows d_add "id, a, coalesce(c::text, 'null')")"
pass "evolve: a column added before the run: NULL in the changes logged before it, its values after it"

# without column names in the log (binlog_row_metadata = MINIMAL) the same DROP stops the
# run on the positional guard (the log's column count is not the table's), naming the table
myq -e "SET GLOBAL binlog_row_metadata = 'MINIMAL'"
myq -e "CREATE TABLE d_pos (id int PRIMARY KEY, a varchar(20), b int); INSERT INTO d_pos VALUES (1, 'one', 10)"
pipeline d_pos.yaml pd_pos freeze d_pos
expect_exit 0 ferry run d_pos.yaml
myq -e "INSERT INTO d_pos VALUES (2, 'two', 20); ALTER TABLE d_pos DROP COLUMN b; INSERT INTO d_pos VALUES (3, 'three')"
expect_exit 1 ferry run d_pos.yaml
case $OUT in *"table \`ferry\`.\`d_pos\`"*"the binary log has 3 columns, the table has 2"*) ;;
  *) fail "no names: a DROP COLUMN before the run: an error naming the table expected: $OUT" ;; esac
[ "$(rows d_pos "id, a, coalesce(b::text, 'null')")" = "1|one|10" ] ||
  fail "no names: rows written past the change: $(rows d_pos "id, a, coalesce(b::text, 'null')")"
pass "without column names: a column dropped before the run stops the stream on the positional guard, nothing written past it"
