#!/usr/bin/env bash
# kill -9 at random points of a shared-slot cdc pipeline (issue 17), into a merge destination
# and a change log (`write: append`) side by side: once during the first run's copy of 12
# tables (the sink slowed; then resumed to its end), then 5 times while `ferry run --follow`
# streams multi-table transactions and 3 tables created meanwhile join the running slot
# (each with a transaction open across its joining the publication; read in watermark
# chunks, each chunk slowed by failpoint cdc_chunk; the kill comes a random delay after the
# joiner appeared in the destinations), each kill followed by a restart that resumes. The delays come from a seed (printed; FERRY_TEST_SEED=N reproduces them; the
# moments also depend on the machine's speed). At the end (writers stopped, two
# bounded runs): every table of the merge destination equals its source; the change log holds
# no change twice, at most one snapshot row per key of a joining table, and, merged by
# (`_ferry_lsn`, `_ferry_seq`) (the last change of each key; a delete removes it), equals the
# source.
. "$(dirname "$0")/../e2e/lib.sh"
. "${FERRY_PG_SH:-$FERRY_SRC/tests/pg/pg.sh}"
pg_start
bg_kill_on_exit

SEED=${FERRY_TEST_SEED:-$(( $(date +%s) % 32768 ))}
echo "seed $SEED (FERRY_TEST_SEED=$SEED reproduces the kill delays)"
RANDOM=$SEED

psql -qX -v ON_ERROR_STOP=1 -c "CREATE DATABASE dest" -c "CREATE DATABASE dlog" >/dev/null
export SRC_URL="$FERRY_PG_URL"
export DEST_URL="postgresql://ferry_admin:$PGPASSWORD@127.0.0.1:$PGPORT/dest"
export LOG_URL="postgresql://ferry_admin:$PGPASSWORD@127.0.0.1:$PGPORT/dlog"
N=12
for i in $(seq -w 1 $N); do
  echo "CREATE TABLE k$i (id int PRIMARY KEY, v int NOT NULL, note text);"
  echo "INSERT INTO k$i SELECT g, g, 'n' || g FROM generate_series(1, 400) g;"
done | pgq >/dev/null
pipeline() { # NAME URL WRITE
  cat > "$1.yaml" <<EOF
version: 1
name: $1
source:
  type: postgres
  url: env:SRC_URL
  resources:
    - {tables: [public.k*], mode: cdc}
sink: {type: postgres, url: env:$2, schema: public, write: $3}
batch: {rows: 200, flush_after: 100ms}
EOF
}
pipeline kmerge DEST_URL merge
pipeline klog LOG_URL append

# both FAILPOINTS [ARGS...]: both pipelines in the background (pids in $pm $pl)
both() {
  local fp=$1; shift
  FERRY_FAILPOINTS=$fp FERRY_LOG=info "$FERRY_BIN" run kmerge.yaml "$@" >> kmerge.log 2>&1 &
  pm=$!
  FERRY_FAILPOINTS=$fp FERRY_LOG=info "$FERRY_BIN" run klog.yaml "$@" >> klog.log 2>&1 &
  pl=$!
  BG+=($pm $pl)
}
kill_both() {
  kill -9 $pm $pl 2>/dev/null || true
  wait $pm 2>/dev/null || true
  wait $pl 2>/dev/null || true
}
delay() { printf '%d.%d' $(( $1 + RANDOM % ($2 - $1) )) $(( RANDOM % 10 )); } # FROM TO seconds
# both_done: waits for both background runs, which must succeed
both_done() {
  local rm_=0 rl=0
  wait $pm || rm_=$?
  wait $pl || rl=$?
  [ $rm_ = 0 ] || fail "the merge run exited $rm_: $(tail -n 20 kmerge.log)"
  [ $rl = 0 ] || fail "the change-log run exited $rl: $(tail -n 20 klog.log)"
}
# in_dest DB TABLE: whether the sink made the table (its run planned it)
in_dest() { [ -n "$(pgq -d "$1" -c "SELECT to_regclass('public.$2')")" ]; }

# ---- 1. kill -9 during the first run's copy of the 12 tables, then resumed to its end
both "before_sink_apply=sleep(300)"
for _ in $(seq 1 400); do
  [ -n "$(pgq -d dest -c "SELECT to_regclass('public.k01')")" ] && break
  sleep 0.05
done
d=$(delay 0 1)
sleep "$d"
kill_both
for p in kmerge klog; do
  [ "$(ferry runs --pipeline $p --json | jq -r '.[0].state')" != completed ] ||
    fail "$p: the first run completed before the kill ($d s after its copy began)"
