#!/usr/bin/env bash
# Installs dependencies, builds ferry twice (dev, and ASan+UBSan) and runs every test in
# both builds. Exits non-zero on any failure. This is the README's test command and what
# CI (.ci/run) runs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
jobs=$(nproc 2>/dev/null || echo 2)

echo "== static checks (scripts/check-source.sh: banned functions, long functions)"
bash scripts/check-source.sh
echo "== build (dev)"
cmake --preset dev >/dev/null
cmake --build --preset dev -j"$jobs"
echo "== tests (dev)"
ctest --preset dev -j"$jobs"

echo "== build (release: the demo's build must stay warning-free too)"
cmake --preset release >/dev/null
cmake --build --preset release -j"$jobs"

echo "== build (tsan: the pipeline unit tests - queue, flow, bus, tracker, pipeline, store)"
cmake --preset tsan >/dev/null
cmake --build --preset tsan -j"$jobs" --target test_queue test_flow test_bus test_tracker test_pipeline test_store
echo "== tests (tsan)"
ctest --preset tsan -j"$jobs"

echo "== build (asan + ubsan)"
cmake --preset asan >/dev/null
cmake --build --preset asan -j"$jobs"
echo "== tests (asan + ubsan)"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --preset asan -j"$jobs"
