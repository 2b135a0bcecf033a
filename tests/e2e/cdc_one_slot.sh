#!/usr/bin/env bash
# One replication slot per pipeline, against a real PostgreSQL with max_wal_senders = 10:
#  1. 50 tables `tables: [public.t*]` in mode cdc into PostgreSQL (merge): exactly one slot
#     and one publication (holding the 50 tables) for the pipeline; multi-table transactions
#     (inserts, updates, deletes across tables) while `ferry run --follow` runs; kill -9 at a
#     random point, follow again while a 51st table appears (picked up by a later run through
#     the same slot), a final bounded run: every table equals its source (set
#     equality of whole rows); the slot is confirmed no further than the least saved
#     position of the 50 tables;
#  2. 5 tables into SQLite through a source-level `slot:` name; then the slot dropped while
#     ferry is down: "resnapshot required" naming the slot, nothing recreated; the
#     source-level `on_slot_lost: resnapshot` copies anew and the destination equals the
#     source again;
#  3. a pipeline that still holds a slot per table (an earlier ferry): one clear error naming
#     the migration command; `ferry cdc drop` drops the old and the shared slot; the run then
#     works;
#  4. `ferry cdc drop` of the 50-table pipeline drops its one slot and publication.
. "$(dirname "$0")/lib.sh"
. "${FERRY_PG_SH:-$FERRY_SRC/tests/pg/pg.sh}"
# fewer connections than tables: the 50 streams run side by side in ONE session (a stream
# holds no source connection of its own, only briefly while it starts)
PG_CONF_EXTRA="max_connections = 48" pg_start

[ "$(pgq -c 'SHOW max_wal_senders')" = 10 ] || fail "the server must run with max_wal_senders = 10"
[ "$(pgq -c 'SHOW max_connections')" = 48 ] || fail "the server must run with max_connections = 48"

psql -qX -v ON_ERROR_STOP=1 -c "CREATE DATABASE dest" >/dev/null
export SRC_URL="$FERRY_PG_URL"
export DEST_URL="postgresql://ferry_admin:$PGPASSWORD@127.0.0.1:$PGPORT/dest"

N=50
{
  for i in $(seq -w 1 $N); do
    echo "CREATE TABLE t$i (id int PRIMARY KEY, v int NOT NULL, note text);"
    echo "INSERT INTO t$i SELECT g, g * $((10#$i)), 'n' || g FROM generate_series(1, 20) g;"
  done
  for i in 1 2 3 4 5; do
    echo "CREATE TABLE s$i (id int PRIMARY KEY, v int NOT NULL, note text);"
    echo "INSERT INTO s$i SELECT g, g, 's' || g FROM generate_series(1, 30) g;"
  done
  echo "CREATE TABLE l1 (id int PRIMARY KEY, v text);"
  echo "INSERT INTO l1 VALUES (1, 'a'), (2, 'b');"
} | pgq >/dev/null

cat > many.yaml <<EOF
version: 1
name: many
source:
  type: postgres
  url: env:SRC_URL
  resources:
    - {tables: [public.t*], mode: cdc}
sink: {type: postgres, url: env:DEST_URL, schema: public, write: merge}
batch: {rows: 200, flush_after: 100ms}
EOF

# digests PREFIX COUNT [DB]: one line per table, "name md5-of-its-sorted-rows".
digests() {
  local sql="" i
  for i in $(seq -w 1 "$2"); do
    [ -n "$sql" ] && sql="$sql UNION ALL "
    sql="$sql SELECT '$1$i', md5(coalesce(string_agg(x::text, ',' ORDER BY x.id), '')) FROM $1$i x"
  done
  pgq ${3:+-d "$3"} -c "$sql ORDER BY 1"
}
slots() { pgq -c "SELECT count(*) FROM pg_replication_slots"; }
lsn_of_slot() { pgq -c "SELECT coalesce((confirmed_flush_lsn - '0/0')::bigint, 0) FROM pg_replication_slots WHERE slot_name = '$1'"; }
least_saved() { # PIPELINE -> the least saved stream position over its routes
  ferry checkpoints --json | jq -r ".[] | select(.pipeline == \"$1\" and .shard == 0) | .position" |
    jq -r '.n // 0' | sort -n | head -n 1
}

