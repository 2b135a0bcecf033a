#!/usr/bin/env bash
# shared: pg
# labels: asan
# Streamed in-progress transactions (pgoutput protocol 2, `stream_large_transactions: true`)
# against a real PostgreSQL: the source URL gives ferry's replication session a 64kB
# logical_decoding_work_mem, so that every transaction above it reaches ferry in stream
# blocks as the walsender decodes it (kept in a deleted temporary file until its commit,
# pg_spool.h). Replayed from the slot by a bounded
# run: a large transaction with a rolled-back subtransaction (and one nested in it), a
# released one, and a rolled-back one whose first change comes after a nested one's; a large transaction that aborts; a large transaction left open while other
# sessions commit small ones. Under `--follow`: a large transaction open across several
# epochs (the session parked with its spool between them); a kill -9 while one streams in.
# Then a TMPDIR too small for one. Each time both destination tables equal their sources;
# the server counted streamed transactions for the slot (stream_txns); no spool file is left
# in ferry's TMPDIR; the full TMPDIR fails the run with a clear error and no acknowledgement.
# Without the key (the default) the server spills the transaction and streams nothing.
. "$(dirname "$0")/lib.sh"
. "${FERRY_PG_SH:-$FERRY_SRC/tests/pg/pg.sh}"
pg_start
bg_kill_on_exit

dest=$(pg_db dest)
export SRC_URL="$FERRY_PG_URL?options=-c%20logical_decoding_work_mem%3D64kB"
export DEST_URL="postgresql://ferry_admin:$PGPASSWORD@127.0.0.1:$PGPORT/$dest"
SPOOL="$T/spool"
mkdir -p "$SPOOL"

pgq >/dev/null <<'SQL'
CREATE TABLE st_a (id int PRIMARY KEY, v text NOT NULL, n int);
CREATE TABLE st_b (id bigint PRIMARY KEY, note text);
INSERT INTO st_a SELECT g, 'a' || g, g FROM generate_series(1, 3000) g;
INSERT INTO st_b SELECT g, 'b' || g FROM generate_series(1, 1000) g;
SQL
cat > st.yaml <<EOF
version: 1
name: st
source:
  type: postgres
  url: env:SRC_URL
  stream_large_transactions: true
  resources:
    - {tables: [public.st_*], mode: cdc}
sink: {type: postgres, url: env:DEST_URL, schema: public, write: merge}
EOF
run() { TMPDIR="$SPOOL" "$FERRY_BIN" "$@"; }

same() { # LABEL: both tables equal their sources, row by row
  local t a b
  for t in st_a st_b; do
    a=$(pgq -c "SELECT md5(string_agg(t::text, ',' ORDER BY id)) FROM $t t")
    b=$(pgq -d "$dest" -c "SELECT md5(string_agg(t::text, ',' ORDER BY id)) FROM $t t")
    [ "$a" = "$b" ] && continue
    pgq -c "SELECT * FROM $t ORDER BY id" > "$T/src.$t"
    pgq -d "$dest" -c "SELECT * FROM $t ORDER BY id" > "$T/dst.$t"
    fail "$1: $t differs from its source ($(wc -l < "$T/src.$t") rows against $(wc -l < "$T/dst.$t"); first differences: $(diff "$T/src.$t" "$T/dst.$t" | head -6 | tr '\n' ' '))"
  done
}
streamed() { # the server's count of transactions it streamed for ferry's slot (14+)
  pgq -c "SELECT coalesce(sum(stream_txns), 0) FROM pg_stat_replication_slots WHERE slot_name = 'ferry_st'"
}
no_spool_left() {
  [ -z "$(ls -A "$SPOOL")" ] || fail "$1: files left in ferry's TMPDIR: $(ls -A "$SPOOL")"
}

expect_exit 0 run run st.yaml --quiet
same "first run (copy)"
pass "copied 3000 + 1000 rows and created the slot"

