#!/usr/bin/env bash
# slow_sink_backpressure with a cdc source (PostgreSQL, logical replication): a stream-only run
# of a heavy insert stream (200 000 rows, ~50 MiB of WAL) into a PostgreSQL merge table whose
# sink stalls for 8-9 s, twice:
#   1. the sink throttled by the failpoint before_sink_apply=sleep(9000)@5;
#   2. the destination's PostgreSQL backend SIGSTOPped, then SIGCONTed.
# While the sink stalls, the replication stream could deliver the whole transaction many times
# over: ferry's peak RSS (VmHWM, /proc/PID/status) grows by less than the configured bound
# (batch.queue + 2 batches of batch.bytes, plus 16 MiB of allocator slack); the slot's
# confirmed_flush_lsn, sampled again and again, is never past the position the state saved
# (sqlite3); after the stall the destination keeps growing (progress resumes), the run
# completes and the destination equals the source (whole rows), with the slot acknowledged
# no further than the saved position.
. "$(dirname "$0")/../e2e/lib.sh"
. "$FERRY_SRC/tests/fault/cdc_lib.bash"
QUEUE=4 BYTES_MIB=1
BOUND_KB=$(( ((QUEUE + 2) * BYTES_MIB + 16) * 1024 ))
ROWS=${ROWS:-200000}

pgq -c "CREATE TABLE t (id bigint PRIMARY KEY, v text NOT NULL, n int NOT NULL)" >/dev/null
pgq -c "INSERT INTO t SELECT g, md5(g::text), 0 FROM generate_series(1, 1000) g" >/dev/null
cdc_pipeline p.yaml bp_cdc t "{type: postgres, url: env:DEST_URL, schema: public, write: merge}" \
  "rows: 1000, bytes: ${BYTES_MIB}MiB, queue: $QUEUE"
expect_exit 0 ferry run p.yaml --quiet
SLOT=ferry_bp_cdc
NEXT=1000001
heavy() { # one transaction of ROWS inserts of ~200 bytes, then updates
  pgq -c "INSERT INTO t SELECT g, md5(g::text) || md5((g + 1)::text) || md5((g + 2)::text) || md5((g + 3)::text) || md5((g + 4)::text) || md5((g + 5)::text), 1
    FROM generate_series($NEXT, $NEXT + $ROWS - 1) g" -c "UPDATE t SET n = n + 1 WHERE id % 5 = 0" >/dev/null
  NEXT=$((NEXT + ROWS))
}
dest_count() { pgq -d dest -c "SELECT count(*) FROM public.t"; }
check_equal() { # LABEL
  local a b
  a=$(pgq -c "COPY (SELECT * FROM t ORDER BY id) TO STDOUT" | md5sum)
  b=$(pgq -d dest -c "COPY (SELECT * FROM public.t ORDER BY id) TO STDOUT" | md5sum)
  [ "$a" = "$b" ] || fail "$1: the destination differs from the source ($(pgq -c 'SELECT count(*) FROM t') rows at the source, $(dest_count) at the destination)"
}
# sample LABEL: one check of the slot against the saved position, given up after 5 s and
# counted in SKIPPED: a backend SIGSTOPped on the same server can hold a shared lock (a buffer
# mapping partition) that a new connection's authentication waits for until SIGCONT
sample() {
  local sp i=0
  ( cdc_never_ahead bp_cdc $SLOT "$1" ) &
  sp=$!
  while kill -0 $sp 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
  if kill -0 $sp 2>/dev/null; then
    pkill -P $sp 2>/dev/null || true
    kill $sp 2>/dev/null || true
    wait $sp 2>/dev/null || true
    SKIPPED=$((SKIPPED + 1))
    return 0
  fi
  wait $sp || fail "$1: see the message above"
  SAMPLES=$((SAMPLES + 1))
}

# stall_watch PID SECONDS LABEL: samples the slot against the saved position while the sink
# stalls; sets H1 (VmHWM at the start) and H2 (at the end)
stall_watch() {
  local pid=$1 secs=$2 label=$3 end
  H1=$(vmhwm_kb "$pid")
  end=$(( $(date +%s) + secs ))
  SAMPLES=0 SKIPPED=0
  while [ "$(date +%s)" -lt $end ]; do
    sample "$label (sample $SAMPLES)"
    sleep 0.3
  done
  kill -0 "$pid" 2>/dev/null || fail "$label: ferry ended while its sink was stalled: $(cat bp.log)"
  H2=$(vmhwm_kb "$pid")
  [ $((H2 - H1)) -lt $BOUND_KB ] || fail "$label: peak RSS grew by $(( (H2 - H1) / 1024 )) MiB while the sink stalled ($H1 -> $H2 KiB), bound $((BOUND_KB / 1024)) MiB: unbounded buffering"
}

