#!/usr/bin/env bash
# The iceberg sink's REST catalog client with OAuth2 client credentials
# (`catalog_credential: env:…` = client_id:client_secret): tests/tools/rest_catalog.mjs runs
# the token endpoint (POST /v1/oauth/tokens, form-encoded client credentials grant) and only
# takes the tokens it issued, unexpired. Tables are read back by icebird.
#   1. tokens that live 6 s and a run that waits 5.5 s before its catalog commit: the client
#      renews the token before it expires (a second token request, no 401), rows equal the
#      source; the scope sent is the configured one;
#   2. every token revoked before a run: the catalog answers 401 once, the client asks for a
#      new token and sends the request again; rows exact;
#   3. a wrong secret: one message (HTTP 401 invalid_client, "check catalog_credential"), exit
#      non-zero, no table; `expire --pipeline` authenticates the same way;
#   4. neither the secret nor any issued token appears in output, debug log or state;
#   5. bad config: catalog_token and catalog_credential together, catalog_scope without a
#      credential, a token endpoint that is no URL or holds a password: exit 2 naming the key
#      (never the password), nothing sent.
. "$(dirname "$0")/lib.sh"
. "$FERRY_SRC/tests/tools/iceberg_lib.sh"
export REST_CLIENT_ID="ferry-client" REST_CLIENT_SECRET="secret-canary-$RANDOM$RANDOM" REST_TOKEN_TTL=6
export REST_CRED="$REST_CLIENT_ID:$REST_CLIENT_SECRET"
rest_start "$T/rest"
SINK=("type: iceberg" "warehouse: $WH" "namespace: db" "catalog: rest" "catalog_uri: \"$REST_URI\""
      "catalog_credential: env:REST_CRED" "catalog_scope: \"catalog lake:write\"")
meta_file() { basename "$(jq -r --arg k "db"$'\x1f'"$1" '.tables[$k]' "$T/rest/catalog.json")"; }
rest_orders() { # COPIES
  nodetool "$READ" "$WH" db orders "$(meta_file orders)" > ib.jsonl || fail "icebird could not read db.orders"
  python3 compare.py "$T/ref.db" icebird ib.jsonl "$1" || fail "icebird rows differ from the source"
}
tokens() { grep -c '^POST /v1/oauth/tokens 200$' "$T/rest/requests.log" || true; }

# ---- 1. renewal before expiry ---------------------------------------------------------------------
pipeline app.yaml app "$ROWS" "${SINK[@]}"
expect_exit 0 env FERRY_FAILPOINTS='iceberg_before_catalog_commit=sleep(5500)@1' FERRY_LOG=debug \
  "$FERRY_BIN" run app.yaml --quiet
echo "$OUT" > run1.log
[ "$(tokens)" -ge 2 ] || fail "the token should have been renewed: $(cat "$T/rest/requests.log")"
! grep -v oauth "$T/rest/requests.log" | grep -q ' 401$' || fail "a catalog request went with an expired token: $(cat "$T/rest/requests.log")"
grep -q ' catalog lake:write$' "$T/rest/tokens.log" || fail "scope not sent: $(cut -d' ' -f2- "$T/rest/tokens.log")"
rest_orders 1
pass "OAuth2: token obtained, renewed before it expired, no 401; rows equal the source"

# ---- 2. a revoked token -----------------------------------------------------------------------------
before=$(tokens)
: > "$T/rest/requests.log"
touch "$T/rest/revoke-tokens"
expect_exit 0 env FERRY_LOG=debug "$FERRY_BIN" run app.yaml --quiet
echo "$OUT" > run2.log
[ "$(grep -c ' 401$' "$T/rest/requests.log")" = 1 ] || fail "want exactly one 401: $(cat "$T/rest/requests.log")"
awk '/ 401$/ {seen=1; next} seen {print; exit}' "$T/rest/requests.log" | grep -qx 'POST /v1/oauth/tokens 200' \
  || fail "the 401 was not followed by a token request: $(cat "$T/rest/requests.log")"
