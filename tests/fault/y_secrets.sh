#!/usr/bin/env bash
# tests/fault/y_secrets.sh - the secrets row of the fault catalog for the PostgreSQL cdc source
# and for `ferry serve`'s API. Two canaries: a password (in the env: urls of the cdc source and
# of a PostgreSQL sink) and an hmac key (env: reference of a transform).
#   1. CLI, mode: cdc into a PostgreSQL merge: a good run, then failures forced at every step:
#      the password changed on the server (bad password), a closed port (bad host), a sink that
#      cannot connect, a sink error at the commit, crashes (after an apply, before the end of the
#      change stream) and their resumes;
#   2. `ferry serve` running the same pipelines: register, validate, discover (good, bad
#      password, bad host), runs that complete and fail, a worker SIGKILLed mid-run, every read
#      endpoint (pipelines, versions, secrets, runs, run, events stream, connectors, metrics);
# Oracles: neither canary appears in any output or error message of ferry, any event, any API
# response body, the state database (every byte, WAL included), the server's and workers'
# logs, any file under the test's folder, nor the /proc/PID/cmdline of any ferry process
# (sampled every 50 ms for the whole test). The data still arrive: the destination equals the
# source after the resumes.
. "$(dirname "$0")/../e2e/lib.sh"
. "${FERRY_PG_SH:-$FERRY_SRC/tests/pg/pg.sh}"
pg_start
. "$FERRY_SRC/tests/serve/lib.sh"

CANARY="CanaryPw$RANDOM$RANDOM$RANDOM"
CANARY_H="CanaryHmac$RANDOM$RANDOM$RANDOM"
# ferry never sees the admin's libpq environment: its urls carry their own credentials.
ferry() { env -u PGPASSWORD -u PGUSER -u PGHOST -u PGPORT -u PGDATABASE "$FERRY_BIN" "$@"; }

pgq <<SQL
CREATE ROLE ferry_cdc LOGIN SUPERUSER PASSWORD '$CANARY';
CREATE TABLE t (id bigint PRIMARY KEY, note text, n integer);
INSERT INTO t SELECT g, 'note ' || g, g FROM generate_series(1, 20000) g;
SQL
psql -qX -v ON_ERROR_STOP=1 -c "CREATE DATABASE dest" >/dev/null
export CDC_URL="postgresql://ferry_cdc:$CANARY@127.0.0.1:$PGPORT/ferry"
export DEST_URL="postgresql://ferry_cdc:$CANARY@127.0.0.1:$PGPORT/dest"
dead=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export DEAD_URL="postgresql://ferry_cdc:$CANARY@127.0.0.1:$dead/ferry?connect_timeout=2"
export NODB_URL="postgresql://ferry_cdc:$CANARY@127.0.0.1:$PGPORT/no_such_db"
export FERRY_TEST_HMAC="$CANARY_H"

# Every ferry process's command line, sampled until the test ends.
(
  while :; do
    for p in $(pgrep -x ferry); do
      tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null && echo
    done
    sleep 0.05
  done
) >> "$T/cmdlines.txt" 2>/dev/null &
SAMPLER=$!
EXTRA_PIDS="$SAMPLER"

pipeline() { # FILE NAME SRC_URL_VAR SINK_URL_VAR
  cat > "$1" <<EOF
version: 1
name: $2
source:
  type: postgres
  url: env:$3
  resources:
    - {table: public.t, mode: cdc}
sink: {type: postgres, url: env:$4, schema: public, write: merge}
transforms:
  - {resource: public.t, column: note, hash: hmac_sha256, key: env:FERRY_TEST_HMAC}
batch: {rows: 1000, flush_after: 200ms}
EOF
}
pipeline good.yaml sec_cdc CDC_URL DEST_URL
pipeline deadsrc.yaml sec_dead DEAD_URL DEST_URL
pipeline nodb.yaml sec_nodb CDC_URL NODB_URL

