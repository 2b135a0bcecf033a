#!/usr/bin/env bash
# shared: pg
# The secrets store (issue 19, docs/security.md): a PostgreSQL URL whose password exists
# only as a secret (stdin -> sealed in the state store) is copied from, through the CLI
# (`ferry run`, key in FERRY_STORE_KEY) and through `ferry serve --secret-key` (PUT
# /v1/secrets/NAME, a worker resolving secret:NAME). Asserted: listings name secrets and
# never values; viewer and operator cannot put or delete; the policy's `secrets:` list
# refuses other names at registration and the worker checks the host inside a stored URL;
# a wrong key fails naming the secret, never its value; rotate-key leaves every secret
# readable with the new key only; the password and the key are in no byte of any file the
# test's ferry processes wrote (state db, -wal, logs, responses).
source "$(dirname "$0")/lib.sh"
source "$FERRY_SRC/tests/serve/lib.sh"
source "$FERRY_SRC/tests/pg/pg.sh"
pg_start
pgq -c "CREATE TABLE public.items (id int PRIMARY KEY, v text);
        INSERT INTO public.items SELECT g, 'v' || g FROM generate_series(1, 500) g;"
# From here on nothing of ours holds the reader's password but the secrets store: libpq
# must not find it in PGPASSWORD either.
ADMIN_PW=$PGPASSWORD
pgq_admin() { PGPASSWORD=$ADMIN_PW pgq "$@"; }
READER_URL=$FERRY_PG_READER_URL
SECRET_PW=$PG_READER_PASSWORD
unset PGPASSWORD FERRY_PG_URL FERRY_PG_READER_URL
BAD_URL="postgresql://ferry_reader:$SECRET_PW@127.0.0.1:$((PGPORT + 1))/ferry"

umask 077
openssl rand -hex 32 > "$T/k1"
openssl rand -base64 32 > "$T/k2"
K1=$(cat "$T/k1")
K2=$(cat "$T/k2")

copy_yaml() { # NAME SECRET OUTDB
  printf 'version: 1\nname: %s\nsource:\n  type: postgres\n  url: secret:%s\n  resources:\n    - table: public.items\n      target: items\n      mode: full\nsink: {type: sqlite, path: "%s", write: replace}\n' "$1" "$2" "$3"
}
rows_in() { q "$1" "SELECT count(*) || ':' || sum(id) FROM items"; }

# ---- CLI: put, list, run ----
printf '%s' "$READER_URL" | ferry secrets put pgurl --secret-key "file:$T/k1" --state "$T/state.db" > put.out \
  || fail "secrets put: $(cat put.out)"
ferry secrets list --state "$T/state.db" --json > list.json
jq -e 'length == 1 and .[0].name == "pgurl" and (.[0] | keys == ["created","name","updated"])' list.json > /dev/null \
  || fail "secrets list: $(cat list.json)"
grep -qF "$SECRET_PW" list.json && fail "secrets list shows the value"
expect_exit 2 ferry secrets put pgurl "$READER_URL" --state "$T/state.db"
printf 'x' | FERRY_STORE_KEY=abc "$FERRY_BIN" secrets put short --state "$T/state.db" 2> short.err && fail "a 3-character key was accepted"
grep -q "32 bytes" short.err || fail "short key: $(cat short.err)"
pass "secrets put (value from stdin only), list shows names and times only, a short key is refused"

copy_yaml cli pgurl "$T/cli.db" > cli.yaml
FERRY_STORE_KEY=$K1 ferry run cli.yaml --state "$T/state.db" > cli.out 2>&1 || fail "run with secret:pgurl: $(tail -5 cli.out)"
[ "$(rows_in "$T/cli.db")" = "500:125250" ] || fail "cli copy: $(rows_in "$T/cli.db")"
pass "ferry run copies from PostgreSQL with the URL only in the secrets store (secret:pgurl)"

FERRY_STORE_KEY=$K2 ferry run cli.yaml --state "$T/state.db" > wrong.out 2>&1 && fail "a run with the wrong key succeeded"
grep -q "secret pgurl cannot be decrypted" wrong.out || fail "wrong key: $(tail -3 wrong.out)"
ferry run cli.yaml --state "$T/state.db" > nokey.out 2>&1 && fail "a run without a key succeeded"
grep -q "secret:pgurl needs the secret key in FERRY_STORE_KEY" nokey.out || fail "no key: $(tail -3 nokey.out)"
pass "a wrong or missing key fails naming the secret"

# ---- API: roles, put, list, delete, a worker resolving secret:NAME under a policy ----
declare -A TOK
for r in viewer operator admin; do TOK[$r]="tok-$r-$RANDOM$RANDOM$RANDOM"; done
for r in viewer operator admin; do
  echo "id-$r $r sha256:$(printf '%s' "${TOK[$r]}" | sha256sum | cut -d' ' -f1)"
