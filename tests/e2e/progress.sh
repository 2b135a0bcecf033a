#!/usr/bin/env bash
# What a run tells about its progress and its bottleneck:
#   1. a slow destination (before_sink_apply=sleep): the summary line says sink-bound, the
#      resource.completed event has "bound": "sink", the readers' wait at least half of the
#      resource's time, and resource.started carries the plan's rows_estimate (the sample
#      source's exact count);
#   2. a slow source (before_queue_push=sleep): source-bound, "bound": "source";
#   3. on a terminal (a pty from script(1)) the live line shows percent, ETA and the bound;
#   4. `ferry show` of a running copy shows the percent of the estimate; of a completed one
#      (case 1) the bound, and --json carries rows_estimate and bound.
# (The PostgreSQL source's rows_estimate: tests/e2e/pg_source.sh.)
. "$(dirname "$0")/lib.sh"

{
  sample_source prog 20000
  printf '%s\n' "  resources:" "    - table: orders" "sink:" "  type: sqlite" "  path: d.db" \
    "batch: {rows: 1000, queue: 2}"
} > p.yaml

# completed_payload RUN : the resource.completed payload of orders in RUN
completed_payload() { ferry events "$1" --json | jq -c 'select(.type == "resource.completed" and .resource == "orders") | .payload'; }

# ---- 1. a slow destination ---------------------------------------------------------------
expect_exit 0 env FERRY_FAILPOINTS='before_sink_apply=sleep(250)' "$FERRY_BIN" run p.yaml
grep -q '^orders: 20000 rows, .* rows/s, sink-bound)$' <<< "$OUT" || fail "summary: $OUT"
p=$(completed_payload 1)
jq -e '.rows == 20000 and .bound == "sink" and .wait_sink_ms * 2 >= .ms and .wait_sink_ms > .wait_source_ms
  and .ms >= 20 * 250' <<< "$p" >/dev/null || fail "slow destination: $p"
est=$(ferry events 1 --json | jq -c 'select(.type == "resource.started") | .payload.rows_estimate')
[ "$est" = 20000 ] || fail "rows_estimate of the sample source: $est"
[ "$(q d.db 'SELECT count(*), count(DISTINCT id) FROM orders')" = "20000|20000" ] || fail "rows"
expect_exit 0 ferry show 1 --json
jq -e '.resources[0] | .bound == "sink" and .rows_estimate == 20000' <<< "$OUT" >/dev/null \
  || fail "ferry show --json: $(jq -c '.resources[0]' <<< "$OUT")"
expect_exit 0 ferry show 1
grep -Eq '^  orders +full +append +completed +20000 rows .* diverged  sink-bound$' <<< "$OUT" || fail "ferry show: $OUT"
pass "slow destination: sink-bound in the summary and the event, readers waited >= half the time"

# ---- 2. a slow source --------------------------------------------------------------------
sed -i 's/d.db/e.db/' p.yaml
expect_exit 0 env FERRY_FAILPOINTS='before_queue_push=sleep(300)' "$FERRY_BIN" run p.yaml
grep -q '^orders: 20000 rows, .* rows/s, source-bound)$' <<< "$OUT" || fail "summary: $OUT"
p=$(completed_payload 2)
jq -e '.bound == "source" and .wait_source_ms * 2 >= .ms and .wait_source_ms > .wait_sink_ms' \
  <<< "$p" >/dev/null || fail "slow source: $p"
[ "$(q e.db 'SELECT count(*), count(DISTINCT id) FROM orders')" = "20000|20000" ] || fail "rows"
pass "slow source: source-bound in the summary and the event"

# ---- 3. the live line on a terminal --------------------------------------------------------
sed -i 's/e.db/f.db/' p.yaml
FERRY_FAILPOINTS='before_sink_apply=sleep(250)' script -qec "$FERRY_BIN run p.yaml" /dev/null \
  | tr '\r' '\n' > tty.txt || fail "run on a pty: $(tail -5 tty.txt)"
grep -Eq '^.*orders +[0-9]+ rows +[0-9]{1,2}%  ETA [0-9]+s .*queue [0-9]/2  sink-bound' tty.txt \
  || fail "no live line with percent, ETA and the bound: $(head -20 tty.txt)"
grep -q 'run 3 completed: 20000 rows' tty.txt || fail "run 3 did not complete: $(tail -5 tty.txt)"
pass "terminal: the live line shows percent, ETA and sink-bound"

# ---- 4. ferry show while the copy runs -------------------------------------------------------
sed -i 's/f.db/h.db/' p.yaml
FERRY_FAILPOINTS='before_sink_apply=sleep(250)' "$FERRY_BIN" run p.yaml --quiet > run4.log 2>&1 &
pid=$!
seen=""
for _ in $(seq 1 200); do
  seen=$("$FERRY_BIN" show 4 2>/dev/null | grep -E '^  orders +full +append +running +[0-9]+ rows .*  [0-9]{1,2}% of ~20000 rows$' || true)
  [ -n "$seen" ] && break
  kill -0 $pid 2>/dev/null || break
  sleep 0.1
done
wait $pid || fail "run 4 failed: $(cat run4.log)"
[ -n "$seen" ] || fail "ferry show never showed the running resource's percent of its estimate"
pass "ferry show of a running copy: percent of the estimate ($(sed 's/  */ /g' <<< "$seen"))"