: > outputs.txt
run_ferry() { # EXIT ARGS...: runs ferry, keeps its output for the secrets check
  local want=$1; shift
  expect_exit "$want" ferry "$@"
  printf '%s\n' "$OUT" >> outputs.txt
}
run_any() { # ARGS...: a run that is expected to fail (crash or error): any non-zero exit
  set +e
  OUT=$(ferry "$@" 2>&1)
  local rc=$?
  set -e
  printf '%s\n' "$OUT" >> outputs.txt
  [ "$rc" != 0 ] || fail "expected a failure from: $* -- output: $OUT"
}
churn() { pgq -c "UPDATE t SET n = n + 1 WHERE id % $1 = 0; INSERT INTO t SELECT g, 'late ' || g, g FROM generate_series($2, $2 + 499) g;"; }
# The destination equals the source (the note column is hashed, so compare the other columns).
same_dest() {
  local a b
  a=$(pgq -c "SELECT md5(string_agg(id || ':' || n, ',' ORDER BY id)) FROM t")
  b=$(pgq dest -c "SELECT md5(string_agg(id || ':' || n, ',' ORDER BY id)) FROM public.t")
  [ "$a" = "$b" ] || fail "$1: destination differs from the source"
}

# ---- 1. CLI ----------------------------------------------------------------------------------
FERRY_FAILPOINTS="after_sink_apply=sleep(20)" run_ferry 0 run good.yaml
same_dest "first run"
churn 3 30000
pgq -c "ALTER ROLE ferry_cdc PASSWORD 'other-$RANDOM'"
run_any run good.yaml
printf '%s' "$OUT" | grep -q "password authentication failed" || fail "bad password: $OUT"
pgq -c "ALTER ROLE ferry_cdc PASSWORD '$CANARY'"
run_any run deadsrc.yaml
printf '%s' "$OUT" | grep -q "127.0.0.1:$dead" || fail "bad host: the message should name it: $OUT"
run_any run nodb.yaml
printf '%s' "$OUT" | grep -q "no_such_db" || fail "sink that cannot connect: $OUT"
churn 4 60000
FERRY_FAILPOINTS="before_sink_commit=error" run_any run good.yaml
run_ferry 0 run good.yaml
churn 6 70000
FERRY_FAILPOINTS="after_sink_apply=crash" run_any run good.yaml
run_ferry 0 resume "$(ferry runs --json | jq -r '.[0].id')"
same_dest "after the crash"
churn 5 40000
FERRY_FAILPOINTS="cdc_before_end=crash" run_any run good.yaml
run_ferry 0 run good.yaml
same_dest "after the crash before the end of the stream"
for id in $(ferry runs --json | jq -r '.[].id'); do
  ferry events "$id" --json >> outputs.txt
  ferry show "$id" >> outputs.txt 2>&1 || true
done
ferry runs --json >> outputs.txt
ferry secrets >> outputs.txt 2>&1 || true
pass "cli: cdc runs with a bad password, a bad host, a sink that cannot connect, a sink error and two crashes; the resumes are exact"

# ---- 2. ferry serve --------------------------------------------------------------------------
export FERRY_FAILPOINTS="after_sink_apply=sleep(50)"
start_serve --lease 4s --workers 2
api POST /v1/pipelines --data-binary @good.yaml > /dev/null; [ "$CODE" = 201 ] || [ "$CODE" = 200 ] || fail "register: $CODE $BODY"
api POST /v1/pipelines --data-binary @deadsrc.yaml > /dev/null
api POST /v1/pipelines --data-binary @nodb.yaml > /dev/null
pipeline badpw.yaml sec_badpw CDC_URL DEST_URL
api POST /v1/connectors/validate --data-binary @good.yaml > /dev/null
api POST /v1/connectors/discover --data-binary @good.yaml > /dev/null
[ "$CODE" = 200 ] || fail "discover: $CODE $BODY"
api POST /v1/connectors/discover --data-binary @deadsrc.yaml > /dev/null
[ "$CODE" != 200 ] || fail "discover of a dead host answered 200: $BODY"
printf '%s' "$BODY" | grep -q "127.0.0.1:$dead" || fail "discover of a dead host should name it: $BODY"
pgq -c "ALTER ROLE ferry_cdc PASSWORD 'other-$RANDOM'"
api POST /v1/connectors/discover --data-binary @good.yaml > /dev/null
[ "$CODE" != 200 ] || fail "discover with a bad password answered 200: $BODY"
r_bad=$(api POST /v1/pipelines/sec_cdc/runs | jq -r .id)
wait_state "$r_bad" failed 900
pgq -c "ALTER ROLE ferry_cdc PASSWORD '$CANARY'"
r_dead=$(api POST /v1/pipelines/sec_dead/runs | jq -r .id)
wait_state "$r_dead" failed 900
r_nodb=$(api POST /v1/pipelines/sec_nodb/runs | jq -r .id)
wait_state "$r_nodb" failed 900
churn 7 50000
r_ok=$(api POST /v1/pipelines/sec_cdc/runs | jq -r .id)
wait_state "$r_ok" completed 1200
same_dest "served run"
# a worker killed mid-run: the reaper fails the run; resuming it completes
# 30 source transactions: one cdc table applies each source transaction whole (a commit group
# of one), so the run's rows show only at a transaction's end; with many, it is still running.
for i in $(seq 0 29); do
  echo "INSERT INTO t SELECT g, 'big ' || g, g FROM generate_series($((100000 + i * 2000)), $((101999 + i * 2000))) g;"
