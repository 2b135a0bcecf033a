#!/usr/bin/env bash
# MySQL/MariaDB CDC benchmark (issue 18): ferry's binlog CDC (`mode: cdc`, merge into
# PostgreSQL) against a MariaDB replica of the same server applying the same changes, same
# machine, same run. Never gates CI.
#
# One primary (tests/mysql/mysql.sh), one GTID replica of it (a second mariadbd, default
# single-threaded apply; with PAR>0 also slave_parallel_threads=PAR, mode optimistic), one
# PostgreSQL (tests/pg/pg.sh). Table `ev` (bigint key, int, varchar, datetime(6), decimal)
# with SEED rows; ferry's first cdc run copies it (snapshot). Then the replica's SQL thread is
# stopped and CHANGES row changes are committed on the primary in transactions of TXN rows:
# half inserts, a quarter updates, a quarter deletes. Once the replica's IO thread holds the
# whole log:
#   a. the replica's apply: START SLAVE SQL_THREAD until MASTER_GTID_WAIT(primary position);
#   b. ferry: one `ferry run` streaming from its saved position to the log's end (integrity
#      digest on, merge into PostgreSQL), peak RSS;
# changes/s = CHANGES / seconds. Afterwards the replica and PostgreSQL must equal the primary
# (count and md5 over the rows in key order), else the row says WRONG.
# Writes bench/results/mysql-cdc-<date>-<CHANGES>changes.md.
#   CHANGES=400000 TXN=1000 SEED=100000 bash bench/mysql_cdc.sh
#   FERRY_BIN=build/dev/ferry skips the Release build (the results say so).
set -euo pipefail
cd "$(dirname "$0")/.."
FERRY_SRC=$PWD
CHANGES=${CHANGES:-400000}
TXN=${TXN:-1000}
SEED=${SEED:-100000}
PAR=${PAR:-0}
jobs=$(nproc 2>/dev/null || echo 2)

build_note="Release (-O3)"
if [ -z "${FERRY_BIN:-}" ]; then
  cmake -S . -B build/bench -DCMAKE_BUILD_TYPE=Release -DFERRY_WERROR=OFF >/dev/null
  cmake --build build/bench -j"$jobs" --target ferry >/dev/null
  FERRY_BIN=$PWD/build/bench/ferry
else
  build_note="given binary $FERRY_BIN"
fi

T=$(mktemp -d "${TMPDIR:-/tmp}/ferry-mycdcbench.XXXXXX")
chmod 755 "$T"
trap 'rm -rf "$T"' EXIT
. tests/mysql/mysql.sh
. tests/pg/pg.sh
my_start
pg_start
pgq() { psql -v ON_ERROR_STOP=1 -qXAt "$@"; }
export PGTZ=UTC

# ---- the replica (as tests/e2e/mysql_cdc.sh starts one; my_stop removes it with MY_DIR) ----
RD=$MY_DIR/replica
mkdir -p "$RD"; chmod 755 "$RD"
[ "$(id -u)" = 0 ] && chown mysql "$RD"
if [ -n "${FERRY_MY_TEMPLATE:-}" ] && [ -d "$FERRY_MY_TEMPLATE/data/mysql" ]; then
  my_as cp -a "$FERRY_MY_TEMPLATE/data" "$RD/data"
else
  my_install "$RD"
fi
up=0
for _ in 1 2 3 4 5; do
  RPORT=$((20000 + RANDOM % 20000))
  # the same server settings as the primary (tests/mysql/mysql.sh)
  my_as /usr/sbin/mariadbd --no-defaults --user=mysql --datadir="$RD/data" --socket="$RD/sock" \
    --port="$RPORT" --bind-address=127.0.0.1 --pid-file="$RD/pid" --tmpdir="$RD" \
    --log-bin="$RD/data/replica-bin" --binlog-format=ROW --binlog-row-image=FULL --server-id=2 \
    --innodb-buffer-pool-size=64M --innodb-log-file-size=16M --innodb-flush-log-at-trx-commit=2 \
    --sync-binlog=0 --skip-name-resolve --character-set-server=utf8mb4 --collation-server=utf8mb4_bin \
    --log-error="$RD/server.log" >/dev/null 2>&1 &
  for _ in $(seq 1 300); do
    mariadb-admin --no-defaults -S "$RD/sock" -uroot ping >/dev/null 2>&1 && { up=1; break; }
    grep -q "Do you already have another server running" "$RD/server.log" 2>/dev/null && break
    sleep 0.1
  done
  [ $up = 1 ] && break
