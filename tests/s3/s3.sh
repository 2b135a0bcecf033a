# tests/s3/s3.sh - sourced by tests that need an S3-compatible server: starts s3rver (pinned in
# tests/tools, npm ci by scripts/install-deps.sh) on a free loopback port with a temporary
# directory and stops it when the shell exits. Needs lib.sh's $T (workdir) and $FERRY_SRC.
#   s3_start BUCKET...   sets S3_PORT, S3_ENDPOINT (http://127.0.0.1:PORT)
#   s3_flaky N           a proxy failing every Nth request with 503 (0: none, it only logs
#                        request lines to $T/flaky.count.requests): sets FLAKY_ENDPOINT
#   s3c get|list|put ... the independent signed client (aws4) against $S3_ENDPOINT
#   s3_stop              (also on exit)
S3_TOOLS="$FERRY_SRC/tests/s3"
S3_PIDS=()

s3_have() {
  command -v node >/dev/null && [ -d "$FERRY_SRC/tests/tools/node_modules/s3rver" ] \
    && [ -d "$FERRY_SRC/tests/tools/node_modules/aws4" ]
}

_s3_wait_file() { # FILE PID
  local i
  for i in $(seq 1 100); do
    [ -s "$1" ] && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

s3_start() {
  mkdir -p "$T/s3data"
  rm -f "$T/s3.port"
  node "$S3_TOOLS/server.mjs" "$T/s3data" "$T/s3.port" "$@" > "$T/s3rver.log" 2>&1 &
  S3_PIDS+=($!)
  _s3_wait_file "$T/s3.port" $! || { cat "$T/s3rver.log" >&2; fail "s3rver did not start"; }
  S3_PORT=$(cat "$T/s3.port")
  S3_ENDPOINT="http://127.0.0.1:$S3_PORT"
}

s3_flaky() {
  rm -f "$T/flaky.port" "$T/flaky.count" "$T/flaky.count.requests"
  node "$S3_TOOLS/flaky.mjs" "$S3_PORT" "$1" "$T/flaky.port" "$T/flaky.count" > "$T/flaky.log" 2>&1 &
  FLAKY_PID=$!
  S3_PIDS+=($FLAKY_PID)
  _s3_wait_file "$T/flaky.port" $FLAKY_PID || { cat "$T/flaky.log" >&2; fail "flaky proxy did not start"; }
  FLAKY_ENDPOINT="http://127.0.0.1:$(cat "$T/flaky.port")"
}

# Stops the flaky proxy; its counts ("forwarded failed") land in $T/flaky.count.
s3_flaky_stop() {
  kill -TERM "$FLAKY_PID" 2>/dev/null || true
  wait "$FLAKY_PID" 2>/dev/null || true
}

s3c() { node "$S3_TOOLS/client.mjs" "$S3_ENDPOINT" "$@"; }

s3_stop() {
  local p
  for p in "${S3_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${S3_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  S3_PIDS=()
}

# Chain onto lib.sh's EXIT trap: stop the servers first, then clean up as lib.sh does.
trap 'rc=$?; s3_stop; if [ $rc -ne 0 ]; then echo "FAILED (workdir kept: $T)"; else rm -rf "$T"; fi; exit $rc' EXIT