# ---- 1. 50 tables, one slot
expect_exit 0 ferry run many.yaml
[ "$(slots)" = 1 ] || fail "want exactly one slot, got: $(pgq -c 'SELECT slot_name FROM pg_replication_slots')"
[ "$(pgq -c "SELECT slot_name FROM pg_replication_slots")" = ferry_many ] || fail "slot name"
[ "$(pgq -c "SELECT count(*) FROM pg_publication_tables WHERE pubname = 'ferry_many'")" = $N ] ||
  fail "the publication does not hold the $N tables"
[ "$(digests t $N)" = "$(digests t $N dest)" ] || fail "first run: destination differs"
pass "first run: $N tables copied through one slot and one publication"

# ---- 1b. the WAL decoded once for the 50 tables (one session, not one per wave of 16):
# each source transaction is decoded once per session that reads it (total_txns), and one
# commit group holds every stream.
txns() { pgq -c "SELECT coalesce((SELECT total_txns FROM pg_stat_replication_slots WHERE slot_name = 'ferry_many'), 0)"; }
K=40
t0=$(txns)
for k in $(seq 1 $K); do
  echo "BEGIN; UPDATE t01 SET v = v + 1 WHERE id = $(( k % 20 + 1 ));"
  echo "UPDATE t$(printf '%02d' $(( k % 30 + 20 ))) SET v = v - 1 WHERE id = $(( k % 20 + 1 ));"
  echo "UPDATE t50 SET note = 'k$k' WHERE id = $(( k % 20 + 1 )); COMMIT;"
done | pgq >/dev/null
FERRY_LOG=info expect_exit 0 ferry run many.yaml
d=$(( $(txns) - t0 ))
[ "$d" -ge $K ] || fail "total_txns grew by $d, less than the $K transactions committed (stats not counting?)"
[ "$d" -lt $((2 * K)) ] || fail "total_txns grew by $d for $K transactions: the WAL was decoded more than once"
printf '%s' "$OUT" | grep -q "for $N stream(s)" ||
  fail "one commit group for the $N streams expected: $(printf '%s' "$OUT" | grep 'commit group' | head -5)"
[ "$(digests t $N)" = "$(digests t $N dest)" ] || fail "after $K transactions across tables: destination differs"
pass "$N tables on max_connections = 48: $K transactions across tables decoded $d times (one session), one commit group"

# Multi-table transactions: an insert, an update and a delete in three tables each.
workload() { # SEED COUNT
  local k a b c
  for k in $(seq 1 "$2"); do
    a=$(printf '%02d' $(( (k * 7 + $1) % N + 1 )))
    b=$(printf '%02d' $(( (k * 13 + $1) % N + 1 )))
    c=$(printf '%02d' $(( (k * 29 + $1) % N + 1 )))
    echo "BEGIN;"
    echo "INSERT INTO t$a VALUES ($1 * 100000 + $k, $k, 'w$k') ON CONFLICT (id) DO UPDATE SET v = t$a.v + 1;"
    echo "UPDATE t$b SET v = v + 1, note = 'u$k' WHERE id = $(( k % 20 + 1 ));"
    echo "DELETE FROM t$c WHERE id = $(( (k * 3) % 20 + 1 ));"
    echo "UPDATE t$a SET note = note || '+' WHERE id = $(( k % 20 + 1 ));"
    echo "COMMIT;"
    echo "SELECT pg_sleep(0.005);"
  done | pgq >/dev/null
}
workload 1 400 &
wl=$!
"$FERRY_BIN" run many.yaml --follow --epoch 300ms --quiet > follow1.log 2>&1 &
fpid=$!
sleep $(( 2 + RANDOM % 4 )).$(( RANDOM % 10 ))
kill -9 $fpid
wait $fpid 2>/dev/null || true
# Streams read one after another: never two sessions (nor two slots) at once.
[ "$(slots)" = 1 ] || fail "a second slot appeared"
"$FERRY_BIN" run many.yaml --follow --epoch 300ms --quiet > follow2.log 2>&1 &
fpid=$!
# A table that starts matching the pattern while following: copied and followed through the
# same slot (added to the publication by a later run of the follow).
pgq -c "CREATE TABLE t51 (id int PRIMARY KEY, v int NOT NULL, note text)" \
    -c "INSERT INTO t51 SELECT g, g, 'new' FROM generate_series(1, 10) g" >/dev/null
