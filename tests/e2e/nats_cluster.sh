#!/usr/bin/env bash
# The NATS JetStream bus on a 3-node JetStream cluster on loopback (nats-server from Debian):
# a run publishes to a stream with 3 replicas (`?replicas=3`, the URL lists all three
# servers); mid-run the node ferry is connected to is killed with SIGKILL. The client moves
# to another node, publishes that time out while the stream elects a new leader are retried
# under one message id (JetStream deduplicates them), and the run completes: destination
# exact, `ferry show` counts exact, every batch's event on the bus exactly once, one
# run.completed. A second run after the kill (two nodes left: still a quorum) completes too.
. "$(dirname "$0")/lib.sh"
NATS_BIN=${NATS_BIN:-$(command -v nats-server || true)}
[ -x "$NATS_BIN" ] || fail "nats-server is not installed (scripts/install-deps.sh)"

PIDS=()
cleanup_nats() { for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done; }
prev_trap=$(trap -p EXIT)
prev_trap=${prev_trap#trap -- \'}
prev_trap=${prev_trap%\' EXIT}
# shellcheck disable=SC2064
trap "__rc=\$?; cleanup_nats; set +e; (exit \$__rc); $prev_trap" EXIT
# Three nodes on six fixed-at-start ports (each node's route list names the others' cluster
# ports before they listen). Ports below the kernel's ephemeral range (32768..) so no
# outgoing connection holds one; a port another program took meanwhile makes a node exit:
# every node is stopped and the cluster started again on other ports (at most 5 times).
start_cluster() {
  local i
  base=$((20000 + RANDOM % 12000))
  P=($base $((base + 1)) $((base + 2)))
  C=($((base + 10)) $((base + 11)) $((base + 12)))
  ROUTES="nats://127.0.0.1:${C[0]},nats://127.0.0.1:${C[1]},nats://127.0.0.1:${C[2]}"
  PIDS=()
  for i in 0 1 2; do
    rm -rf "$T/n$i"
    "$NATS_BIN" -js -sd "$T/n$i" -n "n$i" -p "${P[$i]}" -a 127.0.0.1 --cluster_name ferry \
      --cluster "nats://127.0.0.1:${C[$i]}" --routes "$ROUTES" >"$T/n$i.log" 2>&1 &
    PIDS+=($!)
  done
  for i in 0 1 2; do
    for _ in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/${P[$i]}") 2>/dev/null && break; sleep 0.1; done
    (exec 3<>"/dev/tcp/127.0.0.1/${P[$i]}") 2>/dev/null || { BAD=$i; return 1; }
  done
  sleep 0.5 # a node that lost its cluster port exits just after opening its client port
  for i in 0 1 2; do kill -0 "${PIDS[$i]}" 2>/dev/null || { BAD=$i; return 1; }; done
}
started=0
for attempt in 1 2 3 4 5; do
  if start_cluster; then started=1; break; fi
  grep -q "address already in use" "$T/n$BAD.log" || { cat "$T/n$BAD.log" >&2; fail "node n$BAD did not start"; }
  echo "  attempt $attempt: a port of node n$BAD was taken meanwhile; starting the cluster again"
  cleanup_nats
  wait "${PIDS[@]}" 2>/dev/null || true
done
[ $started = 1 ] || { cat "$T/n$BAD.log" >&2; fail "node n$BAD did not start (5 attempts)"; }
URL="nats://127.0.0.1:${P[0]},nats://127.0.0.1:${P[1]},nats://127.0.0.1:${P[2]}?stream=CLUSTER&replicas=3"

pipeline() { # FILE NAME DB ROWS
  cat >"$1" <<YAML
version: 1
name: $2
source: {type: sample, rows: $4, seed: 5, resources: [{table: orders}]}
sink: {type: sqlite, path: $3}
batch: {rows: 400}
YAML
}
export FERRY_STATE="$T/state.db"
# The cluster elects its JetStream meta leader a few seconds after the routes connect: the
# first small run retries until the stream can be created.
pipeline warm.yaml warm warm.db 400
ok=0
for _ in $(seq 1 30); do
  if "$FERRY_BIN" run warm.yaml --bus "$URL" --quiet >warm.out 2>&1; then ok=1; break; fi
  sleep 1
done
[ $ok = 1 ] || fail "the cluster never accepted the stream: $(cat warm.out)"

pipeline big.yaml big big.db 20000
FERRY_FAILPOINTS="before_sink_apply=sleep(80)" "$FERRY_BIN" run big.yaml --bus "$URL" --json \
  >big.out 2>big.err &
fpid=$!
for _ in $(seq 1 300); do
  n=$(q big.db 'SELECT count(*) FROM orders' 2>/dev/null || echo 0)
  [ "${n:-0}" -ge 2000 ] && break
  sleep 0.1
done
[ "${n:-0}" -ge 2000 ] || fail "the run did not start writing: $(cat big.err)"
# the node this ferry process is connected to
victim=
for i in 0 1 2; do
  if ss -tnp 2>/dev/null | grep "pid=$fpid," | grep -q ":${P[$i]} "; then victim=$i; break; fi
done
[ -n "$victim" ] || victim=0
kill -9 "${PIDS[$victim]}"
echo "  killed node n$victim (port ${P[$victim]}) with $n rows written"
set +e
wait "$fpid"
rc=$?
set -e
[ $rc = 0 ] || fail "the run failed when node n$victim died: $(tail -n 3 big.err) $(tail -n 1 big.out)"
[ "$(json_field "$(tail -n 1 big.out)" .state)" = completed ] || fail "state: $(tail -n 1 big.out)"
run=$(json_field "$(tail -n 1 big.out)" .run_id)
[ "$(q big.db 'SELECT count(*), count(DISTINCT id) FROM orders')" = "20000|20000" ] || fail "destination"
expect_exit 0 ferry show "$run" --json
[ "$(json_field "$OUT" .rows)" = 20000 ] || fail "show rows: $OUT"
batches=$(json_field "$OUT" .batches)
expect_exit 0 ferry events "$run" --bus "$URL" --json
[ "$(printf '%s\n' "$OUT" | jq -r 'select(.type == "batch.written") | .type' | wc -l)" = "$batches" ] \
  || fail "show batches ($batches) vs batch.written events on the bus"
[ "$(printf '%s\n' "$OUT" | jq -r 'select(.type == "batch.written") | .payload.rows' | paste -sd+ | bc)" = 20000 ] \
  || fail "batch.written rows on the bus (each batch exactly once)"
[ "$(printf '%s\n' "$OUT" | jq -r 'select(.type == "run.completed") | .type' | wc -l)" = 1 ] || fail "run.completed once"
pass "3-node JetStream cluster, the connected node killed mid-run: the run completes, counts and events exact"

pipeline after.yaml after after.db 5000
expect_exit 0 ferry run after.yaml --bus "$URL" --json
[ "$(json_field "$OUT" .state)" = completed ] || fail "a run on the two nodes left: $OUT"
[ "$(q after.db 'SELECT count(*), count(DISTINCT id) FROM orders')" = "5000|5000" ] || fail "after: destination"
pass "with two of three nodes left the next run completes"
