# tests/pg/pg.sh - a throw-away PostgreSQL 15 for one test (sourced, not run).
#
#   . "$FERRY_SRC/tests/pg/pg.sh"; pg_start
#
# pg_start runs initdb (as the `postgres` user when we are root: PostgreSQL refuses to run
# as root) in a fresh folder, starts the server on 127.0.0.1 with a free port of its own,
# unix sockets inside the folder, wal_level=logical and fsync off, creates the superuser
# `ferry_admin`, a least-privilege role `ferry_reader` (CONNECT, USAGE on public, SELECT on
# its tables) and the database `ferry`, and exports PGHOST PGPORT PGUSER PGPASSWORD
# PGDATABASE FERRY_PG_URL (admin) and FERRY_PG_READER_URL. An EXIT trap stops the server
# and removes the folder; an earlier EXIT trap of the caller still runs afterwards.
# PG_CONF_EXTRA (optional): more postgresql.conf lines, e.g. `PG_CONF_EXTRA="max_connections = 48" pg_start`.
# If the server cannot start, pg_start prints its log and exits non-zero: never a skip.
#
# Shared server (CTest fixture pg_shared, tests/fixture.sh): when the test opted in (line 2
# `# shared: pg`, CMake exports FERRY_PG_SHARED=1) and the fixture's server is up, pg_start
# starts no server: it makes a FRESH database `ferry_<test>_<pid>` and reader role
# `ferry_reader_<test>_<pid>` on the suite's one server and exports the same variables
# (PGDATABASE and the URLs name that database; PG_READER names the reader role, PG_DIR is
# empty); pg_stop drops both (and any replication slot of that database), pass or fail.
# A test that sets PG_CONF_EXTRA always gets its own server. Run by hand (no fixture), every
# test gets its own server as before.

PG_BIN=${PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)}
PG_ADMIN_PASSWORD=${PG_ADMIN_PASSWORD:-admin-pw-$RANDOM$RANDOM}
PG_READER_PASSWORD=${PG_READER_PASSWORD:-reader-pw-$RANDOM$RANDOM}

pg_as() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

# pg_shared_env : the file the fixture writes (tests/fixture.sh), under the suite's folder.
pg_shared_env() { printf '%s/pg-shared.env' "${FERRY_TEST_TMP:-${FERRY_SHARED_HOME:-/nonexistent}}"; }

# pg_shared_drop : drops this test's databases (and their replication slots) and reader role
# on the shared server (pg_stop).
pg_shared_drop() {
  local db=$PG_SHARED_DB role=$PG_READER d dbs err=${TMPDIR:-/tmp}/pg-drop.err
  PG_SHARED_DB=
  local -x PGDATABASE=postgres PGPASSWORD=$PG_ADMIN_PASSWORD PGUSER=ferry_admin PGHOST=127.0.0.1
  local -x PGPORT=$PG_SHARED_PORT
  for _ in $(seq 1 50); do
    if dbs=$(psql -qXAt -v ON_ERROR_STOP=1 2>"$err" <<SQL
SELECT pg_terminate_backend(pid) FROM pg_stat_activity
 WHERE (datname = '$db' OR starts_with(datname, '${db}_')) AND pid <> pg_backend_pid();
SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots
 WHERE (database = '$db' OR starts_with(database, '${db}_')) AND NOT active;
SELECT datname FROM pg_database WHERE datname = '$db' OR starts_with(datname, '${db}_');
SQL
    ); then
      for d in $(printf '%s\n' "$dbs" | grep "^$db"); do
        psql -qX -v ON_ERROR_STOP=1 -c "DROP DATABASE IF EXISTS \"$d\" WITH (FORCE)" >/dev/null 2>"$err" ||
          continue 2
      done
      psql -qX -v ON_ERROR_STOP=1 -c "DROP ROLE IF EXISTS \"$role\"" >/dev/null 2>"$err" && return 0
    fi
    sleep 0.2 # a walsender still holding a slot ends a moment after its termination
  done
  echo "pg.sh: could not drop database $db on the shared server: $(cat "$err")" >&2
}

# pg_db NAME : one more database for the test; prints its name: NAME on a server of the
# test's own, <the test's database>_NAME on the shared server (pg_stop drops it there).
pg_db() {
  local db=$1
  [ -n "${PG_SHARED_DB:-}" ] && db=${PG_SHARED_DB}_$1
  PGDATABASE=postgres psql -v ON_ERROR_STOP=1 -qX -c "CREATE DATABASE \"$db\"" >/dev/null || return 1
  printf '%s' "$db"
}

