#!/usr/bin/env bash
# labels: asan smoke
# `ferry serve` over real HTTP (curl) on a free loopback port: pipelines (YAML and JSON
# bodies, versions), idempotent run requests, a run watched to completion through
# Server-Sent Events (and replayed from a sequence), pause + resume, cancel, schedules,
# 401 / 413 / 400 answered cleanly, secrets never in a response, /metrics series, and the
# OpenAPI document against the routes the server answers. The destination is compared with
# a reference run of the same pipeline (set equality), and the counts with the events.
. "$(dirname "$0")/lib.sh"
. "$FERRY_SRC/tests/serve/lib.sh"

# A secret the pipelines reference (hmac key): it must never come back from the API.
CANARY="canary-$RANDOM$RANDOM$RANDOM"
export FERRY_TEST_HMAC="$CANARY"
# Each batch waits 20 ms after its apply, so pause and cancel land mid-run on any machine.
export FERRY_FAILPOINTS="after_sink_apply=sleep(20)"
ROWS=200000

pipeline_yaml() { # NAME SINKPATH
  sample_yaml "$1" "$2" "transforms:" \
    "  - {resource: orders, column: note, hash: hmac_sha256, key: env:FERRY_TEST_HMAC}"
}

pipeline_yaml ref "$T/ref.db" > ref.yaml
FERRY_FAILPOINTS= "$FERRY_BIN" run ref.yaml --state "$T/ref-state.db" --quiet > /dev/null
start_serve --lease 10s --workers 2

# ---- health and auth ----
[ "$(curl -s -o /dev/null -w '%{http_code}' "$BASE/livez")" = 200 ] || fail "/livez without a token"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$BASE/readyz")" = 200 ] || fail "/readyz without a token"
n=0
while read -r method path flag; do
  [ "$flag" = public ] && continue
  url=$(printf '%s' "$path" | sed -e 's/{name}/demo/; s/{version}/abc/; s/{id}/1/; s/{file}/app.js/')
  for hdr in "X-None: 1" "Authorization: Bearer wrong-$TOKEN" "Authorization: Basic $TOKEN"; do
    got=$(curl -s -o resp -w '%{http_code}' -X "$method" -H "$hdr" "$BASE$url")
    [ "$got" = 401 ] || fail "$method $url with '$hdr' answered $got, not 401"
    jq -e '.error.code == "unauthorized"' resp > /dev/null || fail "401 body: $(cat resp)"
  done
  n=$((n + 1))
done < <("$FERRY_BIN" serve --routes)
[ "$n" -ge 20 ] || fail "only $n protected routes"
got=$(curl -s -o /dev/null -w '%{http_code}' "$BASE/v1/nothing-here")
[ "$got" = 401 ] || fail "an unknown path without a token answers $got"
pass "401 on all $n protected routes without a token, with a wrong one, with Basic"

# ---- OpenAPI document == routes ----
jq -r '.paths | to_entries[] | .key as $p | .value | keys[] | select(. != "parameters") | "\(ascii_upcase) \($p)"' \
  "$FERRY_SRC/docs/api/openapi.json" | sort > doc-routes
"$FERRY_BIN" serve --routes | awk '{print $1" "$2}' | sort > srv-routes
diff doc-routes srv-routes || fail "docs/api/openapi.json and the server's routes differ"
jq -r '.paths | to_entries[] | .key as $p | .value | to_entries[] | select(.key != "parameters")
       | select(.value.security == []) | "\(.key | ascii_upcase) \($p)"' "$FERRY_SRC/docs/api/openapi.json" | sort > doc-public
"$FERRY_BIN" serve --routes | awk '$3 == "public" {print $1" "$2}' | sort > srv-public
diff doc-public srv-public || fail "public routes differ between the OpenAPI document and the server"
# Every documented route answers (not 404/405) with a token.
while read -r method path; do
  url=$(printf '%s' "$path" | sed -e 's/{name}/nope/; s/{version}/abc/; s/{id}/999/; s/{file}/app.js/')
  got=$(curl -s -o /dev/null -w '%{http_code}' -X "$method" -H "Authorization: Bearer $TOKEN" \
        --max-time 5 "$BASE$url?follow=0" || true)
  [ "$got" != 405 ] || fail "$method $url: 405"