# Pending in the slot: large transactions, each far above 64kB of decoded changes. In the
# first, st_b's first change (and so the session's Relation message for it) is in a
# subtransaction that is rolled back after it was streamed; the top level then changes st_b.
pgq >/dev/null <<'SQL'
BEGIN;
INSERT INTO st_a SELECT g, 'first' || g, g FROM generate_series(50001, 53000) g;
SAVEPOINT only_b;
INSERT INTO st_b SELECT g, 'rolled' || g FROM generate_series(200001, 206000) g;
ROLLBACK TO SAVEPOINT only_b;
UPDATE st_b SET note = note || '-top' WHERE id <= 10;
COMMIT;
BEGIN;
INSERT INTO st_a SELECT g, 'big' || g, g FROM generate_series(10001, 16000) g;
UPDATE st_a SET v = v || '-u', n = n + 1 WHERE id <= 2000;
DELETE FROM st_a WHERE id BETWEEN 2501 AND 2700;
INSERT INTO st_b SELECT g, 'nb' || g FROM generate_series(5001, 8000) g;
SAVEPOINT s1;
INSERT INTO st_a SELECT g, 'gone' || g, g FROM generate_series(20001, 24000) g;
UPDATE st_b SET note = 'gone' WHERE id <= 1000;
SAVEPOINT s2;
DELETE FROM st_a WHERE id BETWEEN 1 AND 500;
ROLLBACK TO SAVEPOINT s1;
SAVEPOINT s3;
UPDATE st_b SET note = note || '-kept' WHERE id BETWEEN 5001 AND 6000;
RELEASE SAVEPOINT s3;
SAVEPOINT p1;
SAVEPOINT p2;
INSERT INTO st_a SELECT g, 'nested' || g, g FROM generate_series(25001, 27000) g;
RELEASE SAVEPOINT p2;
UPDATE st_b SET note = 'parent' WHERE id BETWEEN 7001 AND 7100;
ROLLBACK TO SAVEPOINT p1;
INSERT INTO st_a VALUES (30001, 'last', NULL);
COMMIT;
BEGIN;
INSERT INTO st_a SELECT g, 'aborted' || g, g FROM generate_series(40001, 46000) g;
DELETE FROM st_b WHERE id <= 500;
ROLLBACK;
UPDATE st_a SET n = -1 WHERE id = 3;
SQL
# A large transaction open while other sessions commit small ones (on other rows); it
# commits after them, so it is applied after them, as on the source.
{
  echo "BEGIN;"
  echo "UPDATE st_a SET v = 'long-' || id WHERE id BETWEEN 10001 AND 14000;"
  echo "INSERT INTO st_b SELECT g, 'long' || g FROM generate_series(9001, 12000) g;"
  echo "SELECT pg_sleep(2);"
  echo "UPDATE st_a SET n = n * 10 WHERE id BETWEEN 2001 AND 2400;"
  echo "COMMIT;"
} | pgq >/dev/null &
long=$!
BG+=("$long")
sleep 0.5
for i in $(seq 1 20); do
  pgq -c "UPDATE st_a SET n = coalesce(n, 0) + $i WHERE id = $((2800 + i))" \
      -c "DELETE FROM st_b WHERE id = $((900 + i))" >/dev/null
done
wait "$long" || fail "the long transaction failed"
before=$(streamed)
expect_exit 0 run run st.yaml --quiet
same "replayed backlog with streamed transactions"
no_spool_left "after the replay"
for _ in $(seq 1 100); do
  after=$(streamed)
  [ "$after" -ge $((before + 4)) ] && break
  sleep 0.1
done
[ "$after" -ge $((before + 4)) ] || fail "the server streamed $((after - before)) transactions to ferry, expected 4 or more (stream_txns $before -> $after)"
[ "$(pgq -d "$dest" -c "SELECT (SELECT count(*) FROM st_a WHERE id > 20000 AND id < 30000 OR id BETWEEN 40001 AND 46000) + (SELECT count(*) FROM st_b WHERE id > 200000)")" = 0 ] ||
  fail "rows of a rolled-back subtransaction or an aborted transaction reached the destination"
pass "backlog of 4 large transactions streamed (subtransactions rolled back and released, one whose table's first change was rolled back, one aborted, one open across 20 commits): destination equals the source"

# Under --follow (200 ms epochs, the session parked between them), a large transaction open
# across several epochs while small ones commit: its first blocks are spooled in one epoch's
# session, which is parked with them and continued by the next epochs.
md5s() { # DB: both tables' rows, one digest
  pgq ${1:+-d "$1"} -c "SELECT md5(string_agg(t::text, ',' ORDER BY id)) FROM st_a t" \
    -c "SELECT md5(string_agg(t::text, ',' ORDER BY id)) FROM st_b t" | tr '\n' ' '
}
FERRY_LOG=debug TMPDIR="$SPOOL" "$FERRY_BIN" run st.yaml --follow --epoch 200ms --quiet > follow1.log 2>&1 &
fpid=$!
BG+=("$fpid")
sleep 1
{
  echo "BEGIN;"
  echo "INSERT INTO st_b SELECT g, 'span' || g FROM generate_series(70001, 76000) g;"
  echo "SELECT pg_sleep(1.5);"
  echo "UPDATE st_b SET note = note || '-2' WHERE id BETWEEN 70001 AND 73000;"
  echo "SELECT pg_sleep(1);"
  echo "COMMIT;"
} | pgq >/dev/null &
span=$!
BG+=("$span")
for i in $(seq 1 30); do
  pgq -c "UPDATE st_a SET n = coalesce(n, 0) + 1 WHERE id = $((100 + i))" >/dev/null
  sleep 0.1
done
wait "$span" || fail "the transaction spanning epochs failed"
want=$(md5s)
for _ in $(seq 1 300); do
  [ "$(md5s "$dest")" = "$want" ] && break
  kill -0 "$fpid" 2>/dev/null || break
  sleep 0.1
done
kill -TERM "$fpid" 2>/dev/null || true
set +e; wait "$fpid"; frc=$?; set -e
[ $frc = 0 ] || [ $frc = 5 ] || fail "--follow after SIGTERM exited $frc: $(tail -5 follow1.log)"
same "a transaction open across --follow epochs"
grep -qE "session kept at the end of the run \([1-9][0-9]* streamed transaction" follow1.log ||
  fail "no epoch's session was parked holding a streamed transaction: $(grep 'session kept' follow1.log | sort | uniq -c)"
