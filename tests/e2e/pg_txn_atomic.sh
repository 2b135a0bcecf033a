#!/usr/bin/env bash
# shared: pg
# One destination transaction per source transaction across tables (issue 17), against a real
# PostgreSQL: three account tables followed by one pipeline (`tables: [public.acct_*]`, cdc,
# merge) into PostgreSQL and by a second one into SQLite. Source transactions move money
# between the tables (updates in two tables, an insert in one and an update in another, a
# delete in one whose amount is added in another): the sum over the three tables never
# changes. While `ferry run --follow` applies them (small batches, so that each table's
# changes span many batches), a reader on each destination polls the sum in one statement and
# counts every poll that sees it broken (half of a source transaction); ferry is killed with
# -9 in the middle and follows again; a final run converges: each destination table equals its
# source, no poll ever saw a broken sum, and the pollers saw the destination change.
. "$(dirname "$0")/lib.sh"
. "${FERRY_PG_SH:-$FERRY_SRC/tests/pg/pg.sh}"
pg_start
# background processes (pollers, ferry --follow, workload) never outlive the test
bg_kill_on_exit 'touch "$T/stop_lite"'

dest=$(pg_db dest)
export SRC_URL="$FERRY_PG_URL"
export DEST_URL="postgresql://ferry_admin:$PGPASSWORD@127.0.0.1:$PGPORT/$dest"

N=40
{
  for t in a b c; do
    echo "CREATE TABLE acct_$t (id int PRIMARY KEY, bal bigint NOT NULL, note text);"
    echo "INSERT INTO acct_$t SELECT g, 1000, 'init' FROM generate_series(1, $N) g;"
  done
} | pgq >/dev/null
SUM_SQL="SELECT (SELECT coalesce(sum(bal), 0) FROM acct_a) + (SELECT coalesce(sum(bal), 0) FROM acct_b) + (SELECT coalesce(sum(bal), 0) FROM acct_c)"
TOTAL=$(pgq -c "$SUM_SQL")
[ "$TOTAL" = $((3 * N * 1000)) ] || fail "setup: total $TOTAL"

pipeline() { # FILE NAME SINK
  cat > "$1" <<EOF
version: 1
name: $2
source:
  type: postgres
  url: env:SRC_URL
  resources:
    - {tables: [public.acct_*], mode: cdc}
sink: $3
batch: {rows: 7, flush_after: 50ms}
EOF
}
pipeline pg.yaml txn_pg "{type: postgres, url: env:DEST_URL, schema: public, write: merge}"
pipeline lite.yaml txn_lite "{type: sqlite, path: $T/lite.db, write: merge}"

expect_exit 0 ferry run pg.yaml
expect_exit 0 ferry run lite.yaml
[ "$(pgq -d "$dest" -c "$SUM_SQL")" = "$TOTAL" ] || fail "first run (copy): postgres sum"
[ "$(q lite.db "$SUM_SQL")" = "$TOTAL" ] || fail "first run (copy): sqlite sum"

# The source's transactions: every one keeps the sum (and touches two tables).
workload() { # SEED COUNT
  local k i j x
  for k in $(seq 1 "$2"); do
    i=$(( (k * 7 + $1) % N + 1 )); j=$(( (k * 11 + $1) % N + 1 )); x=$(( k % 37 + 1 ))
    case $(( k % 4 )) in
      0) echo "BEGIN; UPDATE acct_a SET bal = bal - $x WHERE id = $i; UPDATE acct_b SET bal = bal + $x, note = 'k$k' WHERE id = $j; COMMIT;" ;;
      1) echo "BEGIN; INSERT INTO acct_c VALUES ($1 * 100000 + $k, $x, 'new'); UPDATE acct_a SET bal = bal - $x WHERE id = $j; COMMIT;" ;;
      2) echo "BEGIN; WITH d AS (DELETE FROM acct_c WHERE id = (SELECT min(id) FROM acct_c WHERE id > $N) RETURNING bal) UPDATE acct_b SET bal = bal + (SELECT coalesce(sum(bal), 0) FROM d) WHERE id = $i; COMMIT;" ;;
      3) echo "BEGIN; UPDATE acct_b SET bal = bal - $x WHERE id = $i; UPDATE acct_c SET bal = bal + $x WHERE id = $j; UPDATE acct_a SET bal = bal - 1 WHERE id = $i; UPDATE acct_c SET bal = bal + 1 WHERE id = $i; COMMIT;" ;;
    esac
    echo "SELECT pg_sleep(0.004);"
  done | pgq >/dev/null
}