done < doc-routes
pass "OpenAPI document lists exactly the $(wc -l < srv-routes) routes the server answers"

# ---- pipelines: YAML body, same again, JSON body with a change ----
pipeline_yaml demo "$T/out.db" > demo.yaml
api POST /v1/pipelines --data-binary @demo.yaml -H 'Content-Type: application/yaml' > created.json
[ "$CODE" = 201 ] || fail "create pipeline: $CODE $(cat created.json)"
v1=$(jq -r .version created.json)
[ "$(jq -r .new_version created.json)" = true ] || fail "new_version: $(cat created.json)"
api POST /v1/pipelines --data-binary @demo.yaml > again.json
[ "$CODE" = 200 ] && [ "$(jq -r .new_version again.json)" = false ] || fail "same pipeline again: $CODE $(cat again.json)"
# The same pipeline as JSON, with a column dropped: a new route definition, a new version.
python3 - "$T/out2.db" > demo2.json <<'EOF'
import json, sys
print(json.dumps({"version": 1, "name": "demo2", "source": {"type": "sample", "rows": 1000, "seed": 7,
  "resources": [{"table": "orders", "mode": "full"}]},
  "sink": {"type": "sqlite", "path": sys.argv[1], "write": "append"},
  "transforms": [{"resource": "orders", "column": "note", "hash": "hmac_sha256", "key": "env:FERRY_TEST_HMAC"}]}))
EOF
api POST /v1/pipelines --data-binary @demo2.json -H 'Content-Type: application/json' > j1.json
[ "$CODE" = 201 ] || fail "JSON body: $CODE $(cat j1.json)"
jq '.transforms += [{"resource": "orders", "drop": ["discount"]}]' demo2.json > demo2b.json
api POST /v1/pipelines --data-binary @demo2b.json -H 'Content-Type: application/json' > j2.json
[ "$CODE" = 201 ] || fail "changed JSON body: $CODE $(cat j2.json)"
[ "$(jq -r .version j1.json)" != "$(jq -r .version j2.json)" ] || fail "a change made no new version"
[ "$(api GET /v1/pipelines/demo2/versions | jq '.versions | length')" = 2 ] || fail "two versions: $BODY"
[ "$(api GET /v1/pipelines/demo2/versions | jq -r '.versions[0].current')" = true ] || fail "newest is current"
api GET "/v1/pipelines/demo2/versions/$(jq -r .version j1.json)" | jq -e '.spec.name == "demo2"' > /dev/null \
  || fail "GET a version: $BODY"
[ "$(api GET /v1/pipelines | jq '[.pipelines[].name] | sort | join(",")' -r)" = "demo,demo2" ] || fail "list: $BODY"
api GET /v1/pipelines/demo | jq -e '.spec.transforms[0].key == "env:FERRY_TEST_HMAC"' > /dev/null \
  || fail "the secret is returned as its reference: $BODY"
api GET /v1/secrets | jq -e '.secrets[] | select(.ref == "env:FERRY_TEST_HMAC") | has("available") | not' > /dev/null \
  || fail "/v1/secrets: $BODY"
# A password written in clear in a URL is refused at registration (400 naming the key) and
# comes back in no answer (issue 19: secrets only by reference).
PLAIN="plainpw$RANDOM$RANDOM"
cat > pg.yaml <<EOF
version: 1
name: pgplain
source: {type: postgres, url: "postgres://app:$PLAIN@127.0.0.1:1/db", resources: [{table: public.t}]}
sink: {type: sqlite, path: $T/pg.db}
EOF
api POST /v1/pipelines --data-binary @pg.yaml > /dev/null
[ "$CODE" = 400 ] && printf '%s' "$BODY" | jq -e '.error.message | startswith("source.url: ")' > /dev/null \
  || fail "register pgplain: $CODE $BODY"
