#!/usr/bin/env bash
# `ferry verify` of a lake destination (issue 20): bench/lib.sh's ROWS-row orders table in
# PostgreSQL copied into an iceberg table (local warehouse), then verified - the iceberg side
# read back through ferry and hashed in C, its sorted (key, hash) list either
#   A. held in memory (FERRY_VERIFY_SORT_BYTES=1TiB: the only path before issue 20), or
#   B. with the default budget (a quarter of `memory:`, 64 MiB): spilled in sorted runs to a
#      temporary file under TMPDIR, merged, read by pages through a sparse index;
#   C. with the smallest budget (1 MiB): what the verification costs besides the list;
# interleaved A B C A B C ... (REPS rounds), each with /usr/bin/time (wall s, peak RSS).
# Then one source row changed and both verified again (the walk lists a few chunks). bench/
# verify.sh is the PostgreSQL -> PostgreSQL benchmark (no side read through ferry there).
# The load average before and after is recorded: the machine is shared. Never gates CI.
#   ROWS=5000000 REPS=2 bash bench/verify_lake.sh
# S3=1: instead, the s3 destination (s3_case below): the table written by ferry to s3rver
# (tests/s3/server.mjs) as Parquet and as CSV, then `ferry verify` of each, REPS rounds, with
# FERRY and, when FERRY_BASE names another binary (the code before a change), with it too,
# interleaved; wall, peak RSS and the peak bytes under TMPDIR (sampled every 50 ms);
# written to bench/results/verify-s3-<date>.md.
#   S3=1 ROWS=300000 REPS=3 FERRY=build/bench/ferry FERRY_BASE=/tmp/old/ferry bash bench/verify_lake.sh
set -euo pipefail
cd "$(dirname "$0")/.."
FERRY_SRC=$PWD
ROWS=${ROWS:-5000000}
REPS=${REPS:-2}

if [ -z "${FERRY:-}" ]; then # FERRY=path: a binary built already (Release, please)
  cmake -S . -B build/verify-bench -DCMAKE_BUILD_TYPE=Release -DFERRY_WERROR=OFF >/dev/null
  cmake --build build/verify-bench -j2 --target ferry >/dev/null
  FERRY=$FERRY_SRC/build/verify-bench/ferry
fi

W=$(mktemp -d "${TMPDIR:-/tmp}/ferry-vlbench.XXXXXX")
S3PID=""
trap '[ -n "$S3PID" ] && kill "$S3PID" 2>/dev/null; rm -rf "$W"' EXIT
. "$FERRY_SRC/bench/lib.sh"
bench_pg_start
bench_src_dst
export FERRY_STATE=$W/state.db SRC_URL=$BENCH_SRC_URL
echo "generating $ROWS rows..." >&2
bench_orders "$ROWS"

# ---- S3=1: an s3 destination ------------------------------------------------------------------------
# peak_tmp PID: the largest `du -sb` of $W/stmp while PID runs, into $W/tmp_peak
peak_tmp() {
  local max=0 b
  while kill -0 "$1" 2>/dev/null; do
    b=$(du -sb "$W/stmp" 2>/dev/null | cut -f1)
    [ "${b:-0}" -gt "$max" ] && max=$b
    sleep 0.05
  done
  echo "$max" > "$W/tmp_peak"
}
# s3_one BIN LABEL FMT: one verify of the FMT destination; "wall_s rss_kib tmp_bytes status"
# appended to $W/s3.LABEL.FMT.txt
s3_one() {
  set +e
  TMPDIR=$W/stmp /usr/bin/time -f '%e %M' -o "$W/time.txt" "$1" verify "$W/s3-$3.yaml" --json \
    > "$W/s3.$2.$3.json" &
  local pid=$!
  peak_tmp "$pid" &
  local sampler=$!
  wait "$pid"
  local rc=$?
  wait "$sampler"
  set -e
  echo "$(tail -n 1 "$W/time.txt") $(cat "$W/tmp_peak") $rc" >> "$W/s3.$2.$3.txt"
}
# s3_write FMT: the orders table written to s3rver in FMT by `ferry run`
s3_write() {
  cat > "$W/s3-$1.yaml" <<EOF
version: 1
name: vbench_$1
source: {type: postgres, url: env:SRC_URL, resources: [{table: public.orders}]}
sink: {type: s3, bucket: vbench, prefix: $1, format: $1, endpoint: "$S3_ENDPOINT",
       path_style: true, access_key_id: env:S3_KEY, secret_access_key: env:S3_SECRET}
EOF
  "$FERRY" run "$W/s3-$1.yaml" --quiet
}
# s3_report LABELS BYTES LOAD_BEFORE LOAD_AFTER: the markdown table
s3_report() {
  echo "# ferry verify of an s3 destination: $ROWS rows, Parquet and CSV"
  echo
  echo "$(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, load average before $3, after $4."
  echo "ferry $(git rev-parse --short HEAD 2>/dev/null || echo '?') (Release). Source: bench/lib.sh's"
  echo "orders table in PostgreSQL; destination: s3rver on loopback ($(($2 / 1048576)) MiB of"
  echo "objects), written by \`ferry run\`. new: $FERRY; base: ${FERRY_BASE:-none}."
  echo "Each cell: one round, wall s / peak RSS MiB / peak MiB under TMPDIR; rounds interleaved,"
  echo "order alternating."
  echo
  echo "| destination | binary | rounds |"
  echo "|---|---|---|"
  local fmt l
  for fmt in parquet csv; do
    for l in $1; do
      awk -v f="$fmt" -v l="$l" '{ s = s sep $1 " / " int($2 / 1024) " / " int($3 / 1048576); sep = ", " }
        END { printf "| %s | %s | %s |\n", f, l, s }' "$W/s3.$l.$fmt.txt"
    done
  done
}
s3_case() {
  mkdir -p "$W/s3data" "$W/stmp"
  node "$FERRY_SRC/tests/s3/server.mjs" "$W/s3data" "$W/s3.port" vbench > "$W/s3rver.log" 2>&1 &
  S3PID=$!
  for _ in $(seq 100); do [ -s "$W/s3.port" ] && break; sleep 0.1; done
  [ -s "$W/s3.port" ] || { cat "$W/s3rver.log" >&2; exit 1; }
  export S3_KEY=S3RVER S3_SECRET=S3RVER S3_ENDPOINT="http://127.0.0.1:$(cat "$W/s3.port")"
  s3_write parquet
  s3_write csv
  local bytes labels="new" order load_before fmt r l
  bytes=$(du -sb "$W/s3data/vbench" | cut -f1)
  [ -n "${FERRY_BASE:-}" ] && labels="base new"
  load_before=$(cut -d' ' -f1-3 /proc/loadavg)
  for r in $(seq "$REPS"); do
    order=$labels
    [ $((r % 2)) = 0 ] && [ -n "${FERRY_BASE:-}" ] && order="new base"
    for fmt in parquet csv; do
      for l in $order; do
        s3_one "$([ "$l" = base ] && echo "$FERRY_BASE" || echo "$FERRY")" "$l" "$fmt"
      done
    done
  done
  local load_after
  load_after=$(cut -d' ' -f1-3 /proc/loadavg)
  grep -v ' 0$' "$W"/s3.*.txt && { echo "not equal" >&2; cat "$W"/s3.*.json >&2; exit 1; }
  local out
  out="bench/results/verify-s3-$(date +%Y%m%d).md"
  s3_report "$labels" "$bytes" "$load_before" "$load_after" > "$out"
  cat "$out"
}
if [ "${S3:-0}" = 1 ]; then
  s3_case
  exit 0
