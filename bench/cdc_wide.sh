#!/usr/bin/env bash
# CDC across many tables (issue 17): ferry following TABLES tables through one pipeline
# (`tables: [public.t*]`, `mode: cdc`, merge into PostgreSQL, `ferry run --follow`) against a
# native logical replication subscription to the same tables, on the same server, in the same
# run, both following the same load at the same time.
#
# One throw-away server (tests/pg/pg.sh, max_wal_senders = 10; fsync and synchronous_commit ON
# unless FSYNC=off): database `ferry` holds t1..tTABLES (ROWS rows each); `dst_ferry` and
# `dst_native` receive them (ferry: its cdc snapshot; native: copy_data). The subscription
# connects as its own role `native_repl`, so the walsenders are told apart by their process
# titles. Load: pgbench, CLIENTS clients for SECONDS_ seconds, each transaction updating one
# row in each of three random tables (multi-table transactions; deadlocks retried; the load's
# commits with synchronous_commit off, so that the disk's flush time does not set its rate). Every
# second the lag of each (WAL bytes between the current position and the position its slot
# confirmed) is sampled; when the load stops, the time until each destination equals the
# source (per-table sums). changes/s = changes committed (3 per transaction) / (load time +
# catch-up). Walsender CPU: utime+stime (/proc/PID/stat) of every walsender process of each
# consumer, sampled every 0.2 s during the load and the catch-up: for ferry it shows how many
# times the WAL is decoded (once per session reading the slot). Peak RSS and CPU of ferry.
# Both destinations are checked against the source at the end (count and a digest of every
# row, per table). Writes bench/results/cdc-wide-<date>.md. Never gates CI.
# RATE=N (transactions per second, pgbench --rate): a fixed offered load, so that runs of two
# binaries face the same rate (without it pgbench offers what the machine allows, which
# differs between runs); then the figures to compare are the lag and the catch-up.
# BACKLOG=1: change throughput as replay speed instead (bench/cdc_wide_backlog.sh): the same load
# made while both consumers are stopped, then each alone catches up, one after the other.
#   TABLES=50 ROWS=10000 CLIENTS=4 SECONDS_=60 EPOCH=1s [RATE=1500] [BACKLOG=1] bash bench/cdc_wide.sh
set -euo pipefail
cd "$(dirname "$0")/.."
FERRY_SRC=$PWD
TABLES=${TABLES:-50}
ROWS=${ROWS:-10000}
CLIENTS=${CLIENTS:-4}
RATE=${RATE:-}
DURATION=${SECONDS_:-60}
EPOCH=${EPOCH:-1s}
FSYNC=${FSYNC:-on}
NOTE=${NOTE:-}
BACKLOG=${BACKLOG:-0}
jobs=$(nproc 2>/dev/null || echo 2)
[ "$jobs" -gt 2 ] && jobs=2

if [ -z "${FERRY_BIN:-}" ]; then
  BUILD=${BUILD:-build/cdc-bench}
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DFERRY_WERROR=ON >/dev/null
  cmake --build "$BUILD" -j"$jobs" --target ferry >/dev/null
  FERRY_BIN=$FERRY_SRC/$BUILD/ferry
fi

W=$(mktemp -d "${TMPDIR:-/tmp}/ferry-cdcwide.XXXXXX")
chmod 755 "$W"
trap 'rm -rf "$W"' EXIT
# (before pg_start: its EXIT trap stops the server, then runs this one)
. tests/pg/pg.sh
if [ "$FSYNC" = on ]; then
  PG_CONF_EXTRA="fsync = on
synchronous_commit = on" pg_start
else
  pg_start
fi
PGB=$PG_BIN/pgbench
export FERRY_STATE=$W/state.db
# shellcheck source=bench/lib_cdc.sh
. bench/lib_cdc.sh # pgq, load, ms, secs, the native subscription, the replays, CPU watching
load_start=$(load)
[ "$(pgq -c 'SHOW max_wal_senders')" = 10 ] || { echo "max_wal_senders must be 10" >&2; exit 1; }

echo "making $TABLES tables of $ROWS rows... (load $(load))" >&2
{
  for i in $(seq 1 "$TABLES"); do
    echo "CREATE TABLE t$i (id int PRIMARY KEY, v int NOT NULL, pad text NOT NULL);"
    echo "INSERT INTO t$i SELECT g, 0, md5(g::text) FROM generate_series(1, $ROWS) g;"
  done
  echo "VACUUM ANALYZE;"
} | pgq >/dev/null
for db in dst_ferry dst_native; do pgq -c "CREATE DATABASE $db" >/dev/null; done
pg_dump -s -t 't*' ferry | psql -qX -v ON_ERROR_STOP=1 -d dst_native >/dev/null
NATIVE_PW=native-pw-$RANDOM$RANDOM
list=$(for i in $(seq 1 "$TABLES"); do printf 't%s, ' "$i"; done); list=${list%, }

