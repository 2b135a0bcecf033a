# tests/tools/nodetool.bash - sourced by tests/e2e/lib.sh (not a test).
# `nodetool SCRIPT ARGS...` runs one of the short-lived node tools the tests read results with
# (tests/s3/client.mjs, tests/tools/duckdb_exec.mjs, read_iceberg.mjs, read_parquet.mjs,
# json_rows_equal.mjs) in the test's one toolsd process (tests/tools/toolsd.mjs), started at
# the first call; any other script is run by node itself. Output, exit status, working folder
# and the environment the tools read are what a process of their own would have; the saving
# is node's start-up, 0.1-0.5 s of CPU per call on the test machines. Servers and other
# scripts keep `node` (a function in its place would change what `$!` names).
# FERRY_TOOLSD=0 runs every tool as its own process again.

nodetool() {
  case ${1:-} in
    */s3/client.mjs | */tools/duckdb_exec.mjs | */tools/read_iceberg.mjs | \
      */tools/read_parquet.mjs | */tools/json_rows_equal.mjs)
      [ "${FERRY_TOOLSD:-1}" != 0 ] && { toolsd_call "$@"; return; } ;;
  esac
  command node "$@"
}

# toolsd_port: sets TOOLSD_PORT, starting the test's toolsd when there is none yet. A call from
# a subshell may have started it: the port is then in its folder's file.
toolsd_port() {
  local d=$T/.toolsd i
  [ -n "${TOOLSD_PORT:-}" ] && return 0
  if [ ! -s "$d/port" ]; then
    [ -d "$d" ] || mkdir -p "$d"
    # one starter per test (background jobs may call at once); $$ is the test's shell. Not a
    # job of the shell (a subshell starts it): the test's `wait` must not wait for it.
    if mkdir "$d/lock" 2>/dev/null; then
      (command node --expose-gc "$FERRY_SRC/tests/tools/toolsd.mjs" "$d" $$ > "$d/log" 2>&1 < /dev/null &)
    fi
    for ((i = 0; i < 400; i++)); do
      [ -s "$d/port" ] && break
      sleep 0.025
    done
    [ -s "$d/port" ] || { echo "nodetool: toolsd did not start: $(cat "$d/log" 2>/dev/null)" >&2; return 1; }
  fi
  read -r TOOLSD_PORT < "$d/port"
}

# toolsd_call SCRIPT ARGS... : one run of SCRIPT in the test's toolsd
toolsd_call() {
  local fd rc e out err env=()
  toolsd_port || return 2
  TOOLSD_SEQ=$((${TOOLSD_SEQ:-0} + 1))
  out=$T/.toolsd/$BASHPID.$TOOLSD_SEQ.out
  err=$T/.toolsd/$BASHPID.$TOOLSD_SEQ.err
  # the environment variables the tools read: set as here, or unset
  for e in AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY S3_ENDPOINT DUCKDB_THREADS FERRY_READ_SQL; do
    if [ -n "${!e+x}" ]; then env+=("$e=${!e}"); else env+=("$e"); fi
  done
  exec {fd}<> "/dev/tcp/127.0.0.1/$TOOLSD_PORT" || { echo "nodetool: cannot reach toolsd on port $TOOLSD_PORT" >&2; return 2; }
  printf '%s\0' toolsd1 "$PWD" "$out" "$err" "${#env[@]}" "${env[@]}" "$1" "$(($# - 1))" "${@:2}" >&"$fd"
  IFS= read -r rc <&"$fd" || rc="2 toolsd: no answer (see $T/.toolsd/log)"
  exec {fd}>&-
  [ -s "$out" ] && cat "$out"
  [ -s "$err" ] && cat "$err" >&2
  case $rc in
    '' | *[!0-9]*) echo "nodetool: $1: ${rc#* }" >&2; return 2 ;;
  esac
  return "$rc"
}
