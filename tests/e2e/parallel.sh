#!/usr/bin/env bash
# `parallelism: N` with the sample and sqlite sources: several readers over the shards give
# the same table as one reader; parallelism is tuning (same pipeline version); a run that
# crashes mid-copy with two readers resumes to the same table, no duplicates.
. "$(dirname "$0")/lib.sh"

write_pipeline one.yaml par-one 20000 "$T/one.db" append full "  shards: 4" "" "batch: {rows: 500}"
expect_exit 0 ferry run one.yaml --json
[ "$(json_field "$OUT" .rows)" = 20000 ] || fail "one reader: $OUT"

write_pipeline two.yaml par-two 20000 "$T/two.db" append full "  shards: 4
  parallelism: 2" "" "batch: {rows: 500}"
expect_exit 0 ferry run two.yaml --json
[ "$(json_field "$OUT" .rows)" = 20000 ] || fail "two readers: $OUT"
same_table one.db two.db orders || fail "sample, parallelism 2 over 4 shards: tables differ"
pass "sample -> sqlite, parallelism 2 over 4 shards: the same table as one reader"

v2=$(ferry check two.yaml 2>&1 | grep -o 'version [0-9a-f]*')
sed -e '/parallelism: 2/d' two.yaml > two1.yaml
v1=$(ferry check two1.yaml 2>&1 | grep -o 'version [0-9a-f]*')
[ -n "$v1" ] && [ "$v1" = "$v2" ] || fail "parallelism changed the version: '$v1' vs '$v2'"
write_pipeline bad.yaml par-bad 10 "$T/bad.db" append full "  parallelism: 65"
expect_exit 2 ferry run bad.yaml
grep -q "source.parallelism (line 7): must be between 1 and 64" <<<"$OUT" || fail "parallelism 65 is refused naming the key: $OUT"
pass "parallelism is tuning (same version) and bounded to 1..64"

# sqlite source, 3 shards, 3 readers (each with its own connection to the file).
cat > sq.yaml <<EOF
version: 1
name: par-sqlite
source:
  type: sqlite
  path: $T/one.db
  shards: 3
  parallelism: 3
  resources:
    - {table: orders, key: [id]}
sink:
  type: sqlite
  path: $T/three.db
  write: append
batch: {rows: 700}
EOF
expect_exit 0 ferry check sq.yaml
grep -q "3 shards" <<<"$OUT" || fail "sqlite source: 3 shards planned: $OUT"
expect_exit 0 ferry run sq.yaml --json
[ "$(json_field "$OUT" .rows)" = 20000 ] || fail "sqlite source, 3 readers: $OUT"
same_table one.db three.db orders || fail "sqlite -> sqlite, parallelism 3: tables differ"
pass "sqlite -> sqlite, parallelism 3 over 3 shards: the same table"

# A crash in the middle of a two-reader copy (after the 9th batch is applied), then resume.
write_pipeline crash.yaml par-crash 20000 "$T/crash.db" append full "  shards: 4
  parallelism: 2" "" "batch: {rows: 500}"
set +e
FERRY_FAILPOINTS="after_sink_apply=crash@9" "$FERRY_BIN" run crash.yaml --quiet > crash.log 2>&1
rc=$?
set -e
[ $rc = 137 ] || fail "the failpoint crash: exit $rc $(cat crash.log)"
partial=$(q crash.db "SELECT count(*) FROM orders")
[ "$partial" -gt 0 ] && [ "$partial" -lt 20000 ] || fail "crash left $partial rows"
expect_exit 0 ferry run crash.yaml --json
[ "$(json_field "$OUT" .resumed)" = true ] || fail "the crashed run is resumed: $OUT"
same_table one.db crash.db orders || fail "parallel crash + resume: tables differ"
pass "two readers crashed at $partial rows and resumed: the same table, no duplicates"
