#!/usr/bin/env bash
# The PostgreSQL and NATS JetStream event buses against real servers: the bus unit cases
# (test_bus, next to FERRY_BIN) for all three buses, then `ferry run --bus` of a
# sample -> sqlite pipeline on each with exact counts (after the same state file ran on the
# in-process bus: marks are per bus), and a nats-server killed / a PostgreSQL stopped
# mid-run: the run fails naming the server, and after a restart the resume completes
# without loss.
# A server that cannot start FAILS this test, it never skips.
. "$(dirname "$0")/lib.sh"
. "${FERRY_PG_SH:-$FERRY_SRC/tests/pg/pg.sh}"
pg_start
[ -n "${FERRY_PG_URL:-}" ] || fail "pg_start exported no FERRY_PG_URL"

. "$FERRY_SRC/tests/nats/nats.sh"
nats_start

# ---- the unit cases against every bus ----
TEST_BUS="$(dirname "$FERRY_BIN")/test_bus"
[ -x "$TEST_BUS" ] || fail "no test_bus next to $FERRY_BIN"
set +e
FERRY_TEST_PG_URL="$FERRY_PG_URL" FERRY_TEST_NATS_URL="$NATS_URL" "$TEST_BUS" >unit.log 2>&1
unit_rc=$?
set -e
[ $unit_rc = 0 ] || { cat unit.log >&2; fail "test_bus failed ($unit_rc)"; }
grep -q "is not set" unit.log && { cat unit.log >&2; fail "test_bus skipped a bus"; }
[ "$(grep -c '^\[  PASSED  \]' unit.log)" = 3 ] || { cat unit.log >&2; fail "test_bus did not pass 3 groups"; }
pass "bus unit cases pass on inproc, postgres and nats"

# ---- ferry run --bus: exact counts, events on the bus and not in the state file ----
pipeline() { # FILE NAME DB ROWS BATCH
  cat >"$1" <<YAML
version: 1
name: $2
source:
  type: sample
  rows: $4
  seed: 3
  resources:
    - table: orders
    - table: users
sink:
  type: sqlite
  path: $3
batch: {rows: $5}
YAML
}

# Each state file first runs on the in-process bus (its tracker mark moves to ~100), then
# on a fresh schema / stream whose sequences start at 1: the mark is kept per bus, so the
# new bus's first events are folded, not skipped as "already seen".
export BUS_PG_URL="$FERRY_PG_URL?bus_schema=ferry_bus_e2e"
for bus in "env:BUS_PG_URL" "$NATS_URL?stream=E2E"; do
  name=bus$RANDOM
  export FERRY_STATE="$T/$name.db"
  pipeline "$name-inproc.yaml" "$name-inproc" "$name-inproc.db" 3000 100
  expect_exit 0 ferry run "$name-inproc.yaml" --json
  [ "$(q "$FERRY_STATE" 'SELECT max(seq) FROM events')" -gt 60 ] || fail "inproc run: too few events"
  pipeline "$name.yaml" "$name" "$name-dest.db" 5000 700
  expect_exit 0 ferry run "$name.yaml" --bus "$bus" --json
  [ "$(json_field "$OUT" .state)" = completed ] || fail "$bus: state: $OUT"
  run=$(json_field "$OUT" .run_id)
  expect_exit 0 ferry show "$run" --json
  [ "$(json_field "$OUT" .rows)" = 10000 ] || fail "$bus: show rows: $OUT"
  [ "$(json_field "$OUT" .batches)" = 16 ] || fail "$bus: show batches (2 x ceil(5000/700)): $OUT"
  [ "$(printf '%s\n' "$OUT" | jq -r '[.resources[] | .rows] | add')" = 10000 ] || fail "$bus: resource rows: $OUT"
  [ "$(q "$name-dest.db" 'SELECT count(*), count(DISTINCT id) FROM orders')" = "5000|5000" ] || fail "$bus: orders"
  [ "$(q "$name-dest.db" 'SELECT count(*), count(DISTINCT id) FROM users')" = "5000|5000" ] || fail "$bus: users"
  # the events went to the bus: none in the state file, all readable through the bus
  [ "$(q "$FERRY_STATE" "SELECT count(*) FROM events WHERE run_id = $run")" = 0 ] || fail "$bus: events in the state file"
  [ "$(q "$FERRY_STATE" "SELECT count(*) FROM marks WHERE consumer = 'tracker' OR consumer LIKE 'tracker@%'")" = 2 ] \
    || fail "$bus: a tracker mark per bus: $(q "$FERRY_STATE" 'SELECT * FROM marks')"
  expect_exit 0 ferry events "$run" --bus "$bus" --json
  [ "$(printf '%s\n' "$OUT" | jq -r 'select(.type == "batch.written") | .payload.rows' | paste -sd+ | bc)" = 10000 ] \
    || fail "$bus: batch.written rows on the bus"
  printf '%s\n' "$OUT" | tail -n 1 | jq -e '.type == "run.completed"' >/dev/null || fail "$bus: last event"
  pass "ferry run --bus ${bus%%:*}: show counts exact, events on the bus"