# ---- 1. the sink throttled by a failpoint -----------------------------------------------------
heavy
FERRY_FAILPOINTS="before_sink_apply=sleep(9000)@5" "$FERRY_BIN" run p.yaml > bp.log 2>&1 &
pid=$!
wait_for_log bp.log "failpoint before_sink_apply fired: sleep (hit 5)" $pid 1200 || fail "failpoint: the sink never stalled: $(cat bp.log)"
stalled_at=$(dest_count)
stall_watch $pid 8 "failpoint stall"
[ "$SAMPLES" -gt 0 ] && [ "$SKIPPED" = 0 ] || fail "failpoint stall: $SAMPLES samples, $SKIPPED given up (nothing is stopped here)"
set +e; wait $pid; rc=$?; set -e
[ $rc = 0 ] || fail "failpoint stall: exit $rc after the stall: $(cat bp.log)"
[ "$(dest_count)" -gt "$stalled_at" ] || fail "failpoint stall: no progress after the stall"
cdc_never_ahead bp_cdc $SLOT "failpoint stall (after the run)"
check_equal "failpoint stall"
pass "sink throttled 9 s under a $ROWS-row cdc stream: peak RSS $((H1 / 1024)) -> $((H2 / 1024)) MiB (bound +$((BOUND_KB / 1024)) MiB), slot never ahead ($SAMPLES samples), progress resumed, destination equals the source"

# ---- 2. the destination's backend SIGSTOPped --------------------------------------------------
heavy
before=$(dest_count)
"$FERRY_BIN" run p.yaml > bp.log 2>&1 &
pid=$!
backend=
# The sink's backend once it writes the stream (the commit group of one keeps the source
# transaction's rows in one open destination transaction: a write transaction id, nothing
# visible to a count yet).
for _ in $(seq 1 1200); do
  backend=$(pgq -c "SELECT pid FROM pg_stat_activity WHERE datname = 'dest' AND backend_type = 'client backend' AND application_name = 'ferry' AND backend_xid IS NOT NULL LIMIT 1")
  [ -n "$backend" ] && break
  kill -0 $pid 2>/dev/null || fail "SIGSTOP: ferry ended before the stream was under way: $(cat bp.log)"
  sleep 0.05
done
[ -n "$backend" ] || fail "SIGSTOP: no sink backend seen"
# Nothing reads the destination while its backend is stopped: a backend stopped mid-insert can
# hold a page's buffer lock, and a count(*) would wait for it forever. The count is taken just
# before the stop, and any exit of this script continues the backend first.
stopped_at=$(dest_count)
kill -STOP "$backend"
# shellcheck disable=SC2064
trap "__bp_rc=\$?; set +e; kill -CONT $backend 2>/dev/null; (exit \$__bp_rc); $(trap -p EXIT | sed "s/^trap -- '//; s/' EXIT\$//")" EXIT
stall_watch $pid 8 "backend stopped"
kill -CONT "$backend"
# the run finishes the stream (bounded: a hang fails with the run's log instead of a timeout)
for _ in $(seq 1 3000); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
kill -0 $pid 2>/dev/null && fail "SIGSTOP: the run did not finish within 300 s of SIGCONT: $(cat bp.log)"
set +e; wait $pid; rc=$?; set -e
[ $rc = 0 ] || fail "SIGSTOP: the run failed after SIGCONT (exit $rc): $(cat bp.log)"
[ "$(dest_count)" -gt "$stopped_at" ] || fail "SIGSTOP: no progress after SIGCONT"
[ "$stopped_at" -lt $((before + ROWS)) ] || fail "SIGSTOP: the stop came after the whole stream"
cdc_never_ahead bp_cdc $SLOT "backend stopped (after the run)"
check_equal "backend stopped"
pass "destination backend SIGSTOPped 8 s under a $ROWS-row cdc stream ($((stopped_at - before)) rows in): peak RSS $((H1 / 1024)) -> $((H2 / 1024)) MiB (bound +$((BOUND_KB / 1024)) MiB), slot never ahead ($SAMPLES samples, $SKIPPED given up on a lock the stopped backend held; checked again after the run), progress resumed after SIGCONT, destination equals the source"