api GET /v1/pipelines/pgplain > /dev/null
[ "$CODE" = 404 ] || fail "a refused pipeline was stored: $CODE $BODY"
api GET /v1/pipelines > /dev/null
grep -q "$PLAIN" responses.log && fail "a password written in clear came back"
pass "pipelines from YAML and JSON; unchanged -> same version, changed -> new version; URL passwords refused"

# ---- connectors: list, validate, discover ----
api GET /v1/connectors | jq -e '(.sources[] | select(.name == "sample") | .read_modes | index("full")) and (.sinks | map(.name) | index("sqlite"))' > /dev/null \
  || fail "connectors: $BODY"
api POST /v1/connectors/validate --data-binary @demo.yaml | jq -e '.valid and .name == "demo" and .resources[0].table == "orders"' > /dev/null \
  || fail "validate: $CODE $BODY"
api POST /v1/connectors/validate --data-binary $'version: 1\nname: v\nsource: {type: nosuch}\n' > /dev/null
[ "$CODE" = 400 ] && printf '%s' "$BODY" | jq -e '.error.message | contains("source")' > /dev/null || fail "validate a bad type: $CODE $BODY"
api POST /v1/connectors/discover --data-binary @demo.yaml \
  | jq -e '.resources[0].resource == "orders" and (.resources[0].columns[] | select(.name == "id") | .key_position == 1)' > /dev/null \
  || fail "discover: $CODE $BODY"
pass "connectors listed; a pipeline validated and its source discovered"

# ---- a run, requested twice with one key ----
api POST /v1/pipelines/demo/runs -d '{"idempotency_key": "nightly-1"}' > r1.json
[ "$CODE" = 201 ] || fail "request a run: $CODE $(cat r1.json)"
api POST /v1/pipelines/demo/runs -d '{"idempotency_key": "nightly-1"}' > r2.json
[ "$CODE" = 200 ] || fail "same key again: $CODE $(cat r2.json)"
run=$(jq -r .id r1.json)
[ "$(jq -r .id r2.json)" = "$run" ] && [ "$(jq -r .existed r2.json)" = true ] || fail "same key, same run: $(cat r1.json r2.json)"
api POST /v1/pipelines/demo/runs -H 'Idempotency-Key: nightly-1' > r3.json
[ "$(jq -r .id r3.json)" = "$run" ] || fail "the Idempotency-Key header: $(cat r3.json)"
pass "one idempotency key, one run ($run)"

# ---- watch it through SSE to completion; replay from a sequence ----
curl -sS -N --max-time 120 -H "Authorization: Bearer $TOKEN" "$BASE/v1/runs/$run/events" > sse.txt \
  || fail "the event stream did not end by itself: $(tail -c 500 sse.txt)"
cat sse.txt >> responses.log
grep -q '^event: run.completed$' sse.txt || fail "no run.completed in the stream: $(tail -c 800 sse.txt)"
grep '^id: ' sse.txt | awk '{print $2}' > ids
sort -n -c ids || fail "event ids not increasing"
[ "$(sort -u ids | wc -l)" = "$(wc -l < ids)" ] || fail "an event was sent twice"
grep '^data: ' sse.txt | sed 's/^data: //' | jq -e --arg r "$run" '.run_id == ($r | tonumber)' > /dev/null \
  || fail "an event of another run in the stream"
mid=$(sed -n 5p ids)
curl -sS -N --max-time 60 -H "Authorization: Bearer $TOKEN" "$BASE/v1/runs/$run/events?after=$mid" > replay.txt
grep '^id: ' replay.txt | awk '{print $2}' > rids
awk -v m="$mid" '$1 > m' ids > expect
diff expect rids || fail "replay after $mid differs from the live stream's tail"
curl -sS -N --max-time 60 -H "Authorization: Bearer $TOKEN" -H "Last-Event-ID: $mid" "$BASE/v1/runs/$run/events" \
  | grep '^id: ' | awk '{print $2}' > lids
