#!/usr/bin/env bash
# torn_state for the PostgreSQL state store (`--store postgres://...`): while a sample ->
# sqlite run writes (slowed by a sleep failpoint), the state database's server is stopped
# with `pg_ctl stop -m immediate` (every backend killed, no shutdown checkpoint: a crash),
# then started again (WAL recovery). Asserted: the run fails (non-zero exit, bounded time)
# naming the store's host:port and never its password; after the restart the store is
# consistent: `ferry runs`/`show` read it, every saved checkpoint is covered by the
# destination (all K-lo+1 rows of the shard, sqlite3 reader), and `ferry resume` completes the
# same run with set equality against an unfaulted copy and zero duplicates. The store's
# server runs with synchronous_commit = on (a store that acknowledges only durable commits).
. "$(dirname "$0")/../e2e/lib.sh"
. "$FERRY_SRC/tests/pg/pg.sh"
pg_start
psql -qX -v ON_ERROR_STOP=1 -c "ALTER SYSTEM SET synchronous_commit = on" -c "SELECT pg_reload_conf()" >/dev/null

unset FERRY_STATE
export FERRY_TEST_STORE_URL="$FERRY_PG_URL" # through env: keeps the password off command lines
STORE="env:FERRY_TEST_STORE_URL"
ROWS=200000

write_pipeline ref.yaml pgtorn $ROWS ref.db append full "  shards: 3" "" "batch: {rows: 2000}"
expect_exit 0 ferry run ref.yaml --state "$T/ref-state.db" --quiet
write_pipeline p.yaml pgtorn $ROWS dest.db append full "  shards: 3" "" "batch: {rows: 2000}"

store_checkpoints() { # the state's checkpoints with their shard's lower bound
  pgq -c "SELECT c.shard, (c.position::jsonb->'key'->>0), (pl.plan::jsonb->'shards'->(c.shard::int)->>'lo')
          FROM ferry.run_checkpoints c JOIN ferry.plans pl ON pl.run_id = c.run_id AND pl.resource = c.resource
          WHERE c.run_id = $1 AND c.position::jsonb->'key'->>0 IS NOT NULL"
}

for round in 1 2; do
  rm -f dest.db
  psql -qX -c "DROP SCHEMA IF EXISTS ferry CASCADE" >/dev/null 2>&1
  FERRY_FAILPOINTS="after_sink_apply=sleep(20)" "$FERRY_BIN" run p.yaml --store "$STORE" > run.log 2>&1 &
  pid=$!
  # wait until some batches are in the destination and the store saved a checkpoint
  for _ in $(seq 1 600); do
    n=$(pgq -c "SELECT count(*) FROM ferry.run_checkpoints" 2>/dev/null || echo 0)
    [ "${n:-0}" -gt $((round - 1)) ] && break
    kill -0 $pid 2>/dev/null || fail "round $round: the run ended early: $(cat run.log)"
    sleep 0.05
  done
  [ "${n:-0}" -gt 0 ] || fail "round $round: no checkpoint saved: $(cat run.log)"
  [ $round = 2 ] && sleep 0.$((RANDOM % 9 + 1)) # a later moment, deeper into the run
  (cd / && pg_as "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -m immediate -w stop > /dev/null)
  # the run must notice on its own and stop: it cannot save progress any more
  for _ in $(seq 1 1800); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
  if kill -0 $pid 2>/dev/null; then kill -9 $pid; fail "round $round: the run did not end within 180 s of the store's crash: $(tail -n 5 run.log)"; fi
  set +e; wait $pid; rc=$?; set -e
  if grep -qE 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:' run.log; then fail "round $round: sanitizer report: $(cat run.log)"; fi
  [ $rc != 0 ] || fail "round $round: the run succeeded although its store crashed: $(cat run.log)"
  grep -q "127.0.0.1:$PGPORT" run.log || fail "round $round: the failure does not name the store's host:port: $(tail -n 5 run.log)"
  grep -qF "$PG_ADMIN_PASSWORD" run.log && fail "round $round: the store's password in the output"
  (cd / && pg_as "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/server.log" -w -t 60 start > /dev/null)

  expect_exit 0 ferry runs --store "$STORE" --pipeline pgtorn --json
  run=$(printf '%s' "$OUT" | jq -r '.[0].id')
  state=$(printf '%s' "$OUT" | jq -r '.[0].state')
  expect_exit 0 ferry show "$run" --store "$STORE" --json
  # the saved checkpoints are never ahead of what the destination holds
  cps=$(store_checkpoints "$run")
  checked=0
  while IFS='|' read -r shard key lo; do
    [ -n "$shard" ] || continue
    have=$(q dest.db "SELECT count(DISTINCT id) FROM orders WHERE id BETWEEN $lo AND $key")
    [ "$have" -ge $((key - lo + 1)) ] || fail "round $round: the store's checkpoint of shard $shard says key $key, the destination holds $have of its $((key - lo + 1)) rows"
    checked=$((checked + 1))
  done <<< "$cps"
  [ $checked -ge 1 ] || fail "round $round: no checkpoint in the store after its restart (one was saved before the crash)"
  partial=$(q dest.db "SELECT count(*) FROM orders")
  [ "$partial" -lt $ROWS ] || fail "round $round: the crash came after the whole copy"
  expect_exit 0 ferry resume "$run" --store "$STORE" --json
  [ "$(json_field "$OUT" .run_id)" = "$run" ] || fail "round $round: resume ran another run: $OUT"
  same_table ref.db dest.db orders || fail "round $round: after the store's crash and the resume the destination differs"
  [ "$(q dest.db 'SELECT count(*) - count(DISTINCT id) FROM orders')" = 0 ] || fail "round $round: duplicates"
  pass "round $round: store crashed (pg_ctl stop -m immediate) with $partial rows written; run exit $rc naming 127.0.0.1:$PGPORT (state after restart: $state); $checked checkpoints, none ahead; resume of run $run set-equal, no duplicate; the run said: $(grep -v '^run ' run.log | tail -n 1)"
done
