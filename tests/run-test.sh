#!/usr/bin/env bash
# tests/run-test.sh SCRIPT - how CTest runs one end-to-end or fault test.
#
# The test runs with a private temporary folder as TMPDIR, so everything it starts there
# (PostgreSQL, MariaDB, NATS and S3 servers, ferry processes, tmpfs mounts: the helpers all
# make their folders with mktemp under $TMPDIR) can be found once it ends. A test must stop
# what it started, pass or fail: anything still running or mounted under its folder a few
# seconds after it ended is listed, stopped, and fails the test. The folder is removed when
# the test passed and kept (for its logs) when it failed.
#
# Servers are started from templates when the suite made them (scripts/test.sh exports
# FERRY_PG_TEMPLATE: one initdb for the whole suite, copied per test; see tests/pg/pg.sh).
set -u
script=$1
base=${FERRY_TEST_TMP:-${TMPDIR:-/tmp}}
root=$(mktemp -d "$base/ferry-t.XXXXXX") || { echo "run-test: cannot make a folder in $base" >&2; exit 1; }
chmod 1777 "$root" # like /tmp: servers running as other users (postgres, mysql) work in it
export TMPDIR=$root
# Debian's python3 (scripts/install-deps.sh) before a version manager's shim that PATH may
# name first: a pyenv shim costs half a second per call, and the tests call python3 often.
if [ -x /usr/bin/python3 ] && [ "$(command -v python3)" != /usr/bin/python3 ]; then
  mkdir "$root/.bin" && ln -s /usr/bin/python3 "$root/.bin/python3" && export PATH="$root/.bin:$PATH"
fi
# PostgreSQL's programs themselves, not Debian's /usr/bin/psql (a Perl wrapper that picks a
# version, then execs them: two thirds of each of the thousands of psql calls' CPU). The
# newest installed, as tests/pg/pg.sh's PG_BIN.
pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
[ -n "$pgbin" ] && export PATH="$pgbin:$PATH"

bash "$script"
rc=$?

# Processes of this test: a command line naming the folder, or a working directory inside it
# (PostgreSQL's children rename themselves but keep the data folder as their cwd). Found by one
# find and one pgrep, not a readlink and a tr per process: every process this VM starts costs
# tens of milliseconds, and this runs after each test (and again while anything winds down).
root_glob=$(printf '%s' "$root" | sed 's/[][*?\\]/\\&/g')
root_re=$(printf '%s' "$root" | sed 's/[][\\.*^$+?(){}|]/\\&/g')
ours() {
  local pid cmd
  for pid in $({ find /proc/[0-9]*/cwd -maxdepth 0 -lname "$root_glob*" -printf '%h\n' 2>/dev/null
                 pgrep -f -- "$root_re"; } | sed 's#^/proc/##' | sort -un); do
    [ "$pid" = $$ ] && continue
    cmd=$({ tr '\0' ' ' < "/proc/$pid/cmdline"; } 2>/dev/null) || continue
    [ -n "$cmd" ] || continue # gone, or a zombie
    printf '%s %s\n' "$pid" "$cmd"
  done
}
mounts() { awk -v r="$root" 'index($2, r) == 1 {print $2}' /proc/mounts; }

# A process on its way out (a SIGTERMed worker draining) gets a few seconds.
left=
for _ in $(seq 1 50); do
  left=$(ours)
  [ -z "$left" ] && break
  sleep 0.1
done
leftover=0
if [ -n "$left" ]; then
  leftover=1
  echo "run-test: $script left processes running:" >&2
  printf '  %s\n' "$left" | cut -c1-300 >&2
  # PostgreSQL servers: an immediate stop through their data folders, then anything else.
  while IFS= read -r pidfile; do
    data=$(dirname "$pidfile")
    if [ "$(id -u)" = 0 ]; then
      runuser -u postgres -- "$pgbin/pg_ctl" -D "$data" -m immediate -w stop >/dev/null 2>&1
    else
      "$pgbin/pg_ctl" -D "$data" -m immediate -w stop >/dev/null 2>&1
    fi
  done < <(find "$root" -name postmaster.pid 2>/dev/null)
  ours | awk '{print $1}' | xargs -r kill -9 2>/dev/null
  sleep 0.2
fi
m=$(mounts)
if [ -n "$m" ]; then
  leftover=1
  echo "run-test: $script left mounts: $m" >&2
  printf '%s\n' "$m" | sort -r | xargs -r -n1 umount -l 2>/dev/null
fi
if [ $leftover = 1 ] && [ $rc = 0 ]; then
  echo "FAIL: the test passed but left servers, processes or mounts behind (listed above)" >&2
  rc=1
fi
if [ $rc = 0 ]; then rm -rf "$root"; else echo "run-test: folder kept: $root" >&2; fi
exit $rc