done
[ $up = 1 ] || { cat "$RD/server.log" >&2; echo "mysql_cdc.sh: the replica did not start" >&2; exit 1; }
rq() { mariadb --no-defaults --default-character-set=utf8mb4 -S "$RD/sock" -uroot -N -B "$@"; }
myq -e "CREATE USER 'ferry_repl'@'127.0.0.1' IDENTIFIED BY 'repl-pw'; GRANT REPLICATION SLAVE ON *.* TO 'ferry_repl'@'127.0.0.1'"
par_sql=""
[ "$PAR" -gt 0 ] && par_sql="SET GLOBAL slave_parallel_threads = $PAR; SET GLOBAL slave_parallel_mode = 'optimistic';"
rq -e "SET SESSION sql_log_bin = 0; CREATE DATABASE ferry CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
       SET GLOBAL gtid_slave_pos = '$(myq -e 'SELECT @@global.gtid_binlog_pos')'; $par_sql
       CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = $MY_PORT, MASTER_USER = 'ferry_repl',
         MASTER_PASSWORD = 'repl-pw', MASTER_USE_GTID = slave_pos;
       START SLAVE"

echo "seeding $SEED rows..." >&2
myq <<SQL
CREATE TABLE ev (id bigint PRIMARY KEY, grp int NOT NULL, note varchar(100), at datetime(6) NOT NULL,
  amount decimal(12,2) NOT NULL);
INSERT INTO ev SELECT seq, seq % 1000, CONCAT('seed ', seq), '2024-01-01' + INTERVAL seq SECOND, seq / 100
  FROM seq_1_to_$SEED;
SQL
catch_up() { # waits until the replica has applied the primary's position
  local g; g=$(myq -e 'SELECT @@global.gtid_binlog_pos')
  [ "$(rq -e "SELECT MASTER_GTID_WAIT('$g', 3600)")" = 0 ] || { rq -e "SHOW SLAVE STATUS\G" >&2; exit 1; }
}
catch_up
cat > "$T/cdc.yaml" <<EOF
version: 1
name: mycdcbench
source:
  type: mysql
  url: env:FERRY_MY_READER_URL
  resources:
    - table: ev
      mode: cdc
sink:
  type: postgres
  url: env:FERRY_PG_URL
  write: merge
EOF
export FERRY_STATE=$T/state.db
"$FERRY_BIN" run "$T/cdc.yaml" --quiet # the snapshot
[ "$(pgq -c 'SELECT count(*) FROM ev')" = "$SEED" ] || { echo "mysql_cdc.sh: the snapshot is not complete" >&2; exit 1; }

