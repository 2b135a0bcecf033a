#!/usr/bin/env bash
# Tables created while `ferry run --follow` streams, read inside the running stream in
# watermark chunks (DBLog; docs/internals/cdc.md "Tables that join while streaming"), on a
# server with max_wal_senders = 10:
#  1. 50 tables `tables: [public.t*]` (merge into PostgreSQL) and the same tables as a change
#     log (`write: append`, a second pipeline); multi-table transactions stream under
#     --follow; 5 tables created mid-stream (rows written before, during and after their
#     snapshot, in transactions with older tables) are picked up by the same process: the
#     log says their snapshot was read in chunks while streaming; exactly one slot and at
#     most one walsender per pipeline at every sample; one ADD COLUMN and one DROP COLUMN
#     mid-stream (schema_changes: evolve); every table equals its source, the change log
#     holds no change twice and at most one snapshot row per key;
#  1b. a table excluded from then on: its changes are skipped, its destination is kept, the
#     slot is acknowledged past its changes;
#  2. kill -9 during a new table's chunked snapshot (failpoint cdc_chunk sleeps per chunk),
#     restart: the snapshot goes on after the last durable chunk (fewer chunks read than
#     the table has) and the destination equals the source.
. "$(dirname "$0")/lib.sh"
. "${FERRY_PG_SH:-$FERRY_SRC/tests/pg/pg.sh}"
pg_start
bg_kill_on_exit
[ "$(pgq -c 'SHOW max_wal_senders')" = 10 ] || fail "the server must run with max_wal_senders = 10"

psql -qX -v ON_ERROR_STOP=1 -c "CREATE DATABASE dest" -c "CREATE DATABASE dlog" >/dev/null
export SRC_URL="$FERRY_PG_URL"
export DEST_URL="postgresql://ferry_admin:$PGPASSWORD@127.0.0.1:$PGPORT/dest"
export LOG_URL="postgresql://ferry_admin:$PGPASSWORD@127.0.0.1:$PGPORT/dlog"

N=50
{
  for i in $(seq -w 1 $N); do
    echo "CREATE TABLE t$i (id int PRIMARY KEY, v int NOT NULL, note text);"
    echo "INSERT INTO t$i SELECT g, g * $((10#$i)), 'n' || g FROM generate_series(1, 20) g;"
  done
} | pgq >/dev/null

pipeline() { # NAME URL WRITE
  cat > "$1.yaml" <<EOF
version: 1
name: $1
source:
  type: postgres
  url: env:SRC_URL
  resources:
    - {tables: [public.t*], mode: cdc, schema_changes: evolve}
sink: {type: postgres, url: env:$2, schema: public, write: $3}
batch: {rows: 500, flush_after: 100ms}
EOF
}
pipeline many DEST_URL merge
pipeline log LOG_URL append

# cols TABLE: the source's columns of a table, in order
cols() { pgq -c "SELECT string_agg(quote_ident(column_name), ', ' ORDER BY ordinal_position) FROM information_schema.columns WHERE table_schema = 'public' AND table_name = '$1'"; }
# digests_sql TABLES...: one query giving "table|md5 of its rows over the source's columns"
digests_sql() {
  local sql="" t c
  while IFS='|' read -r t c; do
    [ -n "$sql" ] && sql="$sql UNION ALL "
    sql="$sql SELECT '$t', md5(coalesce(string_agg(x::text, ',' ORDER BY x.id), '')) FROM (SELECT $c FROM $t) x"
  done < <(pgq -c "SELECT table_name, string_agg(quote_ident(column_name), ', ' ORDER BY ordinal_position) FROM information_schema.columns WHERE table_schema = 'public' AND table_name = ANY ('{$(echo "$@" | tr ' ' ',')}') GROUP BY 1 ORDER BY 1")
  echo "$sql ORDER BY 1"
}
same_all() { # WHAT TABLES...: every table equal (rows over the source's columns)
  local what=$1 sql t bad; shift
  sql=$(digests_sql "$@")
  bad=$(diff <(pgq -c "$sql") <(pgq -d dest -c "$sql") | sed -n 's/^< \([^|]*\)|.*/\1/p' | tr '\n' ' ')
  [ -z "$bad" ] && return 0
  t=${bad%% *}
  diff <(pgq -c "COPY (SELECT $(cols "$t") FROM $t ORDER BY id) TO STDOUT") \
       <(pgq -d dest -c "COPY (SELECT $(cols "$t") FROM $t ORDER BY id) TO STDOUT") | head -10
  fail "$what: tables differ: $bad"
}
tables_upto() { seq -f 't%02g' 1 "$1"; }

