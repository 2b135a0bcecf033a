#!/usr/bin/env bash
# Where the time of a per_apply PG → PG copy goes, with and without overlapped commits
# (issue 22; docs/internals/postgres.md "Overlapped commits"). One throw-away server
# (tests/pg/pg.sh) with fsync, synchronous_commit and full_page_writes ON (each COMMIT waits
# for the disk), databases src and dst, a ROWS-row orders-like table (as bench/memory.sh).
# Per variant (overlap_commits false / true), REPS interleaved runs of `ferry run` (append,
# per_apply, default batches) under `perf record -g` (the ferry process only), each from an
# empty destination:
#   - wall s, ferry's client CPU s (user + sys, /usr/bin/time);
#   - server CPU s: every postgres process's user + sys over the run, backends reaped
#     included (the postmaster's cutime/cstime plus its live children, from /proc);
#   - the flow's own split (resource.completed): wait_sink_ms (readers blocked because the
#     writer is behind: the sink is the bottleneck) and wait_source_ms (writer idle);
#   - the ferry process's top self symbols (perf report) of the last run of each variant.
# Every run's destination is counted. Writes bench/results/overlap-profile-<date>.md.
#   ROWS=500000 REPS=2 bash bench/overlap_profile.sh
set -euo pipefail
cd "$(dirname "$0")/.."
FERRY_SRC=$PWD
ROWS=${ROWS:-500000}
REPS=${REPS:-2}
if [ -z "${FERRY:-}" ]; then
  cmake -S . -B build/bench -DCMAKE_BUILD_TYPE=Release -DFERRY_WERROR=ON >/dev/null
  cmake --build build/bench -j2 --target ferry >/dev/null
  FERRY=$FERRY_SRC/build/bench/ferry
fi
command -v perf >/dev/null || { echo "overlap_profile.sh: needs perf (apt-get install linux-perf)" >&2; exit 1; }
W=$(mktemp -d "${TMPDIR:-/tmp}/ferry-ovprof.XXXXXX")
chmod 755 "$W"
trap 'rm -rf "$W"' EXIT
# shellcheck source=lib.sh
. "$FERRY_SRC/bench/lib.sh" # the server, src and dst, the orders table
bench_pg_start on # fsync, synchronous_commit, full_page_writes
cd "$W"
UPTIME0=$(uptime)
bench_src_dst
bench_orders "$ROWS"
PM=$(head -n1 "$PG_DIR/data/postmaster.pid")
TCK=$(getconf CLK_TCK)
server_ticks() { # the postmaster's own + reaped children's + live children's user+sys ticks
  local t c
  t=$(awk '{print $14 + $15 + $16 + $17}' "/proc/$PM/stat")
  for c in $(pgrep -P "$PM"); do
    t=$((t + $(awk '{print $14 + $15}' "/proc/$c/stat" 2>/dev/null || echo 0)))
  done
  echo "$t"
}
yaml() { # yaml FILE OVERLAP
  cat > "$1" <<Y
version: 1
name: ovprof
source: {type: postgres, url: env:BENCH_SRC_URL, resources: [{table: public.orders, mode: full}]}
sink: {type: postgres, url: env:BENCH_DST_URL, schema: public, write: append, overlap_commits: $2}
Y
}
one() { # one OVERLAP -> "wall cpu server_cpu wait_sink_ms wait_source_ms" or FAIL
  psql -qX -d dst -c "DROP TABLE IF EXISTS public.orders" -c "DROP SCHEMA IF EXISTS _ferry CASCADE" -c CHECKPOINT >/dev/null 2>&1
  rm -f "$W"/state.db*
  yaml "$W/p.yaml" "$1"
  local s0 s1 n done_ev
  s0=$(server_ticks)
  if ! /usr/bin/time -f '%e %U %S' -o "$W/t" perf record -q -g -o "$W/perf.$1" -- \
       "$FERRY" run "$W/p.yaml" --fresh --state "$W/state.db" >"$W/out" 2>&1; then
    echo "FAIL $(tail -n1 "$W/out")"; return
  fi
  s1=$(server_ticks)
  n=$(psql -qXAt -d dst -c "SELECT count(*) FROM public.orders")
  [ "$n" = "$ROWS" ] || { echo "FAIL $n rows arrived"; return; }
  done_ev=$(sqlite3 "$W/state.db" "SELECT payload FROM events WHERE type = 'resource.completed'" | tail -n1)
  echo "$(awk '{printf "%s %.2f", $1, $2 + $3}' "$W/t") $(awk -v a="$s0" -v b="$s1" -v t="$TCK" 'BEGIN{printf "%.2f", (b - a) / t}') $(echo "$done_ev" | jq -r '"\(.wait_sink_ms) \(.wait_source_ms)"')"
}
declare -A RES
LOADS=""
for round in $(seq 1 "$REPS"); do
  for ov in false true; do
    echo "round $round/$REPS: overlap_commits $ov" >&2
    LOADS="$LOADS $(cut -d' ' -f1 /proc/loadavg)"
    RES[$ov]="${RES[$ov]:-}$(one "$ov");"
  done
done
for ov in false true; do
  perf report -i "$W/perf.$ov" --no-children --sort dso,symbol --stdio 2>/dev/null |
    grep -E '^ +[0-9.]+%' | head -n 15 > "$W/top.$ov" || true
done
mkdir -p "$FERRY_SRC/bench/results"
out="$FERRY_SRC/bench/results/${OUT:-overlap-profile-$(date -u +%Y%m%d).md}"
{
  echo "# Overlapped commits: where a per_apply PG → PG copy spends its time ($(date -u +%Y-%m-%d))"
  echo
  echo "$ROWS rows (orders-like table), database \`src\` → \`dst\` on one PostgreSQL 15 server with"
  echo "**fsync, synchronous_commit and full_page_writes on**; \`ferry run\`, append, per_apply, default"
  echo "batches, integrity on, under \`perf record -g\`; $REPS runs per variant, interleaved. server CPU:"
  echo "every postgres process over the run (reaped backends included). wait_sink: readers blocked"
  echo "on a full queue (the writer is behind); wait_source: the writer idle for want of a batch."
  echo
  echo "| overlap_commits | run | wall s | ferry CPU s | server CPU s | wait_sink ms | wait_source ms |"
  echo "|---|---|---|---|---|---|---|"
  for ov in false true; do
    echo "${RES[$ov]}" | tr ';' '\n' | awk -v l="$ov" 'NF { n++; if ($1 == "FAIL") print "| " l " | " n " | " $0 " | | | | |"; else printf "| %s | %d | %s | %s | %s | %s | %s |\n", l, n, $1, $2, $3, $4, $5 }'
  done
  for ov in false true; do
    echo
    echo "## ferry's top self symbols, overlap_commits: $ov (last run)"
    echo
    echo '```'
    cat "$W/top.$ov"
    echo '```'
  done
  echo
  echo "## Machine"
  echo
  echo "- $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), $(uname -sr)"
  echo "- \`uptime\` before and after: $UPTIME0 / $(uptime)"
  echo "- 1-minute load average at the start of each run: $LOADS (other helpers' builds and tests share the $(nproc) cores: wall times are only comparable within this file)"
  echo "- ferry ${FERRY_REV:-$(git -C "$FERRY_SRC" rev-parse --short HEAD 2>/dev/null || echo '?')} ($FERRY)"
} | tee "$out"