wait $wl
for k in 1 2 3 4 5 6 7 8 9 10; do
  [ "$(pgq -c "SELECT count(*) FROM pg_publication_tables WHERE pubname = 'ferry_many' AND tablename = 't51'")" = 1 ] && break
  sleep 1
done
pgq -c "BEGIN; UPDATE t51 SET v = -v WHERE id < 4; DELETE FROM t51 WHERE id = 9; UPDATE t01 SET note = 'with t51' WHERE id = 1; COMMIT;" >/dev/null
sleep 2
kill -TERM $fpid
set +e; wait $fpid; frc=$?; set -e
[ $frc = 0 ] || [ $frc = 5 ] || fail "--follow after SIGTERM exited $frc: $(tail -20 follow2.log)"
# The paused run completes (to the end frozen in its plan), then one more reads to now.
expect_exit 0 ferry run many.yaml
expect_exit 0 ferry run many.yaml
[ "$(pgq -c "SELECT count(*) FROM pg_publication_tables WHERE pubname = 'ferry_many'")" = $((N + 1)) ] ||
  fail "the publication does not hold the new table"
d_src=$(digests t $((N + 1)))
d_dst=$(digests t $((N + 1)) dest)
[ "$d_src" = "$d_dst" ] || {
  for t in $(diff <(echo "$d_src") <(echo "$d_dst") | sed -n 's/^< \(t[0-9]*\)|.*/\1/p' | head -3); do
    echo "table $t:"
    diff <(pgq -c "COPY (SELECT * FROM $t ORDER BY id) TO STDOUT") \
         <(pgq -d dest -c "COPY (SELECT * FROM $t ORDER BY id) TO STDOUT") | head -10
  done
  fail "after kill -9 and follow: destination differs"
}
[ "$(slots)" = 1 ] || fail "more than one slot after the follow"
c=$(lsn_of_slot ferry_many)
s=$(least_saved many)
[ "$c" -gt 0 ] && [ "$c" -le "$s" ] || fail "slot confirmed at $c, least saved position $s"
pass "multi-table transactions, kill -9 while following, a table created meanwhile, rerun: $((N + 1)) tables equal, one slot, confirmed $c <= least saved $s"

# ---- 2. SQLite, a source-level slot name, the slot lost while ferry is down
lite() { # FILE EXTRA_SOURCE_KEYS
  cat > "$1" <<EOF
version: 1
name: lite
source:
  type: postgres
  url: env:SRC_URL
  slot: lite_one
  $2
  resources:
    - {tables: [public.s*], mode: cdc}
sink: {type: sqlite, path: $T/lite.db, write: merge}
batch: {rows: 100, flush_after: 100ms}
EOF
}
lite lite.yaml ""
lite_same() {
  local i
  for i in 1 2 3 4 5; do
    a=$(pgq -c "SELECT id || '|' || v || '|' || coalesce(note, '') FROM s$i ORDER BY id" | md5sum)
    b=$(q lite.db "SELECT id || '|' || v || '|' || coalesce(note, '') FROM s$i ORDER BY id" | md5sum)
    [ "$a" = "$b" ] || fail "$1: sqlite table s$i differs"
  done
}
expect_exit 0 ferry run lite.yaml
pgq >/dev/null <<'SQL'
BEGIN; INSERT INTO s1 VALUES (100, 100, 'x'); UPDATE s2 SET v = -1 WHERE id = 3; DELETE FROM s3 WHERE id = 4; COMMIT;
BEGIN; UPDATE s4 SET note = 'moved' WHERE id < 5; DELETE FROM s5; INSERT INTO s5 VALUES (1, 1, 'again'); COMMIT;
SQL
expect_exit 0 ferry run lite.yaml
lite_same "sqlite"
[ "$(pgq -c "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'lite_one'")" = 1 ] || fail "source-level slot name"
pass "5 tables into sqlite through slot lite_one: equal after multi-table transactions"