done > tokens.txt
mkdir -p "$T/out"
cat > policy.yaml <<EOF2
paths: ["$T/out"]
hosts: ["127.0.0.1/32:$PGPORT"]
secrets: ["api*"]
EOF2
# every checkpoint save of a worker waits 2 s: time to look at a running worker (below)
FERRY_FAILPOINTS='before_checkpoint_save=sleep(2000)' \
  start_serve --policy "$T/policy.yaml" --tokens "$T/tokens.txt" --secret-key "file:$T/k1" --workers 1
put_as() { # ROLE NAME VALUE: status to stdout
  printf '%s' "$3" | curl -sS -o put.json -w '%{http_code}' -X PUT -H "Authorization: Bearer ${TOK[$1]}" \
    --data-binary @- "$BASE/v1/secrets/$2"
}
for r in viewer operator; do
  [ "$(put_as "$r" apiurl "$READER_URL")" = 403 ] || fail "$r could put a secret: $(cat put.json)"
  code=$(curl -sS -o del.json -w '%{http_code}' -X DELETE -H "Authorization: Bearer ${TOK[$r]}" "$BASE/v1/secrets/pgurl")
  [ "$code" = 403 ] || fail "$r could delete a secret: $code"
done
[ "$(put_as admin apiurl "$READER_URL")" = 200 ] || fail "admin put: $(cat put.json)"
[ "$(put_as admin apibad "$BAD_URL")" = 200 ] || fail "admin put apibad: $(cat put.json)"
[ "$(put_as admin 'bad%20name' x)" = 400 ] || fail "a bad name was stored: $(cat put.json)"
pass "PUT /v1/secrets/NAME: admin only (viewer and operator 403, also for DELETE)"

api GET /v1/secrets > /dev/null
[ "$CODE" = 200 ] || fail "GET /v1/secrets: $CODE"
printf '%s' "$BODY" | jq -e '[.secrets[] | select(.kind == "secret" and .stored) | .name] | sort == ["apibad","apiurl","pgurl"]' > /dev/null \
  || fail "GET /v1/secrets: $BODY"
printf '%s' "$BODY" | grep -qF "$SECRET_PW" && fail "GET /v1/secrets shows a value"
pass "GET /v1/secrets lists stored names and times, never values"

copy_yaml refused pgurl "$T/out/refused.db" > refused.yaml
api POST /v1/pipelines --data-binary @refused.yaml > /dev/null
[ "$CODE" = 400 ] && printf '%s' "$BODY" | jq -e '.error.message | contains("source.url") and contains("policy rule secrets")' > /dev/null \
  || fail "secret:pgurl outside the policy's secrets list: $CODE $BODY"
pass "the policy's secrets: list refuses secret:pgurl at registration (400 naming key and rule)"

run_and_wait() { # NAME: sets RUN_ID and RUN_STATE (its final state)
  api POST "/v1/pipelines/$1/runs" > /dev/null
  [ "$CODE" = 201 ] || [ "$CODE" = 202 ] || fail "start $1: $CODE $BODY"
  RUN_ID=$(printf '%s' "$BODY" | jq -r '.id // .run.id')
  for _ in $(seq 1 600); do
    RUN_STATE=$(run_state "$RUN_ID")
    case "$RUN_STATE" in completed|failed|canceled) return ;; esac
    sleep 0.1
  done
  fail "run $RUN_ID of $1 did not end: $RUN_STATE"
}
copy_yaml api apiurl "$T/out/api.db" > api.yaml
api POST /v1/pipelines --data-binary @api.yaml > /dev/null
[ "$CODE" = 201 ] || [ "$CODE" = 200 ] || fail "register api: $CODE $BODY"
api POST /v1/pipelines/api/runs > /dev/null
RUN_ID=$(printf '%s' "$BODY" | jq -r '.id // .run.id')
# The key reaches the worker through an inherited sealed memfd it reads and closes at start:
# neither the server's nor the running worker's environment holds it, nor does the worker
# keep the descriptor.
wpid=""
for _ in $(seq 1 600); do
  wpid=$(api GET "/v1/runs/$RUN_ID" | jq -r 'select(.state == "running" and .pid > 0) | .pid')
  [ -n "$wpid" ] && [ -r "/proc/$wpid/environ" ] && break
  sleep 0.05
done
[ -n "$wpid" ] || fail "the api run's worker was never seen running: $BODY"
KEYHEX=$(tr -d '\n' < "$T/k1")
for p in "$SERVE_PID" "$wpid"; do
  tr '\0' '\n' < "/proc/$p/environ" > env.$p
  grep -q '^FERRY_STORE_KEY=' env.$p && fail "process $p has FERRY_STORE_KEY in its environment"
  grep -qiF "$KEYHEX" env.$p && fail "process $p has the key in its environment"
