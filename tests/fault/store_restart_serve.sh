#!/usr/bin/env bash
# The PostgreSQL state store restarting under `ferry serve` (issue 21): while a served run
# copies (sample -> SQLite, merge, each applied batch slowed by a failpoint), the store's
# server is restarted (pg_ctl restart -m fast: every session is terminated). Statements
# that meet the lost connection fail as transient errors (store/pg_store.c): the run's
# worker retries its attempt from the durable checkpoints (the server's default of 3
# retries) instead of failing, the control plane carries on, and the run completes with
# an exact copy (set equality with an unfaulted copy, no duplicate). A wrong store password
# is not transient: `ferry runs` fails at once with one clear error.
. "$(dirname "$0")/../e2e/lib.sh"
. "$FERRY_SRC/tests/pg/pg.sh"
pg_start
. "$FERRY_SRC/tests/serve/lib.sh"
unset FERRY_STATE
export FERRY_TEST_STORE_URL="$FERRY_PG_URL"
ROWS=40000
sample_yaml ref "$T/ref.db" > ref.yaml
"$FERRY_BIN" run ref.yaml --state "$T/ref-state.db" --quiet > /dev/null || fail "reference run"
sample_yaml copy "$T/copy.db" > copy.yaml
sed -i 's/write: append/write: merge/' copy.yaml

FERRY_FAILPOINTS="after_sink_apply=sleep(150)" start_serve --store env:FERRY_TEST_STORE_URL --workers 1 --lease 10s
api POST /v1/pipelines --data-binary @copy.yaml > /dev/null
[ "$CODE" = 201 ] || fail "register: $CODE $BODY"
run=$(api POST /v1/pipelines/copy/runs | jq -r .id)
n=0
for _ in $(seq 1 600); do
  n=$(q "$T/copy.db" "SELECT count(*) FROM orders" 2>/dev/null || echo 0)
  [ "${n:-0}" -gt 0 ] && break
  sleep 0.05
done
[ "${n:-0}" -gt 0 ] && [ "$n" -lt "$ROWS" ] || fail "no copy in progress to interrupt ($n rows)"
pg_as "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -m fast -w -t 60 -l "$PG_DIR/server.log" restart > /dev/null \
  || fail "PostgreSQL did not restart"
wait_done "$run" completed 1800
api GET "/v1/runs/$run" > run.json
same_table ref.db copy.db orders || fail "the copy differs from the unfaulted one"
[ "$(q "$T/copy.db" "SELECT count(*) = count(DISTINCT id) FROM orders")" = 1 ] || fail "duplicate keys"
attempts=$(jq -r .attempt run.json)
api GET /v1/pipelines > /dev/null
[ "$CODE" = 200 ] || fail "the API after the store's restart: $CODE $BODY"
grep -q "$PG_ADMIN_PASSWORD" "$T/serve.out" "$T/serve.err" "$T"/logs/*.log && fail "the store's password in a log"
stop_serve
no_sanitizer_reports
pass "served run: the state store restarted mid-copy, the run completed ($attempts attempt(s)), exact copy"

# A wrong password is permanent: one clear error, no retry loop.
export FERRY_BAD_STORE_URL="postgresql://ferry_admin:not-the-password@127.0.0.1:$PGPORT/ferry"
rc=0; "$FERRY_BIN" runs --store env:FERRY_BAD_STORE_URL > bad.out 2>&1 || rc=$?
[ $rc != 0 ] && grep -q "password authentication failed" bad.out || fail "wrong store password: rc $rc: $(cat bad.out)"
! grep -q "not-the-password" bad.out || fail "the password in the message"
pass "a wrong store password fails at once, naming the cause, never the password"
