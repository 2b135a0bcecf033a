#!/usr/bin/env bash
# shared: pg
# Leader election of the control plane (docs/operations.md, scale-out): two `ferry serve
# --role control` replicas and one `--role api` share one state. Only the holder of the
# store lease "control" dispatches; the leader is killed with kill -9 while runs are queued
# and running; the other replica takes over once the lease runs out (3 sweeps), re-fills
# its queue from the store and starts what was still requested. Every run completes
# exactly once: one attempt per run in the store, one run.started event per run, and each
# destination holds its rows once. A clean stop of the new leader releases the lease.
. "$(dirname "$0")/lib.sh"
. "$FERRY_SRC/tests/serve/lib.sh"
# The shared state: a SQLite file, or (FERRY_FAILOVER_STORE=postgres,
# control_failover_pg.sh) the PostgreSQL store. sq SQL: a query on it.
if [ "${FERRY_FAILOVER_STORE:-sqlite}" = postgres ]; then
  . "${FERRY_PG_SH:-$FERRY_SRC/tests/pg/pg.sh}"
  pg_start
  STATE="$FERRY_PG_URL?schema=ferry_state"
  sq() { psql "$FERRY_PG_URL" -X -q -v ON_ERROR_STOP=1 -A -t -c "SET search_path = ferry_state; $1"; }
else
  STATE="$T/state.db"
  sq() { q "$STATE" "$1"; }
fi
ROWS=20000
N=6
# Each batch waits after its apply: runs last a few seconds, so the kill finds some
# running and some still queued (--workers 2).
export FERRY_FAILPOINTS="after_sink_apply=sleep(150)"

start_serve --role api --store "$STATE"
CTL_PIDS=""
for r in a b; do
  "$FERRY_BIN" serve --policy allow-all --role control --store "$STATE" --workers 2 --sweep 300ms --lease 5s \
    --log-dir "$T/logs-$r" > "$T/ctl-$r.out" 2> "$T/ctl-$r.err" &
  CTL_PIDS="$CTL_PIDS $!"
  EXTRA_PIDS="$EXTRA_PIDS $!"
  eval "PID_$r=$!"
done

leader() { # prints a or b when exactly one replica announced itself leader so far
  local who=""
  for r in a b; do grep -q "control leader" "$T/ctl-$r.out" 2>/dev/null && who="$who$r"; done
  echo "$who"
}
for _ in $(seq 1 200); do [ -n "$(leader)" ] && break; sleep 0.05; done
L=$(leader)
[ "$L" = a ] || [ "$L" = b ] || fail "expected one leader, got '$L': $(cat "$T"/ctl-*.out)"
[ "$L" = a ] && { LPID=$PID_a; F=b; } || { LPID=$PID_b; F=a; }
sleep 1 # the follower has tried the lease several times meanwhile
[ "$(leader)" = "$L" ] || fail "both replicas lead: $(cat "$T"/ctl-*.out)"
pass "one leader ($L), one follower"

for i in $(seq 1 $N); do
  cat > "f$i.yaml" <<EOF
version: 1
name: f$i
source: {type: sample, rows: $ROWS, seed: $i, resources: [{table: orders, mode: full}]}
sink: {type: sqlite, path: $T/dest-$i.db, write: append}
batch: {rows: 1000}
EOF
  api POST /v1/pipelines --data-binary @"f$i.yaml" -H 'Content-Type: application/yaml' > /dev/null
  api POST "/v1/pipelines/f$i/runs" > "req-$i.json"
  jq -e .id "req-$i.json" > /dev/null || fail "run request $i: $(cat "req-$i.json")"
done

# Kill the leader once it started workers.
for _ in $(seq 1 200); do
  [ "$(sq "SELECT count(*) FROM runs WHERE state = 'running'")" -ge 1 ] && break
  sleep 0.05
done
kill -KILL "$LPID"
wait "$LPID" 2>/dev/null || true
t0=$(date +%s%N)
queued=$(sq "SELECT count(*) FROM runs WHERE state = 'requested'")
echo "leader $L killed; $queued run(s) still requested"
for _ in $(seq 1 300); do grep -q "control leader" "$T/ctl-$F.out" && break; sleep 0.05; done
grep -q "control leader" "$T/ctl-$F.out" || fail "replica $F never took over: $(cat "$T/ctl-$F.err")"
took=$((($(date +%s%N) - t0) / 1000000))
pass "replica $F took over after $took ms (lease ttl 900 ms)"

# A run requested after the takeover is dispatched by the new leader.
api POST "/v1/pipelines/f1/runs" -d '{"idempotency_key": "after"}' > req-after.json
AFTER=$(jq -r .id req-after.json)

for i in $(seq 1 $N) after; do
  id=$( [ "$i" = after ] && echo "$AFTER" || jq -r .id "req-$i.json")
  wait_state "$id" completed 1200
done
n_runs=$((N + 1))
[ "$(sq "SELECT count(*) FROM runs WHERE state = 'completed'")" = $n_runs ] ||
  fail "not every run completed: $(sq "SELECT id, state, attempt, error FROM runs")"
[ "$(sq "SELECT count(*) FROM runs WHERE attempt <> 1")" = 0 ] ||
  fail "a run was started twice: $(sq "SELECT id, attempt FROM runs WHERE attempt <> 1")"
[ "$(sq "SELECT count(*) FROM (SELECT run_id FROM events WHERE type = 'run.started'
                 GROUP BY run_id HAVING count(*) <> 1) x")" = 0 ] ||
  fail "a run has more than one run.started event"
for i in $(seq 2 $N); do
  [ "$(q "$T/dest-$i.db" "SELECT count(*) FROM orders")" = $ROWS ] || fail "dest-$i.db row count"
done
[ "$(q "$T/dest-1.db" "SELECT count(*) FROM orders")" = $((2 * ROWS)) ] || fail "dest-1.db row count"
pass "$n_runs runs completed exactly once across the failover (one attempt each)"

# A clean stop releases the lease at once.
FPID=$( [ "$F" = a ] && echo "$PID_a" || echo "$PID_b")
kill -TERM "$FPID"
wait "$FPID" 2>/dev/null || true
[ "$(sq "SELECT owner FROM leases WHERE name = 'control'")" = "" ] ||
  fail "the lease was not released: $(sq "SELECT * FROM leases")"
if grep -l "Sanitizer" "$T"/ctl-*.err "$T"/logs-*/*.log 2>/dev/null; then
  fail "sanitizer reports in the control plane or its workers"
fi
if [ -n "${PG_ADMIN_PASSWORD:-}" ] && grep -lF "$PG_ADMIN_PASSWORD" "$T"/ctl-*.* "$T"/serve.* "$T"/logs-*/*.log; then
  fail "the database password appears in the output"
fi
pass "a clean stop released the lease"
