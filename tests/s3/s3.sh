# tests/s3/s3.sh - sourced by tests that need an S3-compatible server: starts s3rver (pinned in
# tests/tools, npm ci by scripts/install-deps.sh) on a free loopback port with a temporary
# directory and stops it when the shell exits. Needs lib.sh's $T (workdir) and $FERRY_SRC.
#   s3_start BUCKET...   sets S3_PORT, S3_ENDPOINT (http://127.0.0.1:PORT), S3_BUCKET (the first
#                        bucket's name, see below) and S3_DATA (s3rver's folder: a bucket's
#                        objects and uploads live in $S3_DATA/<bucket>)
#   s3_bucket NAME       the name the test's bucket NAME has (own server: NAME)
#   s3_flaky N           a proxy failing every Nth request with 503 (0: none, it only logs
#                        request lines to $T/flaky.count.requests): sets FLAKY_ENDPOINT
#   s3c get|list|put ... the independent signed client (aws4) against $S3_ENDPOINT
#   s3_stop              (also on exit)
#
# Shared front (CTest fixture s3_shared, tests/fixture.sh s3): when the test opted in (line 2
# `# shared: s3`, CMake exports FERRY_S3_SHARED=1) and the fixture's front is up, s3_start
# starts nothing: each bucket NAME becomes a FRESH bucket `NAME-<test>-<pid>` on the suite's one
# front (s3_bucket NAME; S3_BUCKET is the first one's), made the way s3rver's filesystem store
# makes one (a folder under its data folder, S3_DATA); s3_stop removes those folders, objects
# and all, pass or fail. S3_CONDITIONAL_BUCKETS=NAME,... works there too (a flag file the front
# checks, removed with the bucket); a test that sets S3_UPLOAD_BUCKETS (the front reads it when
# it starts) always gets its own front, as does a test run by hand.
S3_TOOLS="$FERRY_SRC/tests/s3"
# nodetool (s3c below): tests/e2e/lib.sh sources it; a script without lib.sh gets it here
declare -F nodetool > /dev/null || . "$FERRY_SRC/tests/tools/nodetool.bash"
S3_PIDS=()
S3_SHARED_BUCKETS=()
declare -gA S3_NAMES=()

# s3_shared_env : the file the fixture writes (tests/fixture.sh), under the suite's folder.
s3_shared_env() { printf '%s/s3-shared.env' "${FERRY_TEST_TMP:-${FERRY_SHARED_HOME:-/nonexistent}}"; }

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

s3_bucket() { printf '%s' "${S3_NAMES[$1]:?s3.sh: no bucket $1 (s3_start $1)}"; }

s3_start() {
  local b
  if [ "${FERRY_S3_SHARED:-}" = 1 ] && [ -z "${S3_UPLOAD_BUCKETS:-}" ] &&
     [ -f "$(s3_shared_env)" ]; then
    s3_shared_attach "$@"
    return
  fi
  for b in "$@"; do S3_NAMES[$b]=$b; done
  S3_BUCKET=${1:-}
  S3_DATA=$T/s3data
  mkdir -p "$T/s3data"
  rm -f "$T/s3.port"
  node "$S3_TOOLS/server.mjs" "$T/s3data" "$T/s3.port" "$@" > "$T/s3rver.log" 2>&1 &
  S3_PIDS+=($!)
  _s3_wait_file "$T/s3.port" $! || { cat "$T/s3rver.log" >&2; fail "s3rver did not start"; }
  S3_PORT=$(cat "$T/s3.port")
  S3_ENDPOINT="http://127.0.0.1:$S3_PORT"
}

