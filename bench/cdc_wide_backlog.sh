# shellcheck shell=bash disable=SC2154 # (the variables of bench/cdc_wide.sh, which sources this)
# bench/cdc_wide_backlog.sh - sourced by bench/cdc_wide.sh when BACKLOG=1 (after its set-up:
# the tables, both destinations copied and level, txn.sql, bench/lib_cdc.sh; not run on its own).
#
# Change throughput as replay speed: per round, the load (pgbench, CLIENTS clients, SECONDS_
# seconds, three tables per transaction) runs while both consumers are stopped (the
# subscription disabled, no ferry process), then each consumer alone replays the backlog,
# one after the other (the order alternates by round): the subscription enabled until its
# database equals the source (polled every 0.2 s); `ferry run` (bounded: it streams to the
# position it planned, then exits) timed to its exit, its database then checked. Nothing else
# runs while one replays, so neither competes with the load or the other for the 2 cores.
# ROUNDS (default 2). Both destinations are checked against the source after each round.
ROUNDS=${ROUNDS:-2}

# replay WHO ROUND: lib_cdc.sh's replay_WHO (native or ferry) up to $want; R[ROUND.WHO] gets
# "ms walsender-CPU-s client-or-apply-worker-CPU-s peak-RSS-MiB" (RSS "-" for native)
replay() {
  if [ "$1" = native ]; then
    replay_native "$sums_sql" "$want"
    R[$2.native]="$REPLAY_MS $REPLAY_WS $REPLAY_APPLY -"
  else
    replay_ferry "$W/p.yaml" "$sums_sql" "$want"
    R[$2.ferry]="$REPLAY_MS $REPLAY_WS $REPLAY_CPU $REPLAY_RSS"
  fi
}

declare -A R CH WALB LD OKR
native_off
for r in $(seq 1 "$ROUNDS"); do
  echo "round $r: making the backlog, ${DURATION}s of load, both stopped... (load $(load))" >&2
  w0=$(lsn)
  PGOPTIONS="-c synchronous_commit=off" "$PGB" -n -M simple -c "$CLIENTS" -j 2 -T "$DURATION" --max-tries=20 -f "$W/txn.sql" ferry > "$W/pgbench.log" 2>&1 \
    || { cat "$W/pgbench.log" >&2; exit 1; }
  CH[$r]=$(( $(grep -o 'number of transactions actually processed: [0-9]*' "$W/pgbench.log" | grep -o '[0-9]*$') * 3 ))
  WALB[$r]=$(( $(lsn) - w0 ))
  want=$(sums ferry)
  if [ $((r % 2)) = 1 ]; then order="ferry native"; else order="native ferry"; fi
  for who in $order; do
    echo "round $r: $who replays... (load $(load))" >&2
    replay "$who" "$r"
    LD[$r.$who]=$(load)
  done
  digests ferry > "$W/src.dig"
  OKR[$r.ferry]=$(digests dst_ferry | diff -q "$W/src.dig" - >/dev/null && echo ok || echo WRONG)
  OKR[$r.native]=$(digests dst_native | diff -q "$W/src.dig" - >/dev/null && echo ok || echo WRONG)
done

rev=${FERRY_REV:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
out=bench/results/${OUT:-cdc-wide-backlog-$(date -u +%Y%m%d)-${TABLES}t.md}
{
  echo "# CDC across $TABLES tables, backlog replay: ferry (one pipeline) against a native subscription, $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo "ferry $rev (Release), PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}') (fsync $FSYNC, max_wal_senders $(pgq -c 'SHOW max_wal_senders')), $(nproc) CPUs."
  echo "Load average (1/5/15 min) at the start: $load_start; at the end: $(load); per replay below (at its end)."
  [ -n "$NOTE" ] && { echo; echo "$NOTE"; }
  echo
  echo "$TABLES tables of $ROWS rows. Per round, pgbench ($CLIENTS clients, ${DURATION}s, each transaction updating a row in each of three random tables, synchronous_commit off) makes a backlog while both consumers are stopped; then each alone replays it, one after the other (round 1: ferry first; round 2: native first; and so on)."
  echo "ferry: one pipeline \`tables: [public.t*]\`, \`mode: cdc\`, merge into PostgreSQL, one bounded \`ferry run\`, default settings (commits durable: synchronous_commit on). Native: one subscription (pgoutput, its defaults: apply worker with synchronous_commit off) to the same tables, into another database of the same server."
  echo
  echo "| round | backlog (row changes / WAL bytes) | consumer | seconds | changes/s | × native (time) | walsender CPU (s) | client / apply worker CPU (s) | peak RSS MiB | load at end | destination |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|"
  for r in $(seq 1 "$ROUNDS"); do
    tn=${R[$r.native]%% *}
    for who in ferry native; do
      read -r t ws cpu rss <<< "${R[$r.$who]}"
      echo "| $r | ${CH[$r]} / ${WALB[$r]} | $who | $(secs "$t") | $(( CH[$r] * 1000 / t )) | $(awk -v a="$t" -v b="$tn" 'BEGIN { printf "%.2f", a / b }') | $ws | $cpu | $rss | ${LD[$r.$who]} | ${OKR[$r.$who]} |"
    done
  done
  echo
  echo "Seconds: from starting \`ferry run\` / enabling the subscription until the destination equals the source (polled every 0.2 s; ferry's include its start, planning of every table and the final save; the subscription's include its worker's start)."
  echo "Walsender CPU: utime+stime from /proc/PID/stat of each consumer's walsender, sampled every 0.2 s; the apply worker's at the end of its replay; ferry's client CPU and peak RSS from /usr/bin/time."
} > "$out"
cat "$out"
