# tests/e2e/mysql_binlog_once.sh - one binlog stream per pipeline: the mysql cdc resources of
# a run share one dump connection (one server_id) that reads the log once and routes each
# table's rows to that table's stream. Against one real MariaDB 10.11 (tests/mysql/mysql.sh)
# into PostgreSQL (merge): 8 tables, transactions spanning all of them written while ferry
# streams; the server's general log counts the COM_BINLOG_DUMP commands of each run (exactly
# one) and `SHOW PROCESSLIST` sampled during a run never shows two ferry dump threads; every
# table set-equal to MariaDB; a run killed with SIGKILL inside a transaction over all 8
# tables (tables at different positions then), resumed: every row once (the run's change
# count exact), equal again; a table whose saved position is ahead of the others' (it joined
# later) skips what it already has; one table stopping at a DDL (schema_changes: fail) while
# the 8 others stream to their end on the shared connection.
. "$FERRY_SRC/tests/e2e/lib.sh"
. "$FERRY_SRC/tests/mysql/mysql.sh"
my_pg_start
export PGTZ=UTC
N_TABLES=8

pipeline() { # FILE NAME TABLES...
  local f=$1 n=$2; shift 2
  { printf 'version: 1\nname: %s\nsource:\n  type: mysql\n  url: env:FERRY_MY_READER_URL\n  resources:\n' "$n"
    for t in "$@"; do printf '    - table: %s\n      mode: cdc\n' "$t"; done
    printf 'sink: {type: postgres, url: env:FERRY_PG_URL, write: merge}\n'
    printf 'batch: {rows: 2000}\n'
  } > "$f"
}
tables=$(seq -f 't%g' 1 $N_TABLES)
for t in $tables; do
  myq -e "CREATE TABLE $t (id int PRIMARY KEY, v varchar(40), n bigint);
          INSERT INTO $t SELECT seq, CONCAT('$t-', seq), seq FROM seq_1_to_300"
done
# shellcheck disable=SC2086
pipeline once.yaml myonce $tables

# Every COM_BINLOG_DUMP of the reader is one line of the general log (command_type).
myq -e "SET GLOBAL log_output = 'TABLE'; SET GLOBAL general_log = 1"
same_tables() { # all tables equal in MariaDB and PostgreSQL
  local t
  for t in $tables; do
    myq -e "SELECT CONCAT_WS('|', id, v, n) FROM $t ORDER BY id" > my_$t.txt
    pgq -c "SELECT concat_ws('|', id, v, n) FROM $t ORDER BY id" > pg_$t.txt
    cmp -s my_$t.txt pg_$t.txt || { diff my_$t.txt pg_$t.txt | head >&2; fail "table $t: PostgreSQL differs from MariaDB ($1)"; }
  done
}

# ---- first run: snapshot of 8 tables, then one stream --------------------------------------
d0=$(my_dumps)
expect_exit 0 ferry run once.yaml
# (nothing written since the snapshot: no dump needed at all)
[ "$(my_dumps)" -le $((d0 + 1)) ] || fail "first run: $(( $(my_dumps) - d0 )) binlog dumps, want at most 1"
same_tables "first run"
myq -e "INSERT INTO t1 VALUES (100001, 'x', 1); INSERT INTO t8 VALUES (100001, 'y', 1)"
d0=$(my_dumps)
FERRY_LOG=info expect_exit 0 ferry run once.yaml
[ "$(my_dumps)" = $((d0 + 1)) ] || fail "second run: $(( $(my_dumps) - d0 )) binlog dumps, want 1"
case $OUT in *"one binlog connection"*) ;; *) fail "the shared stream's log line expected: $OUT" ;; esac
same_tables "second run"
pass "8 tables copied, then streamed on one binlog connection (1 COM_BINLOG_DUMP)"

