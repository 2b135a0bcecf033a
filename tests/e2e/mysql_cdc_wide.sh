# tests/e2e/mysql_cdc_wide.sh - a mysql cdc pipeline wider than the server's connections:
# the streams of a run start at once (the source's open_stream: a stream connects only
# briefly while it reads the catalog) and read the binary log once, on the pipeline's one
# binlog connection. Against one real MariaDB 10.11 (tests/mysql/mysql.sh) with
# max_connections = 12 into PostgreSQL (merge): 40 cdc tables copied, then transactions
# spanning all 40 tables (inserts, updates, deletes, a key update) streamed; the server's
# general log counts the COM_BINLOG_DUMP commands of each run (exactly one, where waves of
# 16 would make three); every table set-equal to MariaDB, the run's change count exact;
# then runs while a writer commits transactions over all tables: one dump per run with
# changes, equal.
. "$FERRY_SRC/tests/e2e/lib.sh"
. "$FERRY_SRC/tests/mysql/mysql.sh"
. "$FERRY_SRC/tests/pg/pg.sh"
my_start
pg_start
pgq() { psql -v ON_ERROR_STOP=1 -qXAt "$@"; }
export PGTZ=UTC
N_TABLES=40
MAX_CONN=12

tables=$(seq -f 'w%g' 1 $N_TABLES)
{ printf 'version: 1\nname: mywide\nsource:\n  type: mysql\n  url: env:FERRY_MY_READER_URL\n  resources:\n'
  for t in $tables; do printf '    - table: %s\n      mode: cdc\n' "$t"; done
  printf 'sink: {type: postgres, url: env:FERRY_PG_URL, write: merge}\n'
} > wide.yaml
sql=""
for t in $tables; do
  sql="$sql CREATE TABLE $t (id int PRIMARY KEY, v varchar(40), n bigint);
       INSERT INTO $t SELECT seq, CONCAT('$t-', seq), seq FROM seq_1_to_50;"
done
myq -e "$sql"
myq -e "SET GLOBAL max_connections = $MAX_CONN; SET GLOBAL log_output = 'TABLE'; SET GLOBAL general_log = 1"
[ "$(myq -e 'SELECT @@global.max_connections')" = $MAX_CONN ] || fail "max_connections not set"

same_tables() { # all tables equal in MariaDB and PostgreSQL
  local t
  for t in $tables; do
    myq -e "SELECT CONCAT_WS('|', id, v, n) FROM $t ORDER BY id" > my_$t.txt
    pgq -c "SELECT concat_ws('|', id, v, n) FROM $t ORDER BY id" > pg_$t.txt
    [ -s my_$t.txt ] || fail "table $t: no rows read from MariaDB ($1)"
    cmp -s my_$t.txt pg_$t.txt || { diff my_$t.txt pg_$t.txt | head >&2; fail "table $t: PostgreSQL differs from MariaDB ($1)"; }
  done
}
txn() { # ONE transaction over every table: 3 inserts, an update, a delete (I: its number)
  local i=$1 t s="START TRANSACTION;"
  for t in $tables; do
    s="$s INSERT INTO $t SELECT 1000 + $i * 10 + seq, CONCAT('x$i-', seq), $i FROM seq_1_to_3;
       UPDATE $t SET v = CONCAT(v, '+'), n = n + 1 WHERE id = $i;
       DELETE FROM $t WHERE id = 25 + $i;"
  done
  myq -e "$s COMMIT;"
}

# ---- first run: 40 tables copied, then their streams -------------------------------------
expect_exit 0 ferry run wide.yaml
same_tables "first run"
pass "$N_TABLES cdc tables copied on a server with max_connections = $MAX_CONN"

# ---- transactions spanning all 40 tables: one wave, one binlog dump ------------------------
for i in 1 2 3 4 5; do txn $i; done
myq -e "UPDATE w7 SET id = id + 100000 WHERE id = 10"
d0=$(my_dumps)
FERRY_LOG=info expect_exit 0 ferry run wide.yaml
[ "$(my_dumps)" = $((d0 + 1)) ] || fail "$N_TABLES streams made $(( $(my_dumps) - d0 )) binlog dumps, want 1"
case $OUT in *"one binlog connection"*) ;; *) fail "the shared stream's log line expected: $OUT" ;; esac
case $OUT in *"on a binlog connection of its own"*) fail "a stream left the shared connection: $OUT" ;; esac
same_tables "5 transactions over $N_TABLES tables"
# per transaction and table: 3 inserts, 1 update, 1 delete; the key update: a delete of
# the old key and the new row (docs/connectors.md)
want=$((5 * N_TABLES * 5 + 2))
r=$(ferry runs --pipeline mywide --json | jq -r '.[0] | "\(.state) \(.rows)"')
[ "$r" = "completed $want" ] || fail "the run (state changes) is $r, want completed $want"
pass "5 transactions over $N_TABLES tables streamed in one wave on one binlog connection ($want changes, all tables equal)"

# ---- runs while a writer commits transactions over all tables ------------------------------
writer() {
  local i
  for i in $(seq 6 10); do txn "$i"; done
  return 0
}
writer &
# runs until the writer is done: one dump per run with changes (tests/mysql/mysql.sh)
my_runs_during $! wide.yaml mywide
same_tables "runs during 5 transactions over $N_TABLES tables"
pass "$MY_RUNS runs during 5 transactions over $N_TABLES tables: one dump per run with changes, all tables equal"
