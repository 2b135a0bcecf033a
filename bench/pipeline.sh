#!/usr/bin/env bash
# Engine-core benchmark: 10 million sample `orders` rows into a null sink and into SQLite,
# rows/s, MB/s and peak RSS at default settings; integrity digest on vs compiled out (ratio);
# CRC32-C GB/s next to memcpy GB/s measured in the same run. Prints a markdown table and
# writes it to bench/results/. Never gates CI.
#   ROWS=10000000 REPS=3 bash bench/pipeline.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS=${ROWS:-10000000}
REPS=${REPS:-3}
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build/bench -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build/bench -j"$jobs" >/dev/null
cmake -S . -B build/bench-nodigest -DCMAKE_BUILD_TYPE=Release -DFERRY_NO_DIGEST=ON >/dev/null
cmake --build build/bench-nodigest -j"$jobs" --target ferry >/dev/null

W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
pipeline() { # pipeline FILE SINK_YAML
  cat > "$1" <<YAML
version: 1
name: bench
source: {type: sample, rows: $ROWS, seed: 42, resources: [{table: orders}]}
sink: $2
YAML
}
pipeline "$W/null.yaml" "{type: null}"
pipeline "$W/sqlite.yaml" "{type: sqlite, path: $W/bench.db}"

# measure BIN FILE -> "seconds peak_kib bytes"
measure() {
  local bin=$1 file=$2 best="" line
  for _ in $(seq 1 "$REPS"); do
    rm -f "$W"/bench.db* "$W"/state.db*
    /usr/bin/time -f '%e %M' -o "$W/time" "$bin" run "$file" --json --fresh --state "$W/state.db" > "$W/out"
    local secs kib bytes
    read -r secs kib < "$W/time"
    bytes=$(jq -r .bytes < "$W/out")
    line="$secs $kib $bytes"
    if [ -z "$best" ] || awk -v a="$secs" -v b="${best%% *}" 'BEGIN{exit !(a<b)}'; then best=$line; fi
  done
  echo "$best"
}
row() { # row LABEL "secs kib bytes"
  local label=$1; set -- $2
  awk -v l="$label" -v s="$1" -v k="$2" -v b="$3" -v r="$ROWS" \
    'BEGIN{printf "| %s | %.2f | %.0f | %.1f | %.1f |\n", l, s, r/s, b/s/1e6, k/1024}'
}

null_on=$(measure build/bench/ferry "$W/null.yaml")
null_off=$(measure build/bench-nodigest/ferry "$W/null.yaml")
sqlite_on=$(measure build/bench/ferry "$W/sqlite.yaml")
sqlite_off=$(measure build/bench-nodigest/ferry "$W/sqlite.yaml")
crc=$(build/bench/bench_crc)

out="bench/results/pipeline-$(date -u +%Y%m%d).md"
{
  echo "# Engine core benchmark ($(date -u +%Y-%m-%d), $(nproc) cores, $(uname -m))"
  echo
  echo "$ROWS sample \`orders\` rows, default batch settings (50000 rows / 2 MiB, queue 2), best of $REPS."
  echo
  echo "| pipeline | wall s | rows/s | MB/s | peak RSS MiB |"
  echo "|---|---|---|---|---|"
  row "sample → null (digest on)" "$null_on"
  row "sample → null (digest compiled out)" "$null_off"
  row "sample → sqlite (digest on)" "$sqlite_on"
  row "sample → sqlite (digest compiled out)" "$sqlite_off"
  echo
  awk -v a="${null_on%% *}" -v b="${null_off%% *}" -v c="${sqlite_on%% *}" -v d="${sqlite_off%% *}" \
    'BEGIN{printf "Integrity overhead (wall time, digest on / off): null sink %.3f×, sqlite sink %.3f× (target ≤ 1.03×).\n", a/b, c/d}'
  echo
  echo "## CRC32-C vs memcpy (same run)"
  echo
  echo "$crc"
} | tee "$out"
echo "written to $out"