done
echo "killed the first copy $d s after it began"
both "" # resumed to its end
both_done

# ---- 2. writers; tables join; 5 kills of the following processes at random delays (after
# the joiner of that round appeared in both destinations, else after the processes started)
# multi-table transactions: 3 old tables (one change each) and the joiners when they exist
# (savepoints, and psql's ON_ERROR_ROLLBACK: the transaction goes on without a joiner that
# does not exist yet, so the writers change every joiner from the moment it exists); a key
# of an old table and of k92 changes twice in a transaction: the change log orders the two
# by `_ferry_seq`, and (commit LSN, sequence) names a change of a table
touch writing
writer() {
  local k=0 a b c
  while [ -f writing ]; do
    k=$((k + 1))
    a=$(printf '%02d' $(( k % N + 1 ))); b=$(printf '%02d' $(( (k + 1) % N + 1 )))
    c=$(printf '%02d' $(( (k + 2) % N + 1 )))
    echo "BEGIN;"
    echo "INSERT INTO k$a VALUES (100000 + $k, $k, 'w$k');"
    echo "UPDATE k$b SET v = v + 1, note = 'u$k' WHERE id = $(( k % 400 + 1 ));"
    echo "UPDATE k$b SET note = 'v$k' WHERE id = $(( k % 400 + 1 ));"
    echo "DELETE FROM k$c WHERE id = $(( (k * 7) % 400 + 1 ));"
    echo "SAVEPOINT s; INSERT INTO k91 VALUES (100000 + $k, $k, 'w$k'); RELEASE SAVEPOINT s;"
    echo "SAVEPOINT s; UPDATE k92 SET v = v + 1, note = 'u$k' WHERE id = $(( (k * 13) % 9000 + 1 )); UPDATE k92 SET note = 'v$k' WHERE id = $(( (k * 13) % 9000 + 1 )); RELEASE SAVEPOINT s;"
    echo "SAVEPOINT s; DELETE FROM k91 WHERE id = $(( (k * 37) % 9000 + 1 )); RELEASE SAVEPOINT s;"
    echo "SAVEPOINT s; UPDATE k93 SET v = v - 1 WHERE id = $(( (k * 53) % 9000 + 1 )); RELEASE SAVEPOINT s;"
    echo "COMMIT;"
    echo "SELECT pg_sleep(0.01);"
  done | psql -qXAt -v ON_ERROR_STOP=0 -v ON_ERROR_ROLLBACK=on >/dev/null 2>&1
}
writer &
wl=$!
BG+=($wl)
# joiner NAME: a table created while the pipelines stream, 9000 rows (3 chunks), and a
# transaction that updates 20 of its rows (across the chunks) at once and stays open 2 s:
# across the table's joining the publication (pgoutput never publishes changes made before
# it), so its first chunk must wait for it (pg_chunk.c writers_gone)
opened=()
joiner() {
  pgq -c "CREATE TABLE $1 (id int PRIMARY KEY, v int NOT NULL, note text)" \
      -c "INSERT INTO $1 SELECT g, g, 'before' FROM generate_series(1, 9000) g" >/dev/null
  printf '%s\n' "BEGIN;" "UPDATE $1 SET v = v + 5, note = 'open' WHERE id % 450 = 7;" \
    "SELECT pg_sleep(2);" "COMMIT;" | psql -qXAt -v ON_ERROR_STOP=1 >/dev/null &
  opened+=($!)
  BG+=($!)
}
rows_of() { # TABLE: its rows in the merge destination (0 before it exists)
  if [ -n "$(pgq -d dest -c "SELECT to_regclass('public.$1')")" ]; then
    pgq -d dest -c "SELECT count(*) FROM $1"
  else
    echo 0
  fi
}
for i in 1 2 3 4 5; do
  both "cdc_chunk=sleep(150)" --follow --epoch 300ms
  j=
  case $i in 1) j=k91 ;; 2) j=k92 ;; 4) j=k93 ;; esac
  if [ -n "$j" ]; then
    sleep 0.5
    # the writers' transactions go on without the joiners that do not exist yet
    [ $j != k93 ] || [ "$(pgq -c "SELECT count(*) FROM k91 WHERE id > 100000")" -gt 0 ] ||
      fail "the writers changed nothing before k93 existed"
    joiner $j # created while the processes stream: planned by a later epoch
    for _ in $(seq 1 600); do
      in_dest dest $j && in_dest dlog $j && break
      kill -0 $pm 2>/dev/null || fail "the merge pipeline ended: $(tail -n 20 kmerge.log)"
      sleep 0.05
    done
    in_dest dest $j && in_dest dlog $j || fail "$j was not planned by the following processes"
    d=$(delay 0 2)
  else
    d=$(delay 1 4)
  fi
  sleep "$d"
  kill -0 $pm 2>/dev/null || fail "the merge pipeline ended before kill $i: $(tail -n 20 kmerge.log)"
  kill -0 $pl 2>/dev/null || fail "the change-log pipeline ended before kill $i: $(tail -n 20 klog.log)"
  kill_both
  when="after $d s"
  [ -z "$j" ] || when="$d s after $j joined"
  echo "kill $i $when: k91/k92/k93 rows in the destination $(rows_of k91)/$(rows_of k92)/$(rows_of k93)"
