#!/usr/bin/env bash
# bench/copy_profile.sh - where the server's time goes in a per-batch-durable PG → PG copy
# against the `COPY | COPY` pipe (issue 22), on a table much larger than shared_buffers.
# One throw-away server (tests/pg/pg.sh) with fsync, synchronous_commit and full_page_writes
# on, databases src and dst, ROWS orders-like rows (bench/lib.sh). Per round, interleaved,
# each into an emptied dst.public.orders (TRUNCATE + CHECKPOINT, untimed):
#   pipe       psql COPY … TO STDOUT (FORMAT binary) | psql COPY … FROM STDIN (FORMAT binary)
#   per_apply  ferry run, append, default settings (per-batch durability, overlapped commits)
# each under `perf record -a -F FREQ` (the whole machine, no call graphs: the samples say
# which functions ran, at a size perf can keep). Reported per run: wall s, server CPU s (every
# postgres process, reaped backends included, from /proc), server minor faults, and of the
# last round the postgres processes' samples by symbol ([k] kernel, [.] user) for both runs
# side by side, sorted by how many more samples per_apply took (the functions where its
# extra server time went), and the 10 where it took fewest.
# Every destination is counted. Writes bench/results/OUT. Never gates CI.
#   ROWS=15000000 REPS=1 OUT=copy-profile-20261205-15m.md bash bench/copy_profile.sh
# CALLERS=SYMBOL records call graphs too (-g) and adds the call chains that reach SYMBOL in
# per_apply's postgres processes (e.g. CALLERS=__memmove_avx512_unaligned_erms).
set -euo pipefail
cd "$(dirname "$0")/.."
FERRY_SRC=$PWD
ROWS=${ROWS:-15000000} REPS=${REPS:-1} FREQ=${FREQ:-499} CALLERS=${CALLERS:-}
FERRY=${FERRY:-$FERRY_SRC/build/bench/ferry}
command -v perf >/dev/null || { echo "copy_profile.sh: needs perf (apt-get install linux-perf)" >&2; exit 1; }
[ -x "$FERRY" ] || { echo "copy_profile.sh: $FERRY: not built (cmake --preset bench)" >&2; exit 2; }
. bench/lib.sh
bench_workdir copyprof
bench_pg_start on
bench_src_dst
bench_orders "$ROWS"
bench_copy_dst
bench_append_yaml "$W/p.yaml" copyprof
HZ=$(getconf CLK_TCK)
now() { date +%s.%N; }
pipe() { bench_pipe; }
per_apply() { rm -f "$W"/state.db*; "$FERRY" run "$W/p.yaml" --quiet --fresh --state "$W/state.db" >/dev/null; }
export -f pipe per_apply bench_pipe
export FERRY W
LINES=""
for r in $(seq 1 "$REPS"); do
  for who in pipe per_apply; do
    bench_fresh_dst
    c0=$(bench_server_sum '$14 + $15 + $16 + $17') f0=$(bench_server_sum '$10 + $11') t0=$(now)
    perf record -q -a ${CALLERS:+-g} -F "$FREQ" -o "$W/perf.$who" -- bash -c "$who" > "$W/rec.$who" 2>&1 ||
      { cat "$W/rec.$who" >&2; exit 1; }
    t=$(echo "$(now) - $t0" | bc)
    c=$(echo "scale=2; ($(bench_server_sum '$14 + $15 + $16 + $17') - $c0) / $HZ" | bc)
    f=$(( $(bench_server_sum '$10 + $11') - f0 ))
    [ "$(psql -qXAt -d dst -c "SELECT count(*) FROM public.orders")" = "$ROWS" ] ||
      { echo "copy_profile.sh: $who: wrong row count" >&2; exit 1; }
    LINES="$LINES| $who | $r | $(printf %.2f "$t") | $c | $f |
"
    echo "round $r: $who $(printf %.2f "$t") s, server CPU $c s, minor faults $f" >&2
  done
done
# samples by symbol of the postgres processes, per run: "symbol samples"
for who in pipe per_apply; do
  perf report -i "$W/perf.$who" --comm postgres --no-children --sort symbol --stdio -n 2>/dev/null |
    awk '/^ +[0-9.]+%/ { n = $2; $1 = ""; $2 = ""; sub(/^ +/, ""); sub(/ +- +-$/, ""); print n "\t" $0 }' > "$W/sym.$who"
done
out=bench/results/$OUT
{
  echo "# Per-batch-durable copy against the pipe: where the server's time goes ($(date -u '+%Y-%m-%d %H:%M UTC'))"
  echo
  echo "$ROWS rows of bench/lib.sh's orders table, src → dst on one PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}')"
  echo "(fsync, synchronous_commit, full_page_writes on; shared_buffers $(psql -qXAt -c 'SHOW shared_buffers');"
  echo "$(bench_pages)). \`pipe\`: psql COPY binary | psql COPY binary;"
  echo "\`per_apply\`: ferry append at its defaults. Each run under \`perf record -a -F $FREQ\`; server CPU and minor"
  echo "faults of every postgres process over the run, from /proc."
  echo
  echo "| run | round | wall s | server CPU s | server minor faults |"
  echo "|---|---|---|---|---|"
  printf '%s' "$LINES"
  echo
  echo "## postgres processes' samples by symbol, last round (per_apply − pipe, the 30 largest differences)"
  echo
  echo '```'
  printf '%-8s %-8s %-8s %s\n' pipe per_apply diff symbol
  awk -F'\t' 'FNR == NR { a[$2] = $1; next } { b[$2] = $1 } END { for (s in b) d[s] = b[s] - a[s];
      for (s in a) if (!(s in b)) d[s] = -a[s];
      for (s in d) printf "%-8d %-8d %-8d %s\n", a[s], b[s], d[s], s }' "$W/sym.pipe" "$W/sym.per_apply" |
    sort -k3,3nr > "$W/diff"
  awk 'NR <= 30' "$W/diff"
  echo '```'
  echo
  echo "The 10 symbols where per_apply took fewest samples against the pipe:"
  echo
  echo '```'
  sort -k3,3n "$W/diff" | awk 'NR <= 10'
  echo '```'
  echo
  if [ -n "$CALLERS" ]; then
    echo "Call chains reaching $CALLERS in per_apply's postgres processes (perf report -G):"
    echo
    echo '```'
    perf report -i "$W/perf.per_apply" --comm postgres --no-children -S "$CALLERS" -G --stdio 2>/dev/null |
      grep -v '^#' | grep -v '^$' | awk 'NR <= 70'
    echo '```'
    echo
  fi
  echo "Total postgres samples: pipe $(awk -F'\t' '{ s += $1 } END { print s + 0 }' "$W/sym.pipe"), per_apply $(awk -F'\t' '{ s += $1 } END { print s + 0 }' "$W/sym.per_apply")."
  echo
  echo "Machine: $(nproc) cores ($(lscpu | sed -n 's/^Model name: *//p' | head -1)), load at the end $(cut -d' ' -f1-3 /proc/loadavg)."
  echo "ferry $(git rev-parse --short HEAD) ($FERRY)."
} | tee "$out"
echo "written to $out" >&2
