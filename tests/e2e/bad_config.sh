#!/usr/bin/env bash
# Bad input gets one clear message naming the key (and line), file or table, a non-zero
# exit, and nothing moved: no destination written, no run recorded.
. "$(dirname "$0")/lib.sh"

check() { # check EXIT PATTERN YAML
  local want=$1 pattern=$2
  printf '%s\n' "$3" > bad.yaml
  expect_exit "$want" ferry run bad.yaml
  printf '%s' "$OUT" | grep -q -- "$pattern" || fail "message should mention '$pattern': $OUT"
  [ "$(printf '%s\n' "$OUT" | grep -c 'error')" -le 1 ] || fail "one message, got: $OUT"
  [ ! -e out.db ] || fail "destination written for a bad config: $OUT"
  echo "ok - $(printf '%s' "$OUT" | head -n 1)"
}

check 2 "name" 'version: 1
source: {type: sample, rows: 10, resources: [{table: orders}]}
sink: {type: sqlite, path: out.db}'
check 2 "version" 'version: 2
name: x
source: {type: sample, rows: 10, resources: [{table: orders}]}
sink: {type: sqlite, path: out.db}'
check 2 "batch.rows (line 5)" 'version: 1
name: x
source: {type: sample, rows: 10, resources: [{table: orders}]}
sink: {type: sqlite, path: out.db}
batch: {rows: lots}'
check 2 "source.rowz" 'version: 1
name: x
source: {type: sample, rowz: 10, rows: 5, resources: [{table: orders}]}
sink: {type: sqlite, path: out.db}'
check 2 "colour" 'version: 1
name: x
colour: blue
source: {type: sample, rows: 10, resources: [{table: orders}]}
sink: {type: sqlite, path: out.db}'
check 2 "sink.path" 'version: 1
name: x
source: {type: sample, rows: 10, resources: [{table: orders}]}
sink: {type: sqlite}'
check 2 "nosuchdb" 'version: 1
name: x
source: {type: nosuchdb, resources: [{table: orders}]}
sink: {type: sqlite, path: out.db}'
check 2 "FERRY_TEST_MISSING_SECRET" 'version: 1
name: x
source: {type: sample, rows: 10, resources: [{table: orders}]}
sink: {type: sqlite, path: out.db}
transforms: [{resource: orders, column: note, hash: hmac_sha256, key: "env:FERRY_TEST_MISSING_SECRET"}]'
check 2 "cursor" 'version: 1
name: x
source: {type: sample, rows: 10, resources: [{table: orders, mode: incremental}]}
sink: {type: sqlite, path: out.db}'
check 7 "nosuchtable" 'version: 1
name: x
source: {type: sample, rows: 10, resources: [{table: nosuchtable}]}
sink: {type: sqlite, path: out.db}'
check 7 "missing.db" 'version: 1
name: x
source: {type: sqlite, path: missing.db, resources: [{table: t}]}
sink: {type: sqlite, path: out.db}'
check 2 "nocolumn" 'version: 1
name: x
source: {type: sample, rows: 10, resources: [{table: orders}]}
sink: {type: sqlite, path: out.db}
transforms: [{resource: orders, drop: [nocolumn]}]'
# A view has no key (a rowid table would be keyed on its rowid).
sqlite3 nokey.db "CREATE TABLE t0 (a TEXT, b INTEGER); INSERT INTO t0 VALUES ('x', 1); CREATE VIEW t AS SELECT a, b FROM t0;"
check 3 "key" 'version: 1
name: x
source: {type: sqlite, path: nokey.db, resources: [{table: t}]}
sink: {type: sqlite, path: out.db, write: upsert}'
expect_exit 2 ferry run does-not-exist.yaml
printf '%s' "$OUT" | grep -q "does-not-exist.yaml" || fail "missing file named: $OUT"
printf 'version: 1\nname: [unclosed\n' > broken.yaml
expect_exit 2 ferry run broken.yaml
printf '%s' "$OUT" | grep -q "broken.yaml" || fail "YAML syntax error names the file: $OUT"
pass "missing and malformed files"

# A secret that resolves is never printed, even when the run fails.
export FERRY_TEST_CANARY="canary-$RANDOM-secret"
printf 'version: 1\nname: s\nsource: {type: sample, rows: 100, resources: [{table: orders}]}\nsink: {type: sqlite, path: out2.db}\ntransforms: [{resource: orders, column: note, hash: hmac_sha256, key: "env:FERRY_TEST_CANARY"}]\n' > s.yaml
FERRY_FAILPOINTS=before_sink_commit=error expect_exit 1 ferry run s.yaml
printf '%s' "$OUT" | grep -q "$FERRY_TEST_CANARY" && fail "secret in output"
ferry events "$(ferry runs --json | jq -r '.[0].id')" --json | grep -q "$FERRY_TEST_CANARY" && fail "secret in events"
grep -a -q "$FERRY_TEST_CANARY" "$FERRY_STATE"* && fail "secret in the state database"
[ "$(ferry runs --json | jq length)" = 1 ] || fail "only the good config recorded a run"
pass "secrets stay out of output, events and state"