# The PostgreSQL reader: polls the sum (one statement, one snapshot) until stop_poll has a
# row; returns "broken-polls changes-seen polls first-broken-sum".
pgq -d "$dest" >/dev/null <<SQL
CREATE TABLE stop_poll (x int);
CREATE FUNCTION poll(want bigint) RETURNS text LANGUAGE plpgsql AS \$\$
DECLARE bad int := 0; seen int := 0; polls int := 0; s bigint; prev text := ''; cur text;
        first text := '-';
BEGIN
  LOOP
    EXIT WHEN EXISTS (SELECT 1 FROM stop_poll);
    SELECT (SELECT coalesce(sum(bal), 0) FROM acct_a) + (SELECT coalesce(sum(bal), 0) FROM acct_b)
           + (SELECT coalesce(sum(bal), 0) FROM acct_c),
           (SELECT string_agg(bal::text, ',' ORDER BY id) FROM acct_a)
      INTO s, cur;
    polls := polls + 1;
    IF s <> want THEN
      bad := bad + 1;
      IF first = '-' THEN first := s::text; END IF;
    END IF;
    IF prev <> '' AND cur <> prev THEN seen := seen + 1; END IF;
    prev := cur;
    PERFORM pg_sleep(0.002);
  END LOOP;
  RETURN bad || ' ' || seen || ' ' || polls || ' ' || first;
END \$\$;
SQL
pgq -d "$dest" -c "SELECT poll($TOTAL)" > poll_pg.out 2>&1 &
ppg=$!
BG+=($ppg)

# The SQLite reader, the same in Python (each SELECT reads one snapshot).
cat > poll.py <<'PY'
import sqlite3, sys, time, os
db, want, stop = sys.argv[1], int(sys.argv[2]), sys.argv[3]
c = sqlite3.connect(db, timeout=30, isolation_level=None)
bad = seen = polls = 0
prev = None
first = "-"
q = ("SELECT (SELECT coalesce(sum(bal), 0) FROM acct_a) + (SELECT coalesce(sum(bal), 0) FROM acct_b)"
     " + (SELECT coalesce(sum(bal), 0) FROM acct_c), (SELECT group_concat(bal) FROM (SELECT bal FROM acct_a ORDER BY id))")
while not os.path.exists(stop):
    s, cur = c.execute(q).fetchone()
    polls += 1
    if s != want:
        bad += 1
        if first == "-":
            first = str(s)
    if prev is not None and cur != prev:
        seen += 1
    prev = cur
    time.sleep(0.002)
print(bad, seen, polls, first)
PY
python3 poll.py "$T/lite.db" "$TOTAL" "$T/stop_lite" > poll_lite.out 2>&1 &
plite=$!
BG+=($plite)

workload 1 500 &
wl=$!
"$FERRY_BIN" run pg.yaml --follow --epoch 300ms --quiet > follow_pg1.log 2>&1 &
fpg=$!
"$FERRY_BIN" run lite.yaml --follow --epoch 300ms --quiet > follow_lite1.log 2>&1 &
flite=$!
BG+=($wl $fpg $flite)
# kill -9 once each has applied some of the workload (notes the transfers wrote)
applied() { # the destination's count of transfer notes in acct_b
  if [ "$1" = pg ]; then pgq -d "$dest" -c "SELECT count(*) FROM acct_b WHERE note LIKE 'k%'"
  else q lite.db "SELECT count(*) FROM acct_b WHERE note LIKE 'k%'"; fi
}
while kill -0 $wl 2>/dev/null; do
  [ "$(applied pg)" -gt 5 ] && [ "$(applied lite)" -gt 5 ] && break
  sleep 0.1
