#!/usr/bin/env bash
# CDC bulk replay benchmark (issue 22; run by `bench/cdc.sh` after its load part, or alone as
# `ONLY=bulk bash bench/cdc.sh` or `bash bench/cdc_bulk.sh`): how fast a backlog of changes is
# replayed into PostgreSQL, ferry (`mode: cdc`, `write: merge`, default batch settings)
# against PostgreSQL's own logical replication (a subscription, pgoutput, its defaults), on
# the same server, in the same run, one after the other.
#
# One throw-away server (tests/pg/pg.sh; fsync and synchronous_commit ON unless FSYNC=off):
# database `ferry` holds `bulk` (BULK_ROWS rows); `dst_ferry` and `dst_native` receive it
# (ferry: its cdc snapshot; native: copy_data). The subscription connects as its own role
# `native_repl`, so the walsenders of the two are told apart by their process titles.
# Per case, while both consumers are stopped (subscription disabled, no ferry running), the
# source makes the backlog:
#   U. one UPDATE of every row, one transaction (BULK_ROWS changes)
#   S. SMALL_TXNS single-row UPDATE transactions (one DO block committing after every row,
#      synchronous_commit off: making the backlog is not what is measured)
# then each consumer alone replays it: the native subscription is enabled and its database
# polled (every 0.2 s) until it equals the source; `ferry run` (bounded: streams to the
# position it planned, then exits) is timed and its database checked. Order alternates (U:
# native first; S: ferry first). Before each case both slots are brought level (CHECKPOINT,
# an idle ferry run, the subscription confirming past it) so that neither re-decodes older
# WAL from a trailing restart_lsn; the restart lag each starts with is reported.
# Reports seconds, changes/s, the ratio ferry/native, ferry's peak RSS and CPU, the CPU of
# the walsender (and, native, the apply worker) from /proc/PID/stat sampled every 0.2 s,
# and the load average. Both destinations are checked equal to the source (count and an
# order-independent digest of every row). Writes bench/results/cdc-bulk-<date>.md. Never
# gates CI. The subscription, the replays and the CPU watching: bench/lib_cdc.sh.
#   BULK_ROWS=1000000 SMALL_TXNS=200000 bash bench/cdc_bulk.sh
#   BENCH_CONTEXT="..." says in the results what else ran on the machine.
set -euo pipefail
cd "$(dirname "$0")/.."
FERRY_SRC=$PWD
BULK_ROWS=${BULK_ROWS:-1000000}
SMALL_TXNS=${SMALL_TXNS:-200000}
FSYNC=${FSYNC:-on}
CASES=${CASES:-U S}
NOTE=${NOTE:-}
jobs=$(nproc 2>/dev/null || echo 2)
[ "$jobs" -gt 2 ] && jobs=2

if [ -z "${FERRY_BIN:-}" ]; then
  BUILD=${BUILD:-build/cdc-bench}
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DFERRY_WERROR=ON >/dev/null
  cmake --build "$BUILD" -j"$jobs" --target ferry >/dev/null
  FERRY_BIN=$FERRY_SRC/$BUILD/ferry
fi

W=$(mktemp -d "${TMPDIR:-/tmp}/ferry-cdcbulk.XXXXXX")
chmod 755 "$W"
trap 'rm -rf "$W"' EXIT
# (before pg_start: its EXIT trap runs this one after stopping the server)
. tests/pg/pg.sh
if [ "$FSYNC" = on ]; then
  PG_CONF_EXTRA="fsync = on
synchronous_commit = on
max_wal_size = 4GB" pg_start
else
  PG_CONF_EXTRA="max_wal_size = 4GB" pg_start
fi
export FERRY_STATE=$W/state.db
# shellcheck source=bench/lib_cdc.sh
. bench/lib_cdc.sh # pgq, load, ms, secs, the native subscription, the replays, CPU watching
load_start=$(load)

