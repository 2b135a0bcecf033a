#!/usr/bin/env bash
# torn_state: the state file cut or crashed while it was being written.
#   1. a crash inside the store's commit of the tracker's fold (before_store_commit) at several
#      hits: the state file passes `PRAGMA integrity_check`, and the re-run completes equal to
#      the reference with no duplicate (previous checkpoint read, never a torn one);
#   2. kill -9 at seeded random moments, then the write-ahead log cut at a random length (a
#      torn tail of what the run wrote): SQLite's frame checksums drop the torn frames, the
#      file reads as of an earlier commit, and the re-run converges with no row missing or
#      doubled (the destination's own checkpoint carries it past what the state lost);
#   3. the main state file cut to a shorter length (page-aligned and not): every command that
#      opens it fails with exit 1 and a message naming the path and saying it is truncated;
#      nothing crashes, nothing is written to the destination.
# SEED replays the kill moments and cut lengths.
. "$(dirname "$0")/../e2e/lib.sh"
SEED=${SEED:-${FERRY_SEED:-$RANDOM}}
echo "seed $SEED (SEED=$SEED replays it)"
RANDOM=$SEED
ROWS=60000
write_pipeline ref.yaml ref $ROWS ref.db append full "  shards: 3" "" "batch: {rows: 1000}"
expect_exit 0 ferry run ref.yaml

# 1. crashes inside the store commit
for hit in 3 17 41; do
  export FERRY_STATE="$T/s1-$hit.db"
  write_pipeline p.yaml "sc$hit" $ROWS "sc$hit.db" append full "  shards: 3" "" "batch: {rows: 1000}"
  FERRY_FAILPOINTS=before_store_commit=crash@$hit expect_exit 137 ferry run p.yaml
  [ "$(q "$FERRY_STATE" 'PRAGMA integrity_check')" = ok ] || fail "state file not intact after a crash in commit $hit"
  expect_exit 0 ferry run p.yaml
  same_table ref.db "sc$hit.db" orders || fail "crash in store commit $hit: destination differs"
  pass "crash in store commit $hit: state intact, re-run exact"
done

# 2. kill -9, then a torn write-ahead log
for it in 1 2 3; do
  export FERRY_STATE="$T/s2-$it.db"
  db="wal$it.db"
  write_pipeline p.yaml "wal$it" $ROWS "$db" append full "  shards: 3" "" "batch: {rows: 1000}"
  # The state file is made (with its identity) and checkpointed into the main file first, so
  # that the cut only tears what this run wrote: a torn tail never reaches commits that were
  # synced long before. (A state rewound past its identity is another state file, whose
  # re-run starts over by design: docs/guarantees.md, "Whose checkpoint is it".)
  expect_exit 0 ferry runs
  q "$FERRY_STATE" 'PRAGMA wal_checkpoint(TRUNCATE)' > /dev/null
  FERRY_FAILPOINTS="after_sink_apply=sleep(15)" "$FERRY_BIN" run p.yaml --quiet > log 2>&1 &
  pid=$!
  sleep "$(printf '0.%03d' $((100 + RANDOM % 700)))"
  kill -9 $pid 2>/dev/null || true
  wait $pid 2>/dev/null || true
  wal="$FERRY_STATE-wal"
  if [ -s "$wal" ]; then
    size=$(stat -c %s "$wal")
    cut=$(( (RANDOM * 32768 + RANDOM) % size ))
    truncate -s "$cut" "$wal"
    echo "iteration $it: WAL cut from $size to $cut bytes"
  fi
  [ "$(q "$FERRY_STATE" 'PRAGMA integrity_check')" = ok ] || fail "seed $SEED: state file corrupt after a torn WAL"
  # a run the (possibly rewound) state says completed is not run again: full mode would copy anew
  [ "$(ferry runs --pipeline "wal$it" --json | jq -r '.[0].state // "none"')" = completed ] \
    || expect_exit 0 ferry run p.yaml
  same_table ref.db "$db" orders || fail "seed $SEED iteration $it: destination differs after a torn WAL"
  pass "torn WAL $it (seed $SEED): an earlier state read, re-run exact"
done

