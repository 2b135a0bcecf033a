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
#   M. merge with deletes, one transaction (bench/pg_merge.sh's shape): a quarter of the rows
#      updated, a quarter deleted, a quarter updated twice, BULK_ROWS/4 new rows inserted
#      (1.25 × BULK_ROWS changes). CASES="U S" leaves it out.
# then each consumer alone replays it: the native subscription is enabled and its database
# polled (every 0.2 s) until it equals the source; `ferry run` (bounded: streams to the
# position it planned, then exits) is timed and its database checked. Order alternates (U
# and M: native first; S: ferry first). Before each case both slots are brought level
# (CHECKPOINT, an idle ferry run, the subscription confirming past it) so that neither
# re-decodes older WAL from a trailing restart_lsn; the restart lag each starts with is
# reported.
# Reports seconds, changes/s, the ratio ferry/native, ferry's peak RSS and CPU, the CPU of
# the walsender (and, native, the apply worker) from /proc/PID/stat sampled every 0.2 s,
# and the load average. Both destinations are checked equal to the source (count and an
# order-independent digest of every row). Writes bench/results/cdc-bulk-<date>.md. Never
# gates CI. The subscription, the replays and the CPU watching: bench/lib_cdc.sh.
#   BULK_ROWS=1000000 SMALL_TXNS=200000 bash bench/cdc_bulk.sh
#   PROFILE=1 records each replay under `perf record -a -g` (the whole machine; perf's own cost
#   is in those replays' times) and adds, per case and consumer, the walsender's and the
#   consumer's (ferry's process; the native apply worker) share of the machine's samples and
#   top self symbols.
#   BENCH_CONTEXT="..." says in the results what else ran on the machine.
set -euo pipefail
cd "$(dirname "$0")/.."
FERRY_SRC=$PWD
BULK_ROWS=${BULK_ROWS:-1000000}
SMALL_TXNS=${SMALL_TXNS:-200000}
FSYNC=${FSYNC:-on}
CASES=${CASES:-U S M}
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
# level: both slots confirmed at the current position with restart_lsn near it. A slot's
# restart_lsn moves only when its walsender decodes a running-transactions record (logged by
# CHECKPOINT) and the consumer then confirms past it, which one pass does not always achieve
# (a run of 2026-12-04 started the subscription 405 MB behind): so pass again, up to 5 times,
# until both restart lags are under LEVEL_MAX bytes (default 16 MiB); the lags are reported.
LEVEL_MAX=${LEVEL_MAX:-16777216}
level() {
  local i fl nl
  for i in 1 2 3 4 5; do
    pgq -c "CHECKPOINT" >/dev/null
    # a record after the checkpoint's running-transactions one, for both to confirm past
    pgq -c "SELECT pg_logical_emit_message(false, 'bench-level', '$i')" >/dev/null
    "$FERRY_BIN" run "$W/p.yaml" --quiet >/dev/null
    pgq -d dst_native -c "ALTER SUBSCRIPTION native_sub ENABLE" >/dev/null
    wait_native_at "$(lsn)"
    sleep 1
    native_off
    fl=$(restart_lag "$(slot)") nl=$(restart_lag native_sub)
    [ "$fl" -lt "$LEVEL_MAX" ] && [ "$nl" -lt "$LEVEL_MAX" ] && return 0
    echo "levelling pass $i: restart lag ferry $fl, native $nl bytes; again" >&2
  done
  echo "slots not level after 5 passes (ferry $fl, native $nl bytes behind): reported as is" >&2
}

declare -A T RSS CPU WS APPLY RLAG LOADS OK WAL
label() { # label CASE: the case's words in the report
  local q=$((BULK_ROWS / 4))
  case $1 in
    U) echo "one UPDATE of $BULK_ROWS rows, one transaction" ;;
    S) echo "$SMALL_TXNS single-row UPDATE transactions" ;;
    M) echo "merge with deletes, one transaction: $q rows updated, $q deleted, $q updated twice, $q inserted" ;;
  esac
}
PROFILE=${PROFILE:-0}
if [ "$PROFILE" = 1 ]; then
  command -v perf >/dev/null ||
    { echo "cdc_bulk.sh: PROFILE=1 needs perf (apt-get install linux-perf)" >&2; exit 1; }
