#!/usr/bin/env bash
# tests/fixture.sh pg|mysql|s3 start|stop - the suite's shared servers, as CTest fixtures.
#
# CMake registers fixture/pg_shared_start and fixture/pg_shared_stop (FIXTURES_SETUP and
# FIXTURES_CLEANUP of pg_shared; likewise mysql) and makes every test whose line 2 says
# `# shared: pg mysql s3` require them, so ctest starts the server once before the first such
# test it runs (also under -R and -L) and stops it after the last, even when tests failed.
# The server's folder, port and admin password go to $FERRY_TEST_TMP/pg-shared.env (or
# my-shared.env; $FERRY_SHARED_HOME, in the build folder, when FERRY_TEST_TMP is unset);
# tests/pg/pg.sh and tests/mysql/mysql.sh read it and give each test a fresh database;
# the S3 front (s3-shared.env) gives each test fresh buckets (tests/s3/s3.sh).
# `start` first stops a server a killed earlier run left behind; a server whose run (the ctest
# that started it, the fixture's parent) is still going is left alone, and `start` fails.
set -euo pipefail
kind=$1 action=$2
FERRY_SRC=${FERRY_SRC:-$(cd "$(dirname "$0")/.." && pwd)}
home=${FERRY_TEST_TMP:-${FERRY_SHARED_HOME:?FERRY_SHARED_HOME or FERRY_TEST_TMP}}
mkdir -p "$home"
case "$action" in start|stop) ;; *) echo "usage: tests/fixture.sh pg|mysql|s3 start|stop" >&2; exit 2 ;; esac
# shellcheck source=shared.sh
. "$FERRY_SRC/tests/shared.sh" # shared_owner_busy, shared_stop_pid
case "$kind" in
  pg)
    # shellcheck source=pg/pg.sh
    . "$FERRY_SRC/tests/pg/pg.sh"
    pg_shared_server "$action"
    [ "$action" = start ] && echo "shared PostgreSQL on port $PGPORT ($(pg_shared_env))"
    ;;
  mysql)
    # shellcheck source=mysql/mysql.sh
    . "$FERRY_SRC/tests/mysql/mysql.sh"
    my_shared_server "$action"
    [ "$action" = start ] && echo "shared MariaDB on port $MY_PORT ($(my_shared_env))"
    ;;
  s3)
    # shellcheck source=s3/s3.sh
    S3_FIXTURE=1 . "$FERRY_SRC/tests/s3/s3.sh"
    s3_shared_server "$action"
    [ "$action" = start ] && echo "shared S3 front on port $S3_PORT ($(s3_shared_env))"
    ;;
  *) echo "usage: tests/fixture.sh pg|mysql|s3 start|stop" >&2; exit 2 ;;
esac
exit 0