# both_runs: a bounded run of each pipeline, side by side
both_runs() {
  local lp lrc=0
  "$FERRY_BIN" run log.yaml > log_run.out 2>&1 &
  lp=$!
  BG+=($lp)
  expect_exit 0 ferry run many.yaml
  wait $lp || lrc=$?
  [ $lrc = 0 ] || fail "the change-log pipeline's run exited $lrc: $(tail -n 5 log_run.out)"
}
both_runs
same_all "first run" $(tables_upto $N)
pass "first run: $N tables copied"

# Multi-table transactions over the old tables and, once they exist, the new ones.
workload() { # SEED COUNT
  local k a b c n
  for k in $(seq 1 "$2"); do
    printf -v a '%02d' $(( (k * 7 + $1) % N + 1 ))
    printf -v b '%02d' $(( (k * 13 + $1) % N + 1 ))
    printf -v c '%02d' $(( (k * 29 + $1) % N + 1 ))
    n=$(( 51 + k % 5 ))
    echo "BEGIN;"
    echo "INSERT INTO t$a VALUES ($1 * 100000 + $k, $k, 'w$k') ON CONFLICT (id) DO UPDATE SET v = t$a.v + 1;"
    echo "UPDATE t$b SET v = v + 1 WHERE id = $(( k % 20 + 1 ));"
    echo "DELETE FROM t$c WHERE id = $(( (k * 3) % 20 + 1 ));"
    # the new tables, when they exist (a savepoint: the transaction goes on without them)
    echo "SAVEPOINT s; INSERT INTO t$n VALUES ($1 * 100000 + $k, $k, 'new') ON CONFLICT (id) DO UPDATE SET v = t$n.v + 1;"
    echo "UPDATE t$n SET v = v - 1, note = 'w$k' WHERE id = $(( (k * 37) % 3000 + 1 ));"
    echo "DELETE FROM t$n WHERE id = $(( (k * 53) % 3000 + 1 )); RELEASE SAVEPOINT s;"
    echo "COMMIT;"
    echo "SELECT pg_sleep(0.005);"
  done | psql -qXAt -v ON_ERROR_STOP=0 >/dev/null 2>&1
}
walsenders=0
sample() { # one slot per pipeline, one walsender per pipeline
  local s w
  s=$(pgq -c "SELECT count(*) FROM pg_replication_slots")
  [ "$s" = 2 ] || fail "want exactly 2 slots (one per pipeline), got: $(pgq -c 'SELECT string_agg(slot_name, \x27,\x27) FROM pg_replication_slots')"
  w=$(pgq -c "SELECT count(*) FROM pg_stat_replication")
  [ "$w" -le 2 ] || fail "$w walsenders for 2 pipelines"
  [ "$w" -gt "$walsenders" ] && walsenders=$w
  return 0
}

workload 1 600 &
wl=$!
BG+=($wl)
FERRY_LOG=info "$FERRY_BIN" run many.yaml --follow --epoch 500ms > many.log 2>&1 &
fm=$!
FERRY_LOG=info "$FERRY_BIN" run log.yaml --follow --epoch 500ms > log.log 2>&1 &
fl=$!
BG+=($fm $fl)
sleep 1
sample
# 5 tables created mid-stream, with rows before their snapshot
for n in 51 52 53 54 55; do
  pgq -c "CREATE TABLE t$n (id int PRIMARY KEY, v int NOT NULL, note text)" \
      -c "INSERT INTO t$n SELECT g, g, 'before' FROM generate_series(1, $(( n == 53 ? 9000 : 3000 ))) g" >/dev/null
