#!/usr/bin/env bash
# SIGKILL, SIGTERM (graceful pause) and SIGSTOP/SIGCONT at seeded random moments of a parallel
# full copy into SQLite (append, per_apply and at_commit), through tests/fault/harness.bash:
# each attempt is hit by a random signal, the next one resumes, until the run completes; the
# destination must then equal an uninterrupted copy with no missing row and no duplicate (the
# sqlite sink commits ferry's checkpoint with the data). FERRY_SEED (or SEED) replays the
# schedule; ITER sets the iterations (tests/fault/soak runs hundreds).
. "$(dirname "$0")/../e2e/lib.sh"
. "$FERRY_SRC/tests/fault/harness.bash"
SEED=${FERRY_SEED:-${SEED:-$RANDOM}}
ITER=${ITER:-2}
ROWS=${ROWS:-300000}
echo "seed $SEED (FERRY_SEED=$SEED replays it), $ITER iterations, $ROWS rows"
RANDOM=$SEED
export FH_FAILPOINTS="after_sink_apply=sleep(8)" # 100 batches: each attempt lasts over 0.8 s

write_pipeline ref.yaml ref "$ROWS" ref.db append full "  shards: 3" "" "batch: {rows: 3000}"
expect_exit 0 ferry run ref.yaml
for it in $(seq 1 "$ITER"); do
  for durability in per_apply at_commit; do
    db="t$it-$durability.db"
    write_pipeline p.yaml "ks$it-$durability" "$ROWS" "$db" append full "  shards: 3
  parallelism: 2" "  durability: $durability" "batch: {rows: 3000}"
    fault_until_done p.yaml "ks$it-$durability" 6
    same_table ref.db "$db" orders || fail "seed $SEED iteration $it ($durability): destination differs"
    pass "iteration $it ($durability): equal to the reference, no duplicates"
  done
done
echo "seed $SEED: attempts $FH_ATTEMPTS, SIGKILL $FH_KILLS, SIGTERM $FH_TERMS, SIGSTOP $FH_STOPS, rows checked $((ITER * 2 * ROWS)), missing 0, duplicates 0"
