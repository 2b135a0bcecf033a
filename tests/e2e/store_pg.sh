#!/usr/bin/env bash
# The PostgreSQL state store against a real PostgreSQL 15 (tests/pg/pg.sh):
#  1. the store-exercising unit tests (test_store, test_store_lease, test_tracker,
#     test_control, test_bus, test_flow, test_pull, test_secretbox, built next to
#     $FERRY_BIN) with
#     FERRY_TEST_STORE set, each test case on a fresh schema;
#  2. `ferry run --store` of a sample -> sqlite pipeline, kill -9 mid-run, `ferry resume`:
#     set equality with a reference copy, zero duplicates; runs/show/checkpoints read it;
#  3. `ferry serve --store postgres://...`: a run requested over the API completes with
#     exact counts, and the store URL (password) is on no worker's command line;
#  4. a wrong password and an unreachable server: one clear message, no password, exit != 0.
. "$(dirname "$0")/lib.sh"
. "$FERRY_SRC/tests/serve/lib.sh"
. "$FERRY_SRC/tests/pg/pg.sh"
pg_start

UNIT_DIR=$(dirname "$FERRY_BIN")
URL="$FERRY_PG_URL"
unset FERRY_STATE
export FERRY_TEST_STORE_URL="$URL" # read through env: below, keeping it off command lines
STORE="env:FERRY_TEST_STORE_URL"

# ---- 1. unit tests on PostgreSQL ----
for t in test_store test_store_lease test_tracker test_control test_bus test_flow test_pull test_secretbox; do
  if [ ! -x "$UNIT_DIR/$t" ]; then
    [ "$t" = test_pull ] && continue # the pull workers' test, when that module is present
    fail "$UNIT_DIR/$t is not built"
  fi
  FERRY_TEST_STORE="$URL" "$UNIT_DIR/$t" > "unit-$t.log" 2>&1 ||
    { tail -n 40 "unit-$t.log" >&2; fail "$t on the PostgreSQL store"; }
  grep -q 'PASSED' "unit-$t.log" || fail "$t printed no result"
  if grep -qE 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:' "unit-$t.log"; then
    fail "$t: sanitizer report"
  fi
done
# The unit tests dropped their schemas.
left=$(psql -qAtX -c "SELECT count(*) FROM pg_namespace WHERE nspname LIKE 't\\_%'")
[ "$left" = 0 ] || fail "$left test schemas left behind"
pass "unit tests of the store, bus, tracker, control plane, flow and pull workers pass on PostgreSQL"

# ---- 2. run, kill -9, resume ----
ROWS=300000
write_pipeline ref.yaml pgstore $ROWS ref.db append incremental "" "" "batch: {rows: 5000}"
FERRY_FAILPOINTS= expect_exit 0 ferry run ref.yaml --state "$T/ref-state.db"
write_pipeline p.yaml pgstore $ROWS dest.db append incremental "" "" "batch: {rows: 5000}"
FERRY_FAILPOINTS="after_sink_apply=sleep(15)" "$FERRY_BIN" run p.yaml --store "$STORE" > run.log 2>&1 &
pid=$!
wrote=0
for _ in $(seq 1 600); do
  r=$(ferry runs --store "$STORE" --pipeline pgstore --json 2>/dev/null | jq -r '.[0].rows // 0' 2>/dev/null || echo 0)
  if [ "${r:-0}" -gt 0 ]; then wrote=$r; break; fi
  kill -0 "$pid" 2>/dev/null || fail "the run ended early: $(cat run.log)"
  sleep 0.05