done
[ "$(psql "$FERRY_PG_URL" -XAtqc 'SELECT count(DISTINCT scope) FROM ferry_bus_e2e.events')" = 1 ] \
  || fail "pg bus scope"

# ---- nats-server killed mid-run, restarted, resumed ----
name=kill$RANDOM
export FERRY_STATE="$T/$name.db"
pipeline "$name.yaml" "$name" "$name-dest.db" 20000 400
FERRY_FAILPOINTS="before_sink_apply=sleep(100)" "$FERRY_BIN" run "$name.yaml" --bus "$NATS_URL" --json \
  >"$name.out" 2>"$name.err" &
ferry_pid=$!
for _ in $(seq 1 300); do
  n=$(q "$name-dest.db" 'SELECT count(*) FROM orders' 2>/dev/null || echo 0)
  [ "${n:-0}" -ge 2000 ] && break
  sleep 0.1
done
[ "${n:-0}" -ge 2000 ] || fail "the run did not start writing"
nats_stop
set +e
wait "$ferry_pid"
ferry_rc=$?
set -e
[ $ferry_rc != 0 ] || fail "the run survived a dead bus: $(cat "$name.out")"
grep -q "NATS bus at 127.0.0.1:$NATS_PORT" "$name.err" "$name.out" \
  || fail "the error does not name the server: $(cat "$name.err" "$name.out")"
! grep -E "Sanitizer|runtime error" "$name.err" || fail "sanitizer report from the failed run"
echo "  the run's error: $(tail -n 1 "$name.out" | jq -r '.error.message // .' 2>/dev/null || tail -n 1 "$name.out")"
pass "a dead nats-server fails the run naming 127.0.0.1:$NATS_PORT"

nats_start "$NATS_PORT"
expect_exit 0 ferry run "$name.yaml" --bus "$NATS_URL" --json
[ "$(json_field "$OUT" .state)" = completed ] || fail "resume: $OUT"
[ "$(json_field "$OUT" .resumed)" = true ] || fail "not a resume: $OUT"
[ "$(q "$name-dest.db" 'SELECT count(*), count(DISTINCT id), min(id), max(id) FROM orders')" = "20000|20000|1|20000" ] \
  || fail "orders after the resume: $(q "$name-dest.db" 'SELECT count(*), count(DISTINCT id) FROM orders')"
[ "$(q "$name-dest.db" 'SELECT count(*), count(DISTINCT id) FROM users')" = "20000|20000" ] || fail "users after the resume"
pass "after a restart of nats-server the resume completes without loss"

# ---- the same with PostgreSQL stopped mid-run (immediate shutdown: like a crash) ----
name=pgkill$RANDOM
export FERRY_STATE="$T/$name.db"
pipeline "$name.yaml" "$name" "$name-dest.db" 20000 400
FERRY_FAILPOINTS="before_sink_apply=sleep(100)" "$FERRY_BIN" run "$name.yaml" --bus env:BUS_PG_URL --json \
  >"$name.out" 2>"$name.err" &
ferry_pid=$!
for _ in $(seq 1 300); do
  n=$(q "$name-dest.db" 'SELECT count(*) FROM orders' 2>/dev/null || echo 0)
  [ "${n:-0}" -ge 2000 ] && break
  sleep 0.1
done
[ "${n:-0}" -ge 2000 ] || fail "the pg-bus run did not start writing"
(cd / && pg_as "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -m immediate -w stop >/dev/null)
set +e
wait "$ferry_pid"
ferry_rc=$?
set -e
[ $ferry_rc != 0 ] || fail "the run survived a dead PostgreSQL bus: $(cat "$name.out")"
grep -q "PostgreSQL bus at 127.0.0.1:$PGPORT/ferry" "$name.err" "$name.out" \
  || fail "the error does not name the server: $(cat "$name.err" "$name.out")"
grep -q "$PGPASSWORD" "$name.err" "$name.out" && fail "the password leaked into the output"
! grep -E "Sanitizer|runtime error" "$name.err" || fail "sanitizer report from the failed run"
echo "  the run's error: $(tail -n 1 "$name.out" | jq -r '.error.message // .' 2>/dev/null || tail -n 1 "$name.out")"
pass "a dead PostgreSQL bus fails the run naming 127.0.0.1:$PGPORT"
(cd / && pg_as "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/server.log" -w -t 60 start >/dev/null) \
  || fail "PostgreSQL did not restart"
expect_exit 0 ferry run "$name.yaml" --bus env:BUS_PG_URL --json
[ "$(json_field "$OUT" .state)" = completed ] || fail "pg resume: $OUT"
[ "$(json_field "$OUT" .resumed)" = true ] || fail "pg: not a resume: $OUT"
[ "$(q "$name-dest.db" 'SELECT count(*), count(DISTINCT id), min(id), max(id) FROM orders')" = "20000|20000|1|20000" ] \
  || fail "orders after the pg resume"
[ "$(q "$name-dest.db" 'SELECT count(*), count(DISTINCT id) FROM users')" = "20000|20000" ] || fail "users after the pg resume"
pass "after a restart of PostgreSQL the resume completes without loss"
