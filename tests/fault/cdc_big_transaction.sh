#!/usr/bin/env bash
# labels: asan
# cdc, one transaction of 200 000 inserts: `ferry run` is SIGKILLed while it streams that
# transaction (part of it applied, none of it visible: the commit group of one holds the
# destination transaction open until the source transaction's end), then run again: every row is in the
# destination exactly once (merge, PostgreSQL and SQLite sinks), equal to the source; a
# change log (append) holds each row at least once, and exactly once with the PostgreSQL
# sink, whose checkpoint commits with the data. Also: a first run killed while it copies the
# snapshot, the table changed meanwhile, resumed (the slot's snapshot is gone by then): the
# destination still equals the source.
. "$(dirname "$0")/../e2e/lib.sh"
. "$FERRY_SRC/tests/fault/cdc_lib.bash"
ROWS=${ROWS:-200000}

pgq -c "CREATE TABLE big (id bigint PRIMARY KEY, payload text, n int)" >/dev/null
pgq -c "INSERT INTO big SELECT g, 'seed', g FROM generate_series(1, 1000) g" >/dev/null

pipeline() { cdc_pipeline "$1" "$2" big "$3" "rows: 5000"; } # FILE NAME SINK
pipeline pg.yaml big_pg "{type: postgres, url: env:DEST_URL, schema: public, write: merge}"
pipeline lite.yaml big_lite "{type: sqlite, path: $T/lite.db, write: merge}"
pipeline log.yaml big_log "{type: postgres, url: env:DEST_URL, schema: log, write: append}"
for f in pg lite log; do expect_exit 0 ferry run $f.yaml; done

pgq -c "INSERT INTO big SELECT g, md5(g::text), g FROM generate_series(1001, 1000 + $ROWS) g" >/dev/null
total=$((ROWS + 1000))

count_of() { # NAME
  case $1 in
    pg) pgq -d dest -c "SELECT count(*) FROM public.big" ;;
    log) pgq -d dest -c "SELECT count(*) FROM log.big" ;;
    lite) q lite.db "SELECT count(*) FROM big" 2>/dev/null || echo 0 ;;
  esac
}

for f in pg lite log; do
  before=$(count_of $f)
  # The sink is slowed so that the kill lands inside the transaction's stream.
  FERRY_FAILPOINTS="before_sink_apply=sleep(300)" "$FERRY_BIN" run $f.yaml --quiet > kill-$f.log 2>&1 &
  pid=$!
  # 5 batches of 5000 rows applied (into the destination transaction the commit group holds
  # open until the source transaction's commit), 35 more to go
  wait_for_log kill-$f.log "failpoint before_sink_apply fired: sleep (hit 6)" $pid 1200 ||
    fail "$f: the stream never applied 5 batches: $(cat kill-$f.log)"
  kill -0 $pid 2>/dev/null || fail "$f: the run ended before the kill"
  kill -9 $pid
  wait $pid 2>/dev/null || true
  at_kill=$(count_of $f)
  # one destination transaction per source transaction: none of it is visible
  [ "$at_kill" = "$before" ] ||
    fail "$f: part of the source transaction was visible ($before -> $at_kill rows)"
  expect_exit 0 ferry run $f.yaml
  pass "$f: killed after 5 of $((ROWS / 5000)) batches of the transaction were applied (none visible), resumed"
done

a=$(pgq -c "COPY (SELECT * FROM big ORDER BY id) TO STDOUT" | md5sum)
b=$(pgq -d dest -c "COPY (SELECT * FROM public.big ORDER BY id) TO STDOUT" | md5sum)
[ "$a" = "$b" ] || fail "postgres merge differs from the source"
[ "$(pgq -d dest -c "SELECT count(*), count(DISTINCT id) FROM public.big")" = "$total|$total" ] || fail "postgres merge count"
b=$(q lite.db "SELECT id || '|' || payload || '|' || n FROM big ORDER BY id" | md5sum)
a=$(pgq -c "SELECT id || '|' || payload || '|' || n FROM big ORDER BY id" | md5sum)
[ "$a" = "$b" ] || fail "sqlite merge differs from the source"
pass "merge: all $total rows, none twice (postgres and sqlite)"

# The change log: every inserted row present; with the PostgreSQL sink (checkpoint in the
# data's transaction) none twice.
[ "$(pgq -d dest -c "SELECT count(DISTINCT id) FROM log.big WHERE _ferry_op = 'insert'")" = $total ] || fail "change log misses rows"
[ "$(pgq -d dest -c "SELECT count(*) FROM log.big")" = $total ] || fail "change log has duplicates: $(pgq -d dest -c "SELECT count(*) FROM log.big")"
[ "$(pgq -d dest -c "SELECT count(DISTINCT _ferry_lsn) FROM log.big WHERE id > 1000")" = 1 ] || fail "one transaction, one LSN"
seq=$(pgq -d dest -c "SELECT min(_ferry_seq), max(_ferry_seq), count(DISTINCT _ferry_seq), bool_and(_ferry_seq = id - 1000) FROM log.big WHERE id > 1000")
[ "$seq" = "1|$ROWS|$ROWS|t" ] || fail "the transaction's _ferry_seq are not 1..$ROWS in insert order: $seq"
pass "append change log: all $total rows once, the transaction's rows share its LSN and are numbered 1..$ROWS in order"

# ---- a first run killed during the snapshot copy
pgq -c "CREATE TABLE snap (id bigint PRIMARY KEY, v text)" >/dev/null
pgq -c "INSERT INTO snap SELECT g, 'v' || g FROM generate_series(1, 100000) g" >/dev/null
cdc_pipeline snap.yaml snap_pg snap "{type: postgres, url: env:DEST_URL, schema: public, write: merge}" \
  "rows: 2000" "shard_rows: 10000"
FERRY_FAILPOINTS="before_sink_apply=sleep(100)" "$FERRY_BIN" run snap.yaml --quiet > kill-snap.log 2>&1 &
pid=$!
for _ in $(seq 1 600); do
  n=$(pgq -d dest -c "SELECT count(*) FROM pg_tables WHERE tablename = 'snap'")
  [ "$n" = 1 ] && [ "$(pgq -d dest -c 'SELECT count(*) FROM public.snap')" -ge 10000 ] && break
  sleep 0.05
done
kill -9 $pid
wait $pid 2>/dev/null || true
copied=$(pgq -d dest -c 'SELECT count(*) FROM public.snap')
[ "$copied" -lt 100000 ] || fail "the kill did not land inside the copy"
# Changes after the slot's consistent point, before the resumed copy reads a new snapshot.
pgq >/dev/null <<'SQL'
UPDATE snap SET v = 'changed' WHERE id % 97 = 0;
DELETE FROM snap WHERE id % 89 = 0;
INSERT INTO snap SELECT g, 'late' FROM generate_series(100001, 100500) g;
UPDATE snap SET id = id + 1000000 WHERE id BETWEEN 5 AND 50;
SQL
expect_exit 0 ferry run snap.yaml
printf '%s' "$OUT" | grep -q resuming || fail "the first run was not resumed: $OUT"
a=$(pgq -c "COPY (SELECT * FROM snap ORDER BY id) TO STDOUT" | md5sum)
b=$(pgq -d dest -c "COPY (SELECT * FROM public.snap ORDER BY id) TO STDOUT" | md5sum)
[ "$a" = "$b" ] || fail "after a kill during the snapshot copy the destination differs"
pass "first run killed during the copy ($copied of 100000 rows), table changed, resumed: destination equals the source"
