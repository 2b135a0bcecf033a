#!/usr/bin/env bash
# conn_reset between the CLI client (`--server URL`: `ferry pipelines apply`, `ferry runs
# start`, `ferry runs watch`) and `ferry serve`, through tests/tools/tcpproxy.mjs:
#   a. the connection reset before the run-starting POST reaches the server: the client's
#      retry (same Idempotency-Key) requests the run once; with retries off (FERRY_CLIENT_RETRIES=0)
#      the command fails naming host:port and the key, no run exists, and the command it
#      suggests requests exactly one;
#   b. a black hole (bytes acknowledged, nothing answered): the client gives up after
#      FERRY_CLIENT_TIMEOUT per attempt with one message naming host:port ("Timeout"), for
#      `runs start` and `pipelines apply`; `runs watch` after 30 s without a byte (the server
#      writes a keep-alive every 15 s); no run;
#   c. the connection cut right after the server received the POST, before the answer: the
#      retry finds the run the first attempt started (exactly one run); with retries off the
#      command fails with the key and the suggested command gives that same run, never a
#      second one;
#   d. the proxy refusing connections: a clear error naming host:port, no run.
# Asserted each time: exit code, message, the API token in no output, and the server's run
# list read directly (not through the proxy).
. "$(dirname "$0")/../e2e/lib.sh"
. "$FERRY_SRC/tests/serve/lib.sh"
. "$FERRY_SRC/tests/tools/tcpproxy.bash"

ROWS=200
start_serve --workers 1
px_start "$PORT"
SERVER="http://127.0.0.1:$PX_PORT"
unset FERRY_SERVER

sample_yaml cr "$T/dest.db" > p.yaml
expect_exit 0 ferry pipelines apply p.yaml --server "$SERVER"
[[ $OUT == *"pipeline cr: version "*"(new version)"* ]] || fail "apply through the proxy: $OUT"

hex() { printf '%s' "$1" | od -An -tx1 | tr -d ' \n'; }
POST_RUNS=$(hex "POST /v1/pipelines/cr/runs")
runs() { api GET "/v1/runs?pipeline=cr&limit=1000" | jq ".runs | length"; } # the server, directly
no_token() { [[ $1 != *"$TOKEN"* ]] || fail "$2: the API token in the client's output"; }
names_peer() { [[ $1 == *"127.0.0.1:$PX_PORT"* ]] || fail "$2: the message does not name 127.0.0.1:$PX_PORT: $1"; }
suggested_key() { # the key the failure message suggests retrying with
  printf '%s' "$1" | grep -o -- '--idempotency-key cli-[0-9a-f]*' | head -n 1 | sed 's/.* //'
}

# a. reset before the request reaches the server, the client retries
n0=$(runs)
ctl "/cut?dir=up&hex=$POST_RUNS&when=before" > /dev/null
expect_exit 0 ferry runs start cr --server "$SERVER"
no_token "$OUT" "a"
[ "$(ctl /stats | jq .cuts)" = 1 ] || fail "a: the proxy did not cut"
[ "$(runs)" = $((n0 + 1)) ] || fail "a: $(($(runs) - n0)) runs requested by one command (expected 1): $OUT"
pass "a. reset before the POST reached the server, retried with the same key: one run ($OUT)"

# a, retries off: the failure names the peer and the key; no run; the suggestion requests one
n0=$(runs)
ctl "/cut?dir=up&hex=$POST_RUNS&when=before" > /dev/null
FERRY_CLIENT_RETRIES=0 expect_exit 1 ferry runs start cr --server "$SERVER"
no_token "$OUT" "a (no retry)"
names_peer "$OUT" "a (no retry)"
[ "$(printf '%s\n' "$OUT" | grep -c .)" = 1 ] || fail "a (no retry): more than one line: $OUT"
key=$(suggested_key "$OUT")
[ -n "$key" ] || fail "a (no retry): the message suggests no idempotency key: $OUT"
[ "$(runs)" = "$n0" ] || fail "a (no retry): a run exists although the request never reached the server"
expect_exit 0 ferry runs start cr --server "$SERVER" --idempotency-key "$key"
[[ $OUT == *"requested"* ]] && [[ $OUT != *"already"* ]] || fail "a (no retry): the suggested command: $OUT"
[ "$(runs)" = $((n0 + 1)) ] || fail "a (no retry): the suggested command did not request exactly one run"
pass "a. without retries: exit 1 naming 127.0.0.1:$PX_PORT and the key, no run; the suggested command requested one"

