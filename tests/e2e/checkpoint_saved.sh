#!/usr/bin/env bash
# cursor.checkpoint_saved: every shard's saved resume point is reported on the run's events,
# the last report of each shard equals the run checkpoint in the state store, and the
# run's final event stays its last one.
. "$(dirname "$0")/lib.sh"

check_run() { # check_run NAME: the newest run of pipeline NAME
  local run events shards
  run=$(ferry runs --json | jq -r "[.[] | select(.pipeline == \"$1\")][0].id")
  events=$(ferry events "$run" --json)
  printf '%s\n' "$events" | tail -n 1 | jq -e '.type == "run.completed"' >/dev/null \
    || fail "$1: the final event is not the last: $(printf '%s\n' "$events" | tail -n 1)"
  shards=$(q "$FERRY_STATE" "SELECT count(*) FROM run_checkpoints WHERE run_id = $run")
  [ "$shards" -ge 1 ] || fail "$1: no run checkpoint saved"
  [ "$(printf '%s\n' "$events" | jq -r 'select(.type == "cursor.checkpoint_saved") | .payload.shard' | sort -u | wc -l)" = "$shards" ] \
    || fail "$1: not every shard's checkpoint was reported: $(printf '%s\n' "$events" | grep checkpoint_saved)"
  local shard position reported
  while IFS='|' read -r shard position; do
    reported=$(printf '%s\n' "$events" |
      jq -c "select(.type == \"cursor.checkpoint_saved\" and .payload.shard == $shard) | .payload.position" | tail -n 1)
    [ "$(printf '%s' "$reported" | jq -cS .)" = "$(printf '%s' "$position" | jq -cS .)" ] \
      || fail "$1 shard $shard: reported $reported, saved $position"
  done < <(q "$FERRY_STATE" "SELECT shard, position FROM run_checkpoints WHERE run_id = $run")
}

# Three shards, many batches, a sink durable per apply.
write_pipeline three.yaml three 9000 three.db append full "  shards: 3" "" "batch: {rows: 500}"
expect_exit 0 ferry run three.yaml
[ "$(q three.db 'SELECT count(*), count(DISTINCT id) FROM orders')" = "9000|9000" ] || fail "three: rows"
check_run three
pass "three shards: each shard's last reported checkpoint is the saved one, before run.completed"

# An incremental run: its checkpoints report the cursor key the next run starts after.
write_pipeline inc.yaml inc 3000 inc.db append incremental "" "" "batch: {rows: 700}"
expect_exit 0 ferry run inc.yaml
check_run inc
pass "incremental: the reported checkpoint carries the saved key"

# `ferry events` prints every event of a run, past its pages of 500 (it stopped after the
# first page): 60,000 rows in batches of 100 make well over 500 events.
write_pipeline many.yaml many 60000 many.db append full "" "" "batch: {rows: 100}"
expect_exit 0 ferry run many.yaml
run=$(ferry runs --json | jq -r '[.[] | select(.pipeline == "many")][0].id')
stored=$(q "$FERRY_STATE" "SELECT count(*) FROM events WHERE run_id = $run")
[ "$stored" -gt 1000 ] || fail "many: only $stored events stored (the case needs more than two pages)"
[ "$(ferry events "$run" --json | wc -l)" = "$stored" ] || fail "many: ferry events printed $(ferry events "$run" --json | wc -l) of $stored events"
[ "$(ferry events "$run" | wc -l)" = "$stored" ] || fail "many: ferry events (text) printed fewer than $stored events"
pass "ferry events prints all $stored events of a run, past the first page of 500"
