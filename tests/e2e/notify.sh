#!/usr/bin/env bash
# Webhook notifications (docs/operations.md, notifications): a receiver written apart from
# ferry (tests/tools/webhook_receiver.py, Python's hmac) verifies the HMAC-SHA256 signature
# and the timestamp of every delivery. `ferry run`: run.completed and run.failed arrive,
# signed, with run id and pipeline; the Slack body; a receiver refusing the signature (a
# target with another secret) makes a dead letter; the server-wide default target from the
# environment; run.paused on Ctrl-C. `ferry serve`: the receiver is down when
# the run ends; each notification still arrives, once, when it is back; dead letters are
# listed by GET /v1/notifications?state=dead; the secret appears in no response.
. "$(dirname "$0")/lib.sh"
. "$FERRY_SRC/tests/serve/lib.sh"

export HOOK_SECRET="hook-secret-$RANDOM$RANDOM"
export OTHER_SECRET="other-secret-$RANDOM"
export FERRY_NOTIFY_GRACE_MS=1500
ROWS=20000

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
RECV_PID=""
start_receiver() { # PORT LOG
  python3 "$FERRY_SRC/tests/tools/webhook_receiver.py" "$1" "$HOOK_SECRET" "$2" &
  RECV_PID=$!
  EXTRA_PIDS="$EXTRA_PIDS $RECV_PID"
  for _ in $(seq 1 100); do curl -s -o /dev/null "http://127.0.0.1:$1/" && return 0; sleep 0.05; done
  fail "receiver on port $1 did not start"
}
# wait_log LOG JQ-FILTER: until a line of LOG matches.
wait_log() {
  for _ in $(seq 1 400); do
    [ -f "$1" ] && jq -e -s "$2" "$1" > /dev/null 2>&1 && return 0
    sleep 0.05
  done
  fail "receiver log $1: nothing matching $2 in: $(cat "$1" 2>/dev/null)"
}

# ---- ferry run: completed and failed, signed; slack; a refused signature is a dead letter ----
P1=$(free_port)
start_receiver "$P1" hooks1.log
sample_yaml hooked "$T/hooked.db" \
  "notify:" \
  "  - {webhook: \"http://127.0.0.1:$P1/hook\", secret: env:HOOK_SECRET, on: [run.completed, run.failed]}" \
  "  - {webhook: \"http://127.0.0.1:$P1/slack\", secret: env:HOOK_SECRET, format: slack, on: [run.failed]}" \
  "  - {webhook: \"http://127.0.0.1:$P1/wrong\", secret: env:OTHER_SECRET, on: [run.completed]}" > hooked.yaml
"$FERRY_BIN" run hooked.yaml --state "$T/cli.db" --json > ok.json || fail "run: $(cat ok.json)"
run1=$(jq -r .run_id ok.json)
wait_log hooks1.log "[.[] | select(.valid and .event == \"run.completed\" and .body.run_id == $run1)] | length == 1"
jq -e -s "[.[] | select(.valid and .event == \"run.completed\")][0].body |
          .type == \"run.completed\" and .pipeline == \"hooked\" and .data.rows == $ROWS" hooks1.log > /dev/null \
  || fail "run.completed body: $(head -n 1 hooks1.log)"
# the target with another secret: the receiver refused it (401), a 4xx: dead at once
jq -e -s '[.[] | select(.valid == false and .why == "bad signature")] | length == 1' hooks1.log > /dev/null \
  || fail "the receiver did not refuse the wrongly signed delivery exactly once: $(cat hooks1.log)"
[ "$(q "$T/cli.db" "SELECT state || ' ' || attempts FROM notifications WHERE target LIKE '%/wrong'")" = "dead 1" ] \
  || fail "dead letter: $(q "$T/cli.db" 'SELECT * FROM notifications')"
FERRY_FAILPOINTS="before_sink_apply=error" "$FERRY_BIN" run hooked.yaml --state "$T/cli.db" --fresh --json > bad.json && fail "the failpoint did not fail the run"
run2=$(jq -r .run_id bad.json)
wait_log hooks1.log "[.[] | select(.valid and .event == \"run.failed\" and .body.run_id == $run2)] | length == 1"
jq -e -s "[.[] | select(.valid and .event == \"run.failed\")][0].body.data.message | test(\"failpoint\")" hooks1.log > /dev/null \
  || fail "run.failed carries no message"
wait_log hooks1.log "[.[] | select(.valid and .event == \"run.failed\" and (.body.text // \"\" | test(\"run $run2 of pipeline hooked\")))] | length == 1"
! grep -q "$HOOK_SECRET" hooks1.log "$T/cli.db" || fail "the secret leaked into a body or the state"
pass "ferry run: run.completed and run.failed signed and verified, slack body, refused signature is a dead letter"

