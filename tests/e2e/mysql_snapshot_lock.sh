#!/usr/bin/env bash
# tests/e2e/mysql_snapshot_lock.sh - the MySQL snapshot fallback of `mode: cdc` against a real
# MariaDB 10.11 (tests/mysql/mysql.sh): a server without binlog_snapshot_file (MySQL) gets the
# first run's binary log position under a brief FLUSH TABLES WITH READ LOCK. MariaDB has the
# variable, so failpoint my_snapshot_lock takes that path here: the least-privilege reader
# without RELOAD is refused naming the privilege, nothing written; with RELOAD the snapshot
# copies every row, the lock is released (a write succeeds at once), and the next run
# streams the changes made after the snapshot, every row once.
. "$FERRY_SRC/tests/e2e/lib.sh"
. "$FERRY_SRC/tests/mysql/mysql.sh"
my_start
myq -e "CREATE TABLE lk (id int PRIMARY KEY, v varchar(20));
        INSERT INTO lk SELECT seq, CONCAT('v', seq) FROM seq_1_to_2000"
cat > lk.yaml <<EOF
version: 1
name: lk
source:
  type: mysql
  url: env:FERRY_MY_READER_URL
  resources:
    - table: lk
      mode: cdc
sink: {type: sqlite, path: $PWD/lk.db, write: merge}
EOF
export FERRY_FAILPOINTS="my_snapshot_lock=error"
expect_exit 1 ferry run lk.yaml
case $OUT in *"table \`ferry\`.\`lk\`"*"grant RELOAD"*) ;; *) fail "FTWRL without RELOAD refused naming it: $OUT" ;; esac
[ "$(q lk.db 'SELECT count(*) FROM lk' 2>/dev/null || echo 0)" = 0 ] || fail "nothing may be written without the snapshot"
myq -e "GRANT RELOAD ON *.* TO 'ferry_reader'@'127.0.0.1'"
expect_exit 0 ferry run lk.yaml
[ "$(q lk.db 'SELECT count(*) FROM lk')" = 2000 ] || fail "the locked snapshot copied $(q lk.db 'SELECT count(*) FROM lk') rows"
# the lock is gone: a write does not wait (lock_wait_timeout 5 s would fail it)
myq -e "SET SESSION lock_wait_timeout = 5; INSERT INTO lk VALUES (5000, 'after'); UPDATE lk SET v = 'upd' WHERE id = 7; DELETE FROM lk WHERE id = 8"
unset FERRY_FAILPOINTS
expect_exit 0 ferry run lk.yaml
a=$(myq -e "SELECT CONCAT_WS('|', id, v) FROM lk ORDER BY id" | md5sum)
b=$(q lk.db "SELECT id || '|' || v FROM lk ORDER BY id" | md5sum)
[ "$a" = "$b" ] || fail "after the stream SQLite differs from MariaDB"
pass "cdc first run on a server without binlog_snapshot_file: RELOAD named when missing; snapshot under a brief global read lock, released, then the stream from its position"