# ---- transactions over all 8 tables written while ferry streams ----------------------------
writer() {
  local i t sql
  for i in $(seq 1 30); do
    sql="START TRANSACTION;"
    for t in $tables; do
      sql="$sql INSERT INTO $t SELECT 1000 + $i * 20 + seq, CONCAT('w$i-', seq), $i FROM seq_1_to_15;
        UPDATE $t SET v = CONCAT(v, '+'), n = n + 1 WHERE id % 30 = $i;
        DELETE FROM $t WHERE id = $i * 7;"
    done
    myq -e "$sql COMMIT;"
    [ $((i % 10)) = 0 ] && myq -e "UPDATE t3 SET id = id + 100000 WHERE id = $i; FLUSH BINARY LOGS"
  done
  return 0
}
sampler() { # the most ferry dump threads seen at once, while the file `sampling` exists
  local most=0 k
  while [ -f sampling ]; do
    k=$(myq -e "SELECT COUNT(*) FROM information_schema.PROCESSLIST
                WHERE COMMAND LIKE 'Binlog Dump%' AND USER = 'ferry_reader'")
    [ "$k" -gt "$most" ] && most=$k
    sleep 0.02
  done
  echo "$most" > most.txt
}
touch sampling
sampler &
spid=$!
writer &
# runs until the writer is done: one dump per run with changes (tests/mysql/mysql.sh)
my_runs_during $! once.yaml myonce
rm -f sampling
wait $spid
[ "$(cat most.txt)" -le 1 ] || fail "$(cat most.txt) ferry dump threads at once, want at most 1"
same_tables "after concurrent multi-table transactions"
pass "$MY_RUNS runs during 30 transactions over 8 tables (inserts, updates, deletes, a key update, log rotations): at most one dump per run, never two at once; all tables equal"

# ---- kill -9 inside one transaction over all 8 tables, resumed ----------------------------
ROWS=${ROWS:-4000}
sql="START TRANSACTION;"
for t in $tables; do sql="$sql INSERT INTO $t SELECT 200000 + seq, MD5(seq), seq FROM seq_1_to_$ROWS;"; done
myq -e "$sql COMMIT;"
total_new=$((ROWS * N_TABLES))
pg_new() { pgq -c "SELECT $(for t in $tables; do printf '(SELECT count(*) FROM %s WHERE id > 200000) + ' "$t"; done) 0"; }
# Each table's 2 batches wait 1 s before their apply: the tables' flows apply side by side,
# so half the rows show after about 1 s and the rest a second later; the kill comes in that
# second (with 100 ms a loaded machine's poll was too slow: the kill found every row written).
FERRY_FAILPOINTS="before_sink_apply=sleep(1000)" "$FERRY_BIN" run once.yaml --quiet > kill.log 2>&1 &
pid=$!
for _ in $(seq 1 1200); do
  [ "$(pg_new)" -ge $((total_new / 4)) ] && break
  sleep 0.05
done
kill -9 $pid
wait $pid 2>/dev/null || true
at_kill=$(pg_new)
[ "$at_kill" -gt 0 ] && [ "$at_kill" -lt "$total_new" ] ||
  fail "the kill did not land inside the transaction ($at_kill of $total_new rows)"
d0=$(my_dumps)
expect_exit 0 ferry run once.yaml
[ "$(my_dumps)" = $((d0 + 1)) ] || fail "resumed run: $(( $(my_dumps) - d0 )) binlog dumps, want 1"
same_tables "after the kill"
r=$(ferry runs --pipeline myonce --json | jq -r '.[0] | "\(.state) \(.attempt) \(.rows)"')
[ "$r" = "completed 2 $total_new" ] || fail "the resumed run (state attempt rows) is $r, want completed 2 $total_new"
pass "killed with $at_kill of $total_new rows of one 8-table transaction written, resumed on one connection: every row once"

# ---- a table that joins later: its start is ahead of the others', it skips what it has -----
myq -e "CREATE TABLE late (id int PRIMARY KEY, v varchar(40), n bigint); INSERT INTO late VALUES (1, 'l', 1)"
myq -e "INSERT INTO t1 VALUES (900001, 'before-late', 1)"
# shellcheck disable=SC2086
pipeline once.yaml myonce $tables late
expect_exit 0 ferry run once.yaml # t1..t8 stream from their positions; late is copied, then streams
myq -e "INSERT INTO late VALUES (2, 'l2', 2); INSERT INTO t2 VALUES (900002, 'after-late', 2);
        UPDATE late SET v = 'l1' WHERE id = 1"
d0=$(my_dumps)
expect_exit 0 ferry run once.yaml
[ "$(my_dumps)" = $((d0 + 1)) ] || fail "with a table that joined later: $(( $(my_dumps) - d0 )) binlog dumps, want 1"
tables="$tables late"
same_tables "a table joined later"
[ "$(ferry runs --pipeline myonce --json | jq -r '.[0].rows')" = 3 ] ||
  fail "the last run streamed $(ferry runs --pipeline myonce --json | jq -r '.[0].rows') changes, want 3"
pass "a table that joined later streams on the same connection from its own position (3 changes, none twice)"

# ---- one table's stream fails (a DDL under schema_changes: fail): the others go on -------
# shellcheck disable=SC2086
pipeline once.yaml myonce $tables
sed -i '/^    - table: late$/a\      schema_changes: fail' once.yaml
myq -e "INSERT INTO t4 VALUES (900004, 'before-ddl', 4); ALTER TABLE late ADD COLUMN w int;
        INSERT INTO late VALUES (3, 'l3', 3, 3); INSERT INTO t5 VALUES (900005, 'after-ddl', 5)"
expect_exit 1 ferry run once.yaml
case $OUT in *"1 of 9 resource(s) failed"*"table \`ferry\`.\`late\`"*"schema_changes: fail"*) ;;
  *) fail "one failing stream: an error naming the table and the policy expected: $OUT" ;; esac
tables=${tables% late}
same_tables "one stream failed, the others went on"
pass "one table's stream stops at a DDL (schema_changes: fail); the 8 others stream to the end on the shared connection"
