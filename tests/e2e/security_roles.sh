#!/usr/bin/env bash
# Roles (docs/security.md): a --tokens file holding only SHA-256 hashes gives a viewer, an
# operator and an admin token. Every protected route from `ferry serve --routes` is called
# with each: a role below the route's answers 403 naming the token id and the role needed;
# a role at or above it never gets 401/403. Every mutating request leaves an audit.* event
# naming the token's id, and no token's plaintext is in any byte of the state files.
source "$(dirname "$0")/lib.sh"
source "$FERRY_SRC/tests/serve/lib.sh"
declare -A TOK RANK=([viewer]=1 [operator]=2 [admin]=3)
for r in viewer operator admin; do TOK[$r]="tok-$r-$RANDOM$RANDOM$RANDOM"; done
{
  echo "# id role hash"
  for r in viewer operator admin; do
    echo "id-$r $r sha256:$(printf '%s' "${TOK[$r]}" | sha256sum | cut -d' ' -f1)"
  done
} > tokens.txt
start_serve --role api --tokens tokens.txt
printf 'version: 1\nname: demo\nsource: {type: sample, rows: 10, resources: [{table: orders, mode: full}]}\nsink: {type: "null"}\n' > demo.yaml
curl -sS -o /dev/null -H "Authorization: Bearer ${TOK[admin]}" --data-binary @demo.yaml "$BASE/v1/pipelines"
n=0
while read -r method path need; do
  [ "$need" = public ] && continue
  url=$(printf '%s' "$path" | sed -e 's/{name}/demo/; s/{version}/abc/; s/{id}/1/; s/{file}/app.js/')
  case "$url" in */events) url="$url?follow=0" ;; esac
  for r in viewer operator admin; do
    body=()
    [ "$method" != GET ] && [ "$method" != DELETE ] && body=(--data-binary @demo.yaml)
    code=$(curl -sS -m 20 -o resp.json -w '%{http_code}' -X "$method" -H "Authorization: Bearer ${TOK[$r]}" "${body[@]}" "$BASE$url")
    if [ "${RANK[$r]}" -lt "${RANK[$need]}" ]; then
      [ "$code" = 403 ] && jq -e --arg id "id-$r" --arg need "$need" \
        '.error.code == "forbidden" and (.error.message | contains($id) and contains("needs " + $need))' resp.json > /dev/null \
        || fail "$r on $method $path (needs $need): $code $(cat resp.json)"
    else
      [ "$code" != 403 ] && [ "$code" != 401 ] || fail "$r on $method $path (needs $need): $code $(cat resp.json)"
    fi
    n=$((n + 1))
  done
done < <("$FERRY_BIN" serve --routes)
[ "$n" -ge 60 ] || fail "only $n route checks"
pass "$n role checks: below the route's role 403 naming the token id, at or above never 401/403"
stop_serve
q state.db "SELECT payload FROM events WHERE type = 'audit.denied'" | grep -q '"token":"id-viewer"' || fail "no audit.denied for the viewer"
q state.db "SELECT payload FROM events WHERE type = 'audit.request'" | grep -q '"token":"id-admin","method":"POST","path":"/v1/pipelines"' \
  || fail "no audit.request for the admin's POST /v1/pipelines: $(q state.db "SELECT payload FROM events WHERE type LIKE 'audit.%' LIMIT 3")"
q state.db "SELECT payload FROM events WHERE type = 'audit.request'" | grep -q '"token":"id-operator","method":"POST","path":"/v1/runs/{id}/cancel"' \
  || fail "no audit.request for the operator's cancel"
for r in viewer operator admin; do
  grep -qaF "${TOK[$r]}" state.db state.db-wal serve.out serve.err 2>/dev/null && fail "the $r token's plaintext is stored or logged"
done
pass "audit.request / audit.denied events name token ids; no token plaintext in the state files or logs"
