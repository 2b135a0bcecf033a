#!/usr/bin/env bash
# labels: asan
# Incremental runs move only new and changed rows; upsert converges to the source; a tie
# on the cursor value across batch boundaries skips and doubles nothing.
. "$(dirname "$0")/lib.sh"

mk() { # mk FILE ROWS CLOCK WRITE DB
  cat > "$1" <<YAML
version: 1
name: inc-$4
source:
  type: sample
  rows: $2
  clock: $3
  seed: 11
  resources:
    - table: orders
      mode: incremental
      cursor: [updated_at]
sink:
  type: sqlite
  path: $5
  write: $4
batch: {rows: 700}
YAML
}
moved() { json_field "$OUT" .rows; }

mk p.yaml 5000 0 upsert inc.db
expect_exit 0 ferry run p.yaml --json
[ "$(moved)" = 5000 ] || fail "first run moves everything: $OUT"
mk p.yaml 8000 0 upsert inc.db
expect_exit 0 ferry run p.yaml --json
[ "$(moved)" = 3000 ] || fail "second run moves exactly the 3000 new rows: $OUT"
[ "$(q inc.db 'SELECT count(*), count(DISTINCT id), max(id) FROM orders')" = "8000|8000|8000" ] || fail "8000 rows"
expect_exit 0 ferry run p.yaml --json
[ "$(moved)" = 0 ] || fail "nothing new, nothing moved: $OUT"
pass "new rows only"

mk p.yaml 8000 1 upsert inc.db
expect_exit 0 ferry run p.yaml --json
changed=$(moved)
[ "$changed" -gt 0 ] && [ "$changed" -lt 2000 ] || fail "clock 1 moves only the changed rows, got $changed"
# Convergence: the incremental destination equals a full copy of the source at clock 1.
cat > full.yaml <<YAML
version: 1
name: inc-reference
source: {type: sample, rows: 8000, clock: 1, seed: 11, resources: [{table: orders}]}
sink: {type: sqlite, path: ref.db}
YAML
expect_exit 0 ferry run full.yaml
same_table ref.db inc.db orders || fail "incremental upsert does not equal the source"
pass "changed rows only ($changed), upsert converges to the source"

# Append mode keeps every version: the change log has each changed row twice.
mk a.yaml 8000 0 append app.db
expect_exit 0 ferry run a.yaml
mk a.yaml 8000 1 append app.db
expect_exit 0 ferry run a.yaml --json
[ "$(moved)" = "$changed" ] || fail "append moves the same changed rows"
[ "$(q app.db 'SELECT count(*) FROM orders')" = $((8000 + changed)) ] || fail "append keeps versions"
pass "append keeps every version"

expect_exit 0 ferry checkpoints --json
printf '%s' "$OUT" | jq -e '[.[] | select(.pipeline=="inc-upsert")] | length == 1' >/dev/null \
  || fail "one route checkpoint for inc-upsert: $OUT"
pass "route checkpoint listed"

# Ties: 10 distinct cursor values over 10,000 rows, batches of 333 rows.
sqlite3 src.db <<'SQL'
CREATE TABLE items (id INTEGER PRIMARY KEY, v TEXT, ts TIMESTAMP NOT NULL);
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 10000)
INSERT INTO items SELECT i, 'v' || i, '2024-01-0' || (i % 9 + 1) || ' 00:00:00' FROM n;
SQL
cat > t.yaml <<YAML
version: 1
name: ties
source:
  type: sqlite
  path: src.db
  resources: [{table: items, mode: incremental, cursor: [ts]}]
sink: {type: sqlite, path: ties.db, write: append}
batch: {rows: 333}
YAML
expect_exit 0 ferry run t.yaml --json
[ "$(moved)" = 10000 ] || fail "ties: first run $OUT"
# Late rows sharing the current maximum cursor value, with higher keys, plus newer ones.
sqlite3 src.db "WITH RECURSIVE n(i) AS (SELECT 10001 UNION ALL SELECT i + 1 FROM n WHERE i < 10500)
  INSERT INTO items SELECT i, 'late' || i, CASE WHEN i % 2 = 0 THEN '2024-01-09 00:00:00' ELSE '2024-01-10 00:00:00' END FROM n;"
expect_exit 0 ferry run t.yaml --json
[ "$(moved)" = 500 ] || fail "ties: the 500 late rows exactly: $OUT"
[ "$(q ties.db 'SELECT count(*), count(DISTINCT id) FROM items')" = "10500|10500" ] || fail "ties: no row skipped or doubled"
pass "cursor ties across batch boundaries: none skipped, none doubled"

# The destination ahead of the state store: an incremental append run crashes after some
# batches committed (with their checkpoint) in the destination; a --fresh run then starts
# after the destination's own checkpoint, so the append log holds every row exactly once.
mk x.yaml 5000 0 append ahead.db
FERRY_FAILPOINTS=after_sink_apply=crash@3 expect_exit 137 ferry run x.yaml
[ "$(q ahead.db 'SELECT count(*) FROM orders')" = 2100 ] || fail "three batches of 700 before the crash"
expect_exit 0 ferry run x.yaml --fresh --json
[ "$(moved)" = 2900 ] || fail "the fresh run continues after the destination's checkpoint: $OUT"
[ "$(q ahead.db 'SELECT count(*), count(DISTINCT id) FROM orders')" = "5000|5000" ] || fail "append log exact"
pass "destination ahead of the store: continued after its checkpoint, no duplicate"