echo "making bulk ($BULK_ROWS rows)... (load $(load))" >&2
pgq >/dev/null <<SQL
CREATE TABLE bulk (id bigint PRIMARY KEY, v int NOT NULL, pad text NOT NULL);
INSERT INTO bulk SELECT g, 0, md5(g::text) FROM generate_series(1, $BULK_ROWS) g;
VACUUM ANALYZE bulk;
SQL
for db in dst_ferry dst_native; do pgq -c "CREATE DATABASE $db" >/dev/null; done
pg_dump -s -t bulk ferry | psql -qX -v ON_ERROR_STOP=1 -d dst_native >/dev/null
NATIVE_PW=native-pw-$RANDOM$RANDOM

export SRC_URL="$FERRY_PG_URL"
export DEST_URL="postgresql://ferry_admin:$PGPASSWORD@127.0.0.1:$PGPORT/dst_ferry"
cat > "$W/p.yaml" <<YAML
version: 1
name: bulkbench
source:
  type: postgres
  url: env:SRC_URL
  resources:
    - {table: bulk, mode: cdc}
sink: {type: postgres, url: env:DEST_URL, schema: public, write: merge}
YAML

echo "initial copies... (load $(load))" >&2
"$FERRY_BIN" run "$W/p.yaml" --quiet >/dev/null
native_subscribe bulk

SUMS_SQL="SELECT count(*) || '/' || coalesce(sum(v), 0) FROM bulk"
sums() { pgq -d "$1" -c "$SUMS_SQL"; }
digest() { pgq -d "$1" -c "SELECT count(*) || ':' || coalesce(sum(('x' || substr(md5(id || ',' || v || ',' || pad), 1, 16))::bit(64)::bigint::numeric), 0) FROM bulk"; }
lsn() { pgq -c "SELECT pg_current_wal_lsn()"; }
slot() { pgq -c "SELECT slot_name FROM pg_replication_slots WHERE slot_name LIKE 'ferry_bulkbench%' LIMIT 1"; }
restart_lag() { pgq -c "SELECT pg_current_wal_lsn() - restart_lsn FROM pg_replication_slots WHERE slot_name = '$1'"; }
wait_native_at() { # wait_native_at LSN : the subscription confirmed at least LSN (60 s at most)
  for _ in $(seq 1 300); do
    [ "$(pgq -c "SELECT confirmed_flush_lsn >= '$1' FROM pg_replication_slots WHERE slot_name = 'native_sub'")" = t ] && return 0
    sleep 0.2
  done
  echo "native subscription did not confirm $1" >&2; return 1
}
# level: both slots confirmed at the current position with restart_lsn near it.
level() {
  pgq -c "CHECKPOINT" >/dev/null
  "$FERRY_BIN" run "$W/p.yaml" --quiet >/dev/null
  pgq -d dst_native -c "ALTER SUBSCRIPTION native_sub ENABLE" >/dev/null
  wait_native_at "$(lsn)"
  sleep 1
  native_off
}

declare -A T RSS CPU WS APPLY RLAG LOADS OK WAL
# replay WHO CASE : lib_cdc.sh's replay_WHO (native or ferry) of the backlog up to WANT, its
# figures kept under CASE.WHO; the destination then checked against WANT_DIGEST.
replay() {
  if [ "$1" = native ]; then
    replay_native "$SUMS_SQL" "$WANT"
    APPLY[$2.native]=$REPLAY_APPLY
  else
    replay_ferry "$W/p.yaml" "$SUMS_SQL" "$WANT"
    RSS[$2.ferry]=$REPLAY_RSS CPU[$2.ferry]=$REPLAY_CPU
  fi
  T[$2.$1]=$REPLAY_MS
  WS[$2.$1]=$REPLAY_WS
  OK[$2.$1]=$([ "$(digest "dst_$1")" = "$WANT_DIGEST" ] && echo ok || echo WRONG)
  LOADS[$2.$1]=$(load)
}

