#!/usr/bin/env bash
# labels: asan
# parquet_faults: files_faults.sh's crash and kill rows for the files sink writing Parquet,
# read back by DuckDB (not ferry's reader) from the parts the run manifests list, each part's
# size and CRC32-C checked against its manifest entry (Python, independent of ferry):
#   1. crash_before_sink_commit (before_sink_commit=crash): no manifest, no part under its
#      final name; the re-run publishes every row once, whole rows equal to an unfaulted copy;
#   2. crash_after_sink_commit: the committed manifest is complete; the re-run leaves every
#      row present, duplicates only across attempts (each attempt's parts duplicate-free);
#   3. kill -9 at seeded random moments until the run completes: the same oracle.
. "$(dirname "$0")/../e2e/lib.sh"
DUCK="$FERRY_SRC/tests/tools/duckdb_exec.mjs"
command -v node > /dev/null || fail "node is needed (scripts/install-deps.sh)"
SEED=${SEED:-${FERRY_SEED:-$RANDOM}}
echo "seed $SEED (SEED=$SEED replays it)"
RANDOM=$SEED
ROWS=60000

pipeline() { # FILE NAME DIR
  cat > "$1" <<EOF
version: 1
name: $2
source: {type: sample, rows: $ROWS, seed: 7, resources: [{table: orders, mode: full}]}
sink: {type: files, path: $T/$3, format: parquet}
batch: {rows: 2000}
EOF
}

# parts DIR: the parts every manifest lists, checked (size, CRC32-C); prints "ATTEMPT PATH"
parts() {
  local dir=$1 m key bytes crc
  for m in "$T/$dir"/_runs/*/_manifest.json; do
    [ -e "$m" ] || continue
    while read -r key bytes crc; do
      [ "$(stat -c %s "$T/$dir/$key")" = "$bytes" ] || fail "$key: size differs from the manifest"
      [ "$(crc32c "$T/$dir/$key")" = "$crc" ] || fail "$key: CRC32-C differs from the manifest"
      echo "$(basename "$key" | sed -E 's/^part-[0-9]+-([0-9]+)-.*/\1/') $T/$dir/$key"
    done < <(jq -r '.files[] | "\(.path) \(.bytes) \(.crc32c)"' "$m")
  done
}
manifests() { find "$T/$1/_runs" -name _manifest.json 2>/dev/null | wc -l; }
duck_list() { awk '{printf "%s\x27%s\x27", (NR>1?",":""), $2}'; }

# check DIR LABEL: every reference row present (whole rows), no row twice within an attempt;
# prints the number of duplicate rows across attempts
check() {
  local dir=$1 label=$2 list a within missing extra total
  parts "$dir" > parts.txt
  [ -s parts.txt ] || fail "$label: nothing published"
  for a in $(cut -d' ' -f1 parts.txt | sort -u); do
    list=$(awk -v a="$a" '$1 == a' parts.txt | duck_list)
    within=$(nodetool "$DUCK" "SELECT count(*) - count(DISTINCT id) FROM read_parquet([$list])" | jq -r '.[0]')
    [ "$within" = 0 ] || fail "$label: $within rows twice within attempt $a"
  done
  list=$(duck_list < parts.txt)
  missing=$(nodetool "$DUCK" "SELECT count(*) FROM (SELECT * FROM read_parquet('$T/ref/orders/*.parquet') EXCEPT SELECT * FROM read_parquet([$list]))" | jq -r '.[0]')
  extra=$(nodetool "$DUCK" "SELECT count(*) FROM (SELECT * FROM read_parquet([$list]) EXCEPT SELECT * FROM read_parquet('$T/ref/orders/*.parquet'))" | jq -r '.[0]')
  [ "$missing" = 0 ] && [ "$extra" = 0 ] || fail "$label: $missing reference rows missing, $extra foreign rows"
  total=$(nodetool "$DUCK" "SELECT count(*) FROM read_parquet([$list])" | jq -r '.[0]')
  echo $((total - ROWS))
}

pipeline ref.yaml ref ref
expect_exit 0 ferry run ref.yaml --quiet
[ "$(nodetool "$DUCK" "SELECT count(*) FROM read_parquet('$T/ref/orders/*.parquet')" | jq -r '.[0]')" = $ROWS ] \
  || fail "the unfaulted copy"

# ---- 1. crash before the commit ---------------------------------------------------------------
pipeline b.yaml b b
expect_exit 137 env FERRY_FAILPOINTS=before_sink_commit=crash "$FERRY_BIN" run b.yaml --quiet
[ "$(manifests b)" = 0 ] || fail "crash before the commit: a manifest was published"
[ -z "$(find "$T/b" -name 'part-*' 2>/dev/null)" ] || fail "crash before the commit: a part under its final name"
expect_exit 0 ferry run b.yaml --quiet
[ "$(manifests b)" = 1 ] || fail "crash before the commit: $(manifests b) manifests after the re-run"
[ "$(check b "crash before the commit")" = 0 ] || fail "crash before the commit: duplicates after the re-run"
pass "parquet crash_before_sink_commit: nothing published, re-run publishes every row once (DuckDB, CRC32-C)"

# ---- 2. crash after the commit ----------------------------------------------------------------
pipeline a.yaml a a
expect_exit 137 env FERRY_FAILPOINTS=after_sink_commit=crash "$FERRY_BIN" run a.yaml --quiet
[ "$(manifests a)" = 1 ] || fail "crash after the commit: the commit did not publish its manifest"
expect_exit 0 ferry run a.yaml --quiet
d=$(check a "crash after the commit")
pass "parquet crash_after_sink_commit: every row present, $d duplicate rows, all across attempts"

# ---- 3. kill -9 at random moments ----------------------------------------------------------------
pipeline k.yaml k k
kills=0
for attempt in 1 2 3 4; do
  FERRY_FAILPOINTS="after_sink_apply=sleep(20)" "$FERRY_BIN" run k.yaml --quiet > klog 2>&1 &
  pid=$!
  sleep "$(printf '0.%03d' $((50 + RANDOM % 700)))"
  kill -9 $pid 2>/dev/null && kills=$((kills + 1))
  wait $pid 2>/dev/null || true
  [ "$(ferry runs --pipeline k --json | jq -r '.[0].state')" = completed ] && break
done
[ "$(ferry runs --pipeline k --json | jq -r '.[0].state')" = completed ] || expect_exit 0 ferry run k.yaml --quiet
d=$(check k "kill -9 (seed $SEED)")
pass "parquet kill -9 schedule (seed $SEED, $kills kills): every row present, $d duplicate rows, all across attempts"
