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

PG_BIN=${PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)}
PG_ADMIN_PASSWORD=${PG_ADMIN_PASSWORD:-admin-pw-$RANDOM$RANDOM}
PG_READER_PASSWORD=${PG_READER_PASSWORD:-reader-pw-$RANDOM$RANDOM}

pg_as() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

pg_stop() {
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
  [ -x "$PG_BIN/initdb" ] || { echo "pg.sh: no PostgreSQL server binaries (install postgresql)" >&2; exit 1; }
  PG_DIR=$(mktemp -d "${TMPDIR:-/tmp}/ferry-pg.XXXXXX")
  chmod 755 "$PG_DIR"
  [ "$(id -u)" = 0 ] && chown postgres "$PG_DIR"
  local prev_trap
  prev_trap=$(trap -p EXIT)
  prev_trap=${prev_trap#trap -- \'}
  prev_trap=${prev_trap%\' EXIT}
  # shellcheck disable=SC2064
  # Keep the exit status for the caller's trap (lib.sh reports failures from it).
  trap "__pg_rc=\$?; pg_stop; set +e; (exit \$__pg_rc); $prev_trap" EXIT
  local template_pw=
  if [ -n "${FERRY_PG_TEMPLATE:-}" ] && [ -f "$FERRY_PG_TEMPLATE/data/PG_VERSION" ]; then
    # The suite's template cluster (pg_template below): a copy costs a fraction of an initdb.
    # Its admin password is replaced by this test's own once the server is up.
    pg_as cp -a "$FERRY_PG_TEMPLATE/data" "$PG_DIR/data" ||
      { echo "pg.sh: cannot copy the template cluster $FERRY_PG_TEMPLATE" >&2; exit 1; }
    template_pw=$(cat "$FERRY_PG_TEMPLATE/pw")
  else
    pg_initdb "$PG_DIR" "$PG_ADMIN_PASSWORD"
  fi
  local tries=0
  while :; do
    PGPORT=$((20000 + RANDOM % 20000))
    cat >>"$PG_DIR/data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $PGPORT
unix_socket_directories = '$PG_DIR'
wal_level = logical
max_wal_senders = 10
max_replication_slots = 10
fsync = off
synchronous_commit = off
full_page_writes = off
${PG_CONF_EXTRA:-}
CONF
    if pg_as "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/server.log" -w -t 60 start >/dev/null 2>&1; then
      break
    fi
    tries=$((tries + 1))
    if [ $tries -ge 5 ]; then
      cat "$PG_DIR/server.log" >&2 || true
      echo "pg.sh: PostgreSQL did not start" >&2
      exit 1
    fi
  done
  export PGHOST=127.0.0.1 PGPORT PGUSER=ferry_admin PGPASSWORD=$PG_ADMIN_PASSWORD PGDATABASE=postgres
  if [ -n "$template_pw" ]; then
    PGPASSWORD=$template_pw psql -v ON_ERROR_STOP=1 -qX \
      -c "ALTER ROLE ferry_admin PASSWORD '$PG_ADMIN_PASSWORD'" >/dev/null
  fi
  psql -v ON_ERROR_STOP=1 -qX -c "CREATE DATABASE ferry" >/dev/null
  export PGDATABASE=ferry
  psql -v ON_ERROR_STOP=1 -qX >/dev/null <<SQL
CREATE ROLE ferry_reader LOGIN PASSWORD '$PG_READER_PASSWORD';
REVOKE ALL ON DATABASE ferry FROM PUBLIC;
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
GRANT CONNECT ON DATABASE ferry TO ferry_reader;
GRANT USAGE ON SCHEMA public TO ferry_reader;
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO ferry_reader;
SQL
  export FERRY_PG_URL="postgresql://ferry_admin:$PG_ADMIN_PASSWORD@127.0.0.1:$PGPORT/ferry"
  export FERRY_PG_READER_URL="postgresql://ferry_reader:$PG_READER_PASSWORD@127.0.0.1:$PGPORT/ferry"
}

# psql as the admin, quiet, stop on error, unaligned tuples only.
pgq() { psql -v ON_ERROR_STOP=1 -qXAt "$@"; }
