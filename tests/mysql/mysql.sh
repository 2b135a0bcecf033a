# tests/mysql/mysql.sh - a throw-away MariaDB 10.11 for one test (sourced, not run).
#
#   . "$FERRY_SRC/tests/mysql/mysql.sh"; my_start
#
# my_start runs mariadb-install-db in a fresh folder owned by `mysql` (when we are root),
# starts mariadbd as that user on 127.0.0.1 with a free port of its own, its socket inside
# the folder, the binary log on (ROW format, FULL row image, server-id 1), creates the
# database `ferry`, an admin user `ferry_admin` (all privileges, password) and a
# least-privilege reader `ferry_reader` (SELECT on ferry.*, REPLICATION SLAVE, REPLICATION
# CLIENT) and writer `ferry_writer` (SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, ALTER on
# ferry.*), and exports MY_SOCK MY_PORT FERRY_MY_URL (admin), FERRY_MY_READER_URL and
# FERRY_MY_WRITER_URL (mysql://user:pass@127.0.0.1:port/ferry). myq runs SQL as root through the socket in
# database ferry. An EXIT trap stops the server and removes the folder; an earlier EXIT trap
# of the caller still runs afterwards. If the server cannot start, my_start prints its log
# and exits non-zero: never a skip.
# With MY_TLS=1 the server also speaks TLS with a certificate for 127.0.0.1 signed by a CA
# made here (openssl): MY_TLS_CA is that CA's file, MY_TLS_OTHER_CA an unrelated CA's, and the
# user `ferry_tls` (REQUIRE SSL) has the reader's grants: FERRY_MY_TLS_URL.
# MY_DB, MY_READER and MY_WRITER name the test's database and users (ferry, ferry_reader,
# ferry_writer on a server of the test's own).
#
# Shared server (CTest fixture my_shared, tests/fixture.sh): when the test opted in (line 2
# `# shared: mysql`, CMake exports FERRY_MY_SHARED=1) and the fixture's server is up, my_start
# starts no server: it makes a FRESH database `ferry_<test>_<pid>` and users
# `ferry_reader_<test>_<pid>`, `ferry_writer_<test>_<pid>` (the grants above, on that database)
# on the suite's one server, exports the same variables (MY_DIR is empty) and my_stop drops
# them, pass or fail. MY_TLS=1 always gets a server of its own.

MY_ADMIN_PASSWORD=${MY_ADMIN_PASSWORD:-admin-pw-$RANDOM$RANDOM}
MY_READER_PASSWORD=${MY_READER_PASSWORD:-reader-pw-$RANDOM$RANDOM}
MY_WRITER_PASSWORD=${MY_WRITER_PASSWORD:-writer-pw-$RANDOM$RANDOM}

my_as() {
  if [ "$(id -u)" = 0 ]; then runuser -u mysql -- "$@"; else "$@"; fi
}

myq() { mariadb --no-defaults --default-character-set=utf8mb4 -S "$MY_SOCK" -uroot -N -B "${MY_DB:-ferry}" "$@"; }

# my_dumps : the COM_BINLOG_DUMP commands in the server's general log (the test turned it on:
# SET GLOBAL log_output = 'TABLE'; SET GLOBAL general_log = 1).
my_dumps() { myq -e "SELECT COUNT(*) FROM mysql.general_log WHERE command_type = 'Binlog Dump'"; }

# my_runs_during PID FILE NAME : (after tests/e2e/lib.sh) runs the pipeline FILE, named NAME,
# again and again while the process PID (a writer) lives, then once more for the rest, each
# run exiting 0; MY_RUNS is their number. Then the binlog dumps they made (my_dumps): a run
# that streamed changes made exactly one, a run with nothing to read none (the writer may
# finish before a run plans: the next run then has nothing), and at least one run streamed.
my_runs_during() {
  local wpid=$1 file=$2 name=$3 d0 busy made
  d0=$(my_dumps)
  MY_RUNS=0
  while kill -0 "$wpid" 2>/dev/null; do
    expect_exit 0 ferry run "$file"
    MY_RUNS=$((MY_RUNS + 1))
  done
  wait "$wpid"
  expect_exit 0 ferry run "$file" # the rest
  MY_RUNS=$((MY_RUNS + 1))
  busy=$(ferry runs --pipeline "$name" --json | jq --argjson n "$MY_RUNS" '[.[:$n][] | select(.rows > 0)] | length')
  [ "$busy" -ge 1 ] || fail "no run streamed the writer's changes"
  made=$(( $(my_dumps) - d0 ))
  [ "$made" -ge "$busy" ] && [ "$made" -le "$MY_RUNS" ] ||
    fail "$MY_RUNS runs ($busy with changes) made $made binlog dumps, want one per run with changes, at most one per run"
}

