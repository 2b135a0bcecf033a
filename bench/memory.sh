#!/usr/bin/env bash
# Peak memory of a PostgreSQL → PostgreSQL full copy (issue 22): one throw-away server
# (tests/pg/pg.sh) with databases src and dst, a ROWS-row orders-like table (as bench/pg.sh),
# then `ferry run` (append, per-batch durability, integrity on) under /usr/bin/time for each
# batch setting, REPS times each, interleaved: peak RSS (VmHWM: min and max over the runs; it
# depends on how many batches are in flight when the peak is reached), wall time, client CPU
# and the peak ferry reports itself. A baseline with 64 KiB batches shows what is not
# batches (libraries, connections, state). Optional: PROFILE=1 `perf record -g` of one run
# with the default settings (ferry's own samples, top self symbols).
#   ROWS=1000000 REPS=2 [FERRY=path/to/ferry] [LABEL=text] [OUT=name.md] bash bench/memory.sh
# MODE=incremental reads by a cursor (updated_at) instead; MODE=cdc runs twice per measurement
# (write: merge): the snapshot copy, then an UPDATE of every row, then the run that streams it;
# the peak is the larger of the two runs (each run's own is in the file). MODE=parquet writes
# the table to Parquet files instead (files sink, zstd; SET=parquet compares row_group_bytes).
# Writes bench/results/memory-<date>[-LABEL].md. Never gates CI.
set -euo pipefail
cd "$(dirname "$0")/.."
FERRY_SRC=$PWD
ROWS=${ROWS:-1000000}
REPS=${REPS:-2}
PROFILE=${PROFILE:-0}
LABEL=${LABEL:-}
jobs=$(nproc 2>/dev/null || echo 2)
if [ -z "${FERRY:-}" ]; then
  cmake -S . -B build/bench -DCMAKE_BUILD_TYPE=Release -DFERRY_WERROR=ON >/dev/null
  cmake --build build/bench -j"$jobs" --target ferry >/dev/null
  FERRY=$FERRY_SRC/build/bench/ferry
fi
[ "$PROFILE" = 1 ] && ! command -v perf >/dev/null && { echo "memory.sh: PROFILE=1 needs perf (apt-get install linux-perf)" >&2; exit 1; }

W=$(mktemp -d "${TMPDIR:-/tmp}/ferry-membench.XXXXXX")
chmod 755 "$W"
trap 'rm -rf "$W"' EXIT
# shellcheck source=lib.sh
. "$FERRY_SRC/bench/lib.sh" # the server, src and dst, the orders table
bench_pg_start
cd "$W"
UPTIME0=$(uptime)
bench_src_dst
bench_orders "$ROWS"

# CONFIGS: "label|batch yaml" (empty yaml: the defaults). SET=issue22 measures the
# candidates for smaller defaults instead (the defaults of the build under test first).
# SET=overlap: the defaults and 2MiB/queue 2, each with overlap_commits false and true
# (a third field: more sink keys). SET=batchsize: larger batches (fewer destination
# transactions) against the defaults.
if [ "${SET:-}" = defaults ]; then
CONFIGS=("defaults of this build|")
elif [ "${SET:-}" = overlap ]; then
CONFIGS=(
  "defaults, overlap_commits: false||, overlap_commits: false"
  "defaults, overlap_commits: true||, overlap_commits: true"
  "2MiB batches, queue 2, overlap_commits: false|batch: {bytes: 2MiB, queue: 2}|, overlap_commits: false"
  "2MiB batches, queue 2, overlap_commits: true|batch: {bytes: 2MiB, queue: 2}|, overlap_commits: true"
)
elif [ "${SET:-}" = parquet ]; then
CONFIGS=(
  "defaults of this build|"
  "row_group_bytes: 64MiB||, row_group_bytes: 64MiB"
  "row_group_bytes: 32MiB||, row_group_bytes: 32MiB"
  "row_group_bytes: 16MiB||, row_group_bytes: 16MiB"
  "row_group_bytes: 24MiB||, row_group_bytes: 24MiB"
  "baseline: row_group_bytes: 1MiB||, row_group_bytes: 1MiB"
)
elif [ "${SET:-}" = batchsize ]; then
CONFIGS=(
  "defaults of this build|"
  "3MiB batches, queue 2|batch: {bytes: 3MiB, queue: 2}"
  "4MiB batches, queue 1|batch: {bytes: 4MiB, queue: 1}"
  "4MiB batches, queue 2|batch: {bytes: 4MiB, queue: 2}"
  "6MiB batches, queue 1|batch: {bytes: 6MiB, queue: 1}"
)
elif [ "${SET:-}" = issue22 ]; then
CONFIGS=(
  "defaults of this build|"
  "4MiB batches, queue 4|batch: {bytes: 4MiB, queue: 4}"
  "2MiB batches, queue 2|batch: {bytes: 2MiB, queue: 2}"
  "2MiB batches, queue 1|batch: {bytes: 2MiB, queue: 1}"
  "1MiB batches, queue 4|batch: {bytes: 1MiB, queue: 4}"
  "1MiB batches, queue 2|batch: {bytes: 1MiB, queue: 2}"
  "baseline: 64KiB batches, queue 1|batch: {bytes: 64KiB, queue: 1}"
)
else
CONFIGS=(
  "defaults of this build|"
  "4MiB batches, queue 4 (the earlier defaults)|batch: {bytes: 4MiB, queue: 4}"
  "queue 1|batch: {queue: 1}"
  "2MiB batches, queue 4|batch: {bytes: 2MiB, queue: 4}"
  "2MiB batches, queue 2|batch: {bytes: 2MiB, queue: 2}"
  "1MiB batches, queue 2|batch: {bytes: 1MiB, queue: 2}"
  "baseline: 64KiB batches, queue 1|batch: {bytes: 64KiB, queue: 1}"
)
fi
MODE=${MODE:-full}
case $MODE in
  full) RES_YAML="{table: public.orders, mode: full}" WRITE=append ;;
  incremental) RES_YAML="{table: public.orders, mode: incremental, cursor: updated_at}" WRITE=append ;;
  cdc) RES_YAML="{table: public.orders, mode: cdc}" WRITE=merge ;;
  parquet) RES_YAML="{table: public.orders, mode: full}" WRITE=append ;;
  *) echo "memory.sh: MODE full|incremental|cdc|parquet" >&2; exit 2 ;;