diff expect lids || fail "Last-Event-ID replay differs"
api GET "/v1/runs/$run" > run.json
[ "$(jq -r .state run.json)" = completed ] || fail "state: $(cat run.json)"
[ "$(jq -r .rows run.json)" = $ROWS ] || fail "run rows $(jq .rows run.json), want $ROWS"
written=$(grep -c '^event: batch.written$' sse.txt)
[ "$(jq -r .batches run.json)" = "$written" ] || fail "batches $(jq .batches run.json) vs $written batch.written events"
[ "$(jq -r .integrity.verified run.json)" = "$written" ] || fail "verified count"
[ "$(jq -r '.resources[0].rows' run.json)" = $ROWS ] || fail "resource rows"
jq -e '.resources[0].checkpoints | length >= 1' run.json > /dev/null || fail "checkpoints: $(cat run.json)"
jq -e --argjson n $ROWS '.resources[0] | .rows_estimate == $n and (.bound | IN("sink", "source", "balanced"))' \
  run.json > /dev/null || fail "rows_estimate / bound: $(jq -c '.resources[0]' run.json)"
worker_exited "$run"
wait_worker_exit "$run" 0
same_table ref.db out.db orders || fail "the served run's destination differs from the reference"
pass "run $run watched to completion over SSE ($written batches, counts exact, destination equal); replay from $mid"

# ---- pause and resume ----
pipeline_yaml pausable "$T/p.db" > p.yaml
api POST /v1/pipelines --data-binary @p.yaml > /dev/null
prun=$(api POST /v1/pipelines/pausable/runs | jq -r .id)
wait_rows "$prun"
api POST "/v1/runs/$prun/pause" > /dev/null
[ "$CODE" = 202 ] || fail "pause: $CODE $BODY"
wait_done "$prun" paused
wait_worker_exit "$prun" 5
partial=$(sqlite3 -batch -noheader -cmd '.timeout 20000' p.db 'SELECT count(*) FROM orders')
[ "$partial" -gt 0 ] && [ "$partial" -lt $ROWS ] || fail "paused with $partial rows"
api POST "/v1/runs/$prun/pause" > /dev/null
[ "$CODE" = 409 ] || fail "pausing a paused run: $CODE $BODY"
api POST "/v1/runs/$prun/resume" > /dev/null
[ "$CODE" = 202 ] || fail "resume: $CODE $BODY"
wait_done "$prun" completed
same_table ref.db p.db orders || fail "pause + resume through the API differs"
[ "$(api GET "/v1/runs/$prun" | jq -r .attempt)" = 2 ] || fail "resume is a second attempt: $BODY"
pass "pause ($partial rows) and resume through the API: destination exact"

# ---- cancel ----
pipeline_yaml cancelable "$T/c.db" > c.yaml
api POST /v1/pipelines --data-binary @c.yaml > /dev/null
crun=$(api POST /v1/pipelines/cancelable/runs | jq -r .id)
wait_rows "$crun"
# A cdc-style watermark event (what a cdc resource publishes): its lag becomes a metric of
# the running run, and goes away when the run ends.
catt=$(api GET "/v1/runs/$crun" | jq -r .attempt)
sqlite3 -cmd '.timeout 10000' "$T/state.db" "INSERT INTO events (time_us, run_id, attempt, resource, type, payload)
  VALUES ($(date +%s)000000, $crun, $catt, 'orders', 'cursor.watermark_advanced', '{\"shard\":0,\"lag_bytes\":12345,\"lag_seconds\":1.5}')"
for _ in $(seq 1 100); do
  curl -sS -H "Authorization: Bearer $TOKEN" "$BASE/metrics" > m.txt
  grep -q "^ferry_replication_lag_bytes{run=\"$crun\",resource=\"orders\"} 12345$" m.txt && break
  sleep 0.1
done
grep -q "^ferry_replication_lag_seconds{run=\"$crun\",resource=\"orders\"} 1.500$" m.txt || fail "replication lag metric: $(grep lag m.txt)"
api POST "/v1/runs/$crun/cancel" > /dev/null
[ "$CODE" = 202 ] || fail "cancel: $CODE $BODY"
wait_done "$crun" canceled
sleep 0.5
curl -sS -H "Authorization: Bearer $TOKEN" "$BASE/metrics" | grep -q "^ferry_replication_lag_bytes{run=\"$crun\"" \
  && fail "the lag of a canceled run is still exported"