done | pgq
r_kill=$(api POST /v1/pipelines/sec_cdc/runs | jq -r .id)
wait_rows "$r_kill"
wpid=$(api GET "/v1/runs/$r_kill" | jq -r .pid)
[ -n "$wpid" ] && [ "$wpid" != null ] || fail "run $r_kill has no worker pid: $BODY"
kill -KILL "$wpid"
wait_state "$r_kill" failed 900
api POST "/v1/runs/$r_kill/resume" > /dev/null
wait_state "$r_kill" completed 1200
same_dest "served run resumed after a SIGKILL"
for path in /v1/pipelines /v1/pipelines/sec_cdc /v1/pipelines/sec_cdc/versions /v1/pipelines/sec_dead \
  /v1/pipelines/sec_nodb /v1/secrets /v1/runs /v1/connectors /metrics; do
  api GET "$path" > /dev/null
  [ "$CODE" = 200 ] || fail "GET $path: $CODE $BODY"
done
v=$(api GET /v1/pipelines/sec_cdc/versions | jq -r '.versions[0].version')
api GET "/v1/pipelines/sec_cdc/versions/$v" > /dev/null
[ "$CODE" = 200 ] || fail "GET version $v: $CODE $BODY"
for id in "$r_bad" "$r_dead" "$r_nodb" "$r_ok" "$r_kill"; do
  api GET "/v1/runs/$id" > /dev/null
  curl -sS -N --max-time 3 -H "Authorization: Bearer $TOKEN" "$BASE/v1/runs/$id/events?follow=0" >> "$T/responses.log" 2>&1 || true
done
grep -q '^event: run.failed' responses.log && grep -q '^event: run.completed' responses.log \
  || fail "the runs' event streams were not read: $(grep -c '^event:' responses.log) events"
grep -q "password authentication failed" responses.log || fail "the bad password's failure is not reported through the API"
stop_serve
no_sanitizer_reports
pass "serve: discover, validate and runs with a bad password, a bad host, a sink that cannot connect, a killed worker; every read endpoint answered"

# ---- the oracles -----------------------------------------------------------------------------
kill -TERM "$SAMPLER" 2>/dev/null || true
wait "$SAMPLER" 2>/dev/null || true
EXTRA_PIDS=""
[ "$(grep -c serve cmdlines.txt)" -gt 0 ] && [ "$(grep -c -E ' (run|worker) ' cmdlines.txt)" -gt 0 ] \
  || fail "the cmdline sampler saw no ferry run or serve process"
for c in "$CANARY" "$CANARY_H"; do
  for f in outputs.txt responses.log cmdlines.txt serve.out serve.err; do
    grep -a -q -- "$c" "$f" && fail "a canary is in $f: $(grep -a -m 3 -- "$c" "$f")"
  done
  leaked=$(grep -r -a -l -- "$c" "$T" || true)
  [ -z "$leaked" ] || fail "a canary is in these files: $leaked"
done
pass "no canary in any output, event, API response, state byte, log, file or /proc/PID/cmdline"
