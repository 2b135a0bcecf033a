#!/usr/bin/env bash
# cdc_conn_reset: the catalog's conn_reset row for the PostgreSQL cdc source. Every source
# connection (the replication stream and the catalog session) goes through
# tests/tools/tcpproxy.mjs; while a 120k-row transaction streams into a slowed sink, every
# connection is reset (RST). The run fails naming the source's host:port (never the
# password); a plain re-run (no proxy fault) resumes from the slot and the last durable
# checkpoint: the merge destination (PostgreSQL, SQLite) equals the source, and the
# PostgreSQL append change log holds every change exactly once (its checkpoint commits with
# the data). Then the proxy refusing connections at the start of a run: a clear error,
# nothing written, the next run converges. Last, a black hole (the proxy's kernel
# acknowledges, nothing is forwarded) while a 200k-row transaction streams: the run notices
# within the source's io_timeout (5 s here) and fails saying so instead of hanging; the
# re-run is exact.
. "$(dirname "$0")/../e2e/lib.sh"
. "$FERRY_SRC/tests/fault/cdc_lib.bash"
. "$FERRY_SRC/tests/tools/tcpproxy.bash"
px_start "$PGPORT"
ROWS=120000

export SRC_URL="postgresql://ferry_admin:$PGPASSWORD@127.0.0.1:$PX_PORT/ferry?sslmode=disable"
pgq -c "CREATE TABLE src (id bigint PRIMARY KEY, payload text, n int)" >/dev/null
pgq -c "INSERT INTO src SELECT g, 'seed', g FROM generate_series(1, 1000) g" >/dev/null

pipeline() { cdc_pipeline "$1" "$2" src "$3" "rows: 2000" "io_timeout: 5s"; } # FILE NAME SINK
pipeline pg.yaml cr_pg "{type: postgres, url: env:DEST_URL, schema: public, write: merge}"
pipeline lite.yaml cr_lite "{type: sqlite, path: $T/lite.db, write: merge}"
pipeline log.yaml cr_log "{type: postgres, url: env:DEST_URL, schema: log, write: append}"
for f in pg lite log; do expect_exit 0 ferry run $f.yaml --quiet; done

count_of() { # NAME
  case $1 in
    pg) pgq -d dest -c "SELECT count(*) FROM public.src" ;;
    log) pgq -d dest -c "SELECT count(*) FROM log.src" ;;
    lite) q lite.db "SELECT count(*) FROM src" 2>/dev/null || echo 0 ;;
  esac
}
# exact NAME: merge destinations equal the source; the change log holds every change once
exact() {
  local missing extra
  case $1 in
    pg)
      missing=$(pgq -c "SELECT count(*) FROM src" )
      [ "$(pgq -d dest -c "SELECT count(*), count(DISTINCT id), sum(n), sum(length(payload)) FROM public.src")" = \
        "$(pgq -c "SELECT count(*), count(DISTINCT id), sum(n), sum(length(payload)) FROM src")" ] \
        || fail "pg merge: destination differs from the source"
      extra=$(pgq -d dest -c "SELECT md5(string_agg(id || ':' || payload || ':' || n, ',' ORDER BY id)) FROM public.src")
      [ "$extra" = "$(pgq -c "SELECT md5(string_agg(id || ':' || payload || ':' || n, ',' ORDER BY id)) FROM src")" ] \
        || fail "pg merge: rows differ from the source" ;;
    lite)
      [ "$(q lite.db "SELECT count(*), count(DISTINCT id), sum(n) FROM src")" = \
        "$(pgq -F '|' -c "SELECT count(*), count(DISTINCT id), sum(n) FROM src")" ] || fail "sqlite merge: destination differs"
      [ "$(q lite.db "SELECT group_concat(id || ':' || payload || ':' || n, ',') FROM (SELECT * FROM src ORDER BY id)" | md5sum)" = \
        "$(pgq -c "SELECT string_agg(id || ':' || payload || ':' || n, ',' ORDER BY id) FROM src" | md5sum)" ] \
        || fail "sqlite merge: rows differ from the source" ;;
    log)
      # every inserted id once (the change log of inserts only)
      [ "$(pgq -d dest -c "SELECT count(*) - count(DISTINCT id) FROM log.src")" = 0 ] || fail "change log: a change twice"
      [ "$(pgq -d dest -c "SELECT count(*) FROM log.src")" = "$(pgq -c "SELECT count(*) FROM src")" ] \
        || fail "change log: $(pgq -d dest -c "SELECT count(*) FROM log.src") changes, want $(pgq -c "SELECT count(*) FROM src")" ;;
  esac
}

