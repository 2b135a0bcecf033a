#!/usr/bin/env bash
# `ferry serve --dispatch kubernetes` against a recorded Kubernetes API conversation
# (tests/fixtures/k8s/dispatch.json) replayed over HTTPS by tests/tools/k8s_fixture.mjs with
# a self-signed certificate made here (its CA passed with FERRY_K8S_CA_FILE). The fixture
# server fails the test on any request that differs from the recording (method, path,
# bearer token, Job body). The pods of the Jobs are played by `ferry worker --run ID`
# processes on this machine, on the same state. Asserts:
#   - the Job of a requested run is created with the recorded spec and the current token;
#   - a restarted control plane asking for the same Job again gets 409 and adopts it, with
#     the rotated token (the token file is re-read for every request); restarted while the
#     run runs, it finds the Job by label and watches it;
#   - a Job that fails while its attempt runs loses the run through the reaper's path
#     (worker.lost, run.failed), the run is retried (retries: 1) as a new Job, and the
#     failed Job is deleted; the fenced "pod" stops;
#   - when the retried run completes, its Job is deleted; the destination equals a
#     reference run (set equality);
#   - a distributed pipeline with worker.pods: 3 gets an Indexed Job of 3 pull workers; canceling the
#     run deletes it;
#   - 503 leaves the run requested and the Job is asked for again at the next pass;
#   - 403 Forbidden fails the run with one message naming the API host, the Job and the
#     API's Status.message; the token appears in no log and no API answer;
#   - a Job that fails before its pod began fails the run; a Job deleted under a running
#     run loses it at once (not retried with retries: 0);
#   - every Job body ferry sent is valid against the Kubernetes API schemas.
. "$(dirname "$0")/lib.sh"
. "$FERRY_SRC/tests/serve/lib.sh"

command -v node > /dev/null || fail "node is needed"
[ -d "$FERRY_SRC/tests/tools/node_modules/kubernetes-models" ] || fail "run: npm ci --prefix tests/tools"
TOOLS="$FERRY_SRC/tests/tools"

# ---- a self-signed API server certificate for 127.0.0.1 ----
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$T/api.key" -out "$T/api.crt" -days 2 \
  -subj "/CN=127.0.0.1" -addext "subjectAltName=IP:127.0.0.1" 2> /dev/null || fail "openssl"
K8S_TOKEN="sa-token-$RANDOM$RANDOM$RANDOM"
printf '%s\n' "$K8S_TOKEN" > "$T/token"
mkdir -p "$T/k8s"
node "$TOOLS/k8s_fixture.mjs" --fixture "$FERRY_SRC/tests/fixtures/k8s/dispatch.json" \
  --cert "$T/api.crt" --key "$T/api.key" --token-file "$T/token" --out "$T/k8s" \
  --ports "$T/k8s.ports" > "$T/fixture.log" 2>&1 &
EXTRA_PIDS="$EXTRA_PIDS $!"
for _ in $(seq 1 100); do [ -s "$T/k8s.ports" ] && break; sleep 0.1; done
read -r API_PORT CTL_PORT < "$T/k8s.ports" || fail "the fixture server did not start: $(cat "$T/fixture.log")"
CTL="http://127.0.0.1:$CTL_PORT"

export FERRY_K8S_API="https://127.0.0.1:$API_PORT" FERRY_K8S_TOKEN_FILE="$T/token"
export FERRY_K8S_CA_FILE="$T/api.crt" FERRY_K8S_NAMESPACE=ferry-test
unset KUBERNETES_SERVICE_HOST FERRY_DISPATCH FERRY_IMAGE FERRY_K8S_SECRET FERRY_K8S_SERVICE_ACCOUNT \
  FERRY_K8S_TTL FERRY_K8S_DEADLINE FERRY_IMAGE_PULL_POLICY FERRY_K8S_ENV_SECRET
export FERRY_LOG=info # the dispatcher says when it adopts a Job
SERVE_ARGS=(--dispatch kubernetes --image ghcr.io/ferry/ferry:test --sweep 200ms --lease 10s)

