#!/usr/bin/env bash
# The reaper under real signals to real worker processes of `ferry serve`:
#  - SIGKILL: the run fails (worker.lost -> run.failed) within lease + one sweep; with a
#    retry policy it is dispatched again and completes, destination equal to the source;
#  - SIGSTOP past the lease, then SIGCONT: reaped by the lease, then the zombie is fenced:
#    it exits, the run's checkpoints do not move, its events are ignored; the run resumes;
#  - SIGSTOP for half the lease: not reaped, completes in its first attempt;
#  - SIGSTOP for good: the server kills its silent child (SIGKILL) after three leases, even
#    when it was stopped holding the state file's write lock; the run resumes;
#  - two trackers (the server's and each worker's) fold the same log and the server is
#    restarted: counts stay exact (equal to the current attempt's batch.written events).
. "$(dirname "$0")/../e2e/lib.sh"
. "$FERRY_SRC/tests/serve/lib.sh"

LEASE_S=6
export FERRY_FAILPOINTS="after_sink_apply=sleep(25)" # slow enough to signal mid-run
ROWS=300000

pipeline_yaml() { # NAME SINKPATH
  cat <<EOF
version: 1
name: $1
source: {type: sample, rows: $ROWS, seed: 11, resources: [{table: orders, mode: full}]}
sink: {type: sqlite, path: $2, write: upsert}
batch: {rows: 2000}
EOF
}
pipeline_yaml ref "$T/ref.db" > ref.yaml
FERRY_FAILPOINTS= "$FERRY_BIN" run ref.yaml --state "$T/ref-state.db" --quiet > /dev/null
start_serve --lease ${LEASE_S}s --sweep 500ms --workers 4

