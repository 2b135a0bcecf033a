#!/usr/bin/env bash
# labels: asan
# The watermark visibility race of a table that joins a running slot (docs/internals/cdc.md
# "Tables that join while streaming"): a transaction whose commit record precedes the chunk's
# low watermark in the WAL, yet which the chunk's snapshot does not see. The stream applies it
# before the window (its keys are not the window's), and the chunk's older rows would then
# overwrite it at the high watermark. Failpoint cdc_chunk_snapshot_first makes the race wide:
# the chunk's snapshot is taken, then the run sleeps, then writes the low watermark. While it
# sleeps (its backend idle in the transaction, the snapshot its last query) this test commits
# an UPDATE and a DELETE of rows of that chunk and checks the backend is still there (so the
# commit came before the low watermark, after the snapshot). The destination must equal the
# source: the updated rows with their new values, the deleted one gone. Without the snapshot
# check (ferry__pg_chunk_at_hw) the destination keeps the old rows.
# Case 2: a writer's transaction open across the run's ALTER PUBLICATION ... ADD TABLE and
# its first chunk (PostgreSQL never publishes the changes it made before): the first chunk
# waits for it (writers_gone, pg_chunk.c); without the wait its rows keep their old state.
# Case 3: the same when the table is copied from an exported snapshot (older servers' way).
. "$(dirname "$0")/lib.sh"
. "${FERRY_PG_SH:-$FERRY_SRC/tests/pg/pg.sh}"
pg_start
bg_kill_on_exit

psql -qX -v ON_ERROR_STOP=1 -c "CREATE DATABASE dest" >/dev/null
export SRC_URL="$FERRY_PG_URL"
export DEST_URL="postgresql://ferry_admin:$PGPASSWORD@127.0.0.1:$PGPORT/dest"
pgq -c "CREATE TABLE r01 (id int PRIMARY KEY, v int NOT NULL, note text)" \
    -c "INSERT INTO r01 SELECT g, g, 'old' FROM generate_series(1, 50) g" >/dev/null
cat > race.yaml <<EOF
version: 1
name: race
source:
  type: postgres
  url: env:SRC_URL
  resources:
    - {tables: [public.r*], mode: cdc}
sink: {type: postgres, url: env:DEST_URL, schema: public, write: merge}
batch: {rows: 500, flush_after: 100ms}
EOF
rows() { pgq ${2:+-d "$2"} -c "COPY (SELECT id, v, note FROM $1 ORDER BY id) TO STDOUT"; }
expect_exit 0 ferry run race.yaml
[ "$(rows r01 dest)" = "$(rows r01)" ] || fail "first run: r01 differs"

# r02 joins the running slot: read in one chunk (fewer rows than a chunk holds)
pgq -c "CREATE TABLE r02 (id int PRIMARY KEY, v int NOT NULL, note text)" \
    -c "INSERT INTO r02 SELECT g, g, 'old' FROM generate_series(1, 300) g" >/dev/null
FERRY_FAILPOINTS="cdc_chunk_snapshot_first=sleep(4000)" FERRY_LOG=info \
  "$FERRY_BIN" run race.yaml > race.log 2>&1 &
fr=$!
BG+=($fr)
# the chunk's backend, holding its snapshot before the low watermark
held="state = 'idle in transaction' AND query LIKE '%pg_current_snapshot()%' AND datname = 'ferry'"
pid=
for _ in $(seq 1 600); do
  pid=$(pgq -c "SELECT pid FROM pg_stat_activity WHERE $held LIMIT 1")
  [ -n "$pid" ] && break
  kill -0 $fr 2>/dev/null || fail "the run ended before the chunk's snapshot: $(tail -n 20 race.log)"
  sleep 0.05
done
[ -n "$pid" ] || fail "no chunk backend holding a snapshot: $(tail -n 20 race.log)"
pgq -c "BEGIN; UPDATE r02 SET v = v + 1000, note = 'raced' WHERE id <= 10; DELETE FROM r02 WHERE id = 20; COMMIT;"
# still before the low watermark: the commit precedes it in the WAL, after the snapshot
[ "$(pgq -c "SELECT count(*) FROM pg_stat_activity WHERE pid = $pid AND $held")" = 1 ] ||
  fail "the UPDATE did not commit while the chunk's snapshot waited for its low watermark (the race was not reproduced): $(tail -n 20 race.log)"
set +e
wait $fr
rc=$?
set -e
[ $rc = 0 ] || fail "the run exited $rc: $(tail -n 20 race.log)"
grep -q 'r02.*snapshot read in 1 chunks' race.log ||
  fail "r02 was not read in one chunk while streaming: $(grep -i 'chunk\|r02' race.log | tail -5)"