fi

cat > "$W/ice.yaml" <<EOF
version: 1
name: vlbench
source: {type: postgres, url: env:SRC_URL, resources: [{table: public.orders}]}
sink: {type: iceberg, warehouse: $W/wh, namespace: db}
EOF
t0=$(date +%s.%N)
"$FERRY" run "$W/ice.yaml" --quiet
copy_s=$(echo "$(date +%s.%N) - $t0" | bc)
mkdir -p "$W/tmp"

# one MODE (A or B) run: "wall_s rss_kib runs status" appended to $W/MODE.txt
one() {
  local budget=
  [ "$1" = A ] && budget=$((1 << 40))
  [ "$1" = C ] && budget=$((1 << 20))
  set +e
  TMPDIR=$W/tmp FERRY_VERIFY_SORT_BYTES=$budget /usr/bin/time -f '%e %M' -o "$W/time.txt" \
    "$FERRY" verify "$W/ice.yaml" --json > "$W/$1.json"
  local rc=$?
  set -e
  [ -z "$(ls -A "$W/tmp")" ] || { echo "temporary files left: $(ls -A "$W/tmp")" >&2; exit 1; }
  echo "$(tail -n 1 "$W/time.txt") $(jq -r '.resources[0].dest_sort_runs' "$W/$1.json") $rc" \
    >> "$W/$1.$2.txt"
}
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for _ in $(seq "$REPS"); do one A equal; one B equal; one C equal; done
grep -qv ' 0$' "$W/A.equal.txt" "$W/B.equal.txt" "$W/C.equal.txt" && { echo "not equal" >&2; cat "$W"/*.json >&2; exit 1; }
psql -qXAt -d src -c "UPDATE public.orders SET amount = amount + 1 WHERE id = $((ROWS / 3))"
one A diff
one B diff
one C diff
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
same_keys=$(jq -c '.resources[0] | [.different.keys, .chunks]' "$W"/[ABC].json | uniq | wc -l)

row() { # MODE KIND LABEL
  awk -v label="$3" '{ s = s sep $1 " s / " int($2 / 1024) " MiB"; sep = ", "; runs = $3 }
    END { printf "| %s | %s | %s |\n", label, s, runs }' "$W/$1.$2.txt"
}
out="bench/results/verify-lake-$(date +%Y%m%d).md"
{
  echo "# ferry verify of an iceberg destination: $ROWS rows, list in memory vs spilled"
  echo
  echo "$(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, load average before $load_before, after"
  echo "$load_after (uptime); the machine is shared with other jobs (builds and tests of other"
  echo "sessions): absolute times are noisy, compare the interleaved pairs. ferry"
  echo "$(git rev-parse --short HEAD 2>/dev/null || echo '?') (Release) plus uncommitted work, if any."
  echo "Source: bench/lib.sh's orders table in PostgreSQL ($ROWS rows, key bigint); destination:"
  echo "iceberg, local warehouse, written by \`ferry run\` in ${copy_s%.*} s. Peak RSS: /usr/bin/time %M."
  echo
  echo "| mode | runs (wall / peak RSS) | sorted runs spilled |"
  echo "|---|---|---|"
  row A equal "A. equal, list in memory (as before issue 20)"
  row B equal "B. equal, default budget 64 MiB (spilled)"
  row C equal "C. equal, budget 1 MiB (spilled)"
  row A diff "A. one row changed, in memory"
  row B diff "B. one row changed, spilled"
  row C diff "C. one row changed, budget 1 MiB"
  echo
  echo "A, B and C report the same different keys and chunks walked: $([ "$same_keys" = 1 ] && echo yes || echo NO)."
} > "$out"
cat "$out"