phase() { curl -sf -X POST "$CTL/phase/$1" > /dev/null || fail "fixture phase $1"; }
# start_serve (tests/serve/lib.sh) with a longer start-up wait on this shared machine, and a
# message naming what the process was doing when it did not come up.
start_k8s_serve() {
  echo "---- start $(date +%T.%N)" >> "$T/serve.all"; "$FERRY_BIN" serve --policy allow-all --listen 127.0.0.1:0 --state "$T/state.db" "${SERVE_ARGS[@]}" > "$T/serve.out" 2> >(tee -a "$T/serve.all" > "$T/serve.err") &
  SERVE_PID=$!
  for _ in $(seq 1 600); do
    grep -q 'listening on' "$T/serve.out" 2>/dev/null && break
    kill -0 "$SERVE_PID" 2>/dev/null || fail "ferry serve exited: $(cat "$T/serve.err")"
    sleep 0.1
  done
  if ! grep -q 'listening on' "$T/serve.out"; then
    for t in /proc/"$SERVE_PID"/task/*; do echo "$t: $(cat "$t/comm") $(cat "$t/wchan" 2>/dev/null) $(grep State "$t/status")"; done >&2
    fail "ferry serve did not start within 60 s: $(cat "$T/serve.out" "$T/serve.err")"
  fi
  PORT=$(grep -o 'http://127.0.0.1:[0-9]*' "$T/serve.out" | sed 's/.*://')
  BASE="http://127.0.0.1:$PORT"
}
# seen "METHOD NAME": how many times the current or a past phase saw it (summed).
seen() {
  curl -sf "$CTL/seen" | jq -r --arg m "$1" '[.counts | to_entries[] | select(.key | endswith($m)) | .value] | add // 0'
}
wait_seen() { # PATTERN [MIN]
  for _ in $(seq 1 300); do [ "$(seen "$1")" -ge "${2:-1}" ] && return 0; sleep 0.1; done
  fail "the dispatcher never sent $1 (fixture: $(curl -s "$CTL/verify") $(curl -s "$CTL/seen"))"
}
fixture_ok() {
  local v
  v=$(curl -sf "$CTL/verify")
  [ "$(jq '.errors | length' <<< "$v")" = 0 ] || fail "requests differ from the recording: $(jq -c .errors <<< "$v")"
}
JOBS=/apis/batch/v1/namespaces/ferry-test/jobs

# Flags: the value is checked; kubernetes needs an image.
expect_exit 2 "$FERRY_BIN" serve --dispatch nomad --state "$T/x.db"
grep -q 'must be local, pull or kubernetes' <<< "$OUT" || fail "bad --dispatch: $OUT"
expect_exit 2 env FERRY_DISPATCH=kubernetes "$FERRY_BIN" serve --role control --state "$T/x.db"
grep -q 'needs the worker image' <<< "$OUT" || fail "no image: $OUT"
pass "--dispatch checked; kubernetes without an image refused"

# ---- pipelines: the first pod is slowed (50 ms per batch, 120 batches) so its Job can fail while it runs ----
cat > demo.yaml <<EOF
version: 1
name: k8sdemo
source:
  type: sample
  rows: 60000
  seed: 7
  resources:
    - table: orders
      mode: full
sink:
  type: sqlite
  path: $T/out.db
  write: upsert
batch: {rows: 500}
worker: {cpu: 250m, memory: 128Mi, cpu_limit: "1", memory_limit: 512Mi}
EOF
sed -e "s#$T/out.db#$T/ref.db#" -e 's/name: k8sdemo/name: ref/' demo.yaml > ref.yaml
"$FERRY_BIN" run ref.yaml --state "$T/ref-state.db" --quiet > /dev/null
cat > shard.yaml <<EOF
version: 1
name: k8sshard
source: {type: sample, rows: 1000, seed: 7, resources: [{table: orders, mode: full}]}
sink: {type: sqlite, path: $T/shard.db, write: upsert}
worker: {pods: 3, memory: 1Gi}
distribute: true
EOF

start_k8s_serve
api POST '/v1/pipelines?retries=1' --data-binary @demo.yaml > /dev/null
[ "$CODE" = 201 ] || fail "register k8sdemo: $CODE $BODY"

# ---- create ----
run=$(api POST /v1/pipelines/k8sdemo/runs | jq -r .id)
[ "$run" = 1 ] || fail "first run id $run (the fixture records run 1)"
wait_seen "POST $JOBS"
sleep 0.5 # a few polls of the Job
[ "$(run_state 1)" = requested ] || fail "run 1 is $(run_state 1) before any pod started"
fixture_ok
[ -s "$T/k8s/ferry-run-1-1.json" ] || fail "no Job body saved"
pass "Job ferry-run-1-1 created with the recorded spec, bearer token sent; polled while the pod starts"

# ---- restart the control plane; the token rotates; the same Job again -> 409, adopted ----
stop_serve
phase adopt
K8S_TOKEN="sa-token-rotated-$RANDOM$RANDOM$RANDOM"
printf '%s\n' "$K8S_TOKEN" > "$T/token.new" && mv "$T/token.new" "$T/token"
start_k8s_serve
wait_seen "adopt POST $JOBS"
for _ in $(seq 1 100); do grep -q 'ferry-run-1-1 already exists; adopted' "$T/serve.err" && break; sleep 0.1; done
grep -q 'ferry-run-1-1 already exists; adopted' "$T/serve.err" || fail "409 not adopted: $(tail -5 "$T/serve.err")"
[ "$(run_state 1)" = requested ] || fail "run 1 after the 409: $(run_state 1)"
fixture_ok
pass "restarted control plane: 409 AlreadyExists adopted (no second Job), rotated token re-read"

# ---- the pod starts the run; then the Job fails ----
FERRY_FAILPOINTS="after_sink_apply=sleep(50)" "$FERRY_BIN" worker --run 1 --state "$T/state.db" \
  > "$T/pod1.log" 2>&1 &
POD1=$!
EXTRA_PIDS="$EXTRA_PIDS $POD1"
wait_rows 1
[ "$(run_state 1)" = running ] || fail "run 1 not running"

# ---- restart while the run runs: nothing to create; its Job is found by label ----
stop_serve
phase relist
start_k8s_serve
wait_seen "relist GET $JOBS?labelSelector=app.kubernetes.io%2Fmanaged-by%3Dferry"
wait_seen "relist GET $JOBS/ferry-run-1-1"
[ "$(run_state 1)" = running ] || fail "run 1 after the restart: $(run_state 1)"
fixture_ok
pass "restarted while the run runs: Jobs listed by label (managed-by=ferry), ferry-run-1-1 watched again, none created"

phase failed
wait_seen "failed DELETE $JOBS/ferry-run-1-1"
wait_seen "failed POST $JOBS"
set +e
wait "$POD1"
pod_rc=$?
set -e
[ "$pod_rc" != 0 ] || fail "the fenced pod's worker exited 0: $(tail -3 "$T/pod1.log")"
api GET "/v1/runs/1/events?follow=0" > ev1.txt
grep -q 'Kubernetes Job ferry-run-1-1 failed: BackoffLimitExceeded' ev1.txt || fail "no loss naming the Job: $(grep -o 'worker.lost.\{0,300\}' ev1.txt | head -3)"
grep -q '^event: worker.lost$' ev1.txt || fail "no worker.lost event"
api GET /v1/runs/1 > r1.json
[ "$(jq -r .retries r1.json)" = 1 ] || fail "retries: $(cat r1.json)"
[ "$(jq -r .state r1.json)" = requested ] || fail "run 1 after the loss: $(cat r1.json)"
[ "$(jq -r .attempt r1.json)" = 2 ] || fail "fencing attempt: $(cat r1.json)"
# The tracker folds the reaper's run.failed after the retry was requested: the retry stays.
sleep 1
[ "$(run_state 1)" = requested ] || fail "the retried run became $(run_state 1) before its pod started"
fixture_ok
pass "failed Job: run lost through the reaper (attempt 1 fenced, pod stopped with $pod_rc), retried as Job ferry-run-1-3, Job ferry-run-1-1 deleted"

# ---- the retry's pod completes the run; its Job is deleted ----
phase complete
"$FERRY_BIN" worker --run 1 --state "$T/state.db" > "$T/pod3.log" 2>&1 || fail "pod of attempt 3: $(tail -5 "$T/pod3.log")"
wait_state 1 completed
wait_seen "complete DELETE $JOBS/ferry-run-1-3"
same_table ref.db out.db orders || fail "destination differs from the reference run"
fixture_ok
pass "retry completed (destination equals the reference); Job ferry-run-1-3 deleted (propagationPolicy Background)"

# ---- a sharded pipeline: an Indexed Job of pull workers; cancel deletes it ----
phase sharded
api POST /v1/pipelines --data-binary @shard.yaml > /dev/null
[ "$CODE" = 201 ] || fail "register k8sshard: $CODE $BODY"
run2=$(api POST /v1/pipelines/k8sshard/runs | jq -r .id)
[ "$run2" = 2 ] || fail "second run id $run2"
wait_seen "sharded POST $JOBS"
api POST /v1/runs/2/cancel > /dev/null
[ "$CODE" = 202 ] || [ "$CODE" = 200 ] || fail "cancel run 2: $CODE $BODY"
wait_state 2 canceled
wait_seen "sharded DELETE $JOBS/ferry-run-2-1"
fixture_ok
pass "worker.pods: 3 -> Indexed Job (completions = parallelism = 3, worker --pull --run 2); deleted when canceled"

# ---- 503: the run stays requested and the Job is asked for again ----
phase unavailable
run3=$(api POST /v1/pipelines/k8sdemo/runs | jq -r .id)
[ "$run3" = 3 ] || fail "third run id $run3"
wait_seen "unavailable POST $JOBS" 2
[ "$(run_state 3)" = requested ] || fail "run 3 after a 503 and a retry: $(run_state 3)"
grep -q 'creating Job ferry-run-3-1 in namespace ferry-test: HTTP 503: ServiceUnavailable' "$T/serve.err" \
  || fail "the 503 was not logged: $(tail -5 "$T/serve.err")"
api POST /v1/runs/3/cancel > /dev/null
wait_state 3 canceled
wait_seen "unavailable DELETE $JOBS/ferry-run-3-1"
fixture_ok
pass "503 ServiceUnavailable: run kept requested, Job created at the next try, deleted when canceled"

# ---- 403: one clear error on the run ----
phase forbidden
run4=$(api POST /v1/pipelines/k8sdemo/runs | jq -r .id)
[ "$run4" = 4 ] || fail "fourth run id $run4"
wait_state 4 failed
msg=$(api GET /v1/runs/4 | jq -r .error)
for want in "Kubernetes API 127.0.0.1:$API_PORT" "Job ferry-run-4-1" "namespace ferry-test" "HTTP 403" \
  'cannot create resource "jobs" in API group "batch"'; do
  grep -qF "$want" <<< "$msg" || fail "the 403 error lacks '$want': $msg"
done
api GET "/v1/runs/4/events?follow=0" | grep -q '^event: run.failed$' || fail "no run.failed event for run 4"
fixture_ok
pass "403 Forbidden: run failed with \"$msg\""

# ---- a Job that fails before its pod began the run: the run fails (it would stay requested) ----
sed -e "s#$T/out.db#$T/once.db#" -e 's/name: k8sdemo/name: k8sonce/' demo.yaml > once.yaml
api POST /v1/pipelines --data-binary @once.yaml > /dev/null
[ "$CODE" = 201 ] || fail "register k8sonce: $CODE $BODY"
phase unstarted
run5=$(api POST /v1/pipelines/k8sonce/runs | jq -r .id)
[ "$run5" = 5 ] || fail "fifth run id $run5"
wait_state 5 failed
msg=$(api GET /v1/runs/5 | jq -r .error)
grep -qF "Kubernetes Job ferry-run-5-1 failed: DeadlineExceeded: Job was active longer than specified deadline before starting the run" <<< "$msg" \
  || fail "run 5's error: $msg"
wait_seen "unstarted DELETE $JOBS/ferry-run-5-1"
fixture_ok
pass "a Job that failed before its pod started the run: run failed (\"$msg\"), Job deleted"

# ---- a Job deleted while its run runs: lost at once, not retried (retries 0) ----
phase running6
run6=$(api POST /v1/pipelines/k8sonce/runs | jq -r .id)
[ "$run6" = 6 ] || fail "sixth run id $run6"
wait_seen "running6 POST $JOBS"
FERRY_FAILPOINTS="after_sink_apply=sleep(50)" "$FERRY_BIN" worker --run 6 --state "$T/state.db" \
  > "$T/pod6.log" 2>&1 &
POD6=$!
EXTRA_PIDS="$EXTRA_PIDS $POD6"
wait_rows 6
phase gone
wait_state 6 failed
set +e
wait "$POD6"
pod_rc=$?
set -e
[ "$pod_rc" != 0 ] || fail "the fenced pod of run 6 exited 0"
api GET "/v1/runs/6/events?follow=0" > ev6.txt
grep -q 'Kubernetes Job ferry-run-6-1 was deleted' ev6.txt || fail "no loss naming the deleted Job: $(grep -o 'worker.lost.\{0,300\}' ev6.txt | head -3)"
sleep 0.6 # a few more passes: nothing more is asked about the Job
[ "$(run_state 6)" = failed ] || fail "run 6 with retries 0 became $(run_state 6)"
[ "$(api GET /v1/runs/6 | jq -r .retries)" = 0 ] || fail "run 6 was retried"
fixture_ok
pass "Job deleted under a running run: lost at once (worker.lost naming it), not retried, pod fenced ($pod_rc)"

# ---- the token never leaks; every Job body sent is valid against the API schemas ----
for f in "$T/serve.err" "$T/serve.out" "$T/responses.log" "$T"/pod*.log; do
  grep -q "sa-token" "$f" && fail "a service account token appears in $f"
done
sqlite3 -cmd ".timeout 10000" "$T/state.db" .dump > state-dump.sql || fail "cannot dump the state store"
grep -q "sa-token" state-dump.sql && fail "a token is in the state"
node "$TOOLS/validate_k8s.mjs" "$T"/k8s/ferry-run-*.json > validate.out || fail "invalid Job bodies: $(cat validate.out)"
[ "$(ls "$T"/k8s/ferry-run-*.json | wc -l)" = 7 ] || fail "expected 7 Job bodies: $(ls "$T/k8s")"
stop_serve
fixture_ok
no_sanitizer_reports
grep -hE 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:' "$T"/pod*.log "$T/serve.all" && fail "sanitizer report in a pod or an earlier serve"
pass "no token in logs, answers or state; the 7 Job bodies sent are valid Kubernetes objects"