grep -q "continued session" follow1.log || fail "no epoch continued a parked session"
no_spool_left "after --follow"
pass "--follow: a streamed transaction open across epochs is carried by the parked session and applied once at its commit"

# Under --follow, killed with -9 while a large transaction streams in, then resumed.
TMPDIR="$SPOOL" "$FERRY_BIN" run st.yaml --follow --epoch 300ms --quiet > follow.log 2>&1 &
fpid=$!
BG+=("$fpid")
sleep 1
pgq >/dev/null <<'SQL'
BEGIN;
UPDATE st_a SET v = v || '-k', n = coalesce(n, 0) + 7;
INSERT INTO st_b SELECT g, 'kill' || g FROM generate_series(20001, 60000) g;
COMMIT;
SQL
sleep 0.3
kill -0 "$fpid" 2>/dev/null || fail "--follow ended before the kill: $(cat follow.log)"
kill -9 "$fpid"
wait "$fpid" 2>/dev/null || true
pgq -c "DELETE FROM st_b WHERE id BETWEEN 20001 AND 20100" -c "UPDATE st_a SET v = 'after' WHERE id = 1" >/dev/null
no_spool_left "after kill -9"
# the interrupted epoch's run is resumed up to its planned end, then a new run reads the rest
expect_exit 0 run run st.yaml --quiet
expect_exit 0 run run st.yaml --quiet
same "resumed after kill -9"
no_spool_left "after the resumed run"
pass "killed with -9 during a large streamed transaction: the next run converges, no spool file left"

# No room in ferry's TMPDIR for a streamed transaction: the run stops naming the folder and
# the transaction, acknowledges nothing and leaves nothing there; with room, the next run
# converges.
mount_small "$T/small" 1m
confirmed() { pgq -c "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = 'ferry_st'"; }
conf0=$(confirmed)
pgq >/dev/null <<'SQL'
BEGIN;
UPDATE st_a SET v = v || '-full';
INSERT INTO st_b SELECT g, 'full' || g FROM generate_series(100001, 140000) g;
COMMIT;
SQL
set +e
OUT=$(TMPDIR="$T/small" "$FERRY_BIN" run st.yaml 2>&1)
rc=$?
set -e
[ "$rc" != 0 ] || fail "a streamed transaction larger than TMPDIR should fail the run: $OUT; $(df -h "$T/small" | tail -1); streamed $(streamed)"
printf '%s' "$OUT" | grep -q "streamed transaction [0-9]* in $T/small/ferry-txn-.*No space left on device" ||
  fail "the error should name the transaction, the folder and the cause: $OUT"
[ "$(confirmed)" = "$conf0" ] || fail "the slot was acknowledged past the failed transaction ($conf0 -> $(confirmed))"
[ -z "$(ls -A "$T/small")" ] || fail "files left in the full TMPDIR: $(ls -A "$T/small")"
expect_exit 0 run run st.yaml --quiet
expect_exit 0 run run st.yaml --quiet
same "after TMPDIR ran full"
pass "TMPDIR too small for a streamed transaction: clear error, slot not acknowledged, the next run converges"

# Off by default: a pipeline without the key has the same transaction spilled by the server
# (spill_txns), never streamed, and still converges.
cat > off.yaml <<EOF2
version: 1
name: st_off
source:
  type: postgres
  url: env:SRC_URL
  resources:
    - {tables: [public.st_*], mode: cdc}
sink: {type: postgres, url: env:DEST_URL, schema: off_copy, write: merge}
EOF2
pgq -d "$dest" -c "CREATE SCHEMA off_copy" >/dev/null
expect_exit 0 run run off.yaml --quiet
pgq >/dev/null <<'SQL'
BEGIN;
UPDATE st_a SET v = v || '-off';
INSERT INTO st_b SELECT g, 'off' || g FROM generate_series(140001, 160000) g;
COMMIT;
SQL
expect_exit 0 run run off.yaml --quiet
slot_stat() { pgq -c "SELECT coalesce(sum($1), 0) FROM pg_stat_replication_slots WHERE slot_name = 'ferry_st_off'"; }
for _ in $(seq 1 100); do [ "$(slot_stat spill_txns)" -ge 1 ] && break; sleep 0.1; done
[ "$(slot_stat spill_txns)" -ge 1 ] || fail "without the key the server should have spilled the transaction (spill_txns $(slot_stat spill_txns))"
[ "$(slot_stat stream_txns)" = 0 ] || fail "without the key the server streamed $(slot_stat stream_txns) transactions"
for t in st_a st_b; do
  a=$(pgq -c "SELECT md5(string_agg(t::text, ',' ORDER BY id)) FROM $t t")
  b=$(pgq -d "$dest" -c "SELECT md5(string_agg(t::text, ',' ORDER BY id)) FROM off_copy.$t t")
  [ "$a" = "$b" ] || fail "without streaming: off_copy.$t differs from its source"
done
pass "stream_large_transactions off (the default): the server spilled the transaction, nothing streamed, destination equals the source"