export SRC_URL="$FERRY_PG_URL"
export DEST_URL="postgresql://ferry_admin:$PGPASSWORD@127.0.0.1:$PGPORT/dst_ferry"
cat > "$W/p.yaml" <<YAML
version: 1
name: wide
source:
  type: postgres
  url: env:SRC_URL
  resources:
    - {tables: ["public.t*"], mode: cdc}
sink: {type: postgres, url: env:DEST_URL, schema: public, write: merge}
YAML

echo "initial copies... (load $(load))" >&2
t0=$(ms)
"$FERRY_BIN" run "$W/p.yaml" --quiet >/dev/null
t_ferry_copy=$(secs $(( $(ms) - t0 )))
native_subscribe "$list"
t_native_copy=$(secs "$NATIVE_COPY_MS")
slots_ferry=$(pgq -c "SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'ferry_wide%'")

# Both start the load from the same point.
"$FERRY_BIN" run "$W/p.yaml" --quiet >/dev/null
mark=$(pgq -c "SELECT pg_current_wal_lsn()")
for _ in $(seq 1 300); do
  [ "$(pgq -c "SELECT confirmed_flush_lsn >= '$mark' FROM pg_replication_slots WHERE slot_name = 'native_sub'")" = t ] && break
  sleep 0.2
done

sums_sql="SELECT concat_ws(',' $(for i in $(seq 1 "$TABLES"); do printf ", (SELECT count(*) || '/' || sum(v) FROM t%s)" "$i"; done))"
sums() { pgq -d "$1" -c "$sums_sql"; }
digests() {
  local i
  for i in $(seq 1 "$TABLES"); do
    echo "SELECT 't$i ' || count(*) || ':' || coalesce(sum(('x' || substr(md5(id || ',' || v || ',' || pad), 1, 16))::bit(64)::bigint::numeric), 0) FROM t$i;"
  done | pgq -d "$1"
}
lsn() { pgq -c "SELECT (pg_current_wal_lsn() - '0/0')::bigint"; }
slot_pos() { pgq -c "SELECT coalesce(min((confirmed_flush_lsn - '0/0')::bigint), 0) FROM pg_replication_slots WHERE slot_name $1"; }

# The load: three tables per transaction.
cat > "$W/txn.sql" <<SQL
\\set a random(1, $TABLES)
\\set b random(1, $TABLES)
\\set c random(1, $TABLES)
\\set i random(1, $ROWS)
\\set j random(1, $ROWS)
\\set k random(1, $ROWS)
BEGIN;
UPDATE t:a SET v = v + 1 WHERE id = :i;
UPDATE t:b SET v = v + 1 WHERE id = :j;
UPDATE t:c SET v = v + 1 WHERE id = :k;
END;
SQL

# shellcheck source=bench/cdc_wide_backlog.sh
if [ "$BACKLOG" = 1 ]; then . bench/cdc_wide_backlog.sh; exit 0; fi

echo "load ${DURATION}s, both following... (load $(load))" >&2
rm -f "$W/stop-watch"
cpu_watch "postgres: walsender ferry_admin" "$W/ws_ferry" & w1=$!
cpu_watch "postgres: walsender native_repl" "$W/ws_native" & w2=$!
cpu_watch "postgres: logical replication worker" "$W/apply_native" & w3=$!
/usr/bin/time -f '%M %U %S' -o "$W/ferry.time" "$FERRY_BIN" run "$W/p.yaml" --follow --epoch "$EPOCH" --quiet > "$W/follow.log" 2>&1 &
fpid=$!
PGOPTIONS="-c synchronous_commit=off" "$PGB" -n -M simple -c "$CLIENTS" -j 2 -T "$DURATION" ${RATE:+--rate "$RATE"} --max-tries=20 -f "$W/txn.sql" ferry > "$W/pgbench.log" 2>&1 &
bpid=$!
max_f=0 max_n=0 sum_f=0 sum_n=0 k=0 half_f=0 half_k=0
t_load=$(ms)
while kill -0 $bpid 2>/dev/null; do
  cur=$(lsn); f=$(slot_pos "LIKE 'ferry_wide%'"); n=$(slot_pos "= 'native_sub'")
  lf=$((cur - f)); ln=$((cur - n))
  # (a slot may confirm past `cur`, read just before it)
  [ $lf -lt 0 ] && lf=0
  [ $ln -lt 0 ] && ln=0
  [ $lf -gt $max_f ] && max_f=$lf
  [ $ln -gt $max_n ] && max_n=$ln
  sum_f=$((sum_f + lf)); sum_n=$((sum_n + ln)); k=$((k + 1))
  if [ $(( $(ms) - t_load )) -gt $((DURATION * 500)) ]; then half_f=$((half_f + lf)); half_k=$((half_k + 1)); fi
  sleep 1