# ---- the changes, with the replica's SQL thread stopped ------------------------------------
rq -e "STOP SLAVE SQL_THREAD"
ins=$((CHANGES / 2)); upd=$((CHANGES / 4)); del=$((CHANGES - ins - upd))
echo "committing $CHANGES changes ($ins inserts, $upd updates, $del deletes) in transactions of $TXN..." >&2
{
  for ((s = 1; s <= ins; s += TXN)); do
    e=$((s + TXN - 1)); [ $e -gt $ins ] && e=$ins
    echo "INSERT INTO ev SELECT $SEED + seq, seq % 1000, CONCAT('new ', seq), NOW(6), seq / 7 FROM seq_${s}_to_$e;"
  done
  for ((s = 1; s <= upd; s += TXN)); do
    e=$((s + TXN - 1)); [ $e -gt $upd ] && e=$upd
    echo "UPDATE ev SET note = CONCAT('upd ', id), amount = amount + 1 WHERE id BETWEEN $s AND $e;"
  done
  for ((s = 1; s <= del; s += TXN)); do
    e=$((s + TXN - 1)); [ $e -gt $del ] && e=$del
    echo "DELETE FROM ev WHERE id BETWEEN $((SEED + s)) AND $((SEED + e));"
  done
} | myq
# the IO thread holds the whole log before the apply is timed
target=$(myq -e "SHOW MASTER STATUS" | cut -f2)
for _ in $(seq 1 6000); do
  st=$(mariadb --no-defaults -S "$RD/sock" -uroot -e "SHOW SLAVE STATUS\G") # (-N hides the names)
  rp=$(printf '%s\n' "$st" | awk '$1 == "Read_Master_Log_Pos:" {print $2}')
  [ "$rp" = "$target" ] && break
  sleep 0.1
done
[ "$rp" = "$target" ] || { echo "mysql_cdc.sh: the replica's IO thread did not fetch the log" >&2; exit 1; }

load=$(cut -d' ' -f1-3 /proc/loadavg)
t0=$(date +%s.%N)
rq -e "START SLAVE SQL_THREAD"
catch_up
t1=$(date +%s.%N)
replica_s=$(echo "$t1 - $t0" | bc)

t0=$(date +%s.%N)
/usr/bin/time -f '%M' -o "$T/rss" "$FERRY_BIN" run "$T/cdc.yaml" --quiet
t1=$(date +%s.%N)
ferry_s=$(echo "$t1 - $t0" | bc)
rss=$(tail -n1 "$T/rss")

src_sum=$(myq -e "SELECT CONCAT_WS('|', id, grp, COALESCE(note, 'NULL'), amount) FROM ev ORDER BY id" | md5sum | cut -d' ' -f1)
rep_sum=$(rq -e "SELECT CONCAT_WS('|', id, grp, COALESCE(note, 'NULL'), amount) FROM ferry.ev ORDER BY id" | md5sum | cut -d' ' -f1)
pg_sum=$(pgq -c "SELECT concat_ws('|', id, grp, coalesce(note, 'NULL'), amount) FROM ev ORDER BY id" | md5sum | cut -d' ' -f1)
ok() { [ "$1" = "$src_sum" ] && echo ok || echo WRONG; }

out="bench/results/mysql-cdc-$(date +%Y%m%d)-${CHANGES}changes.md"
{
  echo "# MySQL CDC: $CHANGES row changes in transactions of $TXN, $(date -u +%Y-%m-%dT%H:%MZ)"
  echo
  echo "MariaDB $(myq -e 'SELECT VERSION()') primary and replica, PostgreSQL $(pgq -c 'SHOW server_version'); ferry: $build_note, rev $(git rev-parse --short HEAD); $(nproc) CPUs, load $load when the apply started. Seed $SEED rows; $ins inserts, $upd updates, $del deletes. Replica: slave_parallel_threads=$PAR. The replica's IO thread had fetched the whole log before its SQL thread was started (apply only); ferry's run reads the log from the primary and merges into PostgreSQL (integrity digest on)."
  echo
  echo "| applier | seconds | changes/s | peak RSS (MiB) | vs replica | result |"
  echo "|---|---|---|---|---|---|"
  printf '| MariaDB replica (SQL thread) | %.2f | %.0f | | 1.00× | %s |\n' "$replica_s" "$(echo "$CHANGES / $replica_s" | bc -l)" "$(ok "$rep_sum")"
  printf '| ferry mysql cdc -> postgres merge | %.2f | %.0f | %.1f | %.2f× | %s |\n' "$ferry_s" "$(echo "$CHANGES / $ferry_s" | bc -l)" "$(echo "$rss / 1024" | bc -l)" "$(echo "$ferry_s / $replica_s" | bc -l)" "$(ok "$pg_sum")"
} | tee "$out"