api POST "/v1/runs/$crun/cancel" > /dev/null
[ "$CODE" = 409 ] || fail "canceling a canceled run: $CODE $BODY"
api POST "/v1/runs/$run/pause" > /dev/null
[ "$CODE" = 409 ] || fail "pausing a completed run: $CODE $BODY"
pass "cancel through the API; a cdc watermark's lag exported while the run runs, dropped after"

# ---- the command line against the server, and without one ----
pipeline_yaml viacli "$T/cli.db" > cli.yaml
expect_exit 0 "$FERRY_BIN" pipelines apply cli.yaml --server "$BASE"
printf '%s' "$OUT" | grep -q 'new version' || fail "pipelines apply: $OUT"
expect_exit 0 "$FERRY_BIN" pipelines apply cli.yaml --server "$BASE"
printf '%s' "$OUT" | grep -q 'unchanged' || fail "pipelines apply again: $OUT"
FERRY_SERVER="$BASE" "$FERRY_BIN" runs start viacli --idempotency-key cli-1 --json > s1.json
FERRY_SERVER="$BASE" "$FERRY_BIN" runs start viacli --idempotency-key cli-1 --json > s2.json
cli_run=$(jq -r .id s1.json)
[ "$(jq -r .id s2.json)" = "$cli_run" ] || fail "runs start with one key: $(cat s1.json s2.json)"
expect_exit 0 "$FERRY_BIN" runs watch "$cli_run" --server "$BASE"
printf '%s' "$OUT" | grep -q 'run.completed' || fail "runs watch: $OUT"
worker_exited "$cli_run"
same_table ref.db cli.db orders || fail "the run started from the command line differs"
FERRY_API_TOKEN=wrong expect_exit 1 "$FERRY_BIN" runs start viacli --server "$BASE"
printf '%s' "$OUT" | grep -q 'bearer token' || fail "a wrong token from the command line: $OUT"
# No server: the same commands on a local state file.
pipeline_yaml local "$T/local.db" > local.yaml
expect_exit 0 env -u FERRY_SERVER "$FERRY_BIN" pipelines apply local.yaml --state "$T/local-state.db"
expect_exit 0 env -u FERRY_SERVER "$FERRY_BIN" runs start local --state "$T/local-state.db"
expect_exit 0 env -u FERRY_SERVER "$FERRY_BIN" runs watch 1 --state "$T/local-state.db"
printf '%s' "$OUT" | grep -q 'run.completed' || fail "local runs watch: $OUT"
same_table ref.db local.db orders || fail "the local run differs"
pass "ferry pipelines apply / runs start / runs watch, with --server and without"

# ---- runs list filters ----
[ "$(api GET '/v1/runs?state=completed' | jq '[.runs[].state] | unique | join(",")' -r)" = completed ] || fail "state filter: $BODY"
[ "$(api GET '/v1/runs?pipeline=cancelable' | jq '.runs | length')" = 1 ] || fail "pipeline filter: $BODY"
[ "$(api GET '/v1/runs?limit=1' | jq '.runs | length')" = 1 ] || fail "limit: $BODY"
api GET '/v1/runs?state=sleeping' > /dev/null
[ "$CODE" = 400 ] && printf '%s' "$BODY" | jq -e '.error.message | contains("state")' > /dev/null || fail "bad state filter: $CODE $BODY"
pass "runs list filters"