done
ls -l "/proc/$wpid/fd" | grep -q 'memfd:ferry-store-key' && fail "the worker kept the key's descriptor open"
ls -l "/proc/$SERVE_PID/fd" | grep -q 'memfd:ferry-store-key' || fail "the server holds no key descriptor (is the test looking at the right thing?)"
for _ in $(seq 1 600); do
  RUN_STATE=$(run_state "$RUN_ID")
  case "$RUN_STATE" in completed|failed|canceled) break ;; esac
  sleep 0.1
done
[ "$RUN_STATE" = completed ] || fail "api run: $(api GET "/v1/runs/$RUN_ID")"
pass "the key reaches the worker through a memfd it closes; no environment holds it"
[ "$(rows_in "$T/out/api.db")" = "500:125250" ] || fail "api copy: $(rows_in "$T/out/api.db")"
pass "a worker of ferry serve resolves secret:apiurl (key from --secret-key) and copies every row"

copy_yaml apibad apibad "$T/out/bad.db" > bad.yaml
api POST /v1/pipelines --data-binary @bad.yaml > /dev/null
[ "$CODE" = 201 ] || [ "$CODE" = 200 ] || fail "register apibad: $CODE $BODY"
run_and_wait apibad
[ "$RUN_STATE" = failed ] || fail "apibad run: $RUN_STATE"
api GET "/v1/runs/$RUN_ID" > /dev/null
printf '%s' "$BODY" | jq -e '.error | contains("refused by policy rule")' > /dev/null || fail "apibad: $BODY"
printf '%s' "$BODY" | grep -qF "$SECRET_PW" && fail "the run's error shows the password"
pass "the worker checks the host inside a stored URL against the policy"

api DELETE /v1/secrets/apibad > /dev/null
[ "$CODE" = 200 ] || fail "delete apibad: $CODE $BODY"
api DELETE /v1/secrets/apibad > /dev/null
[ "$CODE" = 404 ] || fail "second delete: $CODE $BODY"
stop_serve
pass "DELETE /v1/secrets/NAME (404 once gone)"

# ---- rotation ----
ferry secrets rotate-key --secret-key "file:$T/k2" --new-key "file:$T/k1" --state "$T/state.db" > rot.out 2>&1 \
  && fail "rotation with the wrong old key succeeded"
ferry secrets rotate-key --secret-key "file:$T/k1" --new-key "file:$T/k2" --state "$T/state.db" > rot.out 2>&1 \
  || fail "rotate-key: $(cat rot.out)"
grep -q "2 secret(s) resealed" rot.out || fail "rotate-key: $(cat rot.out)"
FERRY_STORE_KEY=$K2 ferry run cli.yaml --state "$T/state.db" > rot2.out 2>&1 || fail "run after rotation: $(tail -3 rot2.out)"
[ "$(rows_in "$T/cli.db")" = "500:125250" ] || fail "copy after rotation"
sed 's/secret:pgurl/secret:apiurl/; s/cli.db/cli2.db/' cli.yaml > cli2.yaml
FERRY_STORE_KEY=$K2 ferry run cli2.yaml --state "$T/state.db" > rot3.out 2>&1 || fail "apiurl after rotation: $(tail -3 rot3.out)"
FERRY_STORE_KEY=$K1 ferry run cli2.yaml --state "$T/state.db" > rot4.out 2>&1 && fail "the old key still opens apiurl"
grep -q "secret apiurl cannot be decrypted" rot4.out || fail "old key: $(tail -3 rot4.out)"
pass "rotate-key: every secret readable with the new key, not with the old (a wrong old key changes nothing)"

# ---- no plaintext, no key anywhere ----
q "$T/state.db" "PRAGMA wal_checkpoint(PASSIVE)" > /dev/null
for f in $(find "$T" -type f ! -name k1 ! -name k2); do
  for needle in "$SECRET_PW" "$K1" "$K2"; do
    grep -qaF "$needle" "$f" && fail "$f holds the password or a key"
  done
done
[ -f "$T/state.db" ] && ls "$T"/state.db* > /dev/null || fail "no state files"
pass "the password and the keys are in no byte of the state db, its -wal, the logs or any response"

# env:FERRY_STORE_KEY is no reference, even under allow-all
start_serve --policy allow-all --secret-key "file:$T/k2"
printf 'version: 1\nname: keyleak\nsource: {type: sample, rows: 1, resources: [{table: orders, mode: full}]}\nsink: {type: s3, bucket: b, endpoint: "http://192.0.2.1:9", access_key_id: env:FERRY_STORE_KEY, secret_access_key: env:FERRY_STORE_KEY}\n' > keyleak.yaml
api POST /v1/pipelines --data-binary @keyleak.yaml > /dev/null
[ "$CODE" = 400 ] && printf '%s' "$BODY" | jq -e '.error.message | contains("FERRY_STORE_KEY")' > /dev/null \
  || fail "env:FERRY_STORE_KEY accepted under allow-all: $CODE $BODY"
stop_serve
pass "env:FERRY_STORE_KEY is refused under allow-all"