# my_pg_start : the preamble of the MariaDB -> PostgreSQL tests: MariaDB (my_start) and
# PostgreSQL (tests/pg/pg.sh's pg_start, which also defines pgq), both stopped on exit.
my_pg_start() {
  # shellcheck source=../pg/pg.sh
  . "$FERRY_SRC/tests/pg/pg.sh"
  my_start
  pg_start
}

# my_db NAME : one more database for the test; prints its name: NAME on a server of the
# test's own, <the test's database>_NAME on the shared server (my_stop drops it there).
my_db() {
  local db=$1
  [ -n "${MY_SHARED_DB:-}" ] && db=${MY_SHARED_DB}_$1
  mariadb --no-defaults -S "$MY_SOCK" -uroot -e "CREATE DATABASE \`$db\`" >/dev/null || return 1
  printf '%s' "$db"
}

# my_shared_env : the file the fixture writes (tests/fixture.sh), under the suite's folder.
my_shared_env() { printf '%s/my-shared.env' "${FERRY_TEST_TMP:-${FERRY_SHARED_HOME:-/nonexistent}}"; }

my_stop() {
  if [ -n "${MY_SHARED_DB:-}" ]; then
    local d
    for d in $(mariadb --no-defaults -S "$MY_SOCK" -uroot -N -B \
      -e "SHOW DATABASES LIKE '${MY_SHARED_DB//_/\\_}\\_%'" 2>/dev/null) "$MY_SHARED_DB"; do
      mariadb --no-defaults -S "$MY_SOCK" -uroot -e "DROP DATABASE IF EXISTS \`$d\`" >/dev/null ||
        echo "mysql.sh: could not drop database $d on the shared server" >&2
    done
    mariadb --no-defaults -S "$MY_SOCK" -uroot \
      -e "DROP USER IF EXISTS '$MY_READER'@'127.0.0.1', '$MY_WRITER'@'127.0.0.1'" >/dev/null ||
      echo "mysql.sh: could not drop the users of $MY_SHARED_DB on the shared server" >&2
    MY_SHARED_DB=
  fi
  if [ -n "${MY_DIR:-}" ]; then
    local f pid
    # the server, and a replica a test started in $MY_DIR/replica (e2e/mysql_cdc)
    for f in "$MY_DIR/replica/pid" "$MY_DIR/pid"; do
      [ -f "$f" ] || continue
      pid=$(cat "$f" 2>/dev/null || true)
      if [ -n "$pid" ]; then
        kill -9 "$pid" 2>/dev/null || true
        for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      fi
    done
    rm -rf "$MY_DIR"
  fi
  MY_DIR=
}

# my_install DIR : a fresh data folder in DIR/data (mariadb-install-db), root without a password
# through the socket.
my_install() {
  my_as mariadb-install-db --no-defaults --user=mysql --datadir="$1/data" \
    --auth-root-authentication-method=normal --skip-test-db >"$1/install.log" 2>&1 ||
    { cat "$1/install.log" >&2; echo "mysql.sh: mariadb-install-db failed" >&2; exit 1; }
}

# my_template DIR : the suite's template data folder in DIR (run once by scripts/test.sh, which
# exports FERRY_MY_TEMPLATE=DIR); my_start copies it.
my_template() {
  mkdir -p "$1"
  chmod 755 "$1"
  [ "$(id -u)" = 0 ] && chown mysql "$1"
  my_install "$1"
}

