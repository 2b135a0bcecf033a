#!/usr/bin/env bash
# bus_redelivery_ext: bus_redelivery.sh's chaos on the external buses. The PostgreSQL bus
# (tests/pg/pg.sh) and NATS JetStream (tests/nats/nats.sh),
# each wrapped in chaos delivery (FERRY_CHAOS_BUS=1, src/bus/chaos.c: every fetched event
# delivered 1-3 times, one fetch in four rewound up to 8 events; the tracker's folding
# thread restarts at random). For each bus, a series of 4 incremental runs of two resources
# (three shards each, updates between runs) is done twice, plain and under chaos, on
# separate state files, destinations and bus streams/schemas: counters (rows, batches,
# verified, per resource), run checkpoints and route checkpoints identical, rows counted ==
# rows reported, destinations equal and complete. A server that cannot start FAILS the test.
. "$(dirname "$0")/../e2e/lib.sh"
. "${FERRY_PG_SH:-$FERRY_SRC/tests/pg/pg.sh}"
pg_start
[ -n "${FERRY_PG_URL:-}" ] || fail "pg_start exported no FERRY_PG_URL"
SEED=${FERRY_SEED:-${SEED:-$RANDOM}}
echo "seed $SEED (FERRY_SEED=$SEED replays it)"
ROWS=20000

. "$FERRY_SRC/tests/nats/nats.sh"
nats_start
. "$FERRY_SRC/tests/fault/redelivery.bash"

for bus in postgres nats; do
  for mode in plain chaos; do
    export FERRY_STATE="$T/$bus-$mode.db"
    if [ $bus = postgres ]; then
      export BUS_URL="$FERRY_PG_URL?bus_schema=ferry_bus_$mode"
    else
      export BUS_URL="nats://127.0.0.1:$NATS_PORT?stream=REDELIVER_${mode^^}"
    fi
    for clock in 0 1 2 3; do
      pipeline p.yaml redeliver "$T/dest-$bus-$mode.db" $clock
      if [ $mode = chaos ]; then
        FERRY_CHAOS_BUS=1 FERRY_SEED=$((SEED + clock)) expect_exit 0 ferry run p.yaml --bus env:BUS_URL --json
        grep -q "chaos bus: $bus events delivered" <<< "$OUT" || fail "$bus: chaos mode did not engage: $OUT"
      else
        expect_exit 0 ferry run p.yaml --bus env:BUS_URL --json
      fi
      got=$(printf '%s\n' "$OUT" | tail -n 1 | jq -r .rows)
      stored=$(ferry show "$(printf '%s\n' "$OUT" | tail -n 1 | jq -r .run_id)" --json | jq -r .rows)
      [ "$got" = "$stored" ] || fail "$bus $mode clock $clock: the run wrote $got rows, the state counts $stored"
    done
    summary "$FERRY_STATE" redeliver > "summary-$bus-$mode.txt"
  done
  [ "$(grep -c '^run' "summary-$bus-plain.txt")" = 4 ] || fail "$bus: four runs expected: $(cat "summary-$bus-plain.txt")"
  grep -q '^route' "summary-$bus-plain.txt" || fail "$bus: no route checkpoint saved"
  if ! diff -u "summary-$bus-plain.txt" "summary-$bus-chaos.txt"; then
    fail "$bus, seed $SEED: counters or checkpoints differ under redelivery and tracker restarts"
  fi
  for t in orders users; do
    same_table "dest-$bus-plain.db" "dest-$bus-chaos.db" $t || fail "$bus: destinations differ ($t)"
  done
  total=$(q "dest-$bus-chaos.db" "SELECT count(*) FROM orders")
  [ "$total" = $ROWS ] || fail "$bus: destination holds $total orders"
  pass "$bus bus, seed $SEED: 4 incremental runs under chaos delivery: counters, run and route checkpoints identical to a plain delivery ($(wc -l < "summary-$bus-chaos.txt") lines compared)"
done
