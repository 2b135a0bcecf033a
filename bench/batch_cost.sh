#!/usr/bin/env bash
# bench/batch_cost.sh - the per-batch cost of the state store, the bus and the tracker, in
# instructions: valgrind callgrind (every thread of the process: --separate-threads=no) of
# `ferry run` sample -> null and sample -> sqlite at default settings, for each binary given.
# Prints per binary and pipeline: total instructions, batches, instructions per batch and per
# row, and the inclusive instructions of the publishing side (the in-process bus's publish and
# publish_n, which include the store's append and commit) and of the tracker thread (fetch,
# fold, commit). Instruction counts are deterministic within about 1 % and independent of the
# machine's load, unlike wall time. Never gates CI.
#   ROWS=2000000 bash bench/batch_cost.sh build/base/ferry build/t/ferry
# Needs valgrind (callgrind_annotate) and jq. Binaries built with symbols (the default
# RelWithDebInfo) name their static functions.
set -euo pipefail
ROWS=${ROWS:-2000000}
[ $# -ge 1 ] || { echo "usage: bench/batch_cost.sh FERRY_BIN..." >&2; exit 2; }
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
pipeline() { # pipeline FILE SINK_YAML
  cat > "$1" <<YAML
version: 1
name: batchcost
source: {type: sample, rows: $ROWS, seed: 42, resources: [{table: orders}]}
sink: $2
YAML
}
pipeline "$W/null.yaml" "{type: null}"
pipeline "$W/sqlite.yaml" "{type: sqlite, path: $W/sink.db}"

# incl FILE FUNCTION -> inclusive instructions of FUNCTION (0 when absent). A function can
# be listed twice (once more under the file it was inlined from): the largest count is its own.
incl() {
  callgrind_annotate --inclusive=yes --auto=no --threshold=100 "$1" 2>/dev/null |
    awk -v f="$2" '{ n = $1; gsub(",", "", n) }
      $0 ~ ("[:* ]" f "( |$|\\[)") && n ~ /^[0-9]+$/ && n + 0 > m { m = n + 0 } END { print m + 0 }'
}

echo "| binary | pipeline | instructions (M) | batches | per batch | per row |" \
  "publish (M) | tracker (M) |"
echo "|---|---|---|---|---|---|---|---|"
for bin in "$@"; do
  for p in null sqlite; do
    rm -f "$W"/sink.db* "$W"/state.db*
    cg="$W/cg.out"
    valgrind --tool=callgrind --separate-threads=no --callgrind-out-file="$cg" \
      "$bin" run "$W/$p.yaml" --json --fresh --state "$W/state.db" > "$W/out" 2> "$W/vg.err"
    total=$(grep -o 'Collected : [0-9]*' "$W/vg.err" | grep -o '[0-9]*$')
    batches=$(jq -r .batches < "$W/out")
    rows=$(jq -r .rows < "$W/out")
    [ "$rows" = "$ROWS" ] || { echo "batch_cost: $bin $p wrote $rows rows, not $ROWS" >&2; exit 1; }
    pub=$(( $(incl "$cg" inproc_publish) + $(incl "$cg" inproc_publish_n) ))
    trk=$(incl "$cg" tracker_main)
    awk -v b="$bin" -v p="$p" -v t="$total" -v n="$batches" -v r="$rows" -v pu="$pub" \
      -v tr="$trk" 'BEGIN { f = "| %s | sample -> %s | %.1f | %d | %.0f | %.1f | %.1f | %.1f |\n"
        printf f, b, p, t / 1e6, n, t / n, t / r, pu / 1e6, tr / 1e6 }'
    [ -z "${KEEP:-}" ] || cp "$cg" "$KEEP.$(basename "$bin").$p"
  done
done
