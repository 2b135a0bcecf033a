#!/usr/bin/env bash
# Two state files, one destination: the destination's own checkpoints belong to the state
# file that wrote them. A second state file (whose run ids also start at 1) must not read
# them as its own, or it would skip rows and report success with nothing copied.
. "$(dirname "$0")/lib.sh"
write_pipeline p.yaml shared 3000 shared.db append full "" "" "batch: {rows: 500}"
expect_exit 0 ferry run p.yaml --state a.db --json
[ "$(json_field "$OUT" .run_id)" = 1 ] && [ "$(json_field "$OUT" .rows)" = 3000 ] || fail "first state: $OUT"
expect_exit 0 ferry run p.yaml --state b.db --json
[ "$(json_field "$OUT" .run_id)" = 1 ] || fail "second state starts at run 1: $OUT"
[ "$(json_field "$OUT" .rows)" = 3000 ] || fail "the second state file copied everything again: $OUT"
[ "$(q shared.db 'SELECT count(*) FROM orders')" = 6000 ] || fail "append holds both copies"
pass "a second state file does not adopt another's destination checkpoints"

# Within one state file a crashed run still resumes from the destination's checkpoint.
write_pipeline r.yaml resume 3000 r.db append full "" "" "batch: {rows: 500}"
FERRY_FAILPOINTS=after_sink_apply=crash@3 expect_exit 137 ferry run r.yaml --state a.db
expect_exit 0 ferry run r.yaml --state a.db --json
[ "$(json_field "$OUT" .resumed)" = true ] || fail "resumed: $OUT"
[ "$(q r.db 'SELECT count(*), count(DISTINCT id) FROM orders')" = "3000|3000" ] || fail "exactly once after resume"
pass "same state file: resumed exactly once"