# One end for every table of a run: transfers between two tables keep their sum, and each
# bounded run taken while they commit shows the sum whole (no half transaction across
# tables at a run's end).
sum_sql="SELECT (SELECT sum(v) FROM s1) + (SELECT sum(v) FROM s2)"
total=$(pgq -c "$sum_sql")
for k in $(seq 1 300); do
  echo "BEGIN; UPDATE s1 SET v = v - 1 WHERE id = $(( k % 30 + 1 )); UPDATE s2 SET v = v + 1 WHERE id = $(( k % 29 + 1 )); COMMIT; SELECT pg_sleep(0.01);"
done | pgq >/dev/null &
tw=$!
for r in 1 2 3; do
  expect_exit 0 ferry run lite.yaml
  got=$(q lite.db "$sum_sql")
  [ "$got" = "$total" ] || fail "run $r ended inside a transaction across tables: sum $got, want $total"
done
wait $tw
expect_exit 0 ferry run lite.yaml
lite_same "after transfers"
pass "transfers across tables: every run ends at one commit boundary for all tables (sum $total kept)"

pgq -c "SELECT pg_drop_replication_slot('lite_one')" >/dev/null
pgq -c "INSERT INTO s1 VALUES (101, 101, 'lost?')" >/dev/null
expect_exit 1 ferry run lite.yaml
printf '%s' "$OUT" | grep -q 'resnapshot required' || fail "slot loss message: $OUT"
printf '%s' "$OUT" | grep -q 'lite_one' || fail "the message names the slot: $OUT"
[ "$(pgq -c "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'lite_one'")" = 0 ] ||
  fail "the slot was silently recreated"
[ "$(q lite.db 'SELECT count(*) FROM s1 WHERE id = 101')" = 0 ] || fail "rows moved after the slot was lost"
lite lite2.yaml "on_slot_lost: resnapshot"
expect_exit 0 ferry run lite2.yaml --fresh
lite_same "after resnapshot"
pass "slot lost while down: $(printf '%s' "$OUT" | grep -o 'replication slot "lite_one" [^;]*' | head -1); on_slot_lost: resnapshot copied anew"

# ---- 3. a slot per table from an earlier ferry: one clear error, then the migration
cat > leg.yaml <<EOF
version: 1
name: leg
source:
  type: postgres
  url: env:SRC_URL
  resources:
    - {table: l1, mode: cdc}
sink: {type: sqlite, path: $T/leg.db, write: merge}
EOF
pgq -c "SELECT pg_create_logical_replication_slot('ferry_leg_l1', 'pgoutput')" >/dev/null
expect_exit 1 ferry run leg.yaml
printf '%s' "$OUT" | grep -q 'ferry cdc drop' || fail "no migration command in: $OUT"
printf '%s' "$OUT" | grep -q 'ferry_leg_l1' || fail "the old slot is not named: $OUT"
[ "$(pgq -c "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'ferry_leg'")" = 0 ] || fail "a shared slot was made"
expect_exit 0 ferry cdc drop leg.yaml
[ "$(pgq -c "SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'ferry_leg%'")" = 0 ] || fail "old slot left"
expect_exit 0 ferry run leg.yaml
[ "$(q leg.db 'SELECT count(*) FROM l1')" = 2 ] || fail "migrated pipeline did not copy"
pass "per-table slot of an earlier ferry: one error naming \`ferry cdc drop\`; migrated"

# ---- 4. cdc drop of the 50-table pipeline
expect_exit 0 ferry cdc drop many.yaml
[ "$(pgq -c "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'ferry_many'")" = 0 ] || fail "slot left"
[ "$(pgq -c "SELECT count(*) FROM pg_publication WHERE pubname = 'ferry_many'")" = 0 ] || fail "publication left"
pass "ferry cdc drop removes the pipeline's slot and publication"
