#!/usr/bin/env bash
# SIGINT once pauses cleanly (drain, commit, state paused, exit 5) and the next `ferry run`
# resumes; SIGINT twice cancels; `ferry pause RUN` from another process pauses too.
. "$(dirname "$0")/lib.sh"
# Each batch waits 20 ms after its apply so that signals land mid-run on any machine.
SLOW="after_sink_apply=sleep(20)"
ROWS=400000
write_pipeline ref.yaml ref $ROWS ref.db append full "" "" "batch: {rows: 5000}"
expect_exit 0 ferry run ref.yaml

for durability in per_apply at_commit; do
  db="p-$durability.db"
  write_pipeline p.yaml "pause-$durability" $ROWS "$db" append full "" "  durability: $durability" "batch: {rows: 5000}"
  FERRY_FAILPOINTS=$SLOW "$FERRY_BIN" run p.yaml > log 2>&1 &
  pid=$!
  wait_run_rows "pause-$durability" || fail "the run never wrote"
  kill -INT "$pid"
  set +e; wait "$pid"; rc=$?; set -e
  [ $rc = 5 ] || fail "first SIGINT should pause (exit 5), got $rc: $(cat log)"
  run=$(ferry runs --pipeline "pause-$durability" --json | jq -r '.[0].id')
  [ "$(ferry show "$run" --json | jq -r .state)" = paused ] || fail "state paused"
  partial=$(q "$db" 'SELECT count(*) FROM orders')
  [ "$partial" -gt 0 ] && [ "$partial" -lt $ROWS ] || fail "paused with $partial rows"
  expect_exit 0 ferry run p.yaml --json
  [ "$(json_field "$OUT" .resumed)" = true ] || fail "the paused run is resumed: $OUT"
  [ "$(json_field "$OUT" .run_id)" = "$run" ] || fail "same logical run"
  same_table ref.db "$db" orders || fail "pause + resume ($durability) differs"
  pass "pause by SIGINT and resume ($durability): $partial rows before the pause, exact after"
done

# ferry pause RUN from another process.
write_pipeline p2.yaml pause-cli $ROWS cli.db append full "" "" "batch: {rows: 5000}"
FERRY_FAILPOINTS=$SLOW "$FERRY_BIN" run p2.yaml > log 2>&1 &
pid=$!
wait_run_rows pause-cli || fail "the run never wrote"
run=$(ferry runs --pipeline pause-cli --json | jq -r '.[0].id')
expect_exit 0 ferry pause "$run"
set +e; wait "$pid"; rc=$?; set -e
[ $rc = 5 ] || fail "ferry pause: exit $rc: $(cat log)"
ferry events "$run" --json | jq -r .type | grep -qx run.pause_requested || fail "pause_requested event"
expect_exit 0 ferry resume "$run"
same_table ref.db cli.db orders || fail "ferry pause + ferry resume differs"
pass "ferry pause RUN, ferry resume RUN"

# Two signals: cancel; the run is canceled and a new run starts afresh.
write_pipeline p3.yaml cancel $ROWS c.db upsert full "" "" "batch: {rows: 5000}"
FERRY_FAILPOINTS=$SLOW "$FERRY_BIN" run p3.yaml > log 2>&1 &
pid=$!
wait_run_rows cancel || fail "the run never wrote"
kill -INT "$pid"; kill -INT "$pid"
set +e; wait "$pid"; rc=$?; set -e
[ $rc = 6 ] || [ $rc = 5 ] || fail "second SIGINT cancels (exit 6), got $rc: $(cat log)"
expect_exit 0 ferry run p3.yaml
same_table ref.db c.db orders || fail "after cancel, a new run converges"
pass "second SIGINT cancels"

# A pause that arrives before any table starts: the run pauses (exit 5), never reads as
# completed, and a replace publishes nothing until the resumed run has copied every row.
write_pipeline small.yaml early 3000 early.db append full "" "" "batch: {rows: 500}"
expect_exit 0 ferry run small.yaml
write_pipeline p4.yaml early $ROWS early.db replace full "" "" "batch: {rows: 5000}"
FERRY_FAILPOINTS='before_copy_phase=sleep(5000)' "$FERRY_BIN" run p4.yaml > log 2>&1 &
pid=$!
wait_for_log log "of pipeline early started" "$pid" 400 || true
sleep 0.5
kill -INT "$pid"
set +e; wait "$pid"; rc=$?; set -e
[ $rc = 5 ] || fail "a pause before the copy phase should pause (exit 5), got $rc: $(cat log)"
run=$(ferry runs --pipeline early --json | jq -r '.[0].id')
[ "$(ferry show "$run" --json | jq -r .state)" = paused ] || fail "state paused: $(cat log)"
[ "$(q early.db 'SELECT count(*) FROM orders')" = 3000 ] || fail "the paused replace changed the table"
expect_exit 0 ferry run p4.yaml --json
[ "$(json_field "$OUT" .run_id)" = "$run" ] || fail "the paused run is the one resumed"
same_table ref.db early.db orders || fail "the resumed replace differs from the source"
pass "a pause before any table started: paused (exit 5), the table untouched, resumed exactly"
