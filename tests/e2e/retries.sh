#!/usr/bin/env bash
# Retries of failed attempts against a real PostgreSQL (docs/operations.md, retries):
# the server is restarted in the middle of a copy, under `ferry run --retries` and under a
# run `ferry serve` manages; each is retried automatically from its checkpoints
# (run.retry_scheduled with the reason, more than one attempt) and ends with an exact copy
# (set equality both ways). A wrong password is permanent: one attempt, one clear error.
. "$(dirname "$0")/lib.sh"
. "$FERRY_SRC/tests/serve/lib.sh"
. "${FERRY_PG_SH:-$FERRY_SRC/tests/pg/pg.sh}"
pg_start
export SRC_URL="$FERRY_PG_URL"
export BAD_URL="postgresql://ferry_admin:not-the-password@127.0.0.1:$PGPORT/ferry"

pgq -c "CREATE TABLE src (id bigint PRIMARY KEY, name text NOT NULL, amount numeric(12,2), at timestamptz)"
pgq -c "INSERT INTO src SELECT g, md5(g::text), g * 1.25, '2024-01-01'::timestamptz + g * interval '1 minute'
        FROM generate_series(1, 12000) g"

# A webhook receiver (tests/tools/webhook_receiver.py) for the retry notifications.
export HOOK_SECRET="hook-$RANDOM$RANDOM"
HOOK_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
python3 "$FERRY_SRC/tests/tools/webhook_receiver.py" "$HOOK_PORT" "$HOOK_SECRET" "$T/hooks.log" &
EXTRA_PIDS="$EXTRA_PIDS $!"

# pipeline FILE NAME SCHEMA URLVAR
pipeline() {
  cat > "$1" <<YAML
version: 1
name: $2
source:
  type: postgres
  url: env:$4
  resources:
    - {table: src, mode: full}
sink:
  type: postgres
  url: env:SRC_URL
  schema: $3
  write: upsert
batch: {rows: 500}
retries: {max: 6, backoff: 500ms, max_backoff: 4s}
notify: [{webhook: "http://127.0.0.1:$HOOK_PORT/hook", secret: env:HOOK_SECRET, on: [run.retry_scheduled, run.completed]}]
YAML
}

# same_copy SCHEMA: the copy equals the source as multisets, both ways.
same_copy() {
  local missing extra
  missing=$(pgq -c "SELECT count(*) FROM (SELECT * FROM public.src EXCEPT ALL SELECT * FROM \"$1\".src) x")
  extra=$(pgq -c "SELECT count(*) FROM (SELECT * FROM \"$1\".src EXCEPT ALL SELECT * FROM public.src) x")
  [ "$missing" = 0 ] && [ "$extra" = 0 ] || fail "$1.src: $missing source rows missing, $extra extra"
}

# rows_in SCHEMA: rows copied so far (0 before the table exists).
rows_in() { pgq -c "SELECT count(*) FROM \"$1\".src" 2>/dev/null || echo 0; }

# restart_when_copying SCHEMA: once some rows are in (and far from all), restarts the server.
restart_when_copying() {
  local n=0
  for _ in $(seq 1 600); do
    n=$(rows_in "$1")
    [ "$n" -gt 0 ] && break
    sleep 0.05
  done
  [ "$n" -gt 0 ] && [ "$n" -lt 12000 ] || fail "$1: no copy in progress to interrupt ($n rows)"
  pg_as "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -m fast -w -t 60 -l "$PG_DIR/server.log" restart >/dev/null \
    || fail "PostgreSQL did not restart"
}