# s3_shared_attach BUCKET... : this test's fresh buckets on the fixture's front.
s3_shared_attach() {
  local env id b name flags
  env=$(s3_shared_env)
  flags=$(sed -n 's/^flags=//p' "$env")
  S3_PORT=$(sed -n 's/^port=//p' "$env")
  S3_DATA=$(sed -n 's/^data=//p' "$env")
  [ -n "$S3_PORT" ] && [ -d "$S3_DATA" ] || fail "s3.sh: the shared S3 front of $env is not up"
  S3_ENDPOINT="http://127.0.0.1:$S3_PORT"
  id=$(basename "$0" .sh | tr 'A-Z_' 'a-z-' | tr -cd 'a-z0-9-' | cut -c1-30)-$$
  for b in "$@"; do
    name=$b-$id
    mkdir "$S3_DATA/$name" || fail "s3.sh: cannot make bucket $name on the shared front ($env)"
    S3_SHARED_BUCKETS+=("$S3_DATA/$name")
    S3_NAMES[$b]=$name
    if [[ ",${S3_CONDITIONAL_BUCKETS:-}," == *",$b,"* ]]; then
      : > "$flags/$name.conditional" || fail "s3.sh: cannot flag bucket $name conditional ($env)"
      S3_SHARED_BUCKETS+=("$flags/$name.conditional")
    fi
  done
  S3_BUCKET=${1:+${S3_NAMES[$1]}}
  echo "s3.sh: buckets ${S3_NAMES[*]} on the shared S3 front, port $S3_PORT" >&2
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

s3c() { nodetool "$S3_TOOLS/client.mjs" "$S3_ENDPOINT" "$@"; }

s3_stop() {
  local p
  for p in "${S3_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${S3_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  S3_PIDS=()
  for p in "${S3_SHARED_BUCKETS[@]}"; do rm -rf "$p"; done
  S3_SHARED_BUCKETS=()
}

# s3_shared_server start|stop : the fixture's front (tests/fixture.sh): data folder, port, pid
# and owner (the ctest run: our parent) go to $(s3_shared_env). Detached from ctest (its own
# session, output to a log) so that the fixture test ends while the front runs on.
s3_shared_server() {
  local env dir pid
  env=$(s3_shared_env)
  if [ -f "$env" ] && shared_owner_busy "$env" "s3.sh: the shared S3 front"; then # tests/shared.sh
    [ "$1" = stop ] && return 0
    exit 1
  fi
  if [ -f "$env" ]; then # ours, or a killed run's: stopped
    dir=$(sed -n 's/^dir=//p' "$env")
    pid=$(sed -n 's/^pid=//p' "$env")
    shared_stop_pid "$pid" "$dir" # tests/shared.sh
    rm -rf "$dir" "$env"
  fi
  [ "$1" = stop ] && return 0
  dir=$(mktemp -d "${FERRY_TEST_TMP:-$FERRY_SHARED_HOME}/ferry-s3.shared.XXXXXX")
  mkdir "$dir/s3data" "$dir/flags"
  S3_FLAGS_DIR=$dir/flags setsid node "$S3_TOOLS/server.mjs" "$dir/s3data" "$dir/s3.port" \
    > "$dir/s3rver.log" 2>&1 < /dev/null &
  pid=$!
  if ! _s3_wait_file "$dir/s3.port" "$pid"; then
    cat "$dir/s3rver.log" >&2
    kill -KILL "$pid" 2>/dev/null || true
    rm -rf "$dir"
    echo "s3.sh: the shared S3 front did not start" >&2
    exit 1
  fi
  S3_PORT=$(cat "$dir/s3.port")
  printf 'dir=%s\ndata=%s\nflags=%s\nport=%s\npid=%s\nowner=%s\n' "$dir" "$dir/s3data" \
    "$dir/flags" "$S3_PORT" "$pid" "$PPID" > "$env.tmp"
  mv "$env.tmp" "$env"
}

# The fixture sources this file only for s3_shared_server: no test trap there.
[ "${S3_FIXTURE:-}" = 1 ] && return 0
# Chain onto lib.sh's EXIT trap: stop the servers first, then clean up as lib.sh does.
trap 'rc=$?; s3_stop; if [ $rc -ne 0 ]; then echo "FAILED (workdir kept: $T)"; else rm -rf "$T"; fi; exit $rc' EXIT
