#!/usr/bin/env bash
# labels: asan
# Hostile request bodies and paths against `ferry serve`: a YAML alias bomb, JSON nested 100k
# deep, random bytes, NUL bytes, a 100 kB idempotency key, odd names, numbers that overflow,
# percent-encoded NULs. Every answer is a JSON error with a 4xx status, the server keeps
# answering, and (under the sanitizer build) reports nothing.
. "$(dirname "$0")/lib.sh"
. "$FERRY_SRC/tests/serve/lib.sh"
start_serve

python3 - > bomb.yaml <<'PY'
print("a: &a [x, x, x, x, x, x, x, x, x, x]")
prev = "a"
for i in range(1, 12):
    n = "b%d" % i
    print("%s: &%s [%s]" % (n, n, ", ".join(["*" + prev] * 10)))
    prev = n
print("version: 1\nname: bomb\nsource: {type: sample, rows: 1, resources: [{table: orders}]}\nsink: {type: null}")
PY
python3 -c "print('[' * 100000 + ']' * 100000)" > deep.txt
python3 -c "print('{\"a\":' * 50000 + '1' + '}' * 50000)" > deepobj.json
python3 -c "import json; print(json.dumps({'idempotency_key': 'x' * 100000}))" > longkey.json
printf '{"idempotency_key":"a\\u0000b"}' > nul.json
head -c 5000 /dev/urandom > rand.bin
printf 'version: 1\nname: "\\u00e9t\\u00e9 \\"q\\" ; DROP"\nsource: {type: sample, rows: 10, resources: [{table: orders}]}\nsink: {type: null}\n' > uni.yaml
printf 'version: 1\nname: n\nsource: {type: sample, rows: 99999999999999999999999, resources: [{table: orders}]}\nsink: {type: null}\n' > big.yaml
printf '\xef\xbb\xbf\xff\xfe{"idempotency_key": "k"}' > badutf.json

check() { # METHOD PATH FILE
  api "$1" "$2" --max-time 30 --data-binary @"$3" > /dev/null || fail "$1 $2 with $3: no answer (server down?)"
  case "$CODE" in 4??) ;; *) fail "$1 $2 with $3: status $CODE: $(printf '%s' "$BODY" | head -c 300)";; esac
  printf '%s' "$BODY" | jq -e '.error.code and .error.message' > /dev/null || fail "$1 $2 with $3: not a JSON error"
}
n=0
for f in bomb.yaml deep.txt deepobj.json rand.bin uni.yaml badutf.json; do
  for p in /v1/pipelines /v1/connectors/validate /v1/connectors/discover; do check POST "$p" "$f"; n=$((n + 1)); done
done
# Connector keys are read when the connector opens: discover refuses what registering keeps.
check POST /v1/connectors/discover big.yaml
printf '%s' "$BODY" | jq -e '.error.message | contains("rows")' > /dev/null || fail "discover names the key: $BODY"
for f in deep.txt deepobj.json longkey.json nul.json rand.bin badutf.json; do
  check POST /v1/pipelines/uni/runs "$f"; check POST /v1/schedules "$f"; check PATCH /v1/schedules/1 "$f"
  check POST /v1/runs/1/pause "$f"; n=$((n + 4))
done
for path in "/v1/runs/99999999999999999999999" "/v1/runs/-1" "/v1/runs/1/events?after=abc" \
            "/v1/pipelines/%00x" "/v1/pipelines/a%2Fb/versions" "/v1/schedules/0x10" "/ui/..%2F..%2Fetc%2Fpasswd" \
            "/v1/runs?limit=0" "/v1/runs?limit=99999999999999999999" "/v1/runs?before=-5"; do
  got=$(curl -sS -o resp -w '%{http_code}' -H "Authorization: Bearer $TOKEN" --max-time 10 "$BASE$path")
  case "$got" in 4??) ;; *) fail "GET $path: $got $(head -c 200 resp)";; esac
  n=$((n + 1))
done
[ "$(curl -s -o /dev/null -w '%{http_code}' "$BASE/livez")" = 200 ] || fail "the server stopped answering"
stop_serve
no_sanitizer_reports
pass "$n hostile requests answered with JSON 4xx errors; the server kept running"