lo=1001
for f in pg lite log; do
  # one transaction of ROWS inserts per pipeline (each has its own slot)
  pgq -c "INSERT INTO src SELECT g, md5(g::text), g FROM generate_series($lo, $((lo + ROWS - 1))) g" >/dev/null
  lo=$((lo + ROWS))
  before=$(count_of $f)
  FERRY_FAILPOINTS="before_sink_apply=sleep(60)" "$FERRY_BIN" run $f.yaml > run-$f.log 2>&1 &
  pid=$!
  # a batch of the transaction applied (into the open destination transaction of the
  # stream's commit group: nothing of it visible before its commit)
  wait_for_log run-$f.log "failpoint before_sink_apply fired: sleep (hit 2)" $pid 600 || true
  ctl /reset > /dev/null
  set +e
  wait $pid
  rc=$?
  set -e
  [ $rc -ne 0 ] || fail "$f: the run survived a reset of every source connection: $(cat run-$f.log)"
  grep -q "127.0.0.1:$PX_PORT" run-$f.log || fail "$f: the error does not name the source host:port: $(cat run-$f.log)"
  grep -q "$PGPASSWORD" run-$f.log && fail "$f: the password appears in: $(cat run-$f.log)"
  mid=$(count_of $f)
  [ "$mid" = "$before" ] || fail "$f: part of the source transaction is visible ($before -> $mid rows)"
  ctl /pass > /dev/null
  expect_exit 0 ferry run $f.yaml --quiet
  exact $f
  pass "cdc $f: every source connection reset mid-transaction (none of its $ROWS changes visible): run failed naming 127.0.0.1:$PX_PORT, re-run exact"
done

# refused at the start of a run: clear error, nothing written; then converges
pgq -c "UPDATE src SET payload = 'changed', n = n + 1 WHERE id % 7 = 0" >/dev/null
ctl /refuse > /dev/null
for f in pg lite log; do
  before=$(count_of $f)
  expect_exit 1 ferry run $f.yaml --quiet
  grep -q "127.0.0.1:$PX_PORT" <<< "$OUT" || fail "$f refused: the error does not name the source: $OUT"
  [ "$(count_of $f)" = "$before" ] || fail "$f refused: rows written"
done
ctl /pass > /dev/null
for f in pg lite; do
  expect_exit 0 ferry run $f.yaml --quiet
  exact $f
done
pass "cdc: refused source connections fail each run naming the source, nothing written; the next run applies the updates exactly"

# a black hole on the replication stream (the proxy's kernel acknowledges, nothing answers):
# the run must notice within io_timeout (5 s here) and fail saying so, not hang
# (a transaction far larger than what the sink's queues and the socket buffers hold, so the
# stream is still being read when the proxy goes silent)
pgq -c "INSERT INTO src SELECT g, md5(g::text) || md5(g::text), g FROM generate_series($lo, $((lo + 200000 - 1))) g" >/dev/null
lo=$((lo + 200000))
FERRY_FAILPOINTS="before_sink_apply=sleep(60)" "$FERRY_BIN" run pg.yaml > run-stall.log 2>&1 &
pid=$!
wait_for_log run-stall.log "failpoint before_sink_apply fired: sleep (hit 4)" $pid 600 || true
ctl /stall > /dev/null
ended=0
for _ in $(seq 1 600); do kill -0 $pid 2>/dev/null || { ended=1; break; }; sleep 0.1; done
if [ $ended = 0 ]; then
  kill -9 $pid 2>/dev/null || true
  wait $pid 2>/dev/null || true
  fail "cdc black hole: the run still hangs 60 s after the stream stopped answering (io_timeout 5 s): $(tail -n 5 run-stall.log)"
fi
set +e
wait $pid
rc=$?
set -e
# Where the silence lands decides the outcome: mid-stream the run fails (io_timeout on the
# stream); when the stream had already delivered everything, only the slot acknowledgement
# meets it: that query times out too (never a hang), the run completes with its data durable
# and warns that the log was not released (the next run acknowledges it).
if [ $rc -eq 0 ]; then
  grep -q "acknowledging the replication slot.*io_timeout" run-stall.log \
    || fail "cdc black hole: the run succeeded without meeting the silence: $(cat run-stall.log)"
  how="the stream had ended; the slot acknowledgement timed out and the run completed"
else
  how="run failed saying so ($(grep -i 'error' run-stall.log | head -n 1 | cut -c1-120))"
fi
grep -qi "timeout\|timed out\|no answer\|not answer" run-stall.log || fail "cdc black hole: nothing says the server stopped answering: $(cat run-stall.log)"
ctl /pass > /dev/null
expect_exit 0 ferry run pg.yaml --quiet
exact pg
pass "cdc black hole on the replication stream: noticed within io_timeout, $how; re-run exact"