# 3. the main file cut short
export FERRY_STATE="$T/s3.db"
write_pipeline p.yaml cut $ROWS cut.db append full "" "" "batch: {rows: 1000}"
expect_exit 0 ferry run p.yaml
q "$FERRY_STATE" 'PRAGMA wal_checkpoint(TRUNCATE)' > /dev/null
cp "$FERRY_STATE" whole.db
size=$(stat -c %s whole.db)
before=$(q cut.db 'SELECT count(*) FROM orders')
for cut in 4096 $((size / 2 / 4096 * 4096)) $((size / 2 + 123)) 100; do
  cp whole.db "$FERRY_STATE"; rm -f "$FERRY_STATE-wal" "$FERRY_STATE-shm"
  truncate -s "$cut" "$FERRY_STATE"
  for cmd in "run p.yaml" "runs" "show 1"; do
    # shellcheck disable=SC2086
    expect_exit 1 ferry $cmd
    grep -q "$FERRY_STATE" <<< "$OUT" || fail "cut at $cut, ferry $cmd: the message does not name the state file: $OUT"
    grep -qi "truncated\|corrupt\|not a SQLite" <<< "$OUT" || fail "cut at $cut, ferry $cmd: unclear message: $OUT"
  done
  [ "$(q cut.db 'SELECT count(*) FROM orders')" = "$before" ] || fail "cut at $cut: the destination changed"
  pass "state file cut to $cut of $size bytes: clear error naming it ($(printf '%s' "$OUT" | head -n 1 | cut -c1-120))"
done

# 4. the state file restored from an older copy, incremental append into SQLite: the
#    destination is ahead of the state. One run behind (the destination's last run is the one
#    the restored state creates next, same id and version): exactly-once, the run continues
#    after the destination's own checkpoint. Two runs behind (the destination's run is unknown
#    to the restored state, so its checkpoint cannot be tied to this pipeline version): ferry
#    re-reads from its own route checkpoint rather than risk skipping rows: nothing missing,
#    the re-copied rows are duplicates (docs/guarantees.md).
export FERRY_STATE="$T/s4.db"
inc() { # CLOCK
  cat > inc.yaml <<EOF2
version: 1
name: restored
source: {type: sample, rows: 20000, seed: 7, clock: $1, resources: [{table: orders, mode: incremental, cursor: [updated_at]}]}
sink: {type: sqlite, path: $T/inc.db, write: append}
EOF2
}
truth() { # CLOCK: every (id, updated_at) the source has shown up to that clock, in a fresh copy
  rm -f "$T/truth.db" "$T/truth-state.db" "$T/truth-state.db-wal" "$T/truth-state.db-shm"
  for c in $(seq 0 "$1"); do
    cat > truth.yaml <<EOF2
version: 1
name: truth
source: {type: sample, rows: 20000, seed: 7, clock: $c, resources: [{table: orders, mode: incremental, cursor: [updated_at]}]}
sink: {type: sqlite, path: $T/truth.db, write: append}
EOF2
    FERRY_STATE="$T/truth-state.db" expect_exit 0 ferry run truth.yaml
  done
}
inc 0; expect_exit 0 ferry run inc.yaml
cp "$FERRY_STATE" backup.db
inc 1; expect_exit 0 ferry run inc.yaml
cp backup.db "$FERRY_STATE"; rm -f "$FERRY_STATE-wal" "$FERRY_STATE-shm"
expect_exit 0 ferry run inc.yaml
grep -q "never recorded here" <<< "$OUT" || fail "restored state, one run behind: the destination's checkpoint was not used: $OUT"
truth 1
compare() { # -> "missing extra duplicate_rows" of inc.db against truth.db (whole rows)
  q truth.db "ATTACH '$T/inc.db' AS d; SELECT
    (SELECT count(*) FROM (SELECT * FROM main.orders EXCEPT SELECT * FROM d.orders)),
    (SELECT count(*) FROM (SELECT * FROM d.orders EXCEPT SELECT * FROM main.orders)),
    (SELECT count(*) FROM d.orders) - (SELECT count(*) FROM (SELECT DISTINCT * FROM d.orders))" | tr '|' ' '
}
[ "$(compare)" = "0 0 0" ] || fail "restored state, one run behind: missing/extra/duplicates: $(compare)"
pass "state restored one run behind: continued after the destination's own checkpoint, exactly once"
q "$FERRY_STATE" 'PRAGMA wal_checkpoint(TRUNCATE)' > /dev/null
cp "$FERRY_STATE" backup.db
inc 2; expect_exit 0 ferry run inc.yaml
inc 3; expect_exit 0 ferry run inc.yaml
cp backup.db "$FERRY_STATE"; rm -f "$FERRY_STATE-wal" "$FERRY_STATE-shm"
expect_exit 0 ferry run inc.yaml
truth 3
read -r missing extra dups < <(compare)
[ "$missing" = 0 ] && [ "$extra" = 0 ] || fail "restored state, two runs behind: $missing rows missing, $extra foreign"
pass "state restored two runs behind: nothing missing; $dups rows copied again (whole-row duplicates, as documented)"