pg_stop() {
  [ -n "${PG_SHARED_DB:-}" ] && pg_shared_drop
  if [ -n "${PG_DIR:-}" ] && [ -f "$PG_DIR/data/postmaster.pid" ]; then
    pg_as "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -m immediate -w stop >/dev/null 2>&1 || true
  fi
  [ -n "${PG_DIR:-}" ] && rm -rf "$PG_DIR"
  PG_DIR=
}

# pg_initdb DIR PASSWORD : a new cluster in DIR/data, superuser ferry_admin with PASSWORD.
pg_initdb() {
  printf '%s\n' "$2" > "$1/pw"
  [ "$(id -u)" = 0 ] && chown postgres "$1/pw"
  pg_as "$PG_BIN/initdb" -N -D "$1/data" -U ferry_admin --pwfile="$1/pw" -A scram-sha-256 \
    -E UTF8 --locale=C.UTF-8 >"$1/initdb.log" 2>&1 ||
    pg_as "$PG_BIN/initdb" -N -D "$1/data" -U ferry_admin --pwfile="$1/pw" -A scram-sha-256 \
      -E UTF8 --locale=C >"$1/initdb.log" 2>&1 ||
    { cat "$1/initdb.log" >&2; echo "pg.sh: initdb failed" >&2; exit 1; }
  rm -f "$1/pw"
}

# pg_template DIR : the suite's template cluster in DIR (run once by scripts/test.sh, which
# exports FERRY_PG_TEMPLATE=DIR): DIR/data and DIR/pw, the template's admin password.
pg_template() {
  mkdir -p "$1"
  chmod 755 "$1"
  [ "$(id -u)" = 0 ] && chown postgres "$1"
  local pw="template-pw-$RANDOM$RANDOM"
  pg_initdb "$1" "$pw"
  printf '%s' "$pw" > "$1/pw"
}