done
[ "$wrote" -gt 0 ] || fail "the run never wrote: $(cat run.log)"
kill -KILL "$pid"
set +e; wait "$pid" 2>/dev/null; rc=$?; set -e
[ "$rc" = 137 ] || fail "kill -9: exit $rc"
run=$(ferry runs --store "$STORE" --pipeline pgstore --json | jq -r '.[0].id')
partial=$(q dest.db 'SELECT count(*) FROM orders')
[ "$partial" -lt $ROWS ] || fail "killed after the whole copy ($partial rows)"
# The state is in PostgreSQL (schema ferry), not in a file.
[ ! -e .ferry/state.db ] || fail "a SQLite state file was created"
[ "$(psql -qAtX -c "SELECT state FROM ferry.runs WHERE id = $run")" = running ] || fail "run row in ferry.runs"
expect_exit 0 ferry resume "$run" --store "$STORE" --json
[ "$(json_field "$OUT" .resumed)" = true ] || fail "resumed: $OUT"
[ "$(json_field "$OUT" .run_id)" = "$run" ] || fail "same run: $OUT"
same_table ref.db dest.db orders || fail "kill -9 + resume on the PostgreSQL store differs"
[ "$(q dest.db 'SELECT count(*) - count(DISTINCT id) FROM orders')" = 0 ] || fail "duplicates"
pass "kill -9 after $wrote rows ($partial in the destination), resume: set-equal, no duplicate"

# runs / show / checkpoints read the same store (FERRY_STORE as well as --store).
FERRY_STORE="$STORE" expect_exit 0 ferry runs --json
[ "$(printf '%s' "$OUT" | jq -r '.[0].state')" = completed ] || fail "runs: $OUT"
# (counts after a kill -9 are the folded ones: not asserted exactly, the destination is)
[ "$(printf '%s' "$OUT" | jq -r '.[0].rows')" -gt 0 ] || fail "runs rows: $OUT"
expect_exit 0 ferry show "$run" --store "$STORE" --json
[ "$(printf '%s' "$OUT" | jq -r .state)" = completed ] || fail "show: $OUT"
[ "$(printf '%s' "$OUT" | jq -r .attempt)" = 2 ] || fail "show attempt: $OUT"
expect_exit 0 ferry checkpoints --store "$STORE" --pipeline pgstore --json
[ "$(printf '%s' "$OUT" | jq -r 'length')" -ge 1 ] || fail "checkpoints: $OUT"
printf '%s' "$OUT" | grep -q orders || fail "checkpoints name the route: $OUT"
expect_exit 0 ferry events "$run" --store "$STORE" --json
printf '%s\n' "$OUT" | jq -r .type | grep -qx run.completed || fail "events: run.completed"
pass "runs, show, checkpoints and events read the PostgreSQL store"

# ---- 3. ferry serve --store postgres://... ----
# Batches wait 10 ms after their apply, so the worker lives long enough to be looked at.
FERRY_FAILPOINTS="after_sink_apply=sleep(10)" start_serve --store "$URL" --workers 2 --lease 10s
sample_yaml viaapi "$T/api.db" > api.yaml
api POST /v1/pipelines --data-binary @api.yaml -H 'Content-Type: application/yaml' > /dev/null
[ "$CODE" = 201 ] || fail "apply: $CODE $BODY"
api POST /v1/pipelines/viaapi/runs -d '{}' > req.json
[ "$CODE" = 201 ] || fail "run request: $CODE $BODY"
arun=$(jq -r .id req.json)
[ -n "$arun" ] && [ "$arun" != null ] || fail "no run id: $(cat req.json)"
# While the worker lives, its command line holds no password.
PW=$(printf '%s' "$URL" | sed -E 's#^[a-z]+://[^:]*:([^@]*)@.*#\1#')
seen=0
for _ in $(seq 1 400); do
  for p in $(pgrep -P "$SERVE_PID" || true); do
    cmd=$(tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null || true)
    case "$cmd" in *" worker "*) seen=1 ;; *) continue ;; esac
    case "$cmd" in *"$PW"*) fail "a worker's command line holds the store password: $cmd" ;; esac
  done
  [ $seen = 1 ] && break
  [ "$(run_state "$arun")" = completed ] && break
  sleep 0.02