register() { # NAME RETRIES
  pipeline_yaml "$1" "$T/$1.db" > "$1.yaml"
  api POST "/v1/pipelines?retries=$2" --data-binary @"$1.yaml" > /dev/null
  [ "$CODE" = 201 ] || fail "register $1: $CODE $BODY"
}
start_run() { api POST "/v1/pipelines/$1/runs" | jq -r .id; }
worker_pid() { api GET "/v1/runs/$1" | jq -r .pid; }
events_of() { "$FERRY_BIN" events "$1" --state "$T/state.db" --json; }
# until_gone PID: the process is gone (reaped by the server's dispatcher).
until_gone() {
  for _ in $(seq 1 600); do
    [ -e "/proc/$1" ] || return 0
    grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null && { sleep 0.1; continue; }
    sleep 0.1
  done
  fail "process $1 did not exit"
}
# holds_state_lock PID [BYTE]: PID holds an exclusive lock on the state's WAL index, on BYTE
# when given. SQLite takes byte 120 of state.db-shm to write, 121 to checkpoint and 123-127
# briefly to move a read mark (https://sqlite.org/walformat.html). A worker stopped holding
# byte 120 would stop every writer until the server kills it (tested below, on its own); one
# stopped holding another byte (a checkpoint) stops no writer, so the reaper fences it.
holds_state_lock() {
  local ino
  ino=$(stat -c %i "$T/state.db-shm") || return 1
  grep -v -- '->' /proc/locks | awk -v p="$1" -v i=":$ino" -v b="${2:-}" '$4 == "WRITE" && $5 == p && substr($6, length($6) - length(i) + 1) == i && (b == "" || $7 == b)' | grep -q .
}
# stop_now PID: SIGSTOP, then wait until every thread of PID has stopped (the signal is
# delivered asynchronously: a thread still running right after kill(1) may take or release a
# lock before it stops, so the locks are only read once it has)
stop_now() {
  local _ t all
  kill -STOP "$1"
  for _ in $(seq 1 400); do
    all=yes
    for t in /proc/"$1"/task/*/status; do
      grep -q '^State:[[:space:]]*[Tt]' "$t" 2>/dev/null || { [ -e "$t" ] && all=no; }
    done
    [ $all = yes ] && return 0
    sleep 0.005
  done
  fail "process $1 did not stop after SIGSTOP"
}
# stop_outside_lock PID: SIGSTOP at a moment PID holds no state lock.
stop_outside_lock() {
  for _ in $(seq 1 200); do
    stop_now "$1"
    holds_state_lock "$1" || return 0
    kill -CONT "$1"
    sleep 0.05
  done
  fail "worker $1 held the state lock at every one of 200 stops"
}
# The run's checkpoints and attempt as the state store has them.
checkpoints() { q "$T/state.db" "SELECT resource, shard, attempt, position, updated_us FROM run_checkpoints WHERE run_id = $1 ORDER BY 1, 2"; }

# ---- SIGKILL, no retry: failed within lease + sweep ----
register killed 0
run=$(start_run killed)
wait_rows "$run"
pid=$(worker_pid "$run")
[ "$pid" -gt 0 ] || fail "no worker pid"
t0=$(date +%s%N)
kill -KILL "$pid"
deadline=$(( (LEASE_S + 1 + 10) * 10 )) # lease + one sweep, and room for a slow machine
wait_state "$run" failed "$deadline"
t1=$(date +%s%N)
api GET "/v1/runs/$run" > r.json
jq -e '.error | startswith("worker lost")' r.json > /dev/null || fail "error message: $(cat r.json)"
events_of "$run" | jq -r .type > types
grep -qx worker.lost types || fail "no worker.lost event"
wait_worker_exit "$run" -9
events_of "$run" | jq -e 'select(.type == "run.failed") | .payload.code == "worker_lost"' > /dev/null || fail "run.failed code"
pass "SIGKILL: run $run failed after $(( (t1 - t0) / 1000000 )) ms (lease ${LEASE_S}s), worker.lost + run.failed"

# ---- SIGKILL with retries: 1 -> dispatched again, completes, destination exact ----
register retried 1
run=$(start_run retried)
wait_rows "$run"
kill -KILL "$(worker_pid "$run")"
wait_done "$run" completed 1200
api GET "/v1/runs/$run" > r.json
[ "$(jq -r .retries r.json)" = 1 ] || fail "retries: $(cat r.json)"
[ "$(jq -r .attempt r.json)" -ge 3 ] || fail "attempts: a killed one, the fencing one, the retry: $(cat r.json)"
same_table ref.db retried.db orders || fail "retried run's destination differs"
pass "SIGKILL with retries: 1: re-dispatched, completed, destination exact"

# ---- SIGSTOP past the lease, then SIGCONT: fenced ----
register stopped 0
run=$(start_run stopped)
wait_rows "$run"
pid=$(worker_pid "$run")
attempt=$(api GET "/v1/runs/$run" | jq -r .attempt)
stop_outside_lock "$pid"
wait_state "$run" failed $(( (LEASE_S + 1 + 10) * 10 ))
api GET "/v1/runs/$run" | jq -e '.error | contains("no heartbeat")' > /dev/null || fail "reaped by the lease: $BODY"
sleep 0.5 # let the reaper's events be folded
before=$(checkpoints "$run")
[ -n "$before" ] || fail "no checkpoint before the stop"
kill -CONT "$pid"
until_gone "$pid"
after=$(checkpoints "$run")
[ "$before" = "$after" ] || fail "the fenced worker moved checkpoints: before [$before] after [$after]"
[ "$(run_state "$run")" = failed ] || fail "the fenced worker changed the run's state"
[ "$(api GET "/v1/runs/$run" | jq -r .attempt)" = $((attempt + 1)) ] || fail "attempt should be the fencing one"
grep -qi "fenced" "$T/logs/run-$run.log" || fail "the worker did not report being fenced: $(tail -5 "$T/logs/run-$run.log")"
pass "SIGSTOP past the lease + SIGCONT: reaped, the worker is fenced and exits, checkpoints unchanged"
api POST "/v1/runs/$run/resume" > /dev/null
[ "$CODE" = 202 ] || fail "resume the reaped run: $CODE $BODY"
wait_done "$run" completed 1200
same_table ref.db stopped.db orders || fail "resumed after fencing: destination differs"
pass "the reaped run resumes from its checkpoints; destination exact"

# ---- SIGSTOP for half the lease: not reaped ----
register paused 0
run=$(start_run paused)
wait_rows "$run"
pid=$(worker_pid "$run")
stop_outside_lock "$pid"
sleep $((LEASE_S / 2))
kill -CONT "$pid"
wait_done "$run" completed 1200
api GET "/v1/runs/$run" > r.json
[ "$(jq -r .attempt r.json)" = 1 ] || fail "a briefly stopped worker was replaced: $(cat r.json)"
events_of "$run" | jq -r .type | grep -qx worker.lost && fail "false reap of a briefly stopped worker"
same_table ref.db paused.db orders || fail "destination after a brief stop"
pass "SIGSTOP for half the lease: not reaped, completed in attempt 1"
one_attempt_run=$run

# ---- SIGSTOP for good: killed by the server after three leases ----
# Stopped whenever, possibly holding the state's write lock: then the reaper cannot fence it
# and the server kills it at once; otherwise the lease fences it and three leases kill it.
register frozen 0
run=$(start_run frozen)
wait_rows "$run"
pid=$(worker_pid "$run")
locked=no
for _ in $(seq 1 100); do # prefer the harder case: stopped inside a state write
  stop_now "$pid"
  holds_state_lock "$pid" 120 && { locked=yes; break; }
  kill -CONT "$pid"
  sleep 0.01
done
[ "$locked" = yes ] || kill -STOP "$pid"
until_gone "$pid"
wait_state "$run" failed 300
grep -q "worker pid $pid silent for .* killed" "$T/serve.err" || fail "no kill logged for pid $pid: $(tail -5 "$T/serve.err")"
[ "$locked" = no ] || grep -q "worker pid $pid silent .*state file stays locked; killed" "$T/serve.err" || fail "stopped holding the lock: not killed for it"
api POST "/v1/runs/$run/resume" > /dev/null
[ "$CODE" = 202 ] || fail "resume the killed run: $CODE $BODY"
wait_done "$run" completed 1200
same_table ref.db frozen.db orders || fail "resumed after the kill: destination differs"
pass "SIGSTOP for good (holding the state lock: $locked): killed by the server, resumed, destination exact"

# ---- counts exact with two trackers folding, and after a server restart ----
check_counts() {
  for id in $(api GET '/v1/runs?state=completed' | jq -r '.runs[].id'); do
    att=$(api GET "/v1/runs/$id" | jq -r .attempt)
    want=$(events_of "$id" | jq -s --argjson a "$att" '[.[] | select(.type == "batch.written" and .attempt == $a) | .payload.rows] | add // 0')
    wantb=$(events_of "$id" | jq -s --argjson a "$att" '[.[] | select(.type == "batch.written" and .attempt == $a)] | length')
    got=$(api GET "/v1/runs/$id" | jq -r '.rows')
    gotb=$(api GET "/v1/runs/$id" | jq -r '.batches')
    # A resumed run's counters keep earlier attempts' rows: compare within the last attempt
    # only when the run had one attempt.
    if [ "$att" = 1 ]; then
      [ "$got" = "$want" ] && [ "$gotb" = "$wantb" ] || fail "run $id: rows $got batches $gotb, events say $want / $wantb"
    fi
  done
}
check_counts
stop_serve
start_serve --lease ${LEASE_S}s --sweep 500ms
sleep 1
check_counts
[ "$(api GET /v1/runs/"$one_attempt_run" | jq -r .rows)" = $ROWS ] || fail "after a restart: $BODY"
pass "counts exact with two trackers folding the same log, and after a server restart"
stop_serve
no_sanitizer_reports
pass "no sanitizer report from the servers or their workers"