done
sleep 0.$(( RANDOM % 10 ))
kill -9 $fpg $flite
wait $fpg 2>/dev/null || true
wait $flite 2>/dev/null || true
"$FERRY_BIN" run pg.yaml --follow --epoch 300ms --quiet > follow_pg2.log 2>&1 &
fpg=$!
"$FERRY_BIN" run lite.yaml --follow --epoch 300ms --quiet > follow_lite2.log 2>&1 &
flite=$!
BG+=($fpg $flite)
wait $wl  # (two workloads at once could deadlock each other at the source)
workload 2 300
sleep 1
kill -TERM $fpg $flite
set +e
wait $fpg; rc1=$?
wait $flite; rc2=$?
set -e
[ $rc1 = 0 ] || [ $rc1 = 5 ] || fail "postgres --follow exited $rc1: $(tail -20 follow_pg2.log)"
[ $rc2 = 0 ] || [ $rc2 = 5 ] || fail "sqlite --follow exited $rc2: $(tail -20 follow_lite2.log)"
# the paused runs complete, then one more reads to now
expect_exit 0 ferry run pg.yaml
expect_exit 0 ferry run pg.yaml
expect_exit 0 ferry run lite.yaml
expect_exit 0 ferry run lite.yaml
pgq -d "$dest" -c "INSERT INTO stop_poll VALUES (1)" >/dev/null
touch "$T/stop_lite"
wait $ppg || fail "postgres poller: $(cat poll_pg.out)"
wait $plite || fail "sqlite poller: $(cat poll_lite.out)"

for t in a b c; do
  a=$(pgq -c "COPY (SELECT id, bal, note FROM acct_$t ORDER BY id) TO STDOUT" | md5sum)
  b=$(pgq -d "$dest" -c "COPY (SELECT id, bal, note FROM acct_$t ORDER BY id) TO STDOUT" | md5sum)
  c=$(q -separator $'\t' lite.db "SELECT id, bal, note FROM acct_$t ORDER BY id" | md5sum)
  [ "$a" = "$b" ] || fail "postgres: acct_$t differs from the source"
  [ "$a" = "$c" ] || fail "sqlite: acct_$t differs from the source"
done
[ "$(applied pg)" -gt 0 ] || fail "no transfer reached the destination"

read -r bad seen polls first < poll_pg.out
[ "$bad" = 0 ] || fail "postgres: $bad of $polls polls saw half of a source transaction (first sum $first, want $TOTAL); the runs said: $(grep -hv '^ok' follow_pg*.log | tail -n 8)"
[ "$seen" -gt 0 ] || fail "postgres: the poller never saw the destination change ($polls polls)"
read -r bad seen polls first < poll_lite.out
[ "$bad" = 0 ] || fail "sqlite: $bad of $polls polls saw half of a source transaction (first sum $first, want $TOTAL); the runs said: $(grep -hv '^ok' follow_lite*.log | tail -n 8)"
[ "$seen" -gt 0 ] || fail "sqlite: the poller never saw the destination change ($polls polls)"
pass "800 transfers across 3 tables, kill -9 while following: no reader saw half a source transaction (postgres, sqlite), destinations equal"

# A table of the wave whose stream cannot start (the failpoint fails the second table's
# preparation): the tables that could start must not stream without it. Their group would
# commit their part of a source transaction whose other part belongs to the missing table,
# and a reader would see half of it until a later run. The run fails naming the table; the
# destination shows none of the transaction; the next run applies it whole.
pgq >/dev/null <<'SQL'
BEGIN;
UPDATE acct_a SET bal = bal - 5 WHERE id = 1;
UPDATE acct_b SET bal = bal + 2 WHERE id = 1;
UPDATE acct_c SET bal = bal + 3 WHERE id = 1;
COMMIT;
SQL
BALS="SELECT group_concat(bal) FROM (SELECT bal FROM acct_a UNION ALL SELECT bal FROM acct_b UNION ALL SELECT bal FROM acct_c)"
before=$(q lite.db "$BALS")
set +e; FERRY_FAILPOINTS='before_stream_prepare=error@2' "$FERRY_BIN" run lite.yaml > prep_fail.log 2>&1; rc=$?; set -e
[ $rc != 0 ] || fail "a run whose stream could not start succeeded: $(cat prep_fail.log)"
grep -qF "failpoint before_stream_prepare" prep_fail.log && grep -qF "not streamed: resource" prep_fail.log ||
  fail "the error names no failed stream: $(cat prep_fail.log)"
