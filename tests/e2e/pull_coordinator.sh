#!/usr/bin/env bash
# shared: pg
# A distributed run whose coordinator dies (docs/operations.md, scale-out): three `ferry
# worker --pull` processes copy a 300 000-row PostgreSQL table in 10 shards (upsert); the
# worker that claimed the run (its coordinator) is killed with SIGKILL mid-run. Its run
# heartbeat stops, the reaper fences the attempt and, the pipeline allowing one retry,
# requests the run again; another pull worker claims it (a new attempt) and coordinates
# it: the tasks already done stay done, the other workers' tasks of the fenced attempt are
# given back, the coordinator's exported snapshot is gone (resumed shards read a newer
# one). The run completes; source and destination are equal; no duplicate key. Then
# `ferry worker --pull --once` claims a plain run, completes it and exits 0.
. "$(dirname "$0")/lib.sh"
. "$FERRY_SRC/tests/serve/lib.sh"
. "${FERRY_PG_SH:-$FERRY_SRC/tests/pg/pg.sh}"
pg_start
export DEST_URL="$FERRY_PG_URL"
STATE="$T/state.db"
ROWS=300000
p() { psql "$FERRY_PG_URL" -X -q -v ON_ERROR_STOP=1 -A -t "$@"; }

p -c "CREATE TABLE public.items (id bigint PRIMARY KEY, name text NOT NULL, qty integer)"
p -c "INSERT INTO public.items SELECT g, 'item-' || g, g % 97 FROM generate_series(1, $ROWS) g"
cat > pc.yaml <<EOF
version: 1
name: pc
distribute: true
source:
  type: postgres
  url: env:FERRY_PG_URL
  shard_rows: 30000
  resources:
    - {table: public.items, mode: full}
sink: {type: postgres, url: env:DEST_URL, schema: dest, write: upsert}
batch: {rows: 1000}
EOF
export FERRY_FAILPOINTS="after_sink_apply=sleep(40)"
start_serve --dispatch pull --sweep 300ms --lease 3s
api POST "/v1/pipelines?retries=1" --data-binary @pc.yaml -H 'Content-Type: application/yaml' > /dev/null
[ "$CODE" = 201 ] || [ "$CODE" = 200 ] || fail "pipeline not registered ($CODE): $BODY"
PIDS=""
for w in 1 2 3; do
  "$FERRY_BIN" worker --pull --owner "w$w" --lease-ms 2000 --state "$STATE" > "$T/w$w.log" 2>&1 &
  PIDS="$PIDS $!"
  EXTRA_PIDS="$EXTRA_PIDS $!"
done
api POST /v1/pipelines/pc/runs > req.json
RUN=$(jq -r .id req.json)

# The coordinator, once some shards are done and others are held by the other workers.
coord="" w=1
for _ in $(seq 1 1200); do
  done_n=$(q "$STATE" "SELECT count(*) FROM shard_tasks WHERE run_id = $RUN AND state = 'done'")
  held=$(q "$STATE" "SELECT count(DISTINCT owner) FROM shard_tasks WHERE run_id = $RUN AND state = 'leased'")
  [ "${done_n:-0}" -ge 2 ] && [ "${held:-0}" -ge 2 ] && break
  sleep 0.05
done
for pid in $PIDS; do
  grep -q "run $RUN claimed" "$T/w$w.log" && coord=$pid && break
  w=$((w + 1))
done
[ -n "$coord" ] || fail "no coordinator: $(cat "$T"/w*.log | grep -v failpoint | tail -n 20)"
kill -KILL "$coord"
wait "$coord" 2>/dev/null || true
echo "coordinator w$w (pid $coord) killed"

wait_state "$RUN" completed 2400
attempt=$(q "$STATE" "SELECT attempt FROM runs WHERE id = $RUN")
[ "$attempt" -ge 3 ] || fail "expected a fenced attempt and a new claim, attempt is $attempt"
grep -q "run $RUN claimed (attempt $attempt)" "$T"/w*.log || fail "no worker claimed attempt $attempt"
[ "$(q "$STATE" "SELECT count(*) FROM shard_tasks WHERE run_id = $RUN AND state <> 'done'")" = 0 ] ||
  fail "tasks left: $(q "$STATE" "SELECT * FROM shard_tasks WHERE run_id = $RUN")"
missing=$(p -c "SELECT count(*) FROM (SELECT id, name, qty FROM public.items EXCEPT
                SELECT id, name, qty FROM dest.items) x")
extra=$(p -c "SELECT count(*) FROM (SELECT id, name, qty FROM dest.items EXCEPT
              SELECT id, name, qty FROM public.items) x")
[ "$missing" = 0 ] && [ "$extra" = 0 ] || fail "$missing rows missing, $extra extra"
[ "$(p -c "SELECT count(*) - count(DISTINCT id) FROM dest.items")" = 0 ] || fail "duplicate keys"
for pid in $PIDS; do kill -TERM "$pid" 2>/dev/null || true; done
for pid in $PIDS; do wait "$pid" 2>/dev/null || true; done
if grep -l "Sanitizer" "$T"/w*.log; then fail "sanitizer reports in a worker"; fi
pass "coordinator killed: the run was reaped, claimed again (attempt $attempt) and completed; sets equal, no duplicates"

# --once: one piece of work (here a plain, not distributed run), then exit 0.
cat > one.yaml <<EOF
version: 1
name: one
source: {type: sample, rows: 3000, seed: 3, resources: [{table: orders, mode: full}]}
sink: {type: sqlite, path: $T/one.db, write: append}
EOF
api POST /v1/pipelines --data-binary @one.yaml -H 'Content-Type: application/yaml' > /dev/null
api POST /v1/pipelines/one/runs > one.json
ONE=$(jq -r .id one.json)
FERRY_FAILPOINTS= timeout 120 "$FERRY_BIN" worker --pull --once --owner solo --state "$STATE" > solo.log 2>&1 ||
  fail "worker --once failed: $(cat solo.log)"
grep -q "run $ONE claimed" solo.log || fail "worker --once did not claim run $ONE: $(cat solo.log)"
[ "$(q "$STATE" "SELECT state FROM runs WHERE id = $ONE")" = completed ] || fail "run $ONE not completed"
[ "$(q "$T/one.db" "SELECT count(*) FROM orders")" = 3000 ] || fail "one.db row count"
pass "worker --pull --once claimed one run, completed it and exited 0"
