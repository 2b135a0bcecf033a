#!/usr/bin/env bash
# `ferry schedules add|list|rm` and `ferry runs retry RUN` against a real `ferry serve`
# (and, for runs retry, the local state): schedules created, listed (text and JSON),
# removed, with clear errors for a bad cron, a missing --cron, an unknown id; a failed run
# retried through the server and locally ends completed with the same rows as a reference
# run; a completed run is not retried (exit 1, its state named).
. "$(dirname "$0")/lib.sh"
. "$FERRY_SRC/tests/serve/lib.sh"
ROWS=12000

sample_yaml ref "$T/ref.db" > ref.yaml
"$FERRY_BIN" run ref.yaml --state "$T/ref-state.db" --quiet > /dev/null
mkdir -p "$T/out"
sample_yaml demo "$T/out/demo.db" > demo.yaml
start_serve
export FERRY_SERVER="$BASE"
expect_exit 0 "$FERRY_BIN" pipelines apply demo.yaml

# ---- schedules ----
expect_exit 0 "$FERRY_BIN" schedules add demo --cron "0 3 * * *" --timezone Europe/Paris --json
sid=$(printf '%s\n' "$OUT" | tail -n 1 | jq -r .id)
[ "$sid" -gt 0 ] || fail "no schedule id: $OUT"
expect_exit 0 "$FERRY_BIN" schedules list
printf '%s\n' "$OUT" | grep -E "^$sid +demo +0 3 \* \* \* +Europe/Paris +skip +enabled" > /dev/null || fail "list: $OUT"
expect_exit 0 "$FERRY_BIN" schedules list --pipeline demo --json
[ "$(printf '%s\n' "$OUT" | tail -n 1 | jq '.schedules | length')" = 1 ] || fail "list --json: $OUT"
[ "$(api GET "/v1/schedules/$sid" | jq -r .cron)" = "0 3 * * *" ] || fail "the server has no such schedule: $BODY"
expect_exit 2 "$FERRY_BIN" schedules add demo --cron "61 * * * *"
printf '%s\n' "$OUT" | grep -q "cron" || fail "bad cron message: $OUT"
expect_exit 2 "$FERRY_BIN" schedules add demo
expect_exit 2 "$FERRY_BIN" schedules add nope --cron "* * * * *"
printf "%s\n" "$OUT" | grep -q "no registered pipeline named nope" || fail "unknown pipeline: $OUT"
expect_exit 0 "$FERRY_BIN" schedules rm "$sid"
expect_exit 7 "$FERRY_BIN" schedules rm "$sid"
printf '%s\n' "$OUT" | grep -q "schedule $sid" || fail "rm unknown: $OUT"
[ "$(api GET /v1/schedules | jq '.schedules | length')" = 0 ] || fail "not removed: $BODY"
FERRY_SERVER= expect_exit 2 env -u FERRY_SERVER "$FERRY_BIN" schedules list
printf '%s\n' "$OUT" | grep -q "needs a server" || fail "without a server: $OUT"
pass "schedules add, list (text, json), rm; bad cron, missing --cron, unknown pipeline and id refused"

# ---- runs retry through the server: the sink's folder is a file, then it is a folder ----
rm -rf "$T/out"
touch "$T/out"
run=$(api POST /v1/pipelines/demo/runs | jq -r .id)
wait_done "$run" failed
rm -f "$T/out"
mkdir -p "$T/out"
expect_exit 0 "$FERRY_BIN" runs retry "$run"
wait_done "$run" completed
same_table ref.db out/demo.db orders || fail "the retried run's destination differs from the reference"
expect_exit 1 "$FERRY_BIN" runs retry "$run"
printf '%s\n' "$OUT" | grep -q "is completed" || fail "retry of a completed run: $OUT"
stop_serve
pass "runs retry through the server: failed run $run completed, destination equals the reference"

# ---- runs retry locally ----
unset FERRY_SERVER
sample_yaml local "$T/local.db" > local.yaml
FERRY_FAILPOINTS="before_sink_apply=error" "$FERRY_BIN" run local.yaml --state "$T/local-state.db" --json > l.json \
  && fail "the failpoint did not fail the run"
lrun=$(jq -r .run_id l.json)
expect_exit 0 "$FERRY_BIN" runs retry "$lrun" --state "$T/local-state.db"
printf '%s\n' "$OUT" | grep -q "run $lrun completed" || fail "local retry: $OUT"
same_table ref.db local.db orders || fail "the locally retried run differs from the reference"
expect_exit 1 "$FERRY_BIN" runs retry "$lrun" --state "$T/local-state.db"
no_sanitizer_reports
pass "runs retry locally: failed run $lrun resumed here and completed"
