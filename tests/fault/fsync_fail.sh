#!/usr/bin/env bash
# fsync_fail: the state store's fsync (and write) fails, injected through the SQLite VFS shim
# (src/store/fault_vfs.c; failpoints store_fsync / store_write, "@N+" = from the Nth hit on).
#   1. a transient fsync failure mid-run (one hit): the store's commit is retried, the run
#      completes, destination exact;
#   2. fsync fails for good from the Nth sync on, mid-run: exit 1, the error names the state
#      file and says the I/O failed; the state passes integrity_check and the previous
#      checkpoint is readable (`ferry show`, `ferry checkpoints`) and never ahead of the
#      destination; the resume without the failpoint completes: set equality with an
#      uninterrupted copy, no duplicate key; the same with a crash halfway (the resume copies
#      the rest from the last checkpoint that reached the disk);
#   3. an incremental append run whose state cannot be written at all (fsync and write fail
#      from the first hit): refused before anything is copied, naming the state file; then
#      four incremental runs (updates in between), each with one failed fsync (retried, or
#      the run fails naming the state file and a plain re-run finishes it): multiset-equal to the same series run without faults (append: no row twice, none lost).
. "$(dirname "$0")/../e2e/lib.sh"
ROWS=200000
write_pipeline ref.yaml ref $ROWS ref.db append full "" "" "batch: {rows: 1000}"
expect_exit 0 ferry run ref.yaml

# ---- 1. one failed fsync: retried -------------------------------------------------------------
export FERRY_STATE="$T/state1.db"
write_pipeline p1.yaml fsync-once $ROWS "$T/dest1.db" append full "" "" "batch: {rows: 1000}"
FERRY_FAILPOINTS=store_fsync=error@25 expect_exit 0 ferry run p1.yaml
grep -q "failpoint store_fsync fired" <<< "$OUT" || fail "transient: the failpoint did not fire: $OUT"
grep -q "state $FERRY_STATE: .*disk I/O error (retrying)" <<< "$OUT" \
  || fail "transient: no retried store error naming the state file: $OUT"
[ "$(q "$FERRY_STATE" "SELECT state FROM runs")" = completed ] || fail "transient: run not completed"
same_table ref.db "$T/dest1.db" orders || fail "transient: destination differs"
pass "one failed fsync mid-run: the store commit is retried, run completed, destination exact"

# ---- 2. fsync fails for good mid-run ------------------------------------------------------------
# a) the run goes on to its end (the sqlite sink keeps its own checkpoint) but cannot record
#    it: the tracker retries folding until the runner's wait for it gives up, then exit 1
export FERRY_STATE="$T/state2.db"
write_pipeline p2.yaml fsync-broken $ROWS "$T/dest2.db" append full "" "" "batch: {rows: 1000}"
# The break comes at the 60th sync: the store's set-up and the tracker's folds take a varying
# share of the first syncs (more under load), and some checkpoints must reach the disk first.
FERRY_FAILPOINTS="store_fsync=error@60+" expect_exit 1 ferry run p2.yaml
grep -q "failpoint store_fsync fired: error (hit 60 and every later hit)" <<< "$OUT" \
  || fail "broken fsync: the failpoint did not fire: $OUT"
grep -q "^ferry: error: state $FERRY_STATE: .*disk I/O error" <<< "$OUT" \
  || fail "broken fsync: the final error does not name the state file and the I/O error: $OUT"
check_state() { # LABEL DEST: integrity, previous checkpoint readable, never ahead of DEST
  [ "$(q "$FERRY_STATE" 'PRAGMA integrity_check')" = ok ] || fail "$1: state damaged"
  expect_exit 0 ferry show 1 --json
  [ "$(jq -r .state <<< "$OUT")" != completed ] || fail "$1: the state says completed although it could not be written"
  pos=$(jq -r '.resources[] | select(.resource == "orders") | .checkpoints[0].position // empty' <<< "$OUT")
  [ -n "$pos" ] || fail "$1: no checkpoint readable through ferry show: $OUT"
  key=$(jq -r '.key[0]' <<< "$pos")
  dest_rows=$(q "$2" "SELECT count(*) FROM orders")
  [ "$key" -le "$dest_rows" ] || fail "$1: checkpoint $pos ahead of the destination ($dest_rows rows)"
  expect_exit 0 ferry checkpoints
}
check_state "broken fsync" "$T/dest2.db"
expect_exit 0 ferry run p2.yaml
grep -q "resum" <<< "$OUT" || fail "broken fsync: the re-run did not resume: $OUT"
[ "$(q "$FERRY_STATE" "SELECT state FROM runs WHERE id = 1")" = completed ] || fail "broken fsync: resumed run not completed"
same_table ref.db "$T/dest2.db" orders || fail "broken fsync: destination differs after the resume"
pass "fsync failing from the 30th sync on: exit 1 naming the state file, integrity ok, checkpoint $pos readable (destination held $dest_rows), resume exact"

