#!/usr/bin/env bash
# The PostgreSQL state store on a server that acknowledges commits before their WAL is written
# (`synchronous_commit = off` server-wide, `wal_writer_delay = 10s`, a large
# `wal_writer_flush_after`: an acknowledged commit can sit in shared memory for seconds).
# While a sample -> sqlite run writes (slowed by a sleep failpoint), the checkpoints the store
# shows (what `ferry show` / `ferry runs` would report) are read; right after, the store's
# server is stopped with `pg_ctl stop -m immediate` (its WAL buffers are lost, as in a crash),
# then started again. Asserted: every checkpoint read before the crash is still there after
# the recovery (the same shard at that key or further) - the store raises
# synchronous_commit to `on` for its own sessions (docs/operations.md) - and none is ahead of
# the destination; `ferry resume` completes the same run, set-equal to an unfaulted copy, no
# duplicate. Without the store's own setting the recovered store loses the latest
# checkpoints (seen with a build that lacks it).
. "$(dirname "$0")/../e2e/lib.sh"
. "$FERRY_SRC/tests/pg/pg.sh"
pg_start
psql -qX -v ON_ERROR_STOP=1 -c "ALTER SYSTEM SET synchronous_commit = off" \
  -c "ALTER SYSTEM SET wal_writer_delay = '10s'" -c "ALTER SYSTEM SET wal_writer_flush_after = '1GB'" \
  -c "SELECT pg_reload_conf()" > /dev/null
[ "$(pgq -c 'SHOW synchronous_commit')" = off ] || fail "the server does not run with synchronous_commit = off"
[ "$(pgq -c 'SHOW wal_writer_delay')" = 10s ] || fail "wal_writer_delay not applied"
. "$FERRY_SRC/tests/fault/pg_store.bash"
pg_store_setup pgasync 120000

for round in 1 2; do
  store_run_start 40
  # until the store shows a checkpoint (round 2: a third of the rows, deeper into the run)
  want=$((round == 1 ? 1 : ROWS / 3))
  seen=""
  for _ in $(seq 1 1200); do
    seen=$(store_checkpoints 2> /dev/null || true)
    [ -n "$seen" ] && [ "$(printf '%s\n' "$seen" | awk -F'|' '{ s += $2 - $3 + 1 } END { print s + 0 }')" -ge $want ] && break
    kill -0 $pid 2> /dev/null || fail "round $round: the run ended early: $(cat run.log)"
    sleep 0.05
  done
  [ -n "$seen" ] || fail "round $round: no checkpoint saved: $(cat run.log)"
  # the store's server crashes right after the checkpoints were read
  store_crash_wait $round $pid
  store_restart
  [ "$(pgq -c 'SHOW synchronous_commit')" = off ] || fail "round $round: the server's setting changed"

  expect_exit 0 ferry runs --store "$STORE" --pipeline pgasync --json
  run=$(printf '%s' "$OUT" | jq -r '.[0].id')
  [ -n "$run" ] && [ "$run" != null ] || fail "round $round: the run is gone from the store after its server's crash: $OUT"
  after=$(store_checkpoints "$run")
  n=0
  while IFS='|' read -r shard key lo; do
    [ -n "$shard" ] || continue
    n=$((n + 1))
    now=$(printf '%s\n' "$after" | awk -F'|' -v s="$shard" '$1 == s { print $2 }')
    [ -n "$now" ] || fail "round $round: the checkpoint of shard $shard (key $key), saved and shown before the store's crash, is gone after its recovery"
    [ "$now" -ge "$key" ] || fail "round $round: shard $shard's checkpoint went back from key $key to $now across the store's crash"
    # and the recovered checkpoint is never ahead of the destination
    have=$(q dest.db "SELECT count(DISTINCT id) FROM orders WHERE id BETWEEN $lo AND $now")
    [ "$have" -ge $((now - lo + 1)) ] || fail "round $round: the store's checkpoint of shard $shard says key $now, the destination holds $have of its $((now - lo + 1)) rows"
  done <<< "$seen"
  store_resume_same $round "$run"
  # shellcheck disable=SC2154 # rc: set by store_crash_wait (pg_store.bash)
  pass "round $round: $n checkpoints shown before the store's crash (synchronous_commit = off server-wide, wal_writer_delay 10s), all there after its recovery; run exit $rc; resume of run $run set-equal, no duplicate"
done