done
wait_state "$arun" completed 1200
same_table ref.db api.db orders || fail "the run requested over the API differs"
# Two trackers (serve's and the worker's) fold the same events: counted once, exactly.
got=$(api GET "/v1/runs/$arun" | jq -r .rows)
[ "$got" = "$ROWS" ] || fail "the run counts $got rows, not $ROWS: $BODY"
[ "$(psql -qAtX -c "SELECT state FROM ferry.runs WHERE id = $arun")" = completed ] || fail "not in PostgreSQL"
grep -q "$PW" serve.out serve.err && fail "ferry serve printed the store password"
grep -q "state postgres://ferry_admin@" serve.out || fail "serve names the store without password: $(cat serve.out)"
no_sanitizer_reports
stop_serve
[ $seen = 1 ] && pass "ferry serve --store postgres://: an API run completes; no password on a worker's command line" ||
  pass "ferry serve --store postgres://: an API run completes (finished before its worker was seen)"

# ---- 4. bad credentials, unreachable server ----
CANARY="canary-$RANDOM$RANDOM"
set +e
"$FERRY_BIN" runs --store "postgres://ferry_admin:$CANARY@127.0.0.1:$PGPORT/ferry" > out 2> err
rc=$?
set -e
[ $rc != 0 ] || fail "a wrong password was accepted"
[ "$(wc -l < err)" = 1 ] || fail "not one line: $(cat err)"
grep -q "$CANARY" out err && fail "the password appears: $(cat err)"
grep -q "port $PGPORT" err && grep -q "127.0.0.1" err && grep -q "database ferry" err || fail "message: $(cat err)"
set +e
"$FERRY_BIN" show 1 --store "postgres://someone:$CANARY@127.0.0.1:1/nothing" > out 2> err
rc=$?
set -e
[ $rc != 0 ] || fail "an unreachable store was accepted"
[ "$(wc -l < err)" = 1 ] || fail "not one line: $(cat err)"
grep -q "$CANARY" out err && fail "the password appears: $(cat err)"
grep -q "port 1," err && grep -q "database nothing" err || fail "message: $(cat err)"
pass "wrong password, unreachable server: one line naming host, port and database, exit $rc, no password"

# ---- 5. grants: a role without CREATE on the database ----
STATE_PW="state-pw-$RANDOM$RANDOM"
psql -qX -v ON_ERROR_STOP=1 >/dev/null <<SQL
CREATE ROLE ferry_state LOGIN PASSWORD '$STATE_PW';
GRANT CONNECT ON DATABASE ferry TO ferry_state;
CREATE SCHEMA granted;
GRANT USAGE, CREATE ON SCHEMA granted TO ferry_state;
SQL
export FERRY_TEST_STATE_URL="postgres://ferry_state:$STATE_PW@127.0.0.1:$PGPORT/ferry"
set +e
FERRY_TEST_STATE_URL="$FERRY_TEST_STATE_URL?schema=fresh" FERRY_STORE="env:FERRY_TEST_STATE_URL" \
  "$FERRY_BIN" runs > out 2> err
rc=$?
set -e
[ $rc != 0 ] || fail "a role without CREATE created the schema"
grep -q "creating schema fresh" err && grep -q "CREATE on the database" err || fail "grant message: $(cat err)"
grep -q "$STATE_PW" out err && fail "the password appears: $(cat err)"
# The schema of another role (ferry, the admin's): no USAGE, said so.
set +e
FERRY_STORE="env:FERRY_TEST_STATE_URL" "$FERRY_BIN" runs > out 2> err
rc=$?
set -e
[ $rc != 0 ] || fail "a schema without USAGE was used"
grep -q "no USAGE on schema ferry" err || fail "usage message: $(cat err)"
FERRY_TEST_STATE_URL="$FERRY_TEST_STATE_URL?schema=granted" expect_exit 0 ferry run p.yaml \
  --store env:FERRY_TEST_STATE_URL --json
[ "$(json_field "$OUT" .state)" = completed ] || fail "run with the granted schema: $OUT"
[ "$(psql -qAtX -c "SELECT count(*) FROM granted.runs")" = 1 ] || fail "runs in the granted schema"
pass "without CREATE on the database: a clear message; a schema granted beforehand works"