rest_orders 2
pass "OAuth2: a revoked token: one 401, a new token, the request sent again; rows exact"

# ---- 3. a wrong secret ------------------------------------------------------------------------------
: > "$T/rest/requests.log"
pipeline bad.yaml bad 10 "type: iceberg" "warehouse: $T/wbad" "namespace: db" "catalog: rest" \
  "catalog_uri: \"$REST_URI\"" "catalog_credential: env:BAD_CRED"
set +e
OUT=$(BAD_CRED="$REST_CLIENT_ID:wrong-canary-456" "$FERRY_BIN" run bad.yaml --quiet 2>&1)
st=$?
set -e
[ "$st" != 0 ] || fail "a wrong secret should fail the run"
grep -q "OAuth2 token request to $REST_URI/v1/oauth/tokens: HTTP 401 invalid_client" <<< "$OUT" \
  && grep -q "check catalog_credential" <<< "$OUT" || fail "wrong secret: unclear error: $OUT"
[ "$(grep -c "invalid_client" <<< "$OUT")" = 1 ] || fail "one message, not several: $OUT"
! grep -q "wrong-canary-456" <<< "$OUT" || fail "the secret was printed: $OUT"
! grep -vq '^POST /v1/oauth/tokens 401$' "$T/rest/requests.log" || fail "a catalog request went without a token: $(cat "$T/rest/requests.log")"
[ ! -e "$T/wbad/db" ] || fail "a refused run created a table"
expect_exit 0 ferry iceberg expire orders --pipeline app.yaml --older-than 1d --json
[ "$(json_field "$OUT" .snapshots_expired)" = 0 ] || fail "expire through OAuth2: $OUT"
pass "OAuth2: a wrong secret is one clear message (exit $st), nothing written; expire --pipeline authenticates"

# ---- 4. no secret anywhere ---------------------------------------------------------------------------
for s in "$REST_CLIENT_SECRET" $(cut -d' ' -f1 "$T/rest/tokens.log"); do
  ! grep -qF -- "$s" run1.log run2.log || fail "a secret or token is in ferry's output"
  ! sqlite3 "$FERRY_STATE" .dump | grep -qF -- "$s" || fail "a secret or token is in the state"
done
sqlite3 "$FERRY_STATE" .dump > /dev/null || fail "state dump failed"
pass "the client secret and the issued tokens are in no output, log or state"

# ---- 5. bad config -----------------------------------------------------------------------------------
: > "$T/rest/requests.log"
pipeline c1.yaml c1 10 "${SINK[@]}" "catalog_token: env:REST_CRED"
expect_exit 2 ferry run c1.yaml --quiet
grep -q "catalog_credential.*not both" <<< "$OUT" || fail "token + credential: $OUT"
pipeline c2.yaml c2 10 "type: iceberg" "warehouse: $WH" "namespace: db" "catalog: rest" \
  "catalog_uri: \"$REST_URI\"" "catalog_scope: catalog"
expect_exit 2 ferry run c2.yaml --quiet
grep -q "catalog_scope.*only used with catalog_credential" <<< "$OUT" || fail "scope alone: $OUT"
pipeline c3.yaml c3 10 "${SINK[@]}" "catalog_oauth2_uri: tokens"
expect_exit 2 ferry run c3.yaml --quiet
grep -q "catalog_oauth2_uri.*http(s)://" <<< "$OUT" || fail "endpoint not a URL: $OUT"
pipeline c4.yaml c4 10 "${SINK[@]}" "catalog_oauth2_uri: \"http://u:pw-canary-789@127.0.0.1:1/t\""
expect_exit 2 ferry run c4.yaml --quiet
grep -q "catalog_oauth2_uri.*must not hold credentials" <<< "$OUT" && ! grep -q "pw-canary-789" <<< "$OUT" \
  || fail "credentials in the endpoint: $OUT"
[ ! -s "$T/rest/requests.log" ] || fail "a refused pipeline sent requests: $(cat "$T/rest/requests.log")"
pass "bad OAuth2 config: exit 2 naming the key, nothing sent"