# ---- ferry run --retries: restarted mid-copy ----------------------------------------------
pipeline cli.yaml cli cli SRC_URL
export FERRY_FAILPOINTS="before_sink_apply=sleep(150)"
"$FERRY_BIN" run cli.yaml --state "$T/cli.db" --retries 6 --json > cli.out 2> cli.err &
run_pid=$!
restart_when_copying cli
rc=0; wait $run_pid || rc=$?
[ $rc = 0 ] || { cat cli.err >&2; fail "ferry run --retries exited $rc"; }
[ "$(jq -r .state cli.out)" = completed ] || fail "state: $(cat cli.out)"
run=$(jq -r .run_id cli.out)
attempt=$(jq -r .attempt cli.out)
[ "$attempt" -ge 2 ] || fail "one attempt only: the restart was not retried ($(cat cli.out))"
"$FERRY_BIN" events "$run" --state "$T/cli.db" --json > cli-events.json
retries=$(jq -s '[.[] | select(.type == "run.retry_scheduled")] | length' cli-events.json)
[ "$retries" -ge 1 ] || fail "no run.retry_scheduled event"
jq -s -e '[.[] | select(.type == "run.retry_scheduled")][0].payload |
          (.reason | length > 0) and .retry == 1 and .max == 6 and .delay_ms >= 250 and .delay_ms <= 500' \
  cli-events.json > /dev/null || fail "retry event payload: $(jq -c -s '[.[] | select(.type == "run.retry_scheduled")][0]' cli-events.json)"
"$FERRY_BIN" show "$run" --state "$T/cli.db" --json > cli-show.json
jq -e '(.attempts | length) >= 2 and .attempts[0].state == "failed" and (.attempts[0].error | length > 0)
       and .attempts[0].retry_scheduled == true and (.attempts | last).state == "completed"' cli-show.json > /dev/null \
  || fail "attempt history in ferry show: $(jq -c .attempts cli-show.json)"
same_copy cli
for _ in $(seq 1 100); do
  jq -e -s "[.[] | select(.valid and .body.run_id == $run and .event == \"run.completed\")] | length == 1" "$T/hooks.log" > /dev/null 2>&1 && break
  sleep 0.05
done
jq -e -s "[.[] | select(.body.run_id == $run)] | all(.valid) and
          ([.[] | select(.body.run_id == $run and .event == \"run.retry_scheduled\" and (.body.data.reason | length > 0))] | length) == $retries and
          ([.[] | select(.body.run_id == $run and .event == \"run.completed\")] | length) == 1" "$T/hooks.log" > /dev/null \
  || fail "notifications of the retried run: $(cat "$T/hooks.log")"
pass "ferry run --retries: PostgreSQL restarted mid-copy, $attempt attempts, exact copy, retries notified (signed)"

# ---- a wrong password: permanent, one attempt -----------------------------------------------
pipeline bad.yaml bad bad BAD_URL
before=$(grep -c 'password authentication failed' "$PG_DIR/server.log" || true)
expect_exit 1 "$FERRY_BIN" run bad.yaml --state "$T/bad.db" --retries 6
printf "%s\n" "$OUT" > bad.err
grep -q 'password authentication failed' bad.err || fail "no clear error: $(cat bad.err)"
! grep -qi 'retry' bad.err || fail "a wrong password was retried: $(cat bad.err)"
! grep -q 'not-the-password' bad.err || fail "the password leaked into the error"
after=$(grep -c 'password authentication failed' "$PG_DIR/server.log" || true)
[ $((after - before)) = 1 ] || fail "the server saw $((after - before)) failed logins, expected 1"
pass "wrong password: one attempt, one clear error"

# ---- a run ferry serve manages: default retries, restarted mid-copy ---------------------------
pipeline srv.yaml srv srv SRC_URL
sed -i '/^retries:/d' srv.yaml   # the server's default (3) applies
start_serve
api POST /v1/pipelines --data-binary @srv.yaml > /dev/null
[ "$CODE" = 201 ] || fail "register: $CODE $BODY"
run=$(api POST /v1/pipelines/srv/runs | jq -r .id)
[ "$CODE" = 201 ] || [ "$CODE" = 202 ] || fail "start: $CODE $BODY"
restart_when_copying srv
wait_done "$run" completed 1800
api GET "/v1/runs/$run" > srv-run.json
jq -e '.attempt >= 2 and (.attempts | length) >= 2 and .attempts[0].retry_scheduled == true' srv-run.json > /dev/null \
  || fail "served run: attempts $(jq -c '{attempt, attempts}' srv-run.json)"
api GET "/v1/runs/$run/events?format=json" > /dev/null
grep -q 'run.retry_scheduled' "$T"/logs/*.log 2>/dev/null || grep -q 'retry 1 of 3' "$T"/logs/*.log \
  || fail "the worker log does not mention the retry"
same_copy srv
stop_serve
no_sanitizer_reports
unset FERRY_FAILPOINTS
pass "served run: PostgreSQL restarted mid-copy, retried by the worker, exact copy"
