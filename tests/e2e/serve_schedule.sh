#!/usr/bin/env bash
# A cron schedule fires through `ferry serve`'s scheduler thread: the next minute's firing
# requests a run (trigger schedule:ID) that a worker completes; the schedule records it, the
# metric counts it, and the destination equals a reference run. Takes up to ~70 s (it waits
# for a real minute boundary).
. "$(dirname "$0")/lib.sh"
. "$FERRY_SRC/tests/serve/lib.sh"

write_pipeline cron.yaml cron 20000 "$T/cron.db" append full
write_pipeline ref.yaml ref 20000 "$T/ref.db" append full
"$FERRY_BIN" run ref.yaml --state "$T/ref-state.db" --quiet > /dev/null
start_serve --lease 20s
api POST /v1/pipelines --data-binary @cron.yaml > /dev/null
[ "$CODE" = 201 ] || fail "register: $CODE $BODY"
api POST /v1/schedules -d '{"pipeline": "cron", "cron": "* * * * *", "timezone": "Asia/Tokyo"}' > s.json
[ "$CODE" = 201 ] || fail "schedule: $CODE $(cat s.json)"
sid=$(jq -r .id s.json)
next=$(jq -r .next_us s.json)
run=""
for _ in $(seq 1 900); do
  run=$(api GET '/v1/runs?pipeline=cron' | jq -r '.runs[0].id // empty')
  [ -n "$run" ] && break
  sleep 0.1
done
[ -n "$run" ] || fail "the schedule never fired (next was $next)"
wait_done "$run" completed 1200
fired_at=$(api GET "/v1/schedules/$sid" | jq -r .last_us)
[ "$fired_at" -ge "$next" ] || fail "fired at $fired_at, before its time $next"
[ "$(api GET "/v1/schedules/$sid" | jq -r .last_run)" = "$run" ] || fail "the schedule does not name its run: $BODY"
[ "$(api GET "/v1/schedules/$sid" | jq -r .next_us)" -gt "$next" ] || fail "next firing not moved on"
[ "$(sqlite3 -cmd ".timeout 10000" "$T/state.db" "SELECT \"trigger\" FROM runs WHERE id = $run")" = "schedule:$sid" ] || fail "trigger"
curl -sS -H "Authorization: Bearer $TOKEN" "$BASE/metrics" | grep -q '^ferry_schedules_fired_total 1$' || fail "metric"
[ "$(api GET '/v1/runs?pipeline=cron' | jq '.runs | length')" = 1 ] || fail "one firing, one run"
same_table ref.db cron.db orders || fail "the scheduled run's destination differs"
stop_serve
no_sanitizer_reports
pass "schedule $sid fired at the minute boundary; run $run completed"
