#!/usr/bin/env bash
# ThreadSanitizer over the server's request paths (issue 19): `ferry serve` built with
# -fsanitize=thread (preset tsan; CTest tsan/serve_requests, registered only in that build)
# takes concurrent requests from several clients at once - pipeline registration, listings,
# run starts, run and event reads, live event streams, /metrics, secrets puts and listings -
# while its workers run. Asserted: every request answered, every run completed, and no
# ThreadSanitizer report from the server or a worker (the server's exit status and every
# byte of its stderr and the workers' logs).
source "$FERRY_SRC/tests/e2e/lib.sh"
source "$FERRY_SRC/tests/serve/lib.sh"
export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}"
openssl rand -hex 32 > "$T/key"
start_serve --secret-key "file:$T/key" --workers 2 --lease 30s
CLIENTS=6
ROUNDS=4

client() { # N: one client's requests, in order; any unexpected status is written to fail.N
  local n=$1 r code
  local auth=(-H "Authorization: Bearer $TOKEN")
  for r in $(seq 1 "$ROUNDS"); do
    printf 'version: 1\nname: p%s_%s\nsource: {type: sample, rows: 2000, seed: %s, resources: [{table: orders, mode: full}]}\nsink: {type: "null"}\n' \
      "$n" "$r" "$r" > "$T/p$n.yaml"
    code=$(curl -sS -m 30 -o /dev/null -w '%{http_code}' "${auth[@]}" --data-binary @"$T/p$n.yaml" "$BASE/v1/pipelines")
    case "$code" in 200|201) ;; *) echo "register p${n}_$r: $code" >> "$T/fail.$n" ;; esac
    code=$(curl -sS -m 30 -o "$T/run.$n" -w '%{http_code}' "${auth[@]}" -X POST "$BASE/v1/pipelines/p${n}_$r/runs")
    case "$code" in 201|202) ;; *) echo "start p${n}_$r: $code" >> "$T/fail.$n" ;; esac
    local id
    id=$(jq -r '.id // .run.id' "$T/run.$n")
    echo "$id" >> "$T/runs.$n"
    # a live stream, read for a moment while the others keep going
    curl -sS -m 2 -o /dev/null "${auth[@]}" "$BASE/v1/runs/$id/events?follow=1" 2>/dev/null || true
    for path in /v1/pipelines /v1/runs "/v1/runs/$id" "/v1/runs/$id/events?follow=0" /metrics /v1/secrets; do
      code=$(curl -sS -m 30 -o /dev/null -w '%{http_code}' "${auth[@]}" "$BASE$path")
      [ "$code" = 200 ] || echo "GET $path: $code" >> "$T/fail.$n"
    done
    code=$(printf 'value-%s-%s' "$n" "$r" | curl -sS -m 30 -o /dev/null -w '%{http_code}' "${auth[@]}" \
      -X PUT --data-binary @- "$BASE/v1/secrets/s$n")
    [ "$code" = 200 ] || echo "PUT secret s$n: $code" >> "$T/fail.$n"
  done
}

pids=()
for n in $(seq 1 "$CLIENTS"); do client "$n" & pids+=($!); done
for p in "${pids[@]}"; do wait "$p"; done
if ls "$T"/fail.* > /dev/null 2>&1; then fail "requests failed: $(cat "$T"/fail.* | head -20)"; fi
kill -0 "$SERVE_PID" 2>/dev/null || fail "the server died under concurrent requests: $(tail -40 "$T/serve.err")"
pass "$((CLIENTS * ROUNDS)) rounds of concurrent requests answered"

for id in $(cat "$T"/runs.*); do
  for _ in $(seq 1 600); do
    st=$(api GET "/v1/runs/$id" | jq -r .state)
    case "$st" in completed|failed|canceled) break ;; esac
    sleep 0.2
  done
  [ "$st" = completed ] || fail "run $id: $st $(tail -5 "$T/logs/run-$id.log" 2>/dev/null)"
done
pass "every run completed"

kill -TERM "$SERVE_PID"
set +e
wait "$SERVE_PID"
status=$?
set -e
SERVE_PID=""
if grep -a -q "ThreadSanitizer" "$T/serve.err" "$T"/logs/*.log 2>/dev/null; then
  grep -a -A30 "WARNING: ThreadSanitizer" "$T/serve.err" "$T"/logs/*.log | head -80
  fail "ThreadSanitizer reports (above)"
fi
[ "$status" = 0 ] || fail "ferry serve exited with status $status: $(tail -20 "$T/serve.err")"
pass "no ThreadSanitizer report from the server or its workers"
