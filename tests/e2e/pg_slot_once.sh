#!/usr/bin/env bash
# labels: asan
# The WAL of a pipeline's shared replication slot is decoded ONCE per run, whatever the
# number of its cdc tables (issue 17 milestone 2), against a real PostgreSQL 15 running with
# max_wal_senders = 4:
#  1. 12 cdc tables into PostgreSQL (merge) and the same 12 into SQLite (another pipeline,
#     another slot): the first runs copy and stream; then K multi-table transactions; one
#     bounded run of each: every table equal to its source (set equality of whole rows), and
#     pg_stat_replication_slots.total_txns of each slot grew by at least K (decoded) and by
#     less than 2K (a session per table would decode them 12 times);
#     one table whose destination refuses its rows fails, and with it the commit group of the
#     tables streamed together (one destination transaction per source transaction): no
#     table shows the source transaction it could not apply; fixed, they catch up;
#  2. `ferry run --follow` killed with SIGKILL while a multi-table workload commits, then
#     bounded runs: every table equal, nothing lost;
#  3. a bounded run over many changes, paused with SIGINT mid-stream (its sink slowed by a
#     failpoint): exit 5; the next run resumes it and every table is equal;
#  4. the slot is confirmed no further than the least saved position of the 12 tables.
. "$(dirname "$0")/lib.sh"
. "${FERRY_PG_SH:-$FERRY_SRC/tests/pg/pg.sh}"
pg_start

pgq -d postgres -c "ALTER SYSTEM SET max_wal_senders = 4" >/dev/null
(cd "$PG_DIR" && pg_as "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/server.log" -w -t 60 restart >/dev/null)
[ "$(pgq -c 'SHOW max_wal_senders')" = 4 ] || fail "the server must run with max_wal_senders = 4"
[ "$(pgq -c "SELECT current_setting('server_version_num')::int >= 150000")" = t ] ||
  fail "pg_stat_replication_slots.total_txns needs PostgreSQL 14 or later"
psql -qX -v ON_ERROR_STOP=1 -c "CREATE DATABASE dest" >/dev/null
export SRC_URL="$FERRY_PG_URL"
export DEST_URL="postgresql://ferry_admin:$PGPASSWORD@127.0.0.1:$PGPORT/dest"

N=12
{
  for i in $(seq -w 1 $N); do
    echo "CREATE TABLE a$i (id int PRIMARY KEY, v int NOT NULL, note text);"
    echo "INSERT INTO a$i SELECT g, g * $((10#$i)), 'n' || g FROM generate_series(1, 20) g;"
  done
} | pgq >/dev/null

pipeline() { # NAME SINK
  cat > "$1.yaml" <<EOF
version: 1
name: $1
source:
  type: postgres
  url: env:SRC_URL
  resources:
    - {tables: [public.a*], mode: cdc}
sink: $2
batch: {rows: 50, flush_after: 100ms}
EOF
}
pipeline once "{type: postgres, url: env:DEST_URL, schema: public, write: merge}"
pipeline lite "{type: sqlite, path: $T/lite.db, write: merge}"

# Every row of every table, "aNN|id|v|note", in one query (the same SQL for both engines).
all_rows_sql() {
  local i sql=""
  for i in $(seq -w 1 $N); do
    [ -n "$sql" ] && sql="$sql UNION ALL "
    sql="${sql}SELECT 'a$i|' || id || '|' || v || '|' || coalesce(note, '') AS r FROM a$i"
  done
  echo "$sql ORDER BY 1"
}
same_all() { # WHY: every table equal in both destinations (set equality of whole rows)
  local src pg lite
  src=$(pgq -c "$(all_rows_sql)")
  pg=$(pgq -d dest -c "$(all_rows_sql)")
  lite=$(q lite.db "$(all_rows_sql)")
  [ "$src" = "$pg" ] || fail "$1: postgres destination differs: $(diff <(echo "$src") <(echo "$pg") | head -5)"
  [ "$src" = "$lite" ] || fail "$1: sqlite destination differs: $(diff <(echo "$src") <(echo "$lite") | head -5)"
  [ "$(echo "$src" | wc -l)" -gt $((N * 10)) ] || fail "$1: the source has too few rows"
}
txns() { pgq -c "SELECT coalesce((SELECT total_txns FROM pg_stat_replication_slots WHERE slot_name = 'ferry_$1'), 0)"; }
# workload K SEED [SLEEP]: K transactions, each an insert, an update and a delete in three
# different tables.
workload() {
  local k a b c
  for k in $(seq "$2" $(($2 + $1 - 1))); do
    printf -v a '%02d' $((k % N + 1)); printf -v b '%02d' $(((k + 5) % N + 1)); printf -v c '%02d' $(((k + 9) % N + 1))
    echo "BEGIN; INSERT INTO a$a VALUES ($((1000 + k)), $k, 'w$k') ON CONFLICT (id) DO UPDATE SET v = excluded.v;"
    echo "UPDATE a$b SET v = v + 1, note = 'u$k' WHERE id = $((k % 20 + 1));"
    echo "DELETE FROM a$c WHERE id = $((1000 + k - 7)); COMMIT;"
    if [ -n "${3:-}" ]; then echo "SELECT pg_sleep($3);"; fi
  done
}

