#!/usr/bin/env bash
# Secrets from the web UI (Chromium + playwright-core, tests/tools/ui_secrets.mjs): on the
# Secrets page a secret is stored, its value replaced, another stored and deleted, a bad name
# refused with the server's message; no value is ever shown back in the page. Then the API
# lists hk (not tmp), a served run whose HMAC transform keys on secret:hk hashes exactly as a
# reference `ferry run` keyed with the replacing value (so the UI stored that value, byte for
# byte), and no value is in any byte of the state files, the logs or an API response.
. "$(dirname "$0")/lib.sh"
. "$FERRY_SRC/tests/serve/lib.sh"
command -v /usr/bin/chromium > /dev/null || fail "chromium is not installed (scripts/install-deps.sh)"
[ -d "$FERRY_SRC/tests/tools/node_modules/playwright-core" ] || fail "playwright-core missing: npm ci --prefix tests/tools"
OUT="$(dirname "$FERRY_BIN")/test-artifacts/ui"
mkdir -p "$OUT"
V1="first-$RANDOM$RANDOM$RANDOM" V2="second-$RANDOM$RANDOM$RANDOM" V3="third-$RANDOM$RANDOM$RANDOM"
openssl rand -hex 32 > "$T/key"
hashed_yaml() { # NAME SINK KEYREF
  printf 'version: 1\nname: %s\nsource: {type: sample, rows: 300, seed: 5, resources: [{table: users, mode: full}]}\nsink: {type: sqlite, path: "%s", write: append}\ntransforms: [{resource: users, column: email, hash: hmac_sha256, key: "%s"}]\n' "$1" "$2" "$3"
}
hashed_yaml ref "$T/ref.db" env:HK > ref.yaml
HK="$V2" "$FERRY_BIN" run ref.yaml --state "$T/ref-state.db" --quiet > /dev/null || fail "reference run"
start_serve --secret-key "file:$T/key"
node "$FERRY_SRC/tests/tools/ui_secrets.mjs" "$BASE" "$TOKEN" "$V1" "$V2" "$V3" "$OUT" | tee ui.log
for step in "stored hk" "replaced hk" "deleted tmp"; do grep -qx "$step" ui.log || fail "UI step \"$step\" missing: $(cat ui.log)"; done
api GET /v1/secrets > /dev/null
printf '%s' "$BODY" | jq -e '[.secrets[] | select(.kind == "secret" and .stored) | .name] == ["hk"]' > /dev/null \
  || fail "stored secrets after the UI: $BODY"
printf '%s' "$BODY" | jq -e '.secrets[] | select(.name == "hk") | .updated_us >= .created_us' > /dev/null || fail "hk times: $BODY"
hashed_yaml served "$T/served.db" secret:hk > served.yaml
api POST /v1/pipelines --data-binary @served.yaml > /dev/null
[ "$CODE" = 201 ] || fail "register: $CODE $BODY"
run=$(api POST /v1/pipelines/served/runs | jq -r .id)
wait_done "$run" completed
same_table ref.db served.db users || fail "the run keyed with secret:hk hashes unlike the reference keyed with the replacing value"
[ "$(q "$T/served.db" "SELECT count(DISTINCT email) FROM users")" = 300 ] || fail "emails not hashed per row"
for f in $(sed -n 's/^screenshot: //p' ui.log); do [ -s "$f" ] || fail "empty screenshot $f"; done
stop_serve
for v in "$V1" "$V2" "$V3"; do
  grep -qF -- "$v" "$T"/state.db* "$T/responses.log" "$T/serve.out" "$T/serve.err" "$T"/logs/*.log 2>/dev/null \
    && fail "a secret value is in the state files, a log or a response"
done
no_sanitizer_reports
pass "UI: secret stored, replaced, another deleted, bad name refused; values never shown; secret:hk is the replacing value"
