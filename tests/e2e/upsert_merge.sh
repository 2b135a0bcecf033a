#!/usr/bin/env bash
# labels: asan
# upsert converges when repeated; replace swaps whole tables; policy refusals are clear.
. "$(dirname "$0")/lib.sh"

write_pipeline up.yaml up 6000 up.db upsert full "" "" "batch: {rows: 1000}"
expect_exit 0 ferry run up.yaml
expect_exit 0 ferry run up.yaml --fresh
[ "$(q up.db 'SELECT count(*), count(DISTINCT id) FROM orders')" = "6000|6000" ] || fail "upsert twice"
write_pipeline ref.yaml ref 6000 ref.db append
expect_exit 0 ferry run ref.yaml
same_table ref.db up.db orders || fail "upsert equals source"
pass "upsert repeated converges"

# replace: a second run with more rows replaces the table whole.
write_pipeline rp.yaml rp 3000 rp.db replace
expect_exit 0 ferry run rp.yaml
write_pipeline rp.yaml rp 4500 rp.db replace
expect_exit 0 ferry run rp.yaml
[ "$(q rp.db 'SELECT count(*), count(DISTINCT id) FROM orders')" = "4500|4500" ] || fail "replace"
[ "$(q rp.db "SELECT count(*) FROM sqlite_master WHERE name LIKE '%staging%'")" = 0 ] || fail "staging left behind"
pass "replace swaps the table"

# replace is atomic: a failure before commit keeps the previous complete table.
write_pipeline rp2.yaml rp 9000 rp.db replace full "" "" "batch: {rows: 1000}"
FERRY_FAILPOINTS=before_sink_commit=error expect_exit 1 ferry run rp2.yaml
[ "$(q rp.db 'SELECT count(*) FROM orders')" = 4500 ] || fail "replace not atomic"
FERRY_FAILPOINTS=after_sink_apply=crash@2 expect_exit 137 ferry run rp2.yaml --fresh
[ "$(q rp.db 'SELECT count(*) FROM orders')" = 4500 ] || fail "replace not atomic after a crash"
pass "replace is atomic (error and crash before commit keep the old table)"

# Policy: replace with incremental is refused before anything moves.
write_pipeline bad.yaml bad 100 bad.db replace incremental
expect_exit 3 ferry run bad.yaml
printf '%s' "$OUT" | grep -q "replace" || fail "policy message: $OUT"
[ ! -e bad.db ] || [ "$(q bad.db "SELECT count(*) FROM sqlite_master WHERE name='orders'")" = 0 ] || fail "policy refusal wrote a table"
pass "policy refusal before any data moves: $OUT"