my_start() {
  command -v mariadbd >/dev/null || [ -x /usr/sbin/mariadbd ] ||
    { echo "mysql.sh: no MariaDB server (install mariadb-server)" >&2; exit 1; }
  local prev_trap
  prev_trap=$(trap -p EXIT)
  prev_trap=${prev_trap#trap -- \'}
  prev_trap=${prev_trap%\' EXIT}
  # shellcheck disable=SC2064
  trap "__my_rc=\$?; my_stop; set +e; (exit \$__my_rc); $prev_trap" EXIT
  if [ "${FERRY_MY_SHARED:-}" = 1 ] && [ "${MY_TLS:-0}" != 1 ] && [ -f "$(my_shared_env)" ]; then
    my_shared_attach
    return
  fi
  MY_DIR=$(mktemp -d "${TMPDIR:-/tmp}/ferry-my.XXXXXX")
  chmod 755 "$MY_DIR"
  [ "$(id -u)" = 0 ] && chown mysql "$MY_DIR"
  if [ -n "${FERRY_MY_TEMPLATE:-}" ] && [ -d "$FERRY_MY_TEMPLATE/data/mysql" ]; then
    # the suite's template (my_template below): a copy instead of an install per test
    my_as cp -a "$FERRY_MY_TEMPLATE/data" "$MY_DIR/data" ||
      { echo "mysql.sh: cannot copy the template $FERRY_MY_TEMPLATE" >&2; exit 1; }
  else
    my_install "$MY_DIR"
  fi
  MY_SOCK=$MY_DIR/sock
  local tls_args=()
  if [ "${MY_TLS:-0}" = 1 ]; then
    local d=$MY_DIR/tls
    mkdir -p "$d"
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=ferry test CA" \
      -keyout "$d/ca.key" -out "$d/ca.pem" >/dev/null 2>&1
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=other CA" \
      -keyout "$d/other.key" -out "$d/other.pem" >/dev/null 2>&1
    openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" -keyout "$d/server.key" \
      -out "$d/server.csr" >/dev/null 2>&1
    printf 'subjectAltName=IP:127.0.0.1\n' > "$d/ext.cnf"
    openssl x509 -req -in "$d/server.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" -CAcreateserial \
      -days 2 -extfile "$d/ext.cnf" -out "$d/server.pem" >/dev/null 2>&1
    [ "$(id -u)" = 0 ] && chown -R mysql "$d"
    chmod 755 "$d"; chmod 644 "$d"/*.pem
    tls_args=(--ssl-ca="$d/ca.pem" --ssl-cert="$d/server.pem" --ssl-key="$d/server.key")
    export MY_TLS_CA=$d/ca.pem MY_TLS_OTHER_CA=$d/other.pem
  fi
  my_server_start "$MY_DIR" "${tls_args[@]}"
  MY_DB=ferry MY_READER=ferry_reader MY_WRITER=ferry_writer
  mariadb --no-defaults -S "$MY_SOCK" -uroot >/dev/null <<SQL
CREATE USER 'ferry_admin'@'127.0.0.1' IDENTIFIED BY '$MY_ADMIN_PASSWORD';
GRANT ALL PRIVILEGES ON *.* TO 'ferry_admin'@'127.0.0.1';
SQL
  my_test_db
  if [ "${MY_TLS:-0}" = 1 ]; then
    mariadb --no-defaults -S "$MY_SOCK" -uroot >/dev/null <<SQL
CREATE USER 'ferry_tls'@'127.0.0.1' IDENTIFIED BY '$MY_READER_PASSWORD' REQUIRE SSL;
GRANT SELECT ON ferry.* TO 'ferry_tls'@'127.0.0.1';
SQL
    export FERRY_MY_TLS_URL="mysql://ferry_tls:$MY_READER_PASSWORD@127.0.0.1:$MY_PORT/ferry"
  fi
}

# my_server_start DIR [MARIADBD ARGS...] : mariadbd on DIR/data (already there), its socket
# DIR/sock, on a free port; sets MY_SOCK and MY_PORT.
my_server_start() {
  local dir=$1
  shift
  MY_SOCK=$dir/sock
  local tries=0 up from
  while :; do
    MY_PORT=$((20000 + RANDOM % 20000))
    # this attempt's lines only: an earlier attempt's "another server running" would end
    # every later wait at once (and kill the server it was waiting for)
    from=$(($(stat -c %s "$dir/server.log" 2>/dev/null || echo 0) + 1))
    my_as /usr/sbin/mariadbd --no-defaults --user=mysql --datadir="$dir/data" --socket="$MY_SOCK" \
      --port="$MY_PORT" --bind-address=127.0.0.1 --pid-file="$dir/pid" --tmpdir="$dir" \
      --log-bin="$dir/data/binlog" --binlog-format=ROW --binlog-row-image=FULL --server-id=1 \
      --innodb-buffer-pool-size=64M --innodb-log-file-size=16M --innodb-flush-log-at-trx-commit=2 \
      --sync-binlog=0 --character-set-server=utf8mb4 --collation-server=utf8mb4_bin \
      --skip-name-resolve --log-error="$dir/server.log" "$@" >/dev/null 2>&1 &
    up=0
    for _ in $(seq 1 300); do
      # ready on the socket and on TCP (the connectors under test come by TCP; `ping` answers
      # alive even when the TCP user is refused)
      if mariadb-admin --no-defaults -S "$MY_SOCK" -uroot ping >/dev/null 2>&1 &&
        mariadb-admin --no-defaults --protocol=tcp -h 127.0.0.1 -P "$MY_PORT" -unobody \
          --connect-timeout=5 ping >/dev/null 2>&1; then up=1; break; fi
      tail -c +"$from" "$dir/server.log" 2>/dev/null | grep -q "Do you already have another server running" && break
      sleep 0.1
    done
    [ $up = 1 ] && break
    [ -f "$dir/pid" ] && kill -9 "$(cat "$dir/pid")" 2>/dev/null || true
    wait $! 2>/dev/null || true # the failed server gone (and its lock on the datadir) before the next try
    tries=$((tries + 1))
    if [ $tries -ge 5 ]; then
      cat "$dir/server.log" >&2 || true
      echo "mysql.sh: MariaDB did not start" >&2
      exit 1
    fi
    sleep 0.5
  done
  export MY_SOCK MY_PORT
}

# my_test_db : the database $MY_DB, its reader $MY_READER and writer $MY_WRITER (grants in
# the header) and the URLs; ferry_admin already exists.
my_test_db() {
  mariadb --no-defaults -S "$MY_SOCK" -uroot >/dev/null <<SQL
CREATE DATABASE \`$MY_DB\` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
CREATE USER '$MY_READER'@'127.0.0.1' IDENTIFIED BY '$MY_READER_PASSWORD';
GRANT SELECT ON \`$MY_DB\`.* TO '$MY_READER'@'127.0.0.1';
GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO '$MY_READER'@'127.0.0.1';
CREATE USER '$MY_WRITER'@'127.0.0.1' IDENTIFIED BY '$MY_WRITER_PASSWORD';
GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, ALTER ON \`$MY_DB\`.* TO '$MY_WRITER'@'127.0.0.1';
SQL
  export MY_SOCK MY_PORT MY_DB MY_READER MY_WRITER
  export FERRY_MY_URL="mysql://ferry_admin:$MY_ADMIN_PASSWORD@127.0.0.1:$MY_PORT/$MY_DB"
  export FERRY_MY_READER_URL="mysql://$MY_READER:$MY_READER_PASSWORD@127.0.0.1:$MY_PORT/$MY_DB"
  export FERRY_MY_WRITER_URL="mysql://$MY_WRITER:$MY_WRITER_PASSWORD@127.0.0.1:$MY_PORT/$MY_DB"
}

# my_shared_attach : this test's fresh database and users on the fixture's server.
my_shared_attach() {
  local env id
  env=$(my_shared_env)
  MY_SOCK=$(sed -n 's/^sock=//p' "$env")
  MY_PORT=$(sed -n 's/^port=//p' "$env")
  MY_ADMIN_PASSWORD=$(sed -n 's/^password=//p' "$env")
  id=$(basename "$0" .sh | tr -c 'a-z0-9_\n' _ | cut -c1-30)_$$
  MY_DB=ferry_$id MY_READER=ferry_reader_$id MY_WRITER=ferry_writer_$id
  MY_SHARED_DB=$MY_DB MY_DIR=
  my_test_db
}

# my_shared_server start|stop : the fixture's server (tests/fixture.sh); its socket, port and
# admin password go to $(my_shared_env).
my_shared_server() {
  local env dir pid
  env=$(my_shared_env)
  if [ -f "$env" ] && shared_owner_busy "$env" "mysql.sh: the shared server"; then # tests/shared.sh
    [ "$1" = stop ] && return 0
    exit 1
  fi
  if [ -f "$env" ]; then # ours, or a killed run's: stopped
    dir=$(sed -n 's/^dir=//p' "$env")
    pid=$(cat "$dir/pid" 2>/dev/null || true)
    shared_stop_pid "$pid" "$dir" # tests/shared.sh
    rm -rf "$dir" "$env"
  fi
  [ "$1" = stop ] && return 0
  dir=$(mktemp -d "${FERRY_TEST_TMP:-$FERRY_SHARED_HOME}/ferry-my.shared.XXXXXX")
  chmod 755 "$dir"
  [ "$(id -u)" = 0 ] && chown mysql "$dir"
  if [ -n "${FERRY_MY_TEMPLATE:-}" ] && [ -d "$FERRY_MY_TEMPLATE/data/mysql" ]; then
    my_as cp -a "$FERRY_MY_TEMPLATE/data" "$dir/data" ||
      { echo "mysql.sh: cannot copy the template $FERRY_MY_TEMPLATE" >&2; exit 1; }
  else
    my_install "$dir"
  fi
  my_server_start "$dir" --max-connections=500
  mariadb --no-defaults -S "$MY_SOCK" -uroot >/dev/null <<SQL
CREATE USER 'ferry_admin'@'127.0.0.1' IDENTIFIED BY '$MY_ADMIN_PASSWORD';
GRANT ALL PRIVILEGES ON *.* TO 'ferry_admin'@'127.0.0.1';
SQL
  printf 'dir=%s\nsock=%s\nport=%s\npassword=%s\nowner=%s\n' "$dir" "$MY_SOCK" "$MY_PORT" \
    "$MY_ADMIN_PASSWORD" "$PPID" > "$env.tmp"
  mv "$env.tmp" "$env"
}
