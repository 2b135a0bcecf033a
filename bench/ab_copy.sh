#!/usr/bin/env bash
# bench/ab_copy.sh - PostgreSQL → PostgreSQL append with per-batch durability, two ferry
# binaries against the binary COPY pipe in the same rounds (issue 22: is a change in the
# ratio the code or the day?). One throw-away server with fsync on (bench/lib.sh), the
# orders table of ROWS rows; per round, in order: the pipe, ferry A, ferry B, each into an
# emptied table (TRUNCATE + CHECKPOINT, untimed); every destination's count checked.
# Prints and writes bench/results/OUT.md with every round's wall seconds and the medians.
#   A=build/bench/ferry B=/path/to/old/ferry A_LABEL=HEAD B_LABEL=d191034 ROWS=5000000 \
#     ROUNDS=5 OUT=ab-copy-20261204 bash bench/ab_copy.sh
set -euo pipefail
cd "$(dirname "$0")/.."
FERRY_SRC=$PWD
ROWS=${ROWS:-5000000} ROUNDS=${ROUNDS:-5}
: "${A:?A=ferry binary}" "${B:?B=ferry binary}"
. bench/lib.sh # server, src and dst, the orders table
bench_workdir abcopy
bench_pg_start on
bench_src_dst

bench_orders "$ROWS"
bench_copy_dst
bench_append_yaml "$W/p.yaml" ab_copy
now() { date +%s.%N; }
count_ok() { [ "$(psql -qXAt -d dst -c "SELECT count(*) FROM public.orders")" = "$ROWS" ]; }
run_ferry() { rm -f "$W"/state.db*; "$1" run "$W/p.yaml" --quiet --fresh --state "$W/state.db" >/dev/null; }
declare -A T
for r in $(seq 1 "$ROUNDS"); do
  for who in pipe A B; do
    bench_fresh_dst
    t0=$(now)
    case $who in pipe) bench_pipe ;; A) run_ferry "$A" ;; B) run_ferry "$B" ;; esac
    t=$(echo "$(now) - $t0" | bc)
    count_ok || { echo "ab_copy.sh: $who: wrong row count" >&2; exit 1; }
    T[$who]="${T[$who]:-} $(printf %.2f "$t")"
    echo "round $r: $who $(printf %.2f "$t") s" >&2
  done
done
med() { tr ' ' '\n' | grep . | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
mp=$(echo "${T[pipe]}" | med) ma=$(echo "${T[A]}" | med) mb=$(echo "${T[B]}" | med)
out=bench/results/$OUT.md
{
  echo "# PostgreSQL → PostgreSQL append, two ferry binaries against the COPY pipe ($(date -u '+%Y-%m-%d %H:%M UTC'))"
  echo
  echo "$ROWS rows of bench/lib.sh's orders table, src → dst on one PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}') with fsync on; ferry"
  echo "defaults (per-batch durability, overlapped commits, integrity on); $ROUNDS rounds, each pipe, A, B."
  echo
  echo "| run | median wall s | × pipe | every round, s |"
  echo "|---|---|---|---|"
  echo "| binary COPY pipe | $mp | 1.00× |${T[pipe]} |"
  echo "| A: ferry ${A_LABEL:-$A} | $ma | $(awk -v a="$ma" -v p="$mp" 'BEGIN{printf "%.2f", a/p}')× |${T[A]} |"
  echo "| B: ferry ${B_LABEL:-$B} | $mb | $(awk -v a="$mb" -v p="$mp" 'BEGIN{printf "%.2f", a/p}')× |${T[B]} |"
  echo
  echo "Machine: $(nproc) cores, load at the end $(cut -d' ' -f1-3 /proc/loadavg)."
} > "$out"
cat "$out"