# ---- the server-wide default (environment) for a pipeline without notify: ----------------
sample_yaml plain "$T/plain.db" > plain.yaml
FERRY_NOTIFY_WEBHOOK="http://127.0.0.1:$P1/default" FERRY_NOTIFY_SECRET=env:HOOK_SECRET \
  FERRY_NOTIFY_ON=run.completed "$FERRY_BIN" run plain.yaml --state "$T/cli.db" --json > plain.json || fail "plain run"
run5=$(jq -r .run_id plain.json)
wait_log hooks1.log "[.[] | select(.valid and .event == \"run.completed\" and .body.run_id == $run5 and .body.pipeline == \"plain\")] | length == 1"
pass "FERRY_NOTIFY_WEBHOOK: a pipeline without notify: is notified by the default target"

# ---- run.paused: Ctrl-C (SIGINT) pauses a run; the pause is notified ----------------------
ROWS=60000 sample_yaml pausing "$T/pausing.db" \
  "notify: [{webhook: \"http://127.0.0.1:$P1/pause\", secret: env:HOOK_SECRET, on: [run.paused]}]" > pausing.yaml
FERRY_FAILPOINTS="after_sink_apply=sleep(300)" "$FERRY_BIN" run pausing.yaml --state "$T/pause-state.db" --json > paused.json &
ppid=$!
for _ in $(seq 1 400); do
  [ "$(q "$T/pause-state.db" "SELECT count(*) FROM runs WHERE state = 'running' AND rows > 0" 2>/dev/null)" = 1 ] && break
  sleep 0.05
done
kill -INT $ppid
rc=0; wait $ppid || rc=$?
[ $rc = 5 ] || fail "a paused run exits 5, got $rc: $(cat paused.json)"
run6=$(jq -r .run_id paused.json)
wait_log hooks1.log "[.[] | select(.valid and .event == \"run.paused\" and .body.run_id == $run6)] | length == 1"
pass "run.paused notified when Ctrl-C pauses a run"

# ---- ferry serve: the receiver is down when the run ends, and gets it once back ------------
P2=$(free_port)
sample_yaml served "$T/served.db" \
  "notify: [{webhook: \"http://127.0.0.1:$P2/hook\", secret: env:HOOK_SECRET, on: [run.completed]}]" > served.yaml
sample_yaml refused "$T/refused.db" \
  "notify: [{webhook: \"http://127.0.0.1:$P1/wrong\", secret: env:OTHER_SECRET, on: [run.completed]}]" > refused.yaml
start_serve
for f in served refused; do
  api POST /v1/pipelines --data-binary @$f.yaml > /dev/null
  [ "$CODE" = 201 ] || fail "register $f: $CODE $BODY"
done
run3=$(api POST /v1/pipelines/served/runs | jq -r .id)
wait_done "$run3" completed
for _ in $(seq 1 200); do
  att=$(api GET '/v1/notifications?state=pending' | jq "[.notifications[] | select(.run_id == $run3)][0].attempts // 0")
  [ "$att" -ge 1 ] && break
  sleep 0.05
done
[ "$att" -ge 1 ] || fail "no failed attempt recorded while the receiver was down: $(api GET /v1/notifications)"
[ ! -f hooks2.log ] || fail "a receiver that was down received something"
start_receiver "$P2" hooks2.log
wait_log hooks2.log "[.[] | select(.valid and .event == \"run.completed\" and .body.run_id == $run3)] | length >= 1"
sleep 3 # a second delivery, if there were one, would come within the sweeper's next ticks
[ "$(jq -s "[.[] | select(.body.run_id == $run3)] | length" hooks2.log)" = 1 ] || fail "not delivered exactly once: $(cat hooks2.log)"
jq -e -s 'all(.valid)' hooks2.log > /dev/null || fail "an invalid signature: $(cat hooks2.log)"
api GET '/v1/notifications?state=delivered' | jq -e "[.notifications[] | select(.run_id == $run3 and .attempts >= 2)] | length == 1" > /dev/null \
  || fail "delivery not recorded: $(api GET /v1/notifications)"
run4=$(api POST /v1/pipelines/refused/runs | jq -r .id)
wait_done "$run4" completed
for _ in $(seq 1 200); do
  dead=$(api GET '/v1/notifications?state=dead' | jq "[.notifications[] | select(.run_id == $run4)] | length")
  [ "$dead" = 1 ] && break
  sleep 0.05
done
[ "$dead" = 1 ] || fail "dead letter not listed: $(api GET /v1/notifications)"
api GET '/v1/notifications?state=dead' | jq -e "[.notifications[] | select(.run_id == $run4)][0] |
   .last_error == \"HTTP 401\" and .event == \"run.completed\" and .pipeline == \"refused\"" > /dev/null \
  || fail "dead letter fields: $BODY"
api GET '/v1/notifications?state=bogus' > /dev/null
[ "$CODE" = 400 ] || fail "bad state filter: $CODE"
! grep -q -e "$HOOK_SECRET" -e "$OTHER_SECRET" "$T/responses.log" || fail "a secret in an API response"
stop_serve
no_sanitizer_reports
pass "ferry serve: a receiver down at first got the notification once back; dead letters listed"
