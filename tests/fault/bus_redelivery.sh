#!/usr/bin/env bash
# bus_redelivery: the in-process bus in chaos mode (FERRY_CHAOS_BUS=1) delivers every event
# 1-3 times and now and then rewinds to events already delivered, and the tracker's folding
# thread restarts at random (reopens its store handle and mark). A series of incremental runs
# of two resources (three shards each, updates between runs) is done twice, once under chaos
# and once without, on separate state files and destinations. Counters (rows, batches,
# verified, per resource), run checkpoints and route checkpoints must be identical, and each
# equal to the truth: the rows counter equals the rows the destination received. FERRY_SEED
# replays the chaos.
. "$(dirname "$0")/../e2e/lib.sh"
SEED=${FERRY_SEED:-${SEED:-$RANDOM}}
echo "seed $SEED (FERRY_SEED=$SEED replays it)"
ROWS=30000

. "$FERRY_SRC/tests/fault/redelivery.bash"

for mode in plain chaos; do
  export FERRY_STATE="$T/$mode.db"
  for clock in 0 1 2 3; do
    pipeline p.yaml redeliver "$T/dest-$mode.db" $clock
    if [ $mode = chaos ]; then
      FERRY_CHAOS_BUS=1 FERRY_SEED=$((SEED + clock)) expect_exit 0 ferry run p.yaml --json
      grep -q "chaos bus" <<< "$OUT" || fail "chaos mode did not engage: $OUT"
    else
      expect_exit 0 ferry run p.yaml --json
    fi
    # the truth: rows counted for this run == rows it reported; totals of completed full runs
    got=$(printf '%s\n' "$OUT" | tail -n 1 | jq -r .rows)
    stored=$(ferry show "$(printf '%s\n' "$OUT" | tail -n 1 | jq -r .run_id)" --json | jq -r .rows)
    [ "$got" = "$stored" ] || fail "$mode clock $clock: the run wrote $got rows, the state counts $stored"
  done
  summary "$FERRY_STATE" redeliver > "summary-$mode.txt"
done
[ "$(grep -c '^run' summary-plain.txt)" = 4 ] || fail "four runs expected: $(cat summary-plain.txt)"
grep -q '^route' summary-plain.txt || fail "no route checkpoint saved"
if ! diff -u summary-plain.txt summary-chaos.txt; then
  fail "seed $SEED: counters or checkpoints differ under redelivery and tracker restarts"
fi
same_table dest-plain.db dest-chaos.db orders || fail "destinations differ"
same_table dest-plain.db dest-chaos.db users || fail "destinations differ"
total=$(q dest-chaos.db "SELECT count(*) FROM orders")
[ "$total" = $ROWS ] || fail "destination holds $total orders"
pass "seed $SEED: 4 incremental runs under chaos delivery: counters, run and route checkpoints identical to a plain delivery ($(wc -l < summary-chaos.txt) lines compared)"