# ---- schedules ----
api POST /v1/schedules -d '{"pipeline": "demo", "cron": "*/5 * * * *", "timezone": "Europe/Paris", "overlap": "skip"}' > s.json
[ "$CODE" = 201 ] || fail "create schedule: $CODE $(cat s.json)"
sid=$(jq -r .id s.json)
now_us=$(($(date +%s) * 1000000))
next=$(jq -r .next_us s.json)
[ "$next" -gt "$now_us" ] && [ $(( (next / 1000000) % 300 )) = 0 ] || fail "next firing $next is not the next 5-minute mark"
api GET /v1/pipelines/demo | jq -e --arg s "$sid" '.schedules[0].id == ($s | tonumber)' > /dev/null || fail "pipeline lists its schedule: $BODY"
api POST /v1/schedules -d '{"pipeline": "demo", "cron": "61 * * * *"}' > /dev/null
[ "$CODE" = 400 ] && printf '%s' "$BODY" | jq -e '.error.message | startswith("cron")' > /dev/null || fail "bad cron: $CODE $BODY"
api POST /v1/schedules -d '{"pipeline": "demo", "cron": "* * * * *", "timezone": "Mars/Olympus"}' > /dev/null
[ "$CODE" = 400 ] && printf '%s' "$BODY" | jq -e '.error.message | startswith("timezone")' > /dev/null || fail "bad zone: $CODE $BODY"
api POST /v1/schedules -d '{"pipeline": "nope", "cron": "* * * * *"}' > /dev/null
[ "$CODE" = 400 ] && printf '%s' "$BODY" | jq -e '.error.message | startswith("pipeline")' > /dev/null || fail "unknown pipeline: $CODE $BODY"
api PATCH "/v1/schedules/$sid" -d '{"enabled": false, "cron": "0 3 * * *", "timezone": "UTC"}' > p.json
[ "$CODE" = 200 ] && jq -e '.enabled == false and .cron == "0 3 * * *" and .timezone == "UTC"' p.json > /dev/null || fail "patch schedule: $CODE $(cat p.json)"
[ $(( ($(jq -r .next_us p.json) / 1000000) % 86400 )) = 10800 ] || fail "patched next firing is not 03:00 UTC: $(cat p.json)"
api PATCH "/v1/schedules/$sid" -d '{"pipeline": "other"}' > /dev/null
[ "$CODE" = 400 ] && printf '%s' "$BODY" | jq -e '.error.message | startswith("pipeline")' > /dev/null || fail "patch pipeline: $CODE $BODY"
api PATCH "/v1/schedules/$sid" -d '{"overlap": "sometimes"}' > /dev/null
[ "$CODE" = 400 ] && printf '%s' "$BODY" | jq -e '.error.message | startswith("overlap")' > /dev/null || fail "patch overlap: $CODE $BODY"
api PATCH /v1/schedules/424242 -d '{"enabled": true}' > /dev/null
[ "$CODE" = 404 ] || fail "patch a missing schedule: $CODE"
api DELETE "/v1/schedules/$sid" > /dev/null
[ "$CODE" = 200 ] || fail "delete schedule: $CODE"
api GET "/v1/schedules/$sid" > /dev/null
[ "$CODE" = 404 ] || fail "deleted schedule: $CODE"
pass "schedules: cron in a time zone, PATCH (disable, new cron), bad cron / zone / pipeline / overlap named in a 400"

