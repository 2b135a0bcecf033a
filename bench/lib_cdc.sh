# shellcheck shell=bash disable=SC2034 # (REPLAY_* and NATIVE_COPY_MS: set for the sourcing script)
# bench/lib_cdc.sh - what the benchmarks of ferry's cdc against a native subscription share
# (sourced, not run; bench/cdc_bulk.sh, bench/cdc_wide.sh and its bench/cdc_wide_backlog.sh).
# Source it after tests/pg/pg.sh's pg_start. Expects the scripts' set-up on that server:
# database `ferry` the source; `dst_ferry` ferry's destination (its walsender runs as
# ferry_admin); `dst_native` the subscription's, which native_subscribe makes. Needs W (the
# work folder), FERRY_BIN, and NATIVE_PW (native_repl's password) for native_subscribe.
#   pgq ARGS...            psql: unaligned tuples, no psqlrc, stops at the first error
#   load | ms | secs MS    load average (1/5/15 min) | now in ms | MS as seconds (one decimal)
#   cpu_watch PATTERN OUT  CPU ticks of processes titled PATTERN... (below); cpu_secs OUT: in s
#   watch_start PATTERN NAME / watch_stop: cpu_watch into $W/NAME in the background / its end
#   time_mib_cpu FILE      "peak-RSS-MiB CPU-s" from the output of /usr/bin/time -f '%M %U %S'
#   native_subscribe TABLES  (TABLES: "t1, t2") role native_repl, publication native_pub, slot
#                          and subscription native_sub (copy_data); returns when every table is
#                          copied; NATIVE_COPY_MS: the subscription's creation and copy, in ms
#   native_off             the subscription disabled, its slot inactive (30 s at most, or exit 1)
#   replay_native SUMS_SQL WANT / replay_ferry PIPELINE SUMS_SQL WANT: one consumer replays a
#                          backlog (below); REPLAY_MS, REPLAY_WS (its walsender's CPU s), and
#                          REPLAY_APPLY and REPLAY_APPLY_PID (native) or REPLAY_RSS and
#                          REPLAY_CPU (ferry)

pgq() { psql -v ON_ERROR_STOP=1 -qXAt "$@"; }
load() { cut -d' ' -f1-3 /proc/loadavg; }
ms() { echo $(( $(date +%s%N) / 1000000 )); }
secs() { awk -v a="$1" 'BEGIN { printf "%.1f", a / 1000 }'; }

# cpu_watch PATTERN OUT : every 0.2 s, the CPU ticks (utime + stime) of each process whose title
# starts with PATTERN; OUT gets "pid first last" lines (first: ticks when first seen, 0 for a
# process that started after the watch began). Stops when $W/stop-watch appears.
cpu_watch() {
  local pat=$1 out=$2 started=0 p
  local -a st
  local -A first last
  while [ ! -e "$W/stop-watch" ]; do
    for p in $(pgrep -f "^$pat" || true); do
      read -r -a st 2>/dev/null < "/proc/$p/stat" || continue
      [ -z "${first[$p]:-}" ] && first[$p]=$([ $started = 1 ] && echo 0 || echo $((st[13] + st[14])))
      last[$p]=$((st[13] + st[14]))
    done
    started=1
    sleep 0.2
  done
  for p in "${!last[@]}"; do echo "$p ${first[$p]} ${last[$p]}"; done > "$out"
}
cpu_secs() { awk -v hz="$(getconf CLK_TCK)" '{ s += $3 - $2 } END { printf "%.1f", s / hz }' "$1"; }
watch_start() { rm -f "$W/stop-watch"; cpu_watch "$1" "$W/$2" & WATCH_PID=$!; }
watch_stop() { touch "$W/stop-watch"; wait "$WATCH_PID"; }

# (the last line that starts with a number: a process ended by a signal adds a line after it)
time_mib_cpu() { grep -E '^[0-9]+ ' "$1" | tail -n1 | awk '{printf "%d %.1f\n", $1 / 1024, $2 + $3}'; }

