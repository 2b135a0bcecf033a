#!/usr/bin/env bash
# shared: pg
# The notification events e2e/notify.sh does not reach (docs/operations.md, notifications),
# each delivered by `ferry run` to tests/tools/webhook_receiver.py, which verifies every
# signature and timestamp apart from ferry's code:
#   batch.chunk_divergence: a bit flipped between the pipeline and the sink (failpoint
#     before_sink_apply=bitflip), the run fails on the digest mismatch and the divergence
#     is notified with the batch's sequence and both digests;
#   schema.changed and cdc.lag: a PostgreSQL cdc stream held after its discover (failpoint
#     cdc_before_end, as e2e/cdc_schema_stop) while the source commits a change and then
#     adds a column: the stream reads a commit seconds old (cdc.lag above lag_threshold 1s,
#     notified once) and stops at the schema change (schema.changed).
. "$(dirname "$0")/lib.sh"
. "${FERRY_PG_SH:-$FERRY_SRC/tests/pg/pg.sh}"

export HOOK_SECRET="hook-secret-$RANDOM$RANDOM"
export FERRY_NOTIFY_GRACE_MS=3000
RECV_PID=""
# shellcheck disable=SC2064 # lib.sh's trap, expanded now, runs after the receiver is stopped
trap "rc=\$?; [ -n \"\$RECV_PID\" ] && kill \$RECV_PID 2>/dev/null; (exit \$rc); $(trap -p EXIT | sed "s/^trap -- '//; s/' EXIT\$//")" EXIT
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
python3 "$FERRY_SRC/tests/tools/webhook_receiver.py" "$PORT" "$HOOK_SECRET" hooks.log &
RECV_PID=$!
for _ in $(seq 1 100); do curl -s -o /dev/null "http://127.0.0.1:$PORT/" && break; sleep 0.05; done
# wait_log JQ-FILTER: until the receiver's log matches.
wait_log() {
  for _ in $(seq 1 400); do
    [ -f hooks.log ] && jq -e -s "$1" hooks.log > /dev/null 2>&1 && return 0
    sleep 0.05
  done
  fail "receiver log: nothing matching $1 in: $(cat hooks.log 2>/dev/null)"
}

# ---- batch.chunk_divergence ----
cat > flip.yaml <<EOF
version: 1
name: flip
source: {type: sample, rows: 2000, seed: 3, resources: [{table: orders, mode: full}]}
sink: {type: sqlite, path: "$T/flip.db", write: append}
batch: {rows: 500}
notify: [{webhook: "http://127.0.0.1:$PORT/hook", secret: env:HOOK_SECRET, on: [batch.chunk_divergence, run.failed]}]
EOF
FERRY_FAILPOINTS="before_sink_apply=bitflip@2" "$FERRY_BIN" run flip.yaml --state "$T/state.db" --json > flip.json \
  && fail "a flipped bit did not fail the run"
run=$(jq -r .run_id flip.json)
[ -n "$run" ] && [ "$run" != null ] || fail "no run id: $(cat flip.json)"
wait_log "[.[] | select(.valid and .event == \"batch.chunk_divergence\" and .body.run_id == $run)] | length == 1"
jq -e -s "[.[] | select(.event == \"batch.chunk_divergence\")][0].body |
          .pipeline == \"flip\" and .resource == \"orders\" and .data.seq == 2 and .data.expected != .data.got" hooks.log > /dev/null \
  || fail "divergence body: $(cat hooks.log)"
wait_log "[.[] | select(.valid and .event == \"run.failed\" and .body.run_id == $run)] | length == 1"
pass "batch.chunk_divergence notified (signed, batch 2, both digests), then run.failed"

# ---- schema.changed and cdc.lag ----
pg_start
export SRC_URL="$FERRY_PG_URL"
pgq > /dev/null <<'SQL'
CREATE TABLE c1 (id int PRIMARY KEY, note text);
INSERT INTO c1 SELECT g, 'row ' || g FROM generate_series(1, 50) g;
SQL
cat > cdc.yaml <<EOF
version: 1
name: cdcn
source:
  type: postgres
  url: env:SRC_URL
  resources: [{table: c1, mode: cdc}]
sink: {type: sqlite, path: "$T/cdc.db", write: merge}
batch: {rows: 500, flush_after: 100ms}
notify: [{webhook: "http://127.0.0.1:$PORT/cdc", secret: env:HOOK_SECRET, on: [schema.changed, cdc.lag], lag_threshold: 1s}]
EOF
expect_exit 0 ferry run cdc.yaml --state "$T/state.db" # the snapshot; the slot exists from here
FERRY_FAILPOINTS="cdc_before_end=sleep(4000)@1" FERRY_LOG=info "$FERRY_BIN" run cdc.yaml --state "$T/state.db" > cdc.log 2>&1 &
fpid=$!
for _ in $(seq 1 400); do grep -q 'failpoint cdc_before_end fired' cdc.log 2>/dev/null && break; sleep 0.05; done
grep -q 'failpoint cdc_before_end fired' cdc.log || fail "the run never reached cdc_before_end: $(cat cdc.log)"
pgq > /dev/null <<'SQL'
INSERT INTO c1 VALUES (1000, 'before');
ALTER TABLE c1 ADD COLUMN extra int;
INSERT INTO c1 VALUES (1001, 'after', 42);
SQL
rc=0; wait $fpid || rc=$?
[ $rc = 0 ] || fail "ferry run exited $rc: $(cat cdc.log)"
grep -q 'new column "extra"' cdc.log || fail "the stream did not stop at the schema change: $(cat cdc.log)"
# one event per change (column, change, types; schema_changes policy), and the run's own
# note that its stream stopped there (data.reason)
wait_log '[.[] | select(.valid and .event == "schema.changed" and .body.pipeline == "cdcn" and .body.resource == "c1" and .body.data.column == "extra" and .body.data.change == "added" and .body.data.policy == "evolve")] | length == 1'
wait_log '[.[] | select(.valid and .event == "schema.changed" and .body.pipeline == "cdcn" and (.body.data.reason // "" | test("schema change")))] | length == 1'
wait_log '[.[] | select(.valid and .event == "cdc.lag" and .body.pipeline == "cdcn")] | length >= 1'
jq -e -s '[.[] | select(.event == "cdc.lag")][0].body.data.lag_seconds > 1' hooks.log > /dev/null \
  || fail "cdc.lag body: $(jq -c -s '[.[] | select(.event == "cdc.lag")]' hooks.log)"
jq -e -s 'all(.valid)' hooks.log > /dev/null || fail "an invalid signature: $(cat hooks.log)"
! grep -q "$HOOK_SECRET" hooks.log "$T/state.db" || fail "the secret leaked into a body or the state"
pass "schema.changed and cdc.lag (above lag_threshold 1s) notified by a cdc run, signed"