# ---- malformed and oversized bodies ----
check_400() { # FIELD METHOD PATH BODY
  local field=$1 method=$2 path=$3 body=$4
  api "$method" "$path" --data-binary "$body" > /dev/null
  [ "$CODE" = 400 ] || fail "$method $path with '$body': $CODE, not 400: $BODY"
  printf '%s' "$BODY" | jq -e --arg f "$field" '.error.message | contains($f)' > /dev/null \
    || fail "$method $path: the error does not name '$field': $BODY"
}
check_400 'body' POST /v1/pipelines/demo/runs '{"idempotency_key": '
check_400 'idempotency_key' POST /v1/pipelines/demo/runs '{"idempotency_key": 42}'
check_400 'color' POST /v1/pipelines/demo/runs '{"color": "blue"}'
check_400 'body' POST /v1/pipelines/demo/runs '[1, 2]'
check_400 'body' POST /v1/pipelines '{"name": '
check_400 'source' POST /v1/pipelines $'version: 1\nname: x\nsink: {type: sqlite, path: /tmp/x.db}\n'
check_400 'sink' POST /v1/pipelines $'version: 1\nname: x\nsource: {type: sample, rows: 1, resources: [{table: orders}]}\n'
check_400 'body' POST /v1/pipelines ''
check_400 'retries' POST '/v1/pipelines?retries=many' "$(cat demo.yaml)"
api POST /v1/pipelines/nope/runs > /dev/null
[ "$CODE" = 404 ] || fail "a run of an unknown pipeline: $CODE $BODY"
api GET /v1/runs/abc > /dev/null
[ "$CODE" = 404 ] || fail "run abc: $CODE"
head -c 2000000 /dev/zero | tr '\0' 'a' > big.txt
api POST /v1/pipelines --data-binary @big.txt > /dev/null
[ "$CODE" = 413 ] && printf '%s' "$BODY" | jq -e '.error.code == "too_large"' > /dev/null || fail "2 MB body: $CODE $BODY"
# Chunked (no Content-Length): cut off while reading.
api POST /v1/pipelines -H 'Transfer-Encoding: chunked' --data-binary @big.txt > /dev/null
[ "$CODE" = 413 ] || fail "2 MB chunked body: $CODE $BODY"
grep '^{"error":{' responses.log > errors.log || fail "no error bodies recorded"
if grep -Eq 'SELECT |INSERT |UPDATE "|sqlite3_|SQLITE_|state\.db|\.c:[0-9]' errors.log; then
  fail "an error body shows SQL, the state path or source locations: $(grep -E 'SELECT |INSERT |UPDATE "|sqlite3_|SQLITE_|state\.db' errors.log | head -3)"
fi
pass "400 names the field, 404, 413 (declared and chunked); no SQL or paths in bodies"