# b. black hole
n0=$(runs)
ctl /stall > /dev/null
FERRY_CLIENT_TIMEOUT=2 FERRY_CLIENT_RETRIES=1 expect_exit 1 timeout 60 "$FERRY_BIN" runs start cr --server "$SERVER"
no_token "$OUT" "b"
names_peer "$OUT" "b"
[[ $OUT == *"Timeout was reached"* ]] && [[ $OUT == *"(2 attempts)"* ]] || fail "b: not a timeout after 2 attempts: $OUT"
[ "$(printf '%s\n' "$OUT" | grep -c .)" = 1 ] || fail "b: more than one line: $OUT"
b_runs=$OUT
FERRY_CLIENT_TIMEOUT=2 expect_exit 1 timeout 60 "$FERRY_BIN" pipelines apply p.yaml --server "$SERVER"
no_token "$OUT" "b (apply)"
names_peer "$OUT" "b (apply)"
[[ $OUT == *"Timeout was reached"* ]] || fail "b (apply): not a timeout: $OUT"
# an event stream has no overall deadline (a run may take hours) but the server writes a
# keep-alive every 15 s: a stream silent for 30 s (or FERRY_CLIENT_TIMEOUT, when longer) is given up
first_run=$(api GET "/v1/runs?pipeline=cr&limit=1000" | jq '.runs[-1].id')
FERRY_CLIENT_TIMEOUT=2 expect_exit 1 timeout 120 "$FERRY_BIN" runs watch "$first_run" --server "$SERVER"
no_token "$OUT" "b (watch)"
names_peer "$OUT" "b (watch)"
[[ $OUT == *"Timeout was reached"* ]] || fail "b (watch): not a timeout: $OUT"
ctl /pass > /dev/null
[ "$(runs)" = "$n0" ] || fail "b: a run was requested through the black hole"
pass "b. black hole: runs start, pipelines apply and runs watch gave up (exit 1): $b_runs"

# c. cut after the server received the POST, the client retries
n0=$(runs)
ctl "/cut?dir=up&hex=$POST_RUNS&when=after" > /dev/null
expect_exit 0 ferry runs start cr --server "$SERVER" --json
no_token "$OUT" "c"
[ "$(ctl /stats | jq .cuts)" = 3 ] || fail "c: the proxy did not cut"
[ "$(runs)" = $((n0 + 1)) ] || fail "c: $(($(runs) - n0)) runs requested by one command (expected 1): $OUT"
run=$(json_field "$OUT" .id)
[ "$(api GET "/v1/runs?pipeline=cr&limit=1" | jq '.runs[0].id')" = "$run" ] || fail "c: the client printed run $run, the server's newest is another"
pass "c. cut after the server received the POST: the retry found run $run (existed: $(json_field "$OUT" .existed)), one run"

# c, retries off: the user finds the run with the suggested command, no second run
n0=$(runs)
ctl "/cut?dir=up&hex=$POST_RUNS&when=after" > /dev/null
FERRY_CLIENT_RETRIES=0 expect_exit 1 ferry runs start cr --server "$SERVER"
no_token "$OUT" "c (no retry)"
names_peer "$OUT" "c (no retry)"
key=$(suggested_key "$OUT")
[ -n "$key" ] || fail "c (no retry): the message suggests no idempotency key: $OUT"
c_msg=$OUT
# the server acted on the request (it received all of it); wait for the run to show
for _ in $(seq 1 100); do [ "$(runs)" = "$n0" ] || break; sleep 0.05; done
[ "$(runs)" = $((n0 + 1)) ] || fail "c (no retry): the server did not start the run it received"
first=$(api GET "/v1/runs?pipeline=cr&limit=1" | jq '.runs[0].id')
expect_exit 0 ferry runs start cr --server "$SERVER" --idempotency-key "$key" --json
[ "$(json_field "$OUT" .id)" = "$first" ] && [ "$(json_field "$OUT" .existed)" = true ] || fail "c (no retry): the suggested command did not give run $first: $OUT"
[ "$(runs)" = $((n0 + 1)) ] || fail "c (no retry): a second run was started"
pass "c. without retries: exit 1 ($c_msg); the suggested command gave the same run $first, existed: true; one run"

# d. refused
n0=$(runs)
ctl /refuse > /dev/null
FERRY_CLIENT_RETRIES=1 expect_exit 1 ferry runs start cr --server "$SERVER"
no_token "$OUT" "d"
names_peer "$OUT" "d"
ctl /pass > /dev/null
[ "$(runs)" = "$n0" ] || fail "d: a run through a refusing proxy"
pass "d. refused: exit 1: $OUT"

# every requested run completes (the server kept working through it all)
for id in $(api GET "/v1/runs?pipeline=cr&limit=1000" | jq -r '.runs[].id'); do wait_state "$id" completed 600; done
stop_serve
no_sanitizer_reports
grep -rqF "$TOKEN" "$T"/serve.out "$T"/serve.err "$T"/logs 2> /dev/null && fail "the API token in the server's or a worker's output"
pass "every run completed; no token in any log"