done
rm writing
wait $wl || true
for p in "${opened[@]}"; do wait $p || fail "a joiner's open transaction failed"; done

# ---- 3. resume to now, twice (the second reads what came after the first's end)
for _ in 1 2; do
  both ""
  both_done
done

tables="$(seq -f 'k%02g' 1 $N) k91 k92 k93"
for t in $tables; do
  src=$(pgq -c "SELECT md5(coalesce(string_agg(x::text, ',' ORDER BY x.id), '')) FROM (SELECT id, v, note FROM $t) x")
  dst=$(pgq -d dest -c "SELECT md5(coalesce(string_agg(x::text, ',' ORDER BY x.id), '')) FROM (SELECT id, v, note FROM $t) x")
  if [ "$src" != "$dst" ]; then
    diff <(pgq -c "COPY (SELECT id, v, note FROM $t ORDER BY id) TO STDOUT") \
         <(pgq -d dest -c "COPY (SELECT id, v, note FROM $t ORDER BY id) TO STDOUT") | head -10
    fail "merge: $t differs from its source (seed $SEED)"
  fi
  d=$(pgq -d dlog -c "SELECT count(*) FROM (SELECT 1 FROM $t WHERE _ferry_commit_time IS NOT NULL GROUP BY _ferry_lsn, _ferry_seq HAVING count(*) > 1) x")
  [ "$d" = 0 ] || fail "change log: $t holds $d changes twice (seed $SEED)"
  last=$(pgq -d dlog -c "SELECT md5(coalesce(string_agg(x::text, ',' ORDER BY x.id), '')) FROM (SELECT id, v, note FROM (SELECT DISTINCT ON (id) id, v, note, _ferry_op FROM $t ORDER BY id, _ferry_lsn DESC, _ferry_seq DESC) l WHERE _ferry_op <> 'delete') x")
  if [ "$last" != "$src" ]; then
    # the first differing keys with every row the change log holds for them (to diagnose)
    diff <(pgq -c "COPY (SELECT id, v, note FROM $t ORDER BY id) TO STDOUT") \
         <(pgq -d dlog -c "COPY (SELECT id, v, note FROM (SELECT DISTINCT ON (id) id, v, note, _ferry_op FROM $t ORDER BY id, _ferry_lsn DESC, _ferry_seq DESC) l WHERE _ferry_op <> 'delete' ORDER BY id) TO STDOUT") > logdiff.txt || true
    for id in $(grep '^[<>]' logdiff.txt | awk '{print $2}' | sort -un | head -5); do
      echo "key $id: source $(pgq -c "SELECT v, note FROM $t WHERE id = $id" | tr '\n' ' ')"
      pgq -d dlog -c "SELECT id, v, note, _ferry_op, _ferry_lsn, _ferry_seq, _ferry_commit_time FROM $t WHERE id = $id ORDER BY _ferry_lsn, _ferry_seq"
    done
    fail "change log: $t merged by (LSN, sequence) differs from its source (seed $SEED)"
  fi
done
for t in k91 k92 k93; do
  d=$(pgq -d dlog -c "SELECT count(*) FROM (SELECT id FROM $t WHERE _ferry_commit_time IS NULL GROUP BY 1 HAVING count(*) > 1) x")
  [ "$d" = 0 ] || fail "change log: $t has $d keys with two snapshot rows (seed $SEED)"
done
grep -q 'k9[123].*snapshot read in [0-9]* chunks' kmerge.log || fail "no joining table was read in chunks: $(grep -i chunk kmerge.log | tail -5)"
[ "$(pgq -c "SELECT count(*) FROM pg_replication_slots")" = 2 ] || fail "want one slot per pipeline"
pass "6 kill -9 at random points (seed $SEED: the first copy, then while 3 tables joined in chunks and writers ran), resumed: 15 tables equal in merge, the change log without a change twice and equal merged by (LSN, sequence)"