[ "$(q lite.db "$SUM_SQL")" = "$TOTAL" ] ||
  fail "sqlite: the streams that could start applied their part of a source transaction (sum $(q lite.db "$SUM_SQL"), want $TOTAL)"
[ "$(q lite.db "$BALS")" = "$before" ] || fail "sqlite: the failed run applied changes"
expect_exit 0 ferry run lite.yaml
for t in a b c; do
  [ "$(pgq -c "COPY (SELECT id, bal, note FROM acct_$t ORDER BY id) TO STDOUT" | md5sum)" = \
    "$(q -separator $'\t' lite.db "SELECT id, bal, note FROM acct_$t ORDER BY id" | md5sum)" ] ||
    fail "sqlite after the next run: acct_$t differs"
done
pass "a stream of the wave that could not start: none applied without it; the next run applied the transaction whole"

# TRUNCATE in stream order inside a multi-table source transaction (schema_changes: evolve,
# the default): acct_c's money moves to acct_a and acct_c is emptied, then refilled in the
# same transaction; the destinations follow (postgres and sqlite).
pgq >/dev/null <<'SQL'
BEGIN;
UPDATE acct_a SET bal = bal + (SELECT sum(bal) FROM acct_c) WHERE id = 1;
INSERT INTO acct_c VALUES (999999, 0, 'gone with the truncate');
TRUNCATE acct_c;
INSERT INTO acct_c VALUES (1, 0, 'after'), (2, 0, 'after');
COMMIT;
SQL
expect_exit 0 ferry run pg.yaml
expect_exit 0 ferry run lite.yaml
for t in a b c; do
  a=$(pgq -c "COPY (SELECT id, bal, note FROM acct_$t ORDER BY id) TO STDOUT" | md5sum)
  [ "$a" = "$(pgq -d "$dest" -c "COPY (SELECT id, bal, note FROM acct_$t ORDER BY id) TO STDOUT" | md5sum)" ] ||
    fail "postgres after the truncate: acct_$t differs"
  [ "$a" = "$(q -separator $'\t' lite.db "SELECT id, bal, note FROM acct_$t ORDER BY id" | md5sum)" ] ||
    fail "sqlite after the truncate: acct_$t differs"
done
[ "$(pgq -d "$dest" -c "SELECT string_agg(id::text, ',' ORDER BY id) FROM acct_c")" = "1,2" ] ||
  fail "postgres: acct_c after the truncate"
[ "$(pgq -d "$dest" -c "$SUM_SQL")" = "$TOTAL" ] || fail "postgres: sum after the truncate"
pass "TRUNCATE inside a transaction across tables applied in stream order (postgres, sqlite)"

# A publication that leaves a kind of change out would lose those changes silently: refused,
# naming it and the fix.
pgq -c "CREATE PUBLICATION no_trunc FOR TABLE acct_a, acct_b WITH (publish = 'insert, update, delete')" >/dev/null
cat > given.yaml <<EOF2
version: 1
name: txn_given
source:
  type: postgres
  url: env:SRC_URL
  publication: no_trunc
  resources:
    - {tables: [public.acct_a, public.acct_b], mode: cdc}
sink: {type: sqlite, path: $T/given.db, write: merge}
EOF2
set +e; ferry run given.yaml > given.out 2>&1; rc=$?; set -e
[ $rc != 0 ] || fail "a publication without truncate was accepted"
grep -qF 'publication "no_trunc" does not publish truncate' given.out || fail "message: $(cat given.out)"
grep -qF "ALTER PUBLICATION \"no_trunc\" SET (publish = 'insert, update, delete, truncate')" given.out ||
  fail "the message names no fix: $(cat given.out)"
[ "$(pgq -c "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'ferry_txn_given'")" = 0 ] ||
  fail "a slot was made for a refused publication"
pass "a publication that does not publish truncate is refused, naming it and the ALTER that fixes it"