done
# rows during the snapshot (the workload goes on) and a schema change on two old tables
pgq -c "ALTER TABLE t02 ADD COLUMN extra text" -c "UPDATE t02 SET extra = 'x' || id WHERE id % 2 = 0" >/dev/null
pgq -c "ALTER TABLE t03 DROP COLUMN note" -c "UPDATE t03 SET v = v + 1000 WHERE id < 10" >/dev/null
picked() { grep -c 'snapshot read in [0-9]* chunks' "$1" || true; }
for k in $(seq 1 600); do
  sample
  [ "$(picked many.log)" -ge 5 ] && [ "$(picked log.log)" -ge 5 ] && break
  kill -0 $fm 2>/dev/null || fail "the merge follow ended: $(tail -n 20 many.log)"
  kill -0 $fl 2>/dev/null || fail "the change-log follow ended: $(tail -n 20 log.log)"
  sleep 0.1
done
[ "$(picked many.log)" -ge 5 ] || fail "the new tables were not read while streaming: $(grep -i 'chunk\|t5[1-5]' many.log | tail -10)"
[ "$(picked log.log)" -ge 5 ] || fail "the new tables were not read into the change log: $(grep -i 'chunk\|t5[1-5]' log.log | tail -10)"
grep -q 't53.*snapshot read in [3-9] chunks' many.log ||
  fail "t53 (9000 rows) read in fewer than 3 chunks: $(grep 'snapshot read' many.log)"
# rows after the snapshot
pgq -c "BEGIN; UPDATE t51 SET v = -v WHERE id < 40; DELETE FROM t52 WHERE id BETWEEN 100 AND 120; INSERT INTO t55 VALUES (999999, 1, 'after'); UPDATE t01 SET note = 'with new' WHERE id = 1; COMMIT;" >/dev/null
wait $wl
sleep 2
sample
kill -TERM $fm $fl
for p in $fm $fl; do
  set +e; wait $p; frc=$?; set -e
  [ $frc = 0 ] || [ $frc = 5 ] || fail "--follow after SIGTERM exited $frc: $(tail -n 20 many.log log.log)"
done
# the follow processes picked the tables up; the paused runs complete (to the end frozen in
# their plans), then one more reads to now
both_runs
both_runs
same_all "after the follow" $(tables_upto 55)
[ "$(pgq -d dest -c "SELECT count(*) FROM information_schema.columns WHERE table_name = 't02' AND column_name = 'extra'")" = 1 ] ||
  fail "ADD COLUMN mid-stream: t02.extra missing in the destination"
[ "$(pgq -c "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'ferry_many'")" = 1 ] || fail "slot"
# the change log: no change twice, at most one snapshot row per key (snapshot rows have no
# commit time) - the new tables' changes before their snapshot are not replayed twice
for n in 51 52 53 54 55; do
  d=$(pgq -d dlog -c "SELECT count(*) FROM (SELECT id, _ferry_lsn, _ferry_op, v, note FROM t$n WHERE _ferry_commit_time IS NOT NULL GROUP BY 1, 2, 3, 4, 5 HAVING count(*) > 1) x")
  [ "$d" = 0 ] || fail "change log t$n: $d changes twice"
  d=$(pgq -d dlog -c "SELECT count(*) FROM (SELECT id FROM t$n WHERE _ferry_commit_time IS NULL GROUP BY 1 HAVING count(*) > 1) x")
  [ "$d" = 0 ] || fail "change log t$n: $d keys with two snapshot rows"
  # every key of the source is in the log
  m=$(pgq -d dlog -c "SELECT count(DISTINCT id) FROM t$n")
  s=$(pgq -c "SELECT count(*) FROM t$n")
  [ "$m" -ge "$s" ] || fail "change log t$n: $m keys, the source has $s"