fi
declare -A PROF
# top_syms DATA FILTER: the share of the machine's samples of the processes FILTER selects
# (pid:P1,P2 or comm:NAME) and their top 15 self symbols (in % of their own samples).
top_syms() {
  local sel=--pid=${2#pid:} key=pid want=${2#pid:} share
  case $2 in comm:*) sel=--comm=${2#comm:} key=comm want=${2#comm:} ;; esac
  share=$(perf report -i "$1" --no-children --sort "$key" --stdio 2>/dev/null |
    awk -v key="$key" -v want=",$want," '/^ +[0-9.]+%/ {
        k = $2; if (key == "pid") { split($2, a, ":"); k = a[1] }
        if (index(want, "," k ",")) s += $1 }
      END { printf "%.1f", s }')
  echo "share of the machine's samples: $share %"
  perf report -i "$1" "$sel" --no-children --percentage relative --sort dso,symbol --stdio \
    2>/dev/null | grep -E '^ +[0-9.]+%' | head -n 15 | cut -c1-100
}
# profile_of CASE WHO: what perf saw of the replay's walsender(s) and consumer (ferry's
# process by its name: every thread of it; the apply worker by its pid).
profile_of() {
  local data=$W/perf.$1.$2 ws
  ws=$(awk '{printf "%s%s", (NR > 1 ? "," : ""), $1}' "$W/ws_$2")
  echo "#### $(label "$1"): $2"
  echo; echo "walsender (pid $ws):"; echo '```'; top_syms "$data" "pid:$ws"; echo '```'
  if [ "$2" = ferry ]; then
    echo; echo "ferry:"; echo '```'; top_syms "$data" comm:ferry; echo '```'
  elif [ -n "${REPLAY_APPLY_PID:-}" ]; then
    echo; echo "apply worker (pid $REPLAY_APPLY_PID):"; echo '```'
    top_syms "$data" "pid:$REPLAY_APPLY_PID"; echo '```'
  fi
  echo
}

# slot_stats SLOT: "total_bytes spill_bytes" the slot's decoding has produced so far
# (pg_stat_replication_slots: every transaction decoded counts, again when decoded again).
slot_stats() {
  pgq -F' ' -c "SELECT total_bytes, spill_bytes FROM pg_stat_replication_slots
                WHERE slot_name = '$1'"
}
declare -A DEC WALR
# replay WHO CASE : lib_cdc.sh's replay_WHO (native or ferry) of the backlog up to WANT
# (replay_do), its figures kept under CASE.WHO, the destination then checked against
# WANT_DIGEST; around it the slot's decoding counters, the WAL written and, with PROFILE=1,
# perf over the whole machine.
replay() {
  local perf_pid="" sl b0 s0 b1 s1 w0
  if [ "$1" = native ]; then sl=native_sub; else sl=$(slot); fi
  read -r b0 s0 < <(slot_stats "$sl")
  w0=$(lsn)
  if [ "$PROFILE" = 1 ]; then
    perf record -q -a -g -o "$W/perf.$2.$1" 2>/dev/null & perf_pid=$!
    sleep 0.5
  fi
  replay_do "$@"
  if [ -n "$perf_pid" ]; then
    kill -INT "$perf_pid"; wait "$perf_pid" || true
    PROF[$2.$1]=$(profile_of "$2" "$1")
  fi
  sleep 0.5 # (the walsender reports its counters as it goes and when it exits)
  read -r b1 s1 < <(slot_stats "$sl")
  DEC[$2.$1]="$(( (b1 - b0) / 1048576 )) / $(( (s1 - s0) / 1048576 ))"
  WALR[$2.$1]=$(( $(pgq -c "SELECT pg_current_wal_lsn() - '$w0'") / 1048576 ))
}
replay_do() {
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
    M) top=$(pgq -c "SELECT max(id) FROM bulk")
       pgq -1 >/dev/null <<SQL
UPDATE bulk SET v = v + 1 WHERE id % 4 = 1;
DELETE FROM bulk WHERE id % 4 = 2;
UPDATE bulk SET v = v + 1 WHERE id % 4 = 3;
UPDATE bulk SET v = v + 1 WHERE id % 4 = 3;
INSERT INTO bulk SELECT g, 0, md5(g::text) FROM generate_series($top + 1, $top + $BULK_ROWS / 4) g;
SQL
       CHANGES[$c]=$(( BULK_ROWS * 5 / 4 )) ;;
  esac
  WAL[$c]=$(pgq -c "SELECT pg_current_wal_lsn() - '$w0'")
  WANT=$(sums ferry)
  WANT_DIGEST=$(digest ferry)
  if [ "$c" = S ]; then order="ferry native"; else order="native ferry"; fi
  for who in $order; do
    echo "case $c: $who replays... (load $(load))" >&2
    replay "$who" "$c"
  done
done

rev=${FERRY_REV:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
out=bench/results/${OUT:-cdc-bulk-$(date -u +%Y%m%d).md}
rate() { echo $(( ${CHANGES[$1]} * 1000 / ${T[$1.$2]} )); }
{
  echo "# CDC bulk replay into PostgreSQL, ferry (merge) against a native subscription, $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo "ferry $rev (Release), PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}') (fsync $FSYNC), $(nproc) CPUs; what else ran: ${BENCH_CONTEXT:-see the load averages}."
  echo "Load average (1/5/15 min) at the start: $load_start; at the end: $(load); per replay below (at its end)."
  [ -n "$NOTE" ] && { echo; echo "$NOTE"; }
  echo
  echo "| case | consumer | seconds | changes/s | × native | client peak RSS (MiB) | client CPU (s) | walsender CPU (s) | apply worker CPU (s) | decoded / spilled (MiB) | WAL written meanwhile (MiB) | restart lag at start (bytes) | load at end | destination |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
  for c in $CASES; do
    for who in native ferry; do
      [ -n "${T[$c.$who]:-}" ] || continue
      ratio=$(awk -v a="${T[$c.$who]}" -v b="${T[$c.native]}" 'BEGIN { printf "%.2f", a / b }')
      if [ $who = ferry ]; then
        echo "| $(label "$c") (WAL ${WAL[$c]} bytes) | ferry \`run\` (merge) | $(secs "${T[$c.$who]}") | $(rate "$c" $who) | $ratio | ${RSS[$c.$who]} | ${CPU[$c.$who]} | ${WS[$c.$who]} | (in client) | ${DEC[$c.$who]:-} | ${WALR[$c.$who]:-} | ${RLAG[$c.$who]} | ${LOADS[$c.$who]} | ${OK[$c.$who]} |"
      else
        echo "| $(label "$c") (WAL ${WAL[$c]} bytes) | native subscription | $(secs "${T[$c.$who]}") | $(rate "$c" $who) | 1.00 | (server process) | - | ${WS[$c.$who]} | ${APPLY[$c.$who]} | ${DEC[$c.$who]:-} | ${WALR[$c.$who]:-} | ${RLAG[$c.$who]} | ${LOADS[$c.$who]} | ${OK[$c.$who]} |"
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
  echo "last 0.2 s may be missed). Decoded / spilled: the growth of the slot's total_bytes and"
  echo "spill_bytes in pg_stat_replication_slots over the replay (what its walsender's decoding"
  echo "produced and wrote to disk; a transaction decoded twice counts twice). WAL written meanwhile:"
  echo "the server's WAL from the replay's start to its end (the consumer's own writes, mostly),"
  echo "which the walsender also reads past the backlog, to filter out."
  echo "Both destinations checked: count and a digest of every row."
  if [ "$PROFILE" = 1 ]; then
    echo
    echo "## Profiles (PROFILE=1: \`perf record -a -g\` over each replay; self symbols)"
    echo
    for c in $CASES; do for who in native ferry; do
      [ -n "${PROF[$c.$who]:-}" ] && echo "${PROF[$c.$who]}"
    done; done
  fi
} > "$out"
cat "$out"
