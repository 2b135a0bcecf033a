#!/usr/bin/env bash
# labels: asan smoke
# sample -> sqlite full copies: every row arrives once, batching does not change the data,
# sqlite -> sqlite round-trips every type exactly, and the run's events tell the story.
. "$(dirname "$0")/lib.sh"

cat > p1.yaml <<YAML
version: 1
name: full1
source:
  type: sample
  rows: 20000
  seed: 7
  resources:
    - table: orders
    - table: users
sink:
  type: sqlite
  path: a.db
batch: {rows: 3000, queue: 2}
YAML
expect_exit 0 ferry run p1.yaml --json
[ "$(json_field "$OUT" .state)" = completed ] || fail "state: $OUT"
[ "$(json_field "$OUT" .rows)" = 40000 ] || fail "rows moved: $OUT"
run1=$(json_field "$OUT" .run_id)
[ "$(q a.db 'SELECT count(*), count(DISTINCT id), min(id), max(id) FROM orders')" = "20000|20000|1|20000" ] \
  || fail "orders ids"
[ "$(q a.db 'SELECT count(*), count(DISTINCT id) FROM users')" = "20000|20000" ] || fail "users ids"
# Values as an independent reader sees them: exact decimals, nulls, timestamps.
[ "$(q a.db "SELECT count(*) FROM orders WHERE amount NOT GLOB '*[0-9].[0-9][0-9]'")" = 0 ] || fail "amount scale"
[ "$(q a.db "SELECT count(*) > 1000 FROM orders WHERE discount IS NULL")" = 1 ] || fail "discount nulls"
[ "$(q a.db "SELECT count(*) FROM orders WHERE updated_at IS NULL OR created_at IS NULL")" = 0 ] || fail "timestamps"
[ "$(q a.db "SELECT typeof(avatar) FROM users WHERE avatar IS NOT NULL LIMIT 1")" = blob ] || fail "binary as blob"
pass "sample -> sqlite: 2 tables, 40000 rows, ids exact"

# Other batch settings (a tuning knob: same pipeline version) give the same tables.
sed -e 's/name: full1/name: full2/' -e 's/a.db/b.db/' -e 's/batch: .*/batch: {rows: 777, bytes: 64KiB, queue: 1, flush_after: 10ms}/' p1.yaml > p2.yaml
expect_exit 0 ferry run p2.yaml
same_table a.db b.db orders || fail "orders differ with other batch sizes"
same_table a.db b.db users || fail "users differ with other batch sizes"
pass "batch size does not change the data"

# sqlite -> sqlite round trip of every type. a.db's tables were written in append mode,
# which declares no primary key (a log may hold a key twice): the reader names the key, or
# the source would key them on their rowid and copy it along as a column.
cat > p3.yaml <<YAML
version: 1
name: roundtrip
source:
  type: sqlite
  path: a.db
  resources:
    - {table: orders, key: [id]}
    - {table: users, key: [id]}
sink:
  type: sqlite
  path: c.db
batch: {rows: 4096}
YAML
expect_exit 0 ferry run p3.yaml
[ "$(q c.db "SELECT count(*) FROM pragma_table_info('orders') WHERE name = 'rowid'")" = 0 ] \
  || fail "the round trip added a rowid column"
same_table a.db c.db orders || fail "sqlite round trip orders"
same_table a.db c.db users || fail "sqlite round trip users"
pass "sqlite -> sqlite round trip is exact"

# The run's record: state, counts, integrity, events.
expect_exit 0 ferry show "$run1" --json
[ "$(json_field "$OUT" .state)" = completed ] || fail "show state"
[ "$(json_field "$OUT" .rows)" = 40000 ] || fail "show rows: $OUT"
batches=$(json_field "$OUT" .batches)
[ "$(json_field "$OUT" .verified)" = "$batches" ] || fail "every batch verified: $OUT"
[ "$(json_field "$OUT" .diverged)" = 0 ] || fail "no divergence"
expect_exit 0 ferry events "$run1" --json
for t in run.started resource.started batch.buffered batch.written batch.integrity_verified sink.committed resource.completed run.completed; do
  printf '%s\n' "$OUT" | jq -r .type | grep -qx "$t" || fail "event $t missing"
done
[ "$(printf '%s\n' "$OUT" | jq -r 'select(.type=="batch.written") | .payload.rows' | paste -sd+ | bc)" = 40000 ] \
  || fail "batch.written rows add up"
expect_exit 0 ferry runs --json
[ "$(printf '%s' "$OUT" | jq length)" = 3 ] || fail "three runs listed"
pass "show, events, runs"
