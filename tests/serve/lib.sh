# tests/serve/lib.sh - helpers for the tests that drive `ferry serve` over real HTTP
# (sourced after lib.sh; not a test itself, see tests/e2e/serve.sh).
# start_serve ARGS...: starts `ferry serve` on a free loopback port (--policy allow-all unless
# ARGS name a --policy), sets SERVE_PID, BASE.
# api METHOD PATH [curl args]: authenticated request; body to stdout, status in $CODE; every
# response body is also appended to $T/responses.log (the secrets check reads it).

TOKEN="token-$RANDOM$RANDOM$RANDOM"
export FERRY_API_TOKEN="$TOKEN"
SERVE_PID=""

stop_serve() {
  if [ -n "$SERVE_PID" ] && kill -0 "$SERVE_PID" 2>/dev/null; then
    kill -TERM "$SERVE_PID" 2>/dev/null || true
    for _ in $(seq 1 300); do kill -0 "$SERVE_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$SERVE_PID" 2>/dev/null || true
    wait "$SERVE_PID" 2>/dev/null || true
  fi
  SERVE_PID=""
}
# Chains the EXIT trap set so far (lib.sh's, and pg.sh's when PostgreSQL was started first):
# the server (and so its workers) never outlives the test, and neither does anything else.
EXTRA_PIDS=""
__serve_prev_trap=$(trap -p EXIT)
__serve_prev_trap=${__serve_prev_trap#trap -- \'}
__serve_prev_trap=${__serve_prev_trap%\' EXIT}
# shellcheck disable=SC2064 # the previous trap is expanded now, on purpose
trap "rc=\$?; stop_serve; for p in \$EXTRA_PIDS; do kill -TERM \"\$p\" 2>/dev/null || true; done; if [ \$rc -ne 0 ]; then tail -n 30 \"\$T\"/serve.err 2>/dev/null || true; fi; (exit \$rc); $__serve_prev_trap" EXIT

# sample_yaml NAME SINKPATH [LINE...]: on stdout, a pipeline copying $ROWS sample orders
# (seed 7) in full, appended to the SQLite file SINKPATH in batches of 5000; each LINE goes in
# before the batch line.
sample_yaml() {
  local name=$1 path=$2 line
  shift 2
  cat <<EOF
version: 1
name: $name
source:
  type: sample
  rows: $ROWS
  seed: 7
  resources:
    - table: orders
      mode: full
sink:
  type: sqlite
  path: $path
  write: append
EOF
  for line in "$@"; do printf '%s\n' "$line"; done
  echo "batch: {rows: 5000}"
}

# start_serve ARGS... : ferry serve on a free port with the state file SERVE_STATE (default
# $T/state.db); waits up to 30 s (a loaded machine) for its address, failing with its output.
start_serve() {
  rm -f "$T/serve.out" # a second start must not read the previous server's address
  # Most tests register pipelines on this host's files and loopback servers: a single-user
  # host's --policy allow-all unless the test names its own policy (docs/security.md).
  local policy=(--policy allow-all) a
  for a in "$@"; do [ "$a" = --policy ] && policy=(); done
  "$FERRY_BIN" serve --listen 127.0.0.1:0 --state "${SERVE_STATE:-$T/state.db}" "${policy[@]}" "$@" > "$T/serve.out" 2> "$T/serve.err" &
  SERVE_PID=$!
  for _ in $(seq 1 600); do
    grep -q 'listening on' "$T/serve.out" 2>/dev/null && break
    kill -0 "$SERVE_PID" 2>/dev/null || fail "ferry serve exited: $(cat "$T/serve.err")"
    sleep 0.05
  done
  PORT=$(grep -o 'http://127.0.0.1:[0-9]*' "$T/serve.out" | sed 's/.*://')
  [ -n "$PORT" ] || fail "ferry serve printed no address: $(cat "$T/serve.out" "$T/serve.err")"
  BASE="http://127.0.0.1:$PORT"
}

api() {
  local method=$1 path=$2; shift 2
  local out
  out=$(curl -sS -X "$method" -H "Authorization: Bearer $TOKEN" -w '\n%{http_code}' "$@" "$BASE$path")
  CODE=${out##*$'\n'}
  BODY=${out%$'\n'*}
  printf '%s\n' "$BODY" >> "$T/responses.log"
  printf '%s' "$BODY"
}

# run_state ID: the run's state through the API.
run_state() { api GET "/v1/runs/$1" | jq -r .state; }

# wait_state ID STATE [TRIES]: polls until the run reaches STATE.
wait_state() {
  local id=$1 want=$2 tries=${3:-600} s=""
  for _ in $(seq 1 "$tries"); do
    s=$(run_state "$id")
    [ "$s" = "$want" ] && return 0
    sleep 0.1
  done
  fail "run $id: expected state $want, still $s after waiting: $(api GET "/v1/runs/$id")"
}

# wait_rows ID: until the run has written some rows.
wait_rows() {
  for _ in $(seq 1 600); do
    r=$(api GET "/v1/runs/$1" | jq -r '.rows')
    [ "${r:-0}" -gt 0 ] && return 0
    sleep 0.05
  done
  fail "run $1 never wrote a row: $(api GET "/v1/runs/$1")"
}

# no_sanitizer_reports: the server's and the workers' output hold no ASan/UBSan/LSan report
# (the tests run under the sanitizer build too).
no_sanitizer_reports() {
  if grep -lE 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:' "$T/serve.err" "$T"/logs/*.log 2>/dev/null; then
    grep -hE -A12 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:' "$T/serve.err" "$T"/logs/*.log | head -60 >&2
    fail "sanitizer report (files above)"
  fi
}

# worker_exited ID: the run's last worker process has exited (a run is `completed` as soon
# as its final event is folded; the worker then still closes its connections).
worker_exited() {
  local pid
  pid=$(api GET "/v1/runs/$1" | jq -r .pid)
  [ "${pid:-0}" -gt 0 ] || return 0
  for _ in $(seq 1 600); do
    [ -e "/proc/$pid" ] || return 0
    grep -q '^State:.*Z' "/proc/$pid/status" 2>/dev/null && return 0
    sleep 0.05
  done
  fail "worker $pid of run $1 did not exit"
}

# wait_done ID STATE: the run reached STATE and its worker exited.
wait_done() { wait_state "$1" "$2" "${3:-600}"; worker_exited "$1"; }

# wait_worker_exit ID CODE: the dispatcher recorded the run's last worker exit as CODE
# (exit status, or minus the signal).
wait_worker_exit() {
  local got=""
  for _ in $(seq 1 200); do
    got=$(api GET "/v1/runs/$1" | jq -r .worker_exit)
    [ "$got" = "$2" ] && return 0
    sleep 0.05
  done
  fail "run $1: worker_exit $got, expected $2"
}
