# tests/nats/nats.sh - a throw-away nats-server with JetStream for one test (sourced after
# lib.sh; not a test itself). nats_start [PORT]: starts it on 127.0.0.1 with its store in
# $T/nats (a free port unless given), sets NATS_PORT, NATS_PID, NATS_URL; nats_stop kills it.
# The server is stopped when the test exits (chained onto the EXIT trap). A server that
# cannot start FAILS the test, it never skips.
NATS_BIN=${NATS_BIN:-$(command -v nats-server || true)}
[ -x "$NATS_BIN" ] || fail "nats-server is not installed (scripts/install-deps.sh)"
NATS_PID=
nats_stop() {
  if [ -n "$NATS_PID" ]; then kill -9 "$NATS_PID" 2>/dev/null || true; wait "$NATS_PID" 2>/dev/null || true; fi
  NATS_PID=
}
__nats_prev_trap=$(trap -p EXIT)
__nats_prev_trap=${__nats_prev_trap#trap -- \'}
__nats_prev_trap=${__nats_prev_trap%\' EXIT}
# shellcheck disable=SC2064
trap "__rc=\$?; nats_stop; set +e; (exit \$__rc); $__nats_prev_trap" EXIT

nats_start() {
  local want=${1:-} tries=0
  while :; do
    NATS_PORT=${want:-$((20000 + RANDOM % 20000))}
    "$NATS_BIN" -js -sd "$T/nats" -p "$NATS_PORT" -a 127.0.0.1 >>"$T/nats.log" 2>&1 &
    NATS_PID=$!
    for _ in $(seq 1 100); do
      if (exec 3<>"/dev/tcp/127.0.0.1/$NATS_PORT") 2>/dev/null; then
        NATS_URL="nats://127.0.0.1:$NATS_PORT"
        return 0
      fi
      kill -0 "$NATS_PID" 2>/dev/null || break
      sleep 0.1
    done
    nats_stop
    tries=$((tries + 1))
    if [ -n "$want" ] || [ $tries -ge 5 ]; then
      cat "$T/nats.log" >&2
      fail "nats-server did not start on port $NATS_PORT"
    fi
  done
}