declare -A CHANGES
for c in $CASES; do
  echo "case $c: levelling the slots... (load $(load))" >&2
  level
  fs=$(slot)
  RLAG[$c.ferry]=$(restart_lag "$fs")
  RLAG[$c.native]=$(restart_lag native_sub)
  w0=$(lsn)
  echo "case $c: making the backlog... (load $(load))" >&2
  case $c in
    U) pgq -c "UPDATE bulk SET v = v + 1" >/dev/null; CHANGES[$c]=$BULK_ROWS ;;
    S) # one session, a COMMIT after every row (a DO block may commit): SMALL_TXNS transactions
       PGOPTIONS="-c synchronous_commit=off" pgq -c "DO \$\$ BEGIN FOR i IN 1..$SMALL_TXNS LOOP
           UPDATE bulk SET v = v + 1 WHERE id = 1 + (i::bigint * 7919) % $BULK_ROWS; COMMIT; END LOOP; END \$\$" >/dev/null
       CHANGES[$c]=$SMALL_TXNS ;;
  esac
  WAL[$c]=$(pgq -c "SELECT pg_current_wal_lsn() - '$w0'")
  WANT=$(sums ferry)
  WANT_DIGEST=$(digest ferry)
  if [ "$c" = U ]; then order="native ferry"; else order="ferry native"; fi
  for who in $order; do
    echo "case $c: $who replays... (load $(load))" >&2
    replay "$who" "$c"
  done
done

rev=${FERRY_REV:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
out=bench/results/${OUT:-cdc-bulk-$(date -u +%Y%m%d).md}
label() { case $1 in U) echo "one UPDATE of $BULK_ROWS rows, one transaction" ;; S) echo "$SMALL_TXNS single-row UPDATE transactions" ;; esac; }
rate() { echo $(( ${CHANGES[$1]} * 1000 / ${T[$1.$2]} )); }
{
  echo "# CDC bulk replay into PostgreSQL, ferry (merge) against a native subscription, $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo "ferry $rev (Release), PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}') (fsync $FSYNC), $(nproc) CPUs; what else ran: ${BENCH_CONTEXT:-see the load averages}."
  echo "Load average (1/5/15 min) at the start: $load_start; at the end: $(load); per replay below (at its end)."
  [ -n "$NOTE" ] && { echo; echo "$NOTE"; }
  echo
  echo "| case | consumer | seconds | changes/s | × native | client peak RSS (MiB) | client CPU (s) | walsender CPU (s) | apply worker CPU (s) | restart lag at start (bytes) | load at end | destination |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
  for c in $CASES; do
    for who in native ferry; do
      [ -n "${T[$c.$who]:-}" ] || continue
      ratio=$(awk -v a="${T[$c.$who]}" -v b="${T[$c.native]}" 'BEGIN { printf "%.2f", a / b }')
      if [ $who = ferry ]; then
        echo "| $(label "$c") (WAL ${WAL[$c]} bytes) | ferry \`run\` (merge) | $(secs "${T[$c.$who]}") | $(rate "$c" $who) | $ratio | ${RSS[$c.$who]} | ${CPU[$c.$who]} | ${WS[$c.$who]} | (in client) | ${RLAG[$c.$who]} | ${LOADS[$c.$who]} | ${OK[$c.$who]} |"
      else
        echo "| $(label "$c") (WAL ${WAL[$c]} bytes) | native subscription | $(secs "${T[$c.$who]}") | $(rate "$c" $who) | 1.00 | (server process) | - | ${WS[$c.$who]} | ${APPLY[$c.$who]} | ${RLAG[$c.$who]} | ${LOADS[$c.$who]} | ${OK[$c.$who]} |"
      fi
    done
  done
  echo
  echo "Seconds: from enabling the subscription / starting \`ferry run\` until the destination equals the"
  echo "source (polled every 0.2 s; ferry's includes its start, planning and the final save). The"
  echo "backlog is made while both are stopped, so this is replay speed, not the source's rate."
  echo "The subscription runs with its defaults (apply worker with synchronous_commit off);"
  echo "ferry with its defaults (batch rows 50000, flush_after 1s, per-batch durability: each"
  echo "batch committed and its position saved before the slot is acknowledged)."
  echo "CPU of server processes: utime+stime from /proc/PID/stat, sampled every 0.2 s (a process's"
  echo "last 0.2 s may be missed). Both destinations checked: count and a digest of every row."
} > "$out"
cat "$out"