grep -q 'failpoint cdc_chunk_snapshot_first fired' race.log || fail "the failpoint did not fire"
if [ "$(rows r02 dest)" != "$(rows r02)" ]; then
  diff <(rows r02) <(rows r02 dest) | head -10
  fail "r02 differs after the race: the chunk's older rows overwrote a change it did not see"
fi
[ "$(pgq -d dest -c "SELECT count(*) FROM r02 WHERE note = 'raced'")" = 10 ] || fail "the raced rows are missing"
[ "$(pgq -d dest -c "SELECT count(*) FROM r02 WHERE id = 20")" = 0 ] || fail "the deleted row came back"
echo "ok - a change committed after the chunk's snapshot, before its low watermark: its 10 updated rows keep their new values, the deleted row stays deleted"

# open_writer TABLE: TABLE (300 rows) and a transaction that updates 10 of its rows, deletes
# one and stays open 4 s; returns once it holds the table's RowExclusiveLock (pid in $wr)
open_writer() {
  pgq -c "CREATE TABLE $1 (id int PRIMARY KEY, v int NOT NULL, note text)" \
      -c "INSERT INTO $1 SELECT g, g, 'old' FROM generate_series(1, 300) g" >/dev/null
  printf '%s\n' "BEGIN;" "UPDATE $1 SET v = v + 1000, note = 'open' WHERE id <= 10;" \
    "DELETE FROM $1 WHERE id = 20;" "SELECT pg_sleep(4);" "COMMIT;" |
    psql -qXAt -v ON_ERROR_STOP=1 > writer.log 2>&1 &
  wr=$!
  BG+=($wr)
  local locked="SELECT count(*) FROM pg_locks WHERE relation = '$1'::regclass AND mode = 'RowExclusiveLock' AND granted"
  for _ in $(seq 1 200); do
    [ "$(pgq -c "$locked")" = 1 ] && return 0
    sleep 0.05
  done
  fail "the writer did not start: $(cat writer.log)"
}
# writer_arrived TABLE LOG: the writer committed, a later run read on, and TABLE equals its
# source (its changes made before it joined the publication were not lost)
writer_arrived() {
  wait $wr || fail "the writer failed: $(cat writer.log)"
  expect_exit 0 ferry run race.yaml # what came after the first run's end
  if [ "$(rows $1 dest)" != "$(rows $1)" ]; then
    diff <(rows $1) <(rows $1 dest) | head -10
    fail "$1 differs: changes made before the table joined the publication, committed after its snapshot, were lost ($2)"
  fi
}

# 2. A transaction that wrote to a table before ferry added the table to its publication,
# and commits after the first chunk could have read it. pgoutput decodes each change with
# the catalog as of the change, so those changes are never published; only a chunk whose
# snapshot sees the transaction carries them. ferry waits for such writers before the first
# chunk. Here the writer updates 10 rows and deletes one, and holds its transaction open
# (4 s) while the run plans r03 (ALTER PUBLICATION ... ADD TABLE) and would read it.
open_writer r03
FERRY_LOG=info "$FERRY_BIN" run race.yaml > race2.log 2>&1 || fail "the run exited $?: $(tail -n 20 race2.log)"
writer_arrived r03 "read in chunks"
grep -q 'r03.*snapshot read in 1 chunks' race2.log ||
  fail "r03 was not read in chunks while streaming: $(grep -i 'chunk\|r03' race2.log | tail -5)"
grep -q 'r03.*waiting for 1 transaction' race2.log ||
  fail "the run did not wait for the open writer: $(grep -i 'r03' race2.log | tail -5)"
echo "ok - a transaction that wrote to a table before it joined the publication is waited for before the first chunk, and its changes arrive"

# 3. The same writer when the joining table is copied from an exported snapshot (a server
# below 14; failpoint cdc_join_by_copy takes that way here): the snapshot is exported only
# once the writer ended.
open_writer r04
FERRY_FAILPOINTS="cdc_join_by_copy=sleep(1)" FERRY_LOG=info "$FERRY_BIN" run race.yaml > race3.log 2>&1 ||
  fail "the run exited $?: $(tail -n 20 race3.log)"
writer_arrived r04 "copied"
if grep -q 'r04.*snapshot read in' race3.log; then fail "r04 was read in chunks, not copied"; fi
grep -q 'waiting for 1 transaction that wrote to tables joining' race3.log ||
  fail "the copy did not wait for the open writer: $(tail -n 5 race3.log)"
pass "a change committed after the chunk's snapshot, before its low watermark, is kept; a transaction that wrote to a table before it joined the publication is waited for (chunks and exported snapshot alike), and its changes arrive"
