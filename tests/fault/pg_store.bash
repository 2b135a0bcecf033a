# tests/fault/pg_store.bash - the crash-the-state-store scenario shared by
# gapx_pg_store_torn.sh and gapx_pg_store_async.sh (sourced after tests/e2e/lib.sh,
# tests/pg/pg.sh and pg_start; not a test itself: CTest only globs *.sh). The PostgreSQL of
# pg_start holds ferry's state (`--store`); each test sets the server's settings it is about.
#
#   pg_store_setup NAME ROWS   the store through env (STORE), ROWS; ref.db: an unfaulted copy
#                              (its own SQLite state); p.yaml: the same copy into dest.db
#   store_run_start SLEEP_MS   an empty store and destination; `ferry run p.yaml` in the
#                              background (pid; output in run.log), each applied batch slowed
#                              by SLEEP_MS (failpoint after_sink_apply)
#   store_checkpoints [RUN]    shard|key|lo of the run's (or every run's) checkpoints
#   store_crash_wait ROUND PID the store's server crashes (pg_ctl stop -m immediate); the run
#                              PID must then end (180 s at most) and fail (rc: its exit) without
#                              a sanitizer report or the store's password in run.log
#   store_restart              the store's server starts again (WAL recovery)
#   store_resume_same ROUND RUN the crash came before the whole copy (partial: the rows
#                              dest.db held); `ferry resume RUN` completes that same run,
#                              set-equal to ref.db, no duplicate

pg_store_setup() { # NAME ROWS
  unset FERRY_STATE
  export FERRY_TEST_STORE_URL="$FERRY_PG_URL" # through env: keeps the password off command lines
  STORE="env:FERRY_TEST_STORE_URL"
  ROWS=$2
  write_pipeline ref.yaml "$1" "$ROWS" ref.db append full "  shards: 3" "" "batch: {rows: 2000}"
  expect_exit 0 ferry run ref.yaml --state "$T/ref-state.db" --quiet
  write_pipeline p.yaml "$1" "$ROWS" dest.db append full "  shards: 3" "" "batch: {rows: 2000}"
}

store_run_start() { # SLEEP_MS
  rm -f dest.db
  psql -qX -c "DROP SCHEMA IF EXISTS ferry CASCADE" > /dev/null 2>&1
  FERRY_FAILPOINTS="after_sink_apply=sleep($1)" "$FERRY_BIN" run p.yaml --store "$STORE" > run.log 2>&1 &
  pid=$!
}

store_checkpoints() { # [RUN]
  pgq -c "SELECT c.shard, (c.position::jsonb->'key'->>0), (pl.plan::jsonb->'shards'->(c.shard::int)->>'lo')
          FROM ferry.run_checkpoints c JOIN ferry.plans pl ON pl.run_id = c.run_id AND pl.resource = c.resource
          WHERE c.position::jsonb->'key'->>0 IS NOT NULL ${1:+AND c.run_id = $1} ORDER BY 1"
}

store_crash_wait() { # ROUND PID
  local round=$1 pid=$2
  (cd / && pg_as "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -m immediate -w stop > /dev/null)
  # the run must notice on its own and stop: it cannot save progress any more
  for _ in $(seq 1 1800); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid"; fail "round $round: the run did not end within 180 s of the store's crash: $(tail -n 5 run.log)"; fi
  set +e; wait "$pid"; rc=$?; set -e
  if grep -qE 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:' run.log; then fail "round $round: sanitizer report: $(cat run.log)"; fi
  [ $rc != 0 ] || fail "round $round: the run succeeded although its store crashed: $(cat run.log)"
  grep -qF "$PG_ADMIN_PASSWORD" run.log && fail "round $round: the store's password in the output"
  return 0
}

store_restart() {
  (cd / && pg_as "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/server.log" -w -t 60 start > /dev/null)
}

store_resume_same() { # ROUND RUN
  local round=$1 run=$2
  partial=$(q dest.db "SELECT count(*) FROM orders")
  [ "$partial" -lt $ROWS ] || fail "round $round: the crash came after the whole copy"
  expect_exit 0 ferry resume "$run" --store "$STORE" --json
  [ "$(json_field "$OUT" .run_id)" = "$run" ] || fail "round $round: resume ran another run: $OUT"
  same_table ref.db dest.db orders || fail "round $round: after the store's crash and the resume the destination differs"
  [ "$(q dest.db 'SELECT count(*) - count(DISTINCT id) FROM orders')" = 0 ] || fail "round $round: duplicates"
}
