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
. "$FERRY_SRC/tests/fault/pg_store.bash"
pg_store_setup pgtorn 200000

for round in 1 2; do
  store_run_start 20
  # wait until some batches are in the destination and the store saved a checkpoint
  for _ in $(seq 1 600); do
    n=$(pgq -c "SELECT count(*) FROM ferry.run_checkpoints" 2>/dev/null || echo 0)
    [ "${n:-0}" -gt $((round - 1)) ] && break
    kill -0 $pid 2>/dev/null || fail "round $round: the run ended early: $(cat run.log)"
    sleep 0.05
  done
  [ "${n:-0}" -gt 0 ] || fail "round $round: no checkpoint saved: $(cat run.log)"
  [ $round = 2 ] && sleep 0.$((RANDOM % 9 + 1)) # a later moment, deeper into the run
  store_crash_wait $round $pid
  grep -q "127.0.0.1:$PGPORT" run.log || fail "round $round: the failure does not name the store's host:port: $(tail -n 5 run.log)"
  store_restart

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
  store_resume_same $round "$run"
  # shellcheck disable=SC2154 # rc, partial: set by store_crash_wait, store_resume_same (pg_store.bash)
  pass "round $round: store crashed (pg_ctl stop -m immediate) with $partial rows written; run exit $rc naming 127.0.0.1:$PGPORT (state after restart: $state); $checked checkpoints, none ahead; resume of run $run set-equal, no duplicate; the run said: $(grep -v '^run ' run.log | tail -n 1)"
done
