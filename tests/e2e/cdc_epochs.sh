#!/usr/bin/env bash
# `ferry run --follow --epoch-rows N` against a real PostgreSQL: with a time epoch far longer
# than the test, 1000 pending single-row changes are still taken in several runs of at most
# N changes plus one transaction each (each committed, saved and acknowledged), the
# destination ends equal to the source, and the slot is acknowledged where ferry saved.
# Then the replication session kept between --follow runs: later runs continue it (debug
# log), through a concurrent workload and a column added at the source meanwhile, and the
# destination still equals the source; at exit the slot is acknowledged at the saved
# position.
. "$(dirname "$0")/lib.sh"
. "${FERRY_PG_SH:-$FERRY_SRC/tests/pg/pg.sh}"
pg_start

export SRC_URL="$FERRY_PG_URL"
pgq >/dev/null <<'SQL'
CREATE TABLE e1 (id int PRIMARY KEY, v text);
INSERT INTO e1 SELECT g, 'v' || g FROM generate_series(1, 50) g;
SQL
cat > ep.yaml <<EOF2
version: 1
name: ep
source:
  type: postgres
  url: env:SRC_URL
  resources:
    - {table: e1, mode: cdc}
sink: {type: sqlite, path: $T/ep.db, write: merge}
batch: {rows: 100, flush_after: 100ms}
EOF2
expect_exit 0 ferry run ep.yaml
# 1000 changes in 1000 transactions, pending in the slot.
pgq >/dev/null <<'SQL'
DO $$ BEGIN
  FOR i IN 51..800 LOOP INSERT INTO e1 VALUES (i, 'w' || i); COMMIT; END LOOP;
  FOR i IN 1..250 LOOP UPDATE e1 SET v = 'u' || i WHERE id = i; COMMIT; END LOOP;
END $$;
SQL
expect_exit 2 ferry run ep.yaml --follow --epoch-rows 0
FERRY_LOG=debug "$FERRY_BIN" run ep.yaml --follow --epoch 1h --epoch-rows 300 --quiet > follow.log 2>&1 &
fpid=$!
# Converged: every row equal (content, not only counts: the updates keep the lengths).
want=$(pgq -c "SELECT id || '|' || v FROM e1 ORDER BY id" | md5sum)
for i in $(seq 1 600); do
  got=$(q ep.db "SELECT id || '|' || v FROM e1 ORDER BY id" 2>/dev/null | md5sum || true)
  [ "$got" = "$want" ] && break
  kill -0 $fpid 2>/dev/null || break
  sleep 0.2
done
sleep 0.5
kill -TERM $fpid 2>/dev/null || true
set +e; wait $fpid; frc=$?; set -e
[ $frc = 0 ] || [ $frc = 5 ] || fail "--follow after SIGTERM exited $frc: $(cat follow.log)"
a=$(pgq -c "SELECT id || '|' || v FROM e1 ORDER BY id" | md5sum)
b=$(q ep.db "SELECT id || '|' || v FROM e1 ORDER BY id" | md5sum)
[ "$a" = "$b" ] || fail "destination differs from the source after row-count epochs"
# Runs of the follow: completed ones with rows; each at most 300 changes (1-row transactions).
rows=$(ferry runs --pipeline ep --limit 100 --json | jq -r '.[] | select(.state == "completed" and .rows > 0) | .rows' | tail -n +1)
n=$(printf '%s\n' "$rows" | grep -c . || true)
# The first run copied 50 rows; the follow's runs hold the 1000 changes.
[ "$n" -ge 5 ] || fail "expected at least 5 runs with rows (1 copy + 4 epochs of <= 300), got $n: $rows"
max=$(printf '%s\n' "$rows" | sort -n | tail -1)
[ "$max" -le 300 ] || fail "a run wrote $max changes, more than --epoch-rows 300"
pass "--epoch-rows 300: 1000 changes in $((n - 1)) epochs of at most 300, destination equals the source"
saved=$(ferry checkpoints --json | jq -r '.[] | select(.pipeline == "ep" and .shard == 0) | .position' | jq -r .n)
conf=$(pgq -c "SELECT (confirmed_flush_lsn - '0/0')::bigint FROM pg_replication_slots WHERE slot_name = 'ferry_ep'")
[ "$conf" = "$saved" ] || fail "slot confirmed $conf, saved $saved"
pass "each epoch acknowledged the slot at its saved position"
grep -q 'continued session' follow.log || fail "no run continued the previous run's session: $(grep -i 'session' follow.log | head)"

# Sessions kept across epochs, under a workload and a schema change.
FERRY_LOG=debug "$FERRY_BIN" run ep.yaml --follow --epoch 300ms --quiet > follow2.log 2>&1 &
fpid=$!
for i in $(seq 1 60); do
  pgq -c "INSERT INTO e1 VALUES (${i}000 + 1, 'x$i')" -c "UPDATE e1 SET v = v || '.' WHERE id = $i" \
      -c "DELETE FROM e1 WHERE id = $((i + 100))" >/dev/null
  [ $i = 30 ] && pgq -c "ALTER TABLE e1 ADD COLUMN extra int" -c "UPDATE e1 SET extra = id WHERE id < 10" >/dev/null
  sleep 0.05
done
want=$(pgq -c "SELECT id || '|' || v || '|' || coalesce(extra::text, '') FROM e1 ORDER BY id" | md5sum)
for i in $(seq 1 300); do
  got=$(q ep.db "SELECT id || '|' || v || '|' || coalesce(extra, '') FROM e1 ORDER BY id" 2>/dev/null | md5sum || true)
  [ "$got" = "$want" ] && break
  kill -0 $fpid 2>/dev/null || break
  sleep 0.2
done
sleep 0.5
kill -TERM $fpid 2>/dev/null || true
set +e; wait $fpid; frc=$?; set -e
[ $frc = 0 ] || [ $frc = 5 ] || fail "--follow (sessions) exited $frc: $(tail -20 follow2.log)"
a=$(pgq -c "SELECT id || '|' || v || '|' || coalesce(extra::text, '') FROM e1 ORDER BY id" | md5sum)
b=$(q ep.db "SELECT id || '|' || v || '|' || coalesce(extra, '') FROM e1 ORDER BY id" | md5sum)
[ "$a" = "$b" ] || fail "destination differs after --follow with kept sessions"
n=$(grep -c 'continued session' follow2.log || true)
[ "$n" -ge 2 ] || fail "sessions were not continued across epochs ($n)"
grep -q "table \"public\".\"e1\": streaming from slot ferry_ep (continued session)" follow2.log || fail "no continued session"
saved=$(ferry checkpoints --json | jq -r '.[] | select(.pipeline == "ep" and .shard == 0) | .position' | jq -r .n)
conf=$(pgq -c "SELECT (confirmed_flush_lsn - '0/0')::bigint FROM pg_replication_slots WHERE slot_name = 'ferry_ep'")
[ "$conf" = "$saved" ] || fail "after exit the slot confirmed $conf, saved $saved"
[ "$(pgq -c "SELECT active FROM pg_replication_slots WHERE slot_name = 'ferry_ep'")" = f ] || fail "slot still held"
pass "runs continue the previous run's replication session ($n times), a schema change included; acknowledged at exit"
