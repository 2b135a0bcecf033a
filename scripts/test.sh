#!/usr/bin/env bash
# scripts/test.sh [--quick] - the README's test command and what CI (.ci/run) runs.
#
# Full (no option): installs the dependencies, then
#   dev build       every test: unit, fuzz corpus replay, end-to-end and fault;
#   release build   the demo's binary must stay warning-free too;
#   TSan build      the threaded modules' unit tests (queue, flow, bus, tracker, pipeline, store)
#                   and `ferry serve` under concurrent API requests (tests/tsan/);
#   ASan+UBSan      the unit tests, the fuzz corpora and the end-to-end/fault tests labelled
#                   `asan` (the memory-heavy paths: decoders, encoders, file formats, HTTP
#                   bodies, every sink once); the rest of the end-to-end tests drive the same
#                   code through the same paths and run in the dev pass only.
# --quick: the dev build with the unit tests, the fuzz replay and the `smoke` end-to-end tests
#   (a developer's loop, a few minutes).
# Tests run in parallel (one more job than cores: they wait on servers and disks), each in its
# own temporary folder (tests/run-test.sh); PostgreSQL clusters are copied from one template
# (and MariaDB data folders) made here instead of an initdb per test; the tests marked
# `# shared:` get a database on one server of each kind instead (CTest fixtures,
# tests/fixture.sh, started and stopped by ctest in each pass). At the end the suite prints its slowest tests and
# its total time, and fails if any server or process it started is still running.
# Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
case "${1:-}" in
  --quick) quick=1 ;;
  "") ;;
  *) echo "usage: scripts/test.sh [--quick]" >&2; exit 2 ;;
esac

suite_start=$(date +%s)
bash scripts/install-deps.sh
jobs=$(nproc 2>/dev/null || echo 2)
test_jobs=$((jobs + 1))

suite_tmp=$(mktemp -d "${TMPDIR:-/tmp}/ferry-suite.XXXXXX")
chmod 755 "$suite_tmp"
export FERRY_TEST_TMP="$suite_tmp"
logs="$suite_tmp/logs"
mkdir -p "$logs"
phase_times=()

# Anything a test started (a server, a worker, a node process) lives under a ferry-t.* folder
# (tests/run-test.sh) and must be gone when the suite ends.
# The shared servers (ferry-pg.shared.*, ferry-my.shared.*, ferry-s3.shared.*) must be gone
# too: their fixture cleanup ran.
leftovers() { pgrep -af 'ferry-t\.|ferry-pg\.|ferry-my\.|ferry-s3\.' | grep -v -e pgrep -e 'scripts/test.sh' || true; }

report() {
  local rc=$?
  set +e
  echo
  echo "== slowest tests"
  cat "$logs"/*.log 2>/dev/null \
    | sed -nE 's/^.*Test +#[0-9]+: ([^ ]+) \.+[^0-9]*([0-9.]+) sec.*$/\2 \1/p' \
    | sort -rn | head -n 15 | awk '{printf "  %8.1f s  %s\n", $1, $2}'
  for p in "${phase_times[@]}"; do echo "  $p"; done
  echo "== total: $(( $(date +%s) - suite_start )) s"
  local left
  left=$(leftovers)
  if [ -n "$left" ]; then
    echo "== FAIL: processes left running by the tests:" >&2
    printf '%s\n' "$left" >&2
    [ "$rc" = 0 ] && rc=1
    # a shared server whose fixture cleanup never ran (ctest killed): stopped all the same
    bash tests/fixture.sh pg stop >/dev/null 2>&1
    bash tests/fixture.sh mysql stop >/dev/null 2>&1
    bash tests/fixture.sh s3 stop >/dev/null 2>&1
  fi
  if [ "$rc" = 0 ]; then rm -rf "$suite_tmp"; else echo "(test folders kept under $suite_tmp)"; fi
  exit "$rc"
}
trap report EXIT

# phase NAME LOG CMD... : runs a build or test step, keeping its output for the report.
phase() {
  local name=$1 log=$2 t0
  shift 2
  t0=$(date +%s)
  echo "== $name"
  "$@" 2>&1 | tee "$logs/$log.log"
  local rc=${PIPESTATUS[0]}
  phase_times+=("$(printf '%-28s %5d s' "$name" $(( $(date +%s) - t0 )))")
  return "$rc"
}

# One initdb for the whole suite; tests copy it (tests/pg/pg.sh).
# shellcheck source=../tests/pg/pg.sh
. tests/pg/pg.sh
pg_template "$suite_tmp/pg-template"
export FERRY_PG_TEMPLATE="$suite_tmp/pg-template"
# One mariadb-install-db likewise (tests/mysql/mysql.sh).
# shellcheck source=../tests/mysql/mysql.sh
. tests/mysql/mysql.sh
my_template "$suite_tmp/my-template"
export FERRY_MY_TEMPLATE="$suite_tmp/my-template"

phase "static checks" static bash scripts/check-source.sh
cmake --preset dev >/dev/null
phase "build (dev)" build-dev cmake --build --preset dev -j"$jobs"
if [ $quick = 1 ]; then
  phase "tests (dev, quick)" dev ctest --preset dev -j"$test_jobs" -L '^(unit|fuzz|smoke)$'
  exit 0
fi
phase "tests (dev)" dev ctest --preset dev -j"$test_jobs"

cmake --preset release >/dev/null
phase "build (release)" build-release cmake --build --preset release -j"$jobs" --target ferry

cmake --preset tsan >/dev/null
phase "build (tsan)" build-tsan cmake --build --preset tsan -j"$jobs" \
  --target test_queue test_flow test_bus test_tracker test_pipeline test_store test_pool ferry
phase "tests (tsan)" tsan ctest --preset tsan -j"$test_jobs"

cmake --preset asan >/dev/null
phase "build (asan + ubsan)" build-asan cmake --build --preset asan -j"$jobs"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  phase "tests (asan + ubsan)" asan ctest --preset asan -j"$test_jobs" -L '^(unit|fuzz|asan)$'
