# tests/shared.sh - what the suite's shared servers (tests/fixture.sh: PostgreSQL, MariaDB, the
# S3 front) have in common (sourced by tests/fixture.sh, not run): whose a server is, and how a
# stale one is stopped. Each kind's start and stop is its own file's *_shared_server.

# shared_owner_busy ENV WHAT : the server of ENV belongs to another ctest run that is still
# going (its owner, the ctest that started it, is alive and not ours): it is left alone, and
# WHAT is named in the message that says so.
shared_owner_busy() {
  local owner
  owner=$(sed -n 's/^owner=//p' "$1")
  [ -n "$owner" ] && [ "$owner" != "$PPID" ] && kill -0 "$owner" 2>/dev/null || return 1
  echo "$2 of $1 belongs to another test run (pid $owner) still going: give each run its" \
    "own FERRY_TEST_TMP" >&2
}

# shared_pid_in PID DIR : the process PID runs in DIR (its command line names DIR/).
shared_pid_in() { tr '\0' ' ' < "/proc/$1/cmdline" 2>/dev/null | grep -qF "$2/"; }

# shared_stop_pid PID DIR [COMMAND...] : stops the server process PID of the folder DIR (ours,
# or one a killed run left). A pid file outlives its process and its number may be another
# process's by now, so a signal goes to PID only while its command line names DIR: SIGTERM
# first, unless COMMAND (the server's own stop, which checks the process itself: pg_ctl -D)
# is given, then it runs instead (output dropped). Then PID gets 10 s to be gone (a server
# removes its pid file before it exits: the process itself is waited for), then SIGKILL.
shared_stop_pid() {
  local pid=$1 dir=$2
  shift 2
  [ -n "$pid" ] || return 0
  if [ $# -gt 0 ]; then
    "$@" >/dev/null 2>&1 || true
  elif shared_pid_in "$pid" "$dir"; then
    kill -TERM "$pid" 2>/dev/null || true
  else
    return 0
  fi
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  shared_pid_in "$pid" "$dir" && { kill -KILL "$pid" 2>/dev/null || true; }
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
}