done
pass "5 tables created while streaming: read in chunks by the same --follow process, equal; one slot and at most $walsenders walsender(s) for 2 pipelines; ADD/DROP COLUMN evolved; change log without doubles"

# ---- 1b. a table that leaves the selection: no longer followed, its destination kept, and it
# no longer holds the slot back
sed -i 's|tables: \[public.t\*\], mode|tables: [public.t*], exclude: [public.t50], mode|' many.yaml
grep -q 'exclude: \[public.t50\]' many.yaml || fail "many.yaml was not edited"
t50() { pgq ${1:+-d "$1"} -c "SELECT md5(string_agg(x::text, ',' ORDER BY x.id)) FROM t50 x"; }
kept=$(t50 dest)
lsn0=$(pgq -c "SELECT (pg_current_wal_lsn() - '0/0')::bigint")
pgq -c "UPDATE t50 SET v = v + 1" -c "INSERT INTO t50 VALUES (777777, 1, 'left')" -c "UPDATE t01 SET v = v + 1 WHERE id = 2" >/dev/null
expect_exit 0 ferry run many.yaml
[ "$(t50 dest)" = "$kept" ] || fail "t50 left the selection but its destination changed (or was dropped)"
[ "$(t50)" != "$kept" ] || fail "the source of t50 did not change: the check proves nothing"
same_all "after t50 left the selection" t01
c=$(pgq -c "SELECT (confirmed_flush_lsn - '0/0')::bigint FROM pg_replication_slots WHERE slot_name = 'ferry_many'")
[ "$c" -gt "$lsn0" ] || fail "the slot stayed at $c (before $lsn0): the table that left holds it back"
pass "a table that leaves the selection: its changes skipped, its destination kept, the slot acknowledged past them"

# ---- 2. kill -9 in the middle of a chunked snapshot
pgq -c "CREATE TABLE t60 (id int PRIMARY KEY, v int NOT NULL, note text)" \
    -c "INSERT INTO t60 SELECT g, g, 'big' FROM generate_series(1, 60000) g" >/dev/null
FERRY_FAILPOINTS="cdc_chunk=sleep(150)" FERRY_LOG=info "$FERRY_BIN" run many.yaml --follow --epoch 300ms > kill.log 2>&1 &
fk=$!
BG+=($fk)
got=0
for k in $(seq 1 600); do
  got=0
  [ -n "$(pgq -d dest -c "SELECT to_regclass('public.t60')")" ] && got=$(pgq -d dest -c "SELECT count(*) FROM t60")
  [ "$got" -gt 4096 ] && break
  kill -0 $fk 2>/dev/null || fail "the follow ended: $(tail -n 20 kill.log)"
  pgq -c "UPDATE t60 SET v = v + 1 WHERE id = $(( (k * 997) % 60000 + 1 )); UPDATE t01 SET v = v + 1 WHERE id = 2" >/dev/null
  sleep 0.1
done
kill -9 $fk
wait $fk 2>/dev/null || true
[ "$got" -gt 4096 ] && [ "$got" -lt 60000 ] || fail "t60 had $got rows at the kill: not inside its snapshot"
pgq -c "UPDATE t60 SET note = 'after kill' WHERE id % 1000 = 0" -c "DELETE FROM t60 WHERE id % 1001 = 0" >/dev/null
FERRY_LOG=info expect_exit 0 ferry run many.yaml
chunks=$(printf '%s' "$OUT" | sed -n 's/.*t60.*snapshot read in \([0-9]*\) chunks.*/\1/p' | head -1)
[ -n "$chunks" ] || fail "the resumed run did not finish t60's snapshot: $(printf '%s' "$OUT" | tail -5)"
[ "$chunks" -lt 15 ] || fail "the resumed run read $chunks chunks of 60000 rows: it started over"
expect_exit 0 ferry run many.yaml
same_all "after kill -9 in the snapshot" t01 t60
pass "kill -9 with $got of 60000 rows of a chunked snapshot durable: resumed after the last durable chunk ($chunks chunks left), equal"