native_subscribe() {
  local t0
  pgq -c "CREATE ROLE native_repl LOGIN REPLICATION PASSWORD '$NATIVE_PW'" >/dev/null
  pgq -c "GRANT CONNECT ON DATABASE ferry TO native_repl; GRANT SELECT ON $1 TO native_repl" >/dev/null
  pgq -c "CREATE PUBLICATION native_pub FOR TABLE $1" >/dev/null
  # The slot first: CREATE SUBSCRIPTION making its slot on its own server would hang.
  pgq -c "SELECT pg_create_logical_replication_slot('native_sub', 'pgoutput')" >/dev/null
  t0=$(ms)
  pgq -d dst_native -c "CREATE SUBSCRIPTION native_sub CONNECTION 'host=127.0.0.1 port=$PGPORT dbname=ferry user=native_repl password=$NATIVE_PW' PUBLICATION native_pub WITH (create_slot = false, slot_name = 'native_sub', copy_data = true)" >/dev/null
  until [ "$(pgq -d dst_native -c "SELECT count(*) FROM pg_subscription_rel WHERE srsubstate <> 'r'")" = 0 ]; do sleep 0.2; done
  NATIVE_COPY_MS=$(( $(ms) - t0 ))
}

native_off() {
  pgq -d dst_native -c "ALTER SUBSCRIPTION native_sub DISABLE" >/dev/null
  for _ in $(seq 1 150); do
    [ "$(pgq -c "SELECT active FROM pg_replication_slots WHERE slot_name = 'native_sub'")" = f ] && return 0
    sleep 0.2
  done
  echo "the subscription's slot stayed active after DISABLE" >&2
  exit 1
}

# replay_native SUMS_SQL WANT : the subscription enabled until SUMS_SQL on dst_native returns
# WANT (polled every 0.2 s, 900 s at most), then disabled (native_off). The apply worker's CPU
# is read when the destination is equal (its pid from pg_stat_subscription while it runs).
replay_native() {
  local t0 apid="" a1=0
  watch_start "postgres: walsender native_repl" ws_native
  t0=$(ms)
  pgq -d dst_native -c "ALTER SUBSCRIPTION native_sub ENABLE" >/dev/null
  until [ "$(pgq -d dst_native -c "$1")" = "$2" ]; do
    [ -z "$apid" ] && apid=$(pgq -d dst_native -c "SELECT pid FROM pg_stat_subscription WHERE subname = 'native_sub' AND pid IS NOT NULL AND relid IS NULL")
    [ $(( $(ms) - t0 )) -gt 900000 ] && { echo "native did not catch up in 900 s" >&2; break; }
    sleep 0.2
  done
  REPLAY_MS=$(( $(ms) - t0 ))
  [ -n "$apid" ] && a1=$(awk '{print $14 + $15}' "/proc/$apid/stat" 2>/dev/null || echo 0)
  watch_stop
  REPLAY_WS=$(cpu_secs "$W/ws_native")
  REPLAY_APPLY=$(awk -v hz="$(getconf CLK_TCK)" -v a="$a1" 'BEGIN { printf "%.1f", a / hz }')
  REPLAY_APPLY_PID=$apid
  native_off
}

# replay_ferry PIPELINE SUMS_SQL WANT : one bounded `ferry run PIPELINE` (it streams to the
# position it planned, then exits; exit 1 if it fails), then SUMS_SQL on dst_ferry polled
# until it returns WANT (900 s at most). Peak RSS and CPU from /usr/bin/time.
replay_ferry() {
  local t0
  watch_start "postgres: walsender ferry_admin" ws_ferry
  t0=$(ms)
  /usr/bin/time -f '%M %U %S' -o "$W/ferry.time" "$FERRY_BIN" run "$1" --quiet > "$W/ferry.log" 2>&1 \
    || { echo "ferry failed: $(tail -5 "$W/ferry.log")" >&2; exit 1; }
  until [ "$(pgq -d dst_ferry -c "$2")" = "$3" ]; do
    [ $(( $(ms) - t0 )) -gt 900000 ] && { echo "ferry's destination differs" >&2; break; }
    sleep 0.2
  done
  REPLAY_MS=$(( $(ms) - t0 ))
  watch_stop
  REPLAY_WS=$(cpu_secs "$W/ws_ferry")
  read -r REPLAY_RSS REPLAY_CPU < <(time_mib_cpu "$W/ferry.time")
}
