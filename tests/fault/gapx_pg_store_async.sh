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

unset FERRY_STATE
export FERRY_TEST_STORE_URL="$FERRY_PG_URL" # through env: keeps the password off command lines
STORE="env:FERRY_TEST_STORE_URL"
ROWS=120000

write_pipeline ref.yaml pgasync $ROWS ref.db append full "  shards: 3" "" "batch: {rows: 2000}"
expect_exit 0 ferry run ref.yaml --state "$T/ref-state.db" --quiet
write_pipeline p.yaml pgasync $ROWS dest.db append full "  shards: 3" "" "batch: {rows: 2000}"

checkpoints() { # [RUN]: shard|key|lo of the run's (or every run's) checkpoints
  pgq -c "SELECT c.shard, (c.position::jsonb->'key'->>0), (pl.plan::jsonb->'shards'->(c.shard::int)->>'lo')
          FROM ferry.run_checkpoints c JOIN ferry.plans pl ON pl.run_id = c.run_id AND pl.resource = c.resource
          WHERE c.position::jsonb->'key'->>0 IS NOT NULL ${1:+AND c.run_id = $1} ORDER BY 1"
}

for round in 1 2; do
  rm -f dest.db
  psql -qX -c "DROP SCHEMA IF EXISTS ferry CASCADE" > /dev/null 2>&1
  FERRY_FAILPOINTS="after_sink_apply=sleep(40)" "$FERRY_BIN" run p.yaml --store "$STORE" > run.log 2>&1 &
  pid=$!
  # until the store shows a checkpoint (round 2: a third of the rows, deeper into the run)
  want=$((round == 1 ? 1 : ROWS / 3))
  seen=""
  for _ in $(seq 1 1200); do
    seen=$(checkpoints 2> /dev/null || true)
    [ -n "$seen" ] && [ "$(printf '%s\n' "$seen" | awk -F'|' '{ s += $2 - $3 + 1 } END { print s + 0 }')" -ge $want ] && break
    kill -0 $pid 2> /dev/null || fail "round $round: the run ended early: $(cat run.log)"
    sleep 0.05
  done
  [ -n "$seen" ] || fail "round $round: no checkpoint saved: $(cat run.log)"
  # the store's server crashes right after the checkpoints were read
  (cd / && pg_as "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -m immediate -w stop > /dev/null)
  for _ in $(seq 1 1800); do kill -0 $pid 2> /dev/null || break; sleep 0.1; done
  if kill -0 $pid 2> /dev/null; then kill -9 $pid; fail "round $round: the run did not end within 180 s of the store's crash"; fi
  set +e; wait $pid; rc=$?; set -e
  if grep -qE 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:' run.log; then fail "round $round: sanitizer report: $(cat run.log)"; fi
  [ $rc != 0 ] || fail "round $round: the run succeeded although its store crashed: $(cat run.log)"
  grep -qF "$PG_ADMIN_PASSWORD" run.log && fail "round $round: the store's password in the output"
  (cd / && pg_as "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/server.log" -w -t 60 start > /dev/null)
  [ "$(pgq -c 'SHOW synchronous_commit')" = off ] || fail "round $round: the server's setting changed"

  expect_exit 0 ferry runs --store "$STORE" --pipeline pgasync --json
  run=$(printf '%s' "$OUT" | jq -r '.[0].id')
  [ -n "$run" ] && [ "$run" != null ] || fail "round $round: the run is gone from the store after its server's crash: $OUT"
  after=$(checkpoints "$run")
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
  partial=$(q dest.db "SELECT count(*) FROM orders")
  [ "$partial" -lt $ROWS ] || fail "round $round: the crash came after the whole copy"
  expect_exit 0 ferry resume "$run" --store "$STORE" --json
  [ "$(json_field "$OUT" .run_id)" = "$run" ] || fail "round $round: resume ran another run: $OUT"
  same_table ref.db dest.db orders || fail "round $round: after the store's crash and the resume the destination differs"
  [ "$(q dest.db 'SELECT count(*) - count(DISTINCT id) FROM orders')" = 0 ] || fail "round $round: duplicates"
  pass "round $round: $n checkpoints shown before the store's crash (synchronous_commit = off server-wide, wal_writer_delay 10s), all there after its recovery; run exit $rc; resume of run $run set-equal, no duplicate"
done