# ---- metrics ----
curl -sS -H "Authorization: Bearer $TOKEN" "$BASE/metrics" > metrics.txt
for series in 'ferry_runs{state="completed"}' 'ferry_runs{state="canceled"}' ferry_rows_total ferry_bytes_total \
              ferry_batches_total ferry_batches_verified_total ferry_batches_diverged_total ferry_workers_running \
              ferry_runs_queued ferry_workers_started_total ferry_workers_lost_total ferry_runs_retried_total \
              ferry_schedules_fired_total ferry_http_requests_total ferry_http_unauthorized_total ferry_event_streams \
              ferry_batch_latency_seconds_count ferry_batch_latency_seconds_sum 'ferry_batch_latency_seconds_bucket{le="+Inf"}'; do
  grep -q "^$series " metrics.txt || fail "/metrics lacks $series"
  doc=${series%%\{*}; doc=${doc%_bucket}; doc=${doc%_sum}; doc=${doc%_count}
  grep -qF "$doc" "$FERRY_SRC/docs/server.md" || fail "docs/server.md does not document $series"
done
[ "$(grep '^ferry_runs{state="completed"} ' metrics.txt | awk '{print $2}')" -ge 2 ] || fail "completed runs metric"
[ "$(grep '^ferry_workers_started_total ' metrics.txt | awk '{print $2}')" -ge 4 ] || fail "workers started"
[ "$(grep '^ferry_batch_latency_seconds_count ' metrics.txt | awk '{print $2}')" -ge 40 ] || fail "batch latency observations"
grep -q '^# TYPE ferry_queue_depth gauge' metrics.txt || fail "queue depth series"
grep -qF 'ferry_queue_depth{run=' "$FERRY_SRC/docs/server.md" || fail "queue depth undocumented"
pass "/metrics has the documented series"

# ---- delete ----
api DELETE /v1/pipelines/cancelable > /dev/null
[ "$CODE" = 200 ] || fail "delete pipeline: $CODE $BODY"
api GET /v1/pipelines/cancelable > /dev/null
[ "$CODE" = 404 ] || fail "deleted pipeline still found: $CODE"
api GET "/v1/runs/$crun" > /dev/null
[ "$CODE" = 200 ] || fail "runs of a deleted pipeline stay"
pass "pipeline deleted; its runs stay"

# ---- a server stopped mid-run pauses its workers; the next start continues them ----
pipeline_yaml restart "$T/restart.db" > restart.yaml
api POST /v1/pipelines --data-binary @restart.yaml > /dev/null
rrun=$(api POST /v1/pipelines/restart/runs | jq -r .id)
wait_rows "$rrun"
rpid=$(api GET "/v1/runs/$rrun" | jq -r .pid)
stop_serve
[ -e "/proc/$rpid" ] && ! grep -q '^State:.*Z' "/proc/$rpid/status" && fail "the worker outlived the server"
[ "$(q "$T/state.db" "SELECT state FROM runs WHERE id = $rrun")" = paused ] || fail "stopping did not pause run $rrun"
cp serve.err serve-first.err
start_serve --lease 10s --workers 2
wait_done "$rrun" completed
same_table ref.db restart.db orders || fail "paused by a stop, resumed by the next start: destination differs"
[ "$(api GET "/v1/runs/$rrun" | jq -r .attempt)" = 2 ] || fail "resumed in a second attempt: $BODY"
cat serve-first.err >> serve.err
pass "stopping the server paused run $rrun; starting it again resumed and completed it"

# ---- secrets ----
grep -q "$CANARY" responses.log && fail "the secret's value came back in an API response"
"$FERRY_BIN" events "$run" --state "$T/state.db" --json | grep -q "$CANARY" && fail "the secret is in an event"
sqlite3 -cmd ".timeout 10000" "$T/state.db" .dump > state-dump.sql || fail "cannot dump the state store"
grep -q "$CANARY" state-dump.sql && fail "the secret is in the state store"
grep -q "$CANARY" "$T"/logs/*.log serve.err && fail "the secret is in a log"
pass "the secret's value is in no response, event, state row or log"

stop_serve
[ -z "$(pgrep -f "worker --run .* --state $T/state.db" || true)" ] || fail "workers outlived the server"
pass "server stopped; no worker left"
no_sanitizer_reports
pass "no sanitizer report from the server or its workers"

# ---- two processes: --role control and --role api on one state file ----
"$FERRY_BIN" serve --policy allow-all --role control --workers 1 --state "$T/split.db" --log-dir "$T/logs" > control.out 2> control.err &
CONTROL_PID=$!
EXTRA_PIDS="$CONTROL_PID"
mv serve.err serve-all.err
SERVE_STATE="$T/split.db" start_serve --role api
pipeline_yaml split "$T/split-out.db" > split.yaml
api POST /v1/pipelines --data-binary @split.yaml > /dev/null
[ "$CODE" = 201 ] || fail "api role: register: $CODE $BODY"
pipeline_yaml split2 "$T/split2-out.db" > split2.yaml
api POST /v1/pipelines --data-binary @split2.yaml > /dev/null
srun=$(api POST /v1/pipelines/split/runs | jq -r .id)
srun2=$(api POST /v1/pipelines/split2/runs | jq -r .id)
# --workers 1: never two running at once; the second waits for the first.
max=0
for _ in $(seq 1 1200); do
  states=$(api GET '/v1/runs?limit=2' | jq -r '[.runs[].state] | join(",")')
  running=$(printf '%s' "$states" | tr ',' '\n' | grep -c '^running$' || true)
  [ "$running" -gt "$max" ] && max=$running
  [ "$states" = "completed,completed" ] && break
  sleep 0.05
done
[ "$max" -le 1 ] || fail "--workers 1 ran $max runs at once"
wait_done "$srun" completed 1200
wait_done "$srun2" completed 1200
[ "$(api GET "/v1/runs/$srun2" | jq -r .started_us)" -ge "$(api GET "/v1/runs/$srun" | jq -r .ended_us)" ] \
  || fail "the second run started before the first ended"
same_table ref.db split-out.db orders || fail "split roles: destination differs"
same_table ref.db split2-out.db orders || fail "split roles: second destination differs"
curl -sS -H "Authorization: Bearer $TOKEN" "$BASE/metrics" | grep -q '^ferry_workers_started_total 0$' \
  || fail "the api role runs no control plane"
stop_serve
kill -TERM "$CONTROL_PID"; wait "$CONTROL_PID" || fail "control role exit: $(cat control.err)"
cat control.err >> serve.err
no_sanitizer_reports
pass "--role api and --role control as two processes: requested through one, run by the other, one at a time with --workers 1"