done
wait $bpid || { cat "$W/pgbench.log" >&2; exit 1; }
t_end=$(ms)
txns=$(grep -o 'number of transactions actually processed: [0-9]*' "$W/pgbench.log" | grep -o '[0-9]*$')
tps=$(grep -o 'tps = [0-9.]*' "$W/pgbench.log" | head -1 | grep -o '[0-9.]*$')
want=$(sums ferry)
catch_f="" catch_n=""
echo "catching up... (load $(load))" >&2
while [ -z "$catch_f" ] || [ -z "$catch_n" ]; do
  now=$(( $(ms) - t_end ))
  [ -z "$catch_n" ] && [ "$(sums dst_native)" = "$want" ] && catch_n=$now
  [ -z "$catch_f" ] && [ "$(sums dst_ferry)" = "$want" ] && catch_f=$now
  [ $now -gt 600000 ] && break
  sleep 0.2
done
touch "$W/stop-watch"
wait $w1 $w2 $w3
ferry_pid=$(pgrep -P $fpid | head -n 1)
[ -n "$ferry_pid" ] && kill -TERM "$ferry_pid"
wait $fpid 2>/dev/null || true
read -r rss_mib cpu_ferry < <(time_mib_cpu "$W/ferry.time")
digests ferry > "$W/src.dig"
ok_f=$(digests dst_ferry | diff -q "$W/src.dig" - >/dev/null && echo ok || echo WRONG)
ok_n=$(digests dst_native | diff -q "$W/src.dig" - >/dev/null && echo ok || echo WRONG)
changes=$((txns * 3))
rate() { echo $(( changes * 1000 / (DURATION * 1000 + $1) )); }
f_rate=$( [ -n "$catch_f" ] && rate "$catch_f" || echo "-")
n_rate=$( [ -n "$catch_n" ] && rate "$catch_n" || echo "-")
rev=${FERRY_REV:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
sessions_f=$(wc -l < "$W/ws_ferry")
sessions_n=$(wc -l < "$W/ws_native")

out=bench/results/${OUT:-cdc-wide-$(date -u +%Y%m%d)-${TABLES}t.md}
{
  echo "# CDC across $TABLES tables: ferry (one pipeline) against a native subscription, $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo "ferry $rev (Release), PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}') (fsync $FSYNC, max_wal_senders $(pgq -c 'SHOW max_wal_senders'), max_connections $(pgq -c 'SHOW max_connections')), $(nproc) CPUs shared with other work."
  echo "Load average (1/5/15 min) at the start: $load_start; at the end: $(load)."
  [ -n "$NOTE" ] && { echo; echo "$NOTE"; }
  echo
  echo "$TABLES tables of $ROWS rows. pgbench, $CLIENTS clients, ${DURATION}s${RATE:+, offered at $RATE tps (--rate)}, each transaction updating a row in each of three random tables (synchronous_commit off for the load): $txns transactions ($tps tps), $changes row changes."
  echo "ferry: one pipeline \`tables: [public.t*]\`, \`mode: cdc\`, merge into PostgreSQL, \`ferry run --follow --epoch $EPOCH\`, default batch settings; replication slots held by the pipeline: $slots_ferry. Native: one subscription (pgoutput) to the same $TABLES tables, into another database of the same server."
  echo
  echo "| | initial copy (s) | changes/s (load + catch-up) | catch-up after the load (s) | max lag (bytes) | mean lag (bytes) | walsender processes seen | walsender CPU (s) | client / apply worker CPU (s) | peak RSS | destination |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|"
  echo "| ferry | $t_ferry_copy | $f_rate | $( [ -n "$catch_f" ] && secs "$catch_f" || echo "did not catch up in 600 s") | $max_f | $((k > 0 ? sum_f / k : 0)) | $sessions_f | $(cpu_secs "$W/ws_ferry") | $cpu_ferry | $rss_mib MiB | $ok_f |"
  echo "| native subscription | $t_native_copy | $n_rate | $( [ -n "$catch_n" ] && secs "$catch_n" || echo "did not catch up in 600 s") | $max_n | $((k > 0 ? sum_n / k : 0)) | $sessions_n | $(cpu_secs "$W/ws_native") | $(cpu_secs "$W/apply_native") | (server process) | $ok_n |"
  echo
  echo "ferry's mean lag over the second half of the load alone: $((half_k > 0 ? half_f / half_k : 0)) bytes."
  echo
  echo "Lag = WAL bytes between \`pg_current_wal_lsn()\` and the slot's \`confirmed_flush_lsn\`, sampled every second during the load; ferry confirms at the end of each epoch, after the data is durable and its position saved (up to one epoch of lag by design); the subscription confirms continuously."
  echo "Walsender CPU: utime+stime from /proc/PID/stat of every \`walsender\` process of each consumer (told apart by role), sampled every 0.2 s during the load and the catch-up (a process's last 0.2 s may be missed; the initial copies are not counted). Both destinations were checked against the source at the end, table by table (count and a digest of every row)."
} > "$out"
cat "$out"