pg_start() {
  local prev_trap
  prev_trap=$(trap -p EXIT)
  prev_trap=${prev_trap#trap -- \'}
  prev_trap=${prev_trap%\' EXIT}
  if [ "${FERRY_PG_SHARED:-}" = 1 ] && [ -z "${PG_CONF_EXTRA:-}" ] && [ -f "$(pg_shared_env)" ]; then
    # shellcheck disable=SC2064
    trap "__pg_rc=\$?; pg_stop; set +e; (exit \$__pg_rc); $prev_trap" EXIT
    pg_shared_attach
    return
  fi
  [ -x "$PG_BIN/initdb" ] || { echo "pg.sh: no PostgreSQL server binaries (install postgresql)" >&2; exit 1; }
  PG_DIR=$(mktemp -d "${TMPDIR:-/tmp}/ferry-pg.XXXXXX")
  # shellcheck disable=SC2064
  # Keep the exit status for the caller's trap (lib.sh reports failures from it).
  trap "__pg_rc=\$?; pg_stop; set +e; (exit \$__pg_rc); $prev_trap" EXIT
  pg_server_start "$PG_DIR"
  psql -v ON_ERROR_STOP=1 -qX -c "CREATE DATABASE ferry" >/dev/null
  export PGDATABASE=ferry PG_READER=ferry_reader
  pg_test_db ferry ferry_reader
}

# pg_server_start DIR : a server in DIR/data (a copy of the suite's template, or an initdb),
# its sockets in DIR, on a free port, as ferry_admin with $PG_ADMIN_PASSWORD; exports PGHOST
# PGPORT PGUSER PGPASSWORD and PGDATABASE=postgres.
pg_server_start() {
  local dir=$1
  chmod 755 "$dir"
  [ "$(id -u)" = 0 ] && chown postgres "$dir"
  local template_pw=
  if [ -n "${FERRY_PG_TEMPLATE:-}" ] && [ -f "$FERRY_PG_TEMPLATE/data/PG_VERSION" ]; then
    # The suite's template cluster (pg_template below): a copy costs a fraction of an initdb.
    # Its admin password is replaced by this test's own once the server is up.
    pg_as cp -a "$FERRY_PG_TEMPLATE/data" "$dir/data" ||
      { echo "pg.sh: cannot copy the template cluster $FERRY_PG_TEMPLATE" >&2; exit 1; }
    template_pw=$(cat "$FERRY_PG_TEMPLATE/pw")
  else
    pg_initdb "$dir" "$PG_ADMIN_PASSWORD"
  fi
  local tries=0
  while :; do
    PGPORT=$((20000 + RANDOM % 20000))
    cat >>"$dir/data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $PGPORT
unix_socket_directories = '$dir'
wal_level = logical
max_wal_senders = 10
max_replication_slots = 10
fsync = off
synchronous_commit = off
full_page_writes = off
${PG_CONF_EXTRA:-}
CONF
    if pg_as "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start >/dev/null 2>&1; then
      break
    fi
    tries=$((tries + 1))
    if [ $tries -ge 5 ]; then
      cat "$dir/server.log" >&2 || true
      echo "pg.sh: PostgreSQL did not start" >&2
      exit 1
    fi
  done
  export PGHOST=127.0.0.1 PGPORT PGUSER=ferry_admin PGPASSWORD=$PG_ADMIN_PASSWORD PGDATABASE=postgres
  if [ -n "$template_pw" ]; then
    PGPASSWORD=$template_pw psql -v ON_ERROR_STOP=1 -qX \
      -c "ALTER ROLE ferry_admin PASSWORD '$PG_ADMIN_PASSWORD'" >/dev/null
  fi
}

# pg_test_db DB READER : in the (new, connected: $PGDATABASE) database DB, the reader role
# READER (CONNECT, USAGE on public, SELECT on its tables by default privileges) and the URLs.
pg_test_db() {
  local db=$1 reader=$2
  psql -v ON_ERROR_STOP=1 -qX >/dev/null <<SQL
CREATE ROLE "$reader" LOGIN PASSWORD '$PG_READER_PASSWORD';
REVOKE ALL ON DATABASE "$db" FROM PUBLIC;
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
GRANT CONNECT ON DATABASE "$db" TO "$reader";
GRANT USAGE ON SCHEMA public TO "$reader";
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO "$reader";
SQL
  export FERRY_PG_URL="postgresql://ferry_admin:$PG_ADMIN_PASSWORD@127.0.0.1:$PGPORT/$db"
  export FERRY_PG_READER_URL="postgresql://$reader:$PG_READER_PASSWORD@127.0.0.1:$PGPORT/$db"
}

# pg_shared_attach : this test's fresh database and reader role on the fixture's server.
pg_shared_attach() {
  local env id
  env=$(pg_shared_env)
  PG_SHARED_PORT=$(sed -n 's/^port=//p' "$env")
  PG_ADMIN_PASSWORD=$(sed -n 's/^password=//p' "$env")
  id=$(basename "$0" .sh | tr -c 'a-z0-9_\n' _ | cut -c1-30)_$$
  PG_DIR=
  export PGHOST=127.0.0.1 PGPORT=$PG_SHARED_PORT PGUSER=ferry_admin PGPASSWORD=$PG_ADMIN_PASSWORD
  export PGDATABASE=postgres
  psql -v ON_ERROR_STOP=1 -qX -c "CREATE DATABASE \"ferry_$id\"" >/dev/null ||
    { echo "pg.sh: cannot make a database on the shared server (port $PG_SHARED_PORT, $env)" >&2; exit 1; }
  PG_SHARED_DB=ferry_$id
  export PGDATABASE=ferry_$id PG_READER=ferry_reader_$id
  pg_test_db "ferry_$id" "ferry_reader_$id"
}

# pg_shared_server start|stop : the fixture's server (tests/fixture.sh), settings for -j3 of
# the shared tests; its port, admin password and owner (the ctest run: our parent) go to
# $(pg_shared_env).
pg_shared_server() {
  local env dir
  env=$(pg_shared_env)
  if [ -f "$env" ] && shared_owner_busy "$env" "pg.sh: the shared server"; then
    [ "$1" = stop ] && return 0
    exit 1
  fi
  if [ -f "$env" ]; then # ours, or a killed run's: stopped
    dir=$(sed -n 's/^dir=//p' "$env")
    local pid=""
    [ -f "$dir/data/postmaster.pid" ] && pid=$(head -n 1 "$dir/data/postmaster.pid")
    shared_stop_pid "$pid" "$dir" pg_as "$PG_BIN/pg_ctl" -D "$dir/data" -m immediate -w stop # tests/shared.sh
    rm -rf "$dir" "$env"
  fi
  [ "$1" = stop ] && return 0
  dir=$(mktemp -d "${FERRY_TEST_TMP:-$FERRY_SHARED_HOME}/ferry-pg.shared.XXXXXX")
  PG_CONF_EXTRA="max_connections = 400
max_wal_senders = 60
max_replication_slots = 60" pg_server_start "$dir"
  printf 'dir=%s\nport=%s\npassword=%s\nowner=%s\n' "$dir" "$PGPORT" "$PG_ADMIN_PASSWORD" "$PPID" \
    > "$env.tmp"
  mv "$env.tmp" "$env"
}

# psql as the admin, quiet, stop on error, unaligned tuples only.
pgq() { psql -v ON_ERROR_STOP=1 -qXAt "$@"; }
