#!/usr/bin/env bash
# tests/e2e/shared_s3.sh - the shared S3 front (tests/fixture.sh s3, docs/internals/testing.md)
# on one of its own: two tests on it at once get different fresh buckets on the same front
# (none starts a front of its own), an object one puts is not in the other's bucket, a bucket
# named in S3_CONDITIONAL_BUCKETS is flagged for the front; a test's buckets (and flags) are
# removed when it exits, failing or not, the other's stay; the fixture's stop leaves no
# front running, and a fixture start after a killed run stops the front that run left.
. "$FERRY_SRC/tests/e2e/lib.sh"
. "$FERRY_SRC/tests/s3/s3.sh" # s3c
s3_have || fail "node and tests/tools/node_modules (s3rver, aws4) are needed: run scripts/install-deps.sh"
home=$(mktemp -d "${TMPDIR:-/tmp}/ferry-shared.XXXXXX")
fixture() { FERRY_TEST_TMP=$home bash "$FERRY_SRC/tests/fixture.sh" s3 "$@" >/dev/null; }
prev=$(trap -p EXIT); prev=${prev#trap -- \'}; prev=${prev%\' EXIT}
trap "__rc=\$?; fixture stop; (exit \$__rc); $prev" EXIT
fixture start
env_of() { sed -n "s/^$1=//p" "$home/s3-shared.env"; }
port=$(env_of port) data=$(env_of data) flags=$(env_of flags) front=$(env_of pid)
kill -0 "$front" || fail "the fixture's front is not running"

# one "test": the shared front, buckets lake and cond (conditional), an object in lake; it
# prints its variables, then exits with $1 (its EXIT trap removes its buckets)
cat > one.sh <<'SH'
set -euo pipefail
T=$(mktemp -d "${TMPDIR:-/tmp}/one.XXXXXX")
fail() { echo "FAIL: $*" >&2; exit 1; }
. "$FERRY_SRC/tests/s3/s3.sh"
S3_CONDITIONAL_BUCKETS=cond s3_start lake cond
printf 'obj %s\n' "$2" > "$T/obj"
s3c "$S3_BUCKET" put "mine/$2.txt" "$T/obj"
echo "$S3_BUCKET $(s3_bucket cond) $S3_PORT ${#S3_PIDS[@]}"
[ -f "$2.hold" ] && while [ -f "$2.hold" ]; do sleep 0.1; done
exit "$1"
SH
touch a.hold b.hold
FERRY_S3_SHARED=1 FERRY_TEST_TMP=$home bash one.sh 0 a > a.out 2>a.err &
apid=$!
FERRY_S3_SHARED=1 FERRY_TEST_TMP=$home bash one.sh 3 b > b.out 2>b.err &
bpid=$!
for _ in $(seq 1 900); do [ -s a.out ] && [ -s b.out ] && break; sleep 0.1; done
[ -s a.out ] && [ -s b.out ] || fail "the two tests did not start: $(cat a.err b.err)"
read -r alake acond aport apids < a.out
read -r blake bcond bport bpids < b.out
[ "$aport" = "$port" ] && [ "$bport" = "$port" ] && [ "$apids" = 0 ] && [ "$bpids" = 0 ] \
  || fail "a shared test started a front of its own: $(cat a.out b.out) (shared port $port)"
[ "$alake" != "$blake" ] && [ "$acond" != "$bcond" ] && [ "$alake" != "$acond" ] \
  || fail "two tests got the same buckets: $(cat a.out b.out)"
case "$alake" in lake-*) ;; *) fail "bucket lake is named $alake" ;; esac
S3_ENDPOINT="http://127.0.0.1:$port"
[ "$(s3c "$alake" get mine/a.txt)" = "obj a" ] || fail "test a's object is not in its bucket $alake"
[ "$(s3c "$blake" list mine/)" = "mine/b.txt" ] || fail "test b's bucket $blake lists: $(s3c "$blake" list mine/)"
[ -f "$flags/$acond.conditional" ] && [ -f "$flags/$bcond.conditional" ] \
  || fail "the cond buckets are not flagged conditional: $(ls "$flags")"
[ ! -e "$flags/$alake.conditional" ] || fail "bucket lake was flagged conditional"
pass "two tests on the shared S3 front at once: their own buckets ($alake, $blake), no front of their own"

rm b.hold
rc=0; wait $bpid || rc=$?
[ $rc = 3 ] || fail "the second test should exit 3, not $rc: $(cat b.err)"
[ ! -e "$data/$blake" ] && [ ! -e "$data/$bcond" ] && [ ! -e "$flags/$bcond.conditional" ] \
  || fail "the failed test's buckets were left: $(ls "$data" "$flags")"
[ -d "$data/$alake" ] && [ -d "$data/$acond" ] || fail "the running test's buckets were removed"
[ "$(s3c "$alake" get mine/a.txt)" = "obj a" ] || fail "the running test's object is gone"
pass "a failed test's buckets and flags are removed; the other test's stay"

rm a.hold
wait $apid || fail "the first test failed: $(cat a.err)"
[ -z "$(ls -A "$data")" ] && [ -z "$(ls -A "$flags")" ] || fail "buckets left: $(ls -A "$data" "$flags")"
pass "a passing test's buckets and flags are removed"

# a run killed before its cleanup (its owner gone): the next start stops the front it left
dir=$(env_of dir)
fixture start
kill -0 "$front" 2>/dev/null && fail "the next fixture start left the old front running"
[ "$(env_of dir)" != "$dir" ] && [ ! -e "$dir" ] || fail "the old front's folder was kept or reused"
front=$(env_of pid)
fixture stop
kill -0 "$front" 2>/dev/null && fail "the fixture's stop left the front running"
[ -z "$(ls -A "$home")" ] || fail "the fixture's stop left: $(ls -A "$home")"
pass "fixture stop removes the front; a start after a killed run stops the front it left"