# ---- 1. decoded once
expect_exit 0 ferry run once.yaml
expect_exit 0 ferry run lite.yaml
same_all "first runs"
[ "$(pgq -c "SELECT count(*) FROM pg_replication_slots")" = 2 ] || fail "one slot per pipeline expected"
K=60
t_once=$(txns once); t_lite=$(txns lite)
workload $K 1 | pgq >/dev/null
expect_exit 0 ferry run once.yaml
expect_exit 0 ferry run lite.yaml
same_all "after $K multi-table transactions"
d_once=$(( $(txns once) - t_once )); d_lite=$(( $(txns lite) - t_lite ))
# Each source transaction is decoded once per session that reads it: the run's one session
# decodes the K transactions once; a session per table would decode each of them 12 times.
for d in $d_once $d_lite; do
  [ "$d" -ge $K ] || fail "total_txns grew by $d, less than the $K transactions committed (stats not counting?)"
  [ "$d" -lt $((2 * K)) ] || fail "total_txns grew by $d for $K transactions: the WAL was decoded more than once"
done
pass "$N tables on max_wal_senders = 4: $K multi-table transactions decoded $d_once and $d_lite times (postgres, sqlite), every table equal"

# ---- 1b. one table failing: the destination refuses a05's new row (a CHECK constraint) in a
# source transaction that also inserts into a06 and a07. The tables streamed together commit
# together (docs/internals/cdc.md "commit groups"): the run fails naming a05, and neither
# a06 nor a07 shows that transaction (never half of it); fixed, every table catches up.
pgq -d dest -c "ALTER TABLE a05 ADD CONSTRAINT small_v CHECK (v < 1000000)" >/dev/null
pgq -c "BEGIN; UPDATE a05 SET v = 5000000 WHERE id = 1; INSERT INTO a06 VALUES (5000, -6, 'x'); INSERT INTO a07 VALUES (5000, -7, 'x'); COMMIT;" >/dev/null
workload 20 300 | pgq >/dev/null
expect_exit 1 ferry run once.yaml
printf '%s' "$OUT" | grep -q 'a05' || fail "the failure does not name table a05: $OUT"
[ "$(pgq -d dest -c "SELECT count(*) FROM a06 WHERE id = 5000")" = 0 ] ||
  fail "a06 shows half of a source transaction whose a05 part failed"
[ "$(pgq -d dest -c "SELECT count(*) FROM a07 WHERE id = 5000")" = 0 ] ||
  fail "a07 shows half of a source transaction whose a05 part failed"
[ "$(pgq -d dest -c "SELECT v FROM a05 WHERE id = 1")" != 5000000 ] || fail "a05 took a row its destination refuses"
pgq -d dest -c "ALTER TABLE a05 DROP CONSTRAINT small_v" >/dev/null
expect_exit 0 ferry run once.yaml
expect_exit 0 ferry run lite.yaml
same_all "after one table failed"
pass "one table failing (a destination constraint) fails its commit group, no half transaction shown; fixed, every table equal"

# ---- 2. kill -9 while following
workload 150 100 0.01 | pgq >/dev/null &
wl=$!
"$FERRY_BIN" run once.yaml --follow --epoch 300ms --quiet > follow.log 2>&1 &
fpid=$!
sleep $(( 1 + RANDOM % 3 )).$(( RANDOM % 10 ))
kill -9 $fpid
wait $fpid 2>/dev/null || true
wait $wl
expect_exit 0 ferry run once.yaml
expect_exit 0 ferry run once.yaml
expect_exit 0 ferry run lite.yaml
same_all "after kill -9 while following"
pass "kill -9 while following a multi-table workload, then resumed: every table equal"

# ---- 3. SIGINT mid-stream: paused, resumed (batches of 5 rows, each apply slowed: the
# streams are still reading when the pause comes, their flows' queues full)
workload 600 1000 | pgq >/dev/null
sed 's/rows: 50,/rows: 5,/' once.yaml > slow.yaml
FERRY_FAILPOINTS="before_sink_apply=sleep(200)" "$FERRY_BIN" run slow.yaml --quiet > paused.log 2>&1 &
rpid=$!
wait_run_rows once || { kill -9 $rpid; fail "the run wrote nothing: $(tail -5 paused.log)"; }
kill -INT $rpid
set +e; wait $rpid; prc=$?; set -e
[ $prc = 5 ] || fail "SIGINT mid-stream: exit $prc, want 5 (paused): $(tail -5 paused.log)"
[ "$(ferry runs --pipeline once --json | jq -r '.[0].state')" = paused ] || fail "the run is not paused"
expect_exit 0 ferry run once.yaml
expect_exit 0 ferry run lite.yaml
same_all "after a pause and its resume"
pass "SIGINT mid-stream: paused (exit 5), resumed, every table equal"

# ---- 4. the slot never ahead of what every table saved
least=$(ferry checkpoints --json | jq -r '.[] | select(.pipeline == "once" and .shard == 0) | .position' |
  jq -r '.n // 0' | sort -n | head -n 1)
conf=$(pgq -c "SELECT (confirmed_flush_lsn - '0/0')::bigint FROM pg_replication_slots WHERE slot_name = 'ferry_once'")
[ "$conf" -gt 0 ] && [ "$conf" -le "$least" ] || fail "slot confirmed at $conf, least saved position $least"
[ "$(pgq -c "SELECT count(*) FROM pg_replication_slots WHERE active")" = 0 ] || fail "a slot is still held"
pass "slot confirmed at $conf <= least saved position $least, released"
