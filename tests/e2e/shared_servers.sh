#!/usr/bin/env bash
# tests/e2e/shared_servers.sh - the shared test servers (tests/fixture.sh, docs/internals/testing.md)
# on a pair of its own: two tests on one shared PostgreSQL and one MariaDB get different
# fresh databases and users, neither reader can enter the other's database, a replication slot
# and an extra database (pg_db / my_db) of a test are dropped with it when it exits (failing
# or not), and the fixture's stop leaves no server running; a fixture start after a killed run
# stops the server that run left, and leaves alone (refusing) one whose run is still going.
. "$FERRY_SRC/tests/e2e/lib.sh"
home=$(mktemp -d "${TMPDIR:-/tmp}/ferry-shared.XXXXXX") # the servers run as other users: not under $T (0700)
chmod 755 "$home"
fixture() { FERRY_TEST_TMP=$home bash "$FERRY_SRC/tests/fixture.sh" "$@" >/dev/null; }
other=
stop_all() { [ -z "$other" ] || kill "$other" 2>/dev/null || true; fixture pg stop; fixture mysql stop; }
prev=$(trap -p EXIT); prev=${prev#trap -- \'}; prev=${prev%\' EXIT}
trap "__rc=\$?; stop_all; (exit \$__rc); $prev" EXIT
fixture pg start
fixture mysql start
admin() { PGPASSWORD=$(sed -n 's/^password=//p' "$home/pg-shared.env") psql -qXAt -v ON_ERROR_STOP=1 \
  -h 127.0.0.1 -p "$(sed -n 's/^port=//p' "$home/pg-shared.env")" -U ferry_admin -d postgres "$@"; }
root() { mariadb --no-defaults -S "$(sed -n 's/^sock=//p' "$home/my-shared.env")" -uroot -N -B "$@"; }

# one "test": a shell with the shared servers, its own database, a slot and an extra database;
# it prints its variables, then exits with $1 (its EXIT trap drops what it made)
cat > one.sh <<'SH'
set -euo pipefail
. "$FERRY_SRC/tests/pg/pg.sh"
. "$FERRY_SRC/tests/mysql/mysql.sh"
pg_start
my_start
extra=$(pg_db extra)
myextra=$(my_db extra)
psql -qXAt -c "SELECT pg_create_logical_replication_slot('slot_' || pg_backend_pid(), 'pgoutput')" >/dev/null
myq -e "CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t VALUES (1)"
echo "$PGDATABASE $PG_READER $extra $MY_DB $MY_READER $myextra [$PG_DIR$MY_DIR]"
echo "$FERRY_PG_READER_URL" > "$2.pgurl"
echo "$FERRY_MY_READER_URL" > "$2.myurl"
[ -f "$2.hold" ] && while [ -f "$2.hold" ]; do sleep 0.1; done
exit "$1"
SH
touch a.hold b.hold
FERRY_PG_SHARED=1 FERRY_MY_SHARED=1 FERRY_TEST_TMP=$home bash one.sh 0 a > a.out 2>a.err &
apid=$!
FERRY_PG_SHARED=1 FERRY_MY_SHARED=1 FERRY_TEST_TMP=$home bash one.sh 3 b > b.out 2>b.err &
bpid=$!
for _ in $(seq 1 900); do [ -s a.out ] && [ -s b.out ] && break; sleep 0.1; done
[ -s a.out ] && [ -s b.out ] || fail "the two tests did not start: $(cat a.err b.err)"
read -r adb arole aextra amy amyreader amyextra adirs < a.out
read -r bdb brole bextra bmy bmyreader bmyextra bdirs < b.out
[ "$adirs" = "[]" ] && [ "$bdirs" = "[]" ] || fail "a shared test started a server of its own: $adirs $bdirs"
[ "$adb" != "$bdb" ] && [ "$arole" != "$brole" ] && [ "$amy" != "$bmy" ] && [ "$amyreader" != "$bmyreader" ] \
  || fail "two tests got the same names: $(cat a.out b.out)"
[ "$aextra" = "${adb}_extra" ] && [ "$amyextra" = "${amy}_extra" ] || fail "extra databases: $(cat a.out)"
pass "two tests on the shared servers at once: their own databases ($adb, $bdb) and users"

# a test's readers cannot enter the other test's database
psql "$(cat a.pgurl)" -XAtc 'SELECT 1' >/dev/null || fail "a test's reader cannot enter its own database"
psql "$(sed "s|/$adb\$|/$bdb|" a.pgurl)" -XAtc 'SELECT 1' >/dev/null 2>&1 \
  && fail "a test's PostgreSQL reader entered another test's database"
u=$(cat a.myurl); u=${u#mysql://}; cred=${u%%@*}
mariadb --no-defaults -h 127.0.0.1 -P "$(sed -n 's/^port=//p' "$home/my-shared.env")" -u "${cred%%:*}" \
  -p"${cred#*:}" -N -B -e "SELECT count(*) FROM \`$amy\`.t" >/dev/null || fail "a test's MariaDB reader cannot read its own table"
mariadb --no-defaults -h 127.0.0.1 -P "$(sed -n 's/^port=//p' "$home/my-shared.env")" -u "${cred%%:*}" \
  -p"${cred#*:}" -N -B -e "SELECT count(*) FROM \`$bmy\`.t" >/dev/null 2>&1 \
  && fail "a test's MariaDB reader read another test's table"
pass "a test's readers are refused the other test's database"

rm b.hold
rc=0; wait $bpid || rc=$?
[ $rc = 3 ] || fail "the second test should exit 3, not $rc: $(cat b.err)"
# the second test exited (failing): everything it made is gone, the first test's is there
[ "$(admin -c "SELECT count(*) FROM pg_database WHERE datname IN ('$bdb', '$bextra')")" = 0 ] \
  || fail "the failed test's databases were left"
[ "$(admin -c "SELECT count(*) FROM pg_roles WHERE rolname = '$brole'")" = 0 ] || fail "its role was left"
[ "$(admin -c "SELECT count(*) FROM pg_replication_slots WHERE database = '$bdb'")" = 0 ] || fail "its slot was left"
[ "$(root -e "SHOW DATABASES LIKE '${bmy}%'")" = "" ] || fail "its MariaDB databases were left"
[ "$(root -e "SELECT count(*) FROM mysql.user WHERE user = '$bmyreader'")" = 0 ] || fail "its MariaDB user was left"
[ "$(admin -c "SELECT count(*) FROM pg_database WHERE datname IN ('$adb', '$aextra')")" = 2 ] \
  || fail "the running test's databases were dropped"
[ "$(admin -c "SELECT count(*) FROM pg_replication_slots WHERE database = '$adb'")" = 1 ] \
  || fail "the running test's slot is missing"
pass "a failed test's databases, slot, role and users are dropped; the other test's stay"

rm a.hold
wait $apid || fail "the first test failed: $(cat a.err)"
[ "$(admin -c "SELECT count(*) FROM pg_database WHERE datname LIKE 'ferry\_%'")" = 0 ] \
  || fail "databases left: $(admin -c "SELECT datname FROM pg_database")"
[ "$(admin -c "SELECT count(*) FROM pg_replication_slots")" = 0 ] || fail "slots left"
[ "$(root -e "SHOW DATABASES LIKE 'ferry\\_%'")" = "" ] || fail "MariaDB databases left"
pass "a passing test's databases, slot and users are dropped"

# another run's server (its ctest still going) is left alone: a start fails naming it, a stop
# keeps it
sleep 300 &
other=$!
sed -i "s/^owner=.*/owner=$other/" "$home/pg-shared.env"
pgdir=$(sed -n 's/^dir=//p' "$home/pg-shared.env")
pgpid=$(head -n 1 "$pgdir/data/postmaster.pid")
set +e
OUT=$(FERRY_TEST_TMP=$home bash "$FERRY_SRC/tests/fixture.sh" pg start 2>&1)
rc=$?
set -e
[ $rc != 0 ] || fail "a start over another run's live server should fail"
printf '%s' "$OUT" | grep -q "belongs to another test run (pid $other)" || fail "the refusal should name the run: $OUT"
fixture pg stop
kill -0 "$pgpid" 2>/dev/null || fail "a stop ended another run's server"
[ "$(sed -n 's/^dir=//p' "$home/pg-shared.env")" = "$pgdir" ] || fail "another run's server was replaced"
kill "$other"; wait "$other" 2>/dev/null || true
other=
pass "another run's live server: a start refuses naming the run, a stop leaves it"

# a run killed before its cleanup (its owner gone): the next start stops the server it left
fixture pg start
kill -0 "$pgpid" 2>/dev/null && fail "the next fixture start left the old server running"
[ "$(sed -n 's/^dir=//p' "$home/pg-shared.env")" != "$pgdir" ] || fail "the old server's folder was reused"
stop_all
[ -z "$(ls -d "$home"/ferry-* 2>/dev/null)" ] && [ ! -e "$home/pg-shared.env" ] && [ ! -e "$home/my-shared.env" ] \
  || fail "the fixture's stop left: $(ls "$home")"
pass "fixture stop removes the servers; a start after a killed run stops the server it left"