esac
SINK_YAML="type: postgres, url: env:BENCH_DST_URL, schema: public, write: $WRITE"
[ "$MODE" = parquet ] && SINK_YAML="type: files, path: $W/pq, format: parquet, compression: zstd"
# Rows the last run landed: the destination table, or (parquet) the run's own count.
landed() {
  if [ "$MODE" = parquet ]; then
    grep -o 'completed: [0-9]* rows' "$W/out" | awk '{print $2}'
  else
    psql -qXAt -d dst -c "SELECT count(*) FROM public.orders"
  fi
}
yaml() { # yaml FILE BATCH_YAML [SINK_EXTRA]
  cat > "$1" <<Y
version: 1
name: membench
source: {type: postgres, url: env:BENCH_SRC_URL, resources: [$RES_YAML]}
sink: {$SINK_YAML${3:-}}
$2
Y
}
drop_slots() {
  psql -qXAt -d src -c "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE NOT active" >/dev/null 2>&1 || true
}
one() { # one YAML -> "rss_kib wall_s cpu_s ferry_peak_mib" or "FAIL …"
  psql -qX -d dst -c "DROP TABLE IF EXISTS public.orders" -c "DROP SCHEMA IF EXISTS _ferry CASCADE" >/dev/null 2>&1
  rm -rf "$W"/state.db* "$W/pq"
  drop_slots
  if ! /usr/bin/time -f '%M %e %U %S' -o "$W/t" "$FERRY" run "$1" --fresh --state "$W/state.db" >"$W/out" 2>&1; then
    echo "FAIL $(tail -n1 "$W/out")"; return
  fi
  local n copy_rss=0
  n=$(landed)
  [ "$n" = "$ROWS" ] || { echo "FAIL $n rows arrived"; return; }
  if [ "$MODE" = cdc ]; then
    copy_rss=$(cut -d' ' -f1 "$W/t")
    psql -qX -d src -c "UPDATE public.orders SET quantity = quantity % 50 + 1" >/dev/null
    if ! /usr/bin/time -f '%M %e %U %S' -o "$W/t" "$FERRY" run "$1" --state "$W/state.db" >"$W/out" 2>&1; then
      echo "FAIL stream: $(tail -n1 "$W/out")"; return
    fi
    [ "$(psql -qXAt -d dst -c "SELECT sum(quantity) FROM public.orders")" = \
      "$(psql -qXAt -d src -c "SELECT sum(quantity) FROM public.orders")" ] || { echo "FAIL the stream did not land"; return; }
    echo "cdc copy peak $((copy_rss / 1024)) MiB, stream peak $(($(cut -d' ' -f1 "$W/t") / 1024)) MiB" >&2
  fi
  echo "$(awk -v c="$copy_rss" '{printf "%s %s %.2f", ($1 > c ? $1 : c), $2, $3 + $4}' "$W/t") $(grep -o 'peak memory [0-9.]*' "$W/out" | awk '{print $3}')"
}
declare -A RES
LOADS=""
for round in $(seq 1 "$REPS"); do
  for i in "${!CONFIGS[@]}"; do
    c=${CONFIGS[$i]}
    echo "round $round/$REPS: ${c%%|*}" >&2
    rest=${c#*|}
    extra=""
    case $rest in *"|"*) extra=${rest#*|}; rest=${rest%%|*} ;; esac
    yaml "$W/p$i.yaml" "$rest" "$extra"
    LOADS="$LOADS $(cut -d' ' -f1 /proc/loadavg)"
    RES[$i]="${RES[$i]:-}$(one "$W/p$i.yaml");"
  done
done
if [ "$PROFILE" = 1 ]; then
  yaml "$W/prof.yaml" ""
  psql -qX -d dst -c "DROP TABLE IF EXISTS public.orders" -c "DROP SCHEMA IF EXISTS _ferry CASCADE" >/dev/null 2>&1
  rm -f "$W"/state.db*
  perf record -q -g -o "$W/perf.data" -- "$FERRY" run "$W/prof.yaml" --fresh --state "$W/state.db" >/dev/null 2>&1 || true
  perf report -i "$W/perf.data" --no-children --sort dso,symbol --stdio 2>/dev/null |
    grep -E '^ +[0-9.]+%' | head -n 25 > "$W/perf.top" || true
fi

mkdir -p "$FERRY_SRC/bench/results"
out="$FERRY_SRC/bench/results/${OUT:-memory-$(date -u +%Y%m%d)${LABEL:+-$LABEL}.md}"
{
  echo "# Peak memory, PostgreSQL → $([ "$MODE" = parquet ] && echo "Parquet files" || echo "PostgreSQL $MODE") ($(date -u +%Y-%m-%d)${LABEL:+, $LABEL})"
  echo
  echo "$ROWS rows of the orders-like table of bench/pg.sh, database \`src\` → database \`dst\` on one"
  echo "PostgreSQL 15 server; \`ferry run\`, write: append, per-batch durability, integrity on; each setting"
  echo "$REPS times, interleaved. Peak RSS is /usr/bin/time %M (VmHWM) of the ferry process, min and max"
  echo "over the runs (it depends on how many batches are in flight at the peak); the last column is"
  echo "the peak ferry itself reports. Every run's row count is checked."
  echo
  echo "| batch setting | peak RSS MiB (min – max) | wall s (best) | client CPU s (best) | ferry's peak MiB (max) |"
  echo "|---|---|---|---|---|"
  for i in "${!CONFIGS[@]}"; do
    echo "${RES[$i]}" | tr ';' '\n' | awk -v l="${CONFIGS[$i]%%|*}" '
      /^FAIL/ { f = f $0 " " ; next }
      NF >= 3 { n++; r = $1 / 1024; if (n == 1 || r < rmin) rmin = r; if (n == 1 || r > rmax) rmax = r;
                if (n == 1 || $2 < w) w = $2; if (n == 1 || $3 < c) c = $3; if ($4 > p) p = $4 }
      END { if (n == 0) { printf "| %s | failed: %s | | | |\n", l, f; exit }
            printf "| %s | %.1f – %.1f | %.2f | %.2f | %.1f |%s\n", l, rmin, rmax, w, c, p, (f != "") ? " failed runs: " f : "" }'
  done
  if [ -s "$W/perf.top" ]; then
    echo
    echo "## perf record -g of one run with the defaults: ferry's top self symbols"
    echo
    echo '```'
    cat "$W/perf.top"
    echo '```'
  fi
  echo
  echo "## Machine"
  echo
  echo "- $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), $(awk '/MemTotal/{printf "%.0f GiB", $2/1048576}' /proc/meminfo) RAM, $(uname -sr)"
  echo "- \`uptime\` before and after: $UPTIME0 / $(uptime)"
  echo "- 1-minute load average at the start of each run: min $(echo $LOADS | tr ' ' '\n' | sort -g | head -n1), max $(echo $LOADS | tr ' ' '\n' | sort -g | tail -n1) (other processes share the $(nproc) cores: wall times and CPU are only comparable within this file, peak RSS is not timing-free either)"
  echo "- ferry ${FERRY_REV:-$(git -C "$FERRY_SRC" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$FERRY_SRC" diff --quiet 2>/dev/null || echo ' (work tree modified)')} ($FERRY)"
} | tee "$out"
echo "written to $out"
