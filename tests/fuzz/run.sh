#!/usr/bin/env bash
# tests/fuzz/run.sh SECONDS [TARGET...] - runs each libFuzzer target for SECONDS (default 60).
# Run from a FERRY_FUZZ=ON build folder (the `fuzz` target does: cmake --preset fuzz &&
# cmake --build --preset fuzz --target fuzz), or set FUZZ_BUILD. New inputs go to
# fuzz-work/<target>/ (the repo's corpus is read, not written); crashes to
# fuzz-artifacts/<target>/. Add a crasher to tests/fuzz/corpus/<target>/ once it is fixed, so
# that every build replays it (CTest fuzz/<target>). Exits non-zero if a target crashed.
set -uo pipefail
SECONDS_EACH=${1:-60}
shift || true
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${FUZZ_BUILD:-$(pwd)}
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in "$SRC"/tests/fuzz/fuzz_*.c; do targets+=("$(basename "$f" .c)"); done
fi
failed=0
for t in "${targets[@]}"; do
  bin="$BUILD/$t"
  [ -x "$bin" ] || { echo "$t: $bin not built (configure with the fuzz preset)" >&2; failed=1; continue; }
  mkdir -p "$BUILD/fuzz-work/$t" "$BUILD/fuzz-artifacts/$t"
  dict=()
  [ -f "$SRC/tests/fuzz/$t.dict" ] && dict=(-dict="$SRC/tests/fuzz/$t.dict")
  echo "== $t: $SECONDS_EACH s"
  ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} \
    "$bin" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
      -print_final_stats=1 -artifact_prefix="$BUILD/fuzz-artifacts/$t/" "${dict[@]}" \
      "$BUILD/fuzz-work/$t" "$SRC/tests/fuzz/corpus/$t" > "$BUILD/fuzz-artifacts/$t.log" 2>&1
  rc=$?
  grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb|cov: " "$BUILD/fuzz-artifacts/$t.log" | tail -n 3
  if [ $rc -ne 0 ]; then
    echo "$t: FAILED (exit $rc), see $BUILD/fuzz-artifacts/$t.log and $BUILD/fuzz-artifacts/$t/" >&2
    failed=1
  fi
done
exit $failed