# b) the same, and the process dies halfway (a crash after the 100th batch applied):
#    the resume starts from the last checkpoint that reached the disk and copies the rest
export FERRY_STATE="$T/state2b.db"
write_pipeline p2b.yaml fsync-broken-crash $ROWS "$T/dest2b.db" append full "" "" "batch: {rows: 1000}"
# (at least one sync a batch: the 60th comes well before the 100th batch)
FERRY_FAILPOINTS="store_fsync=error@60+,after_sink_apply=crash@100" expect_exit 137 ferry run p2b.yaml
grep -q "failpoint store_fsync fired: error (hit 60 and every later hit)" <<< "$OUT" \
  || fail "broken fsync + crash: the fsync failpoint did not fire before the crash: $OUT"
check_state "broken fsync + crash" "$T/dest2b.db"
[ "$dest_rows" -lt $ROWS ] || fail "broken fsync + crash: the run was not cut short"
expect_exit 0 ferry run p2b.yaml
grep -q "resum" <<< "$OUT" || fail "broken fsync + crash: the re-run did not resume: $OUT"
same_table ref.db "$T/dest2b.db" orders || fail "broken fsync + crash: destination differs after the resume"
pass "fsync failing from the 20th sync on, crash after the 100th batch: state checkpoint $pos (destination $dest_rows rows), resume copied the rest, destination exact"

# ---- 3. incremental append: refused up front, then a failed fsync in every run ---------------
# multiset of the sample columns with their multiplicity, for an EXCEPT both ways
ms() { echo "SELECT $ORDERS_COLS, count(*) FROM $1 GROUP BY $ORDERS_COLS"; }
export FERRY_STATE="$T/state3.db"
write_pipeline p3.yaml fsync-incr 30000 "$T/dest3.db" append incremental "  clock: 0" "" "batch: {rows: 500}"
expect_exit 0 ferry check p3.yaml
FERRY_FAILPOINTS="store_fsync=error@1+,store_write=enospc@1+" expect_exit 1 ferry run p3.yaml
grep -q "state $FERRY_STATE: " <<< "$OUT" || fail "refused up front: message: $OUT"
if [ -e "$T/dest3.db" ]; then
  [ -z "$(q "$T/dest3.db" "SELECT name FROM sqlite_master WHERE name = 'orders'")" ] \
    || [ "$(q "$T/dest3.db" "SELECT count(*) FROM orders")" = 0 ] || fail "refused up front: rows were copied"
fi
retried=0 failed=0
for clock in 0 1 2 3; do
  write_pipeline p3.yaml fsync-incr 30000 "$T/dest3.db" append incremental "  clock: $clock" "" "batch: {rows: 500}"
  # wherever the failed sync lands: retried (exit 0) or the run fails naming the state file,
  # and the plain re-run finishes it
  set +e
  OUT=$(FERRY_FAILPOINTS="store_fsync=error@$((7 + clock))" "$FERRY_BIN" run p3.yaml 2>&1)
  rc=$?
  set -e
  grep -q "failpoint store_fsync fired" <<< "$OUT" || fail "incremental clock $clock: no failure injected: $OUT"
  case $rc in
    0) retried=$((retried + 1)) ;;
    1) grep -q "^ferry: error: state $FERRY_STATE: .*disk I/O error" <<< "$OUT" \
         || fail "incremental clock $clock: error does not name the state file: $OUT"
       failed=$((failed + 1))
       expect_exit 0 ferry run p3.yaml ;;
    *) fail "incremental clock $clock: exit $rc: $OUT" ;;
  esac
done
# the truth: the same series, uninterrupted
export FERRY_STATE="$T/state3ref.db"
for clock in 0 1 2 3; do
  write_pipeline p3r.yaml fsync-incr-ref 30000 "$T/ref3.db" append incremental "  clock: $clock" "" "batch: {rows: 500}"
  expect_exit 0 ferry run p3r.yaml
done
missing=$(q "$T/ref3.db" "ATTACH '$T/dest3.db' AS o; SELECT count(*) FROM ($(ms main.orders) EXCEPT $(ms o.orders))")
extra=$(q "$T/ref3.db" "ATTACH '$T/dest3.db' AS o; SELECT count(*) FROM ($(ms o.orders) EXCEPT $(ms main.orders))")
n_got=$(q "$T/dest3.db" "SELECT count(*) FROM orders")
[ "$missing" = 0 ] && [ "$extra" = 0 ] || fail "incremental: $missing rows (with multiplicity) missing, $extra extra"
[ "$n_got" -gt 30000 ] || fail "incremental: only $n_got rows: the clock series did not append updates"
pass "incremental append: refused up front naming the state file; 4 runs each with a failed fsync ($retried retried, $failed failed and re-run): $n_got rows, multiset-equal to an uninterrupted series"
