#!/usr/bin/env bash
# tests/e2e/mysql_snapshot_lock.sh - the MySQL snapshot fallback of `mode: cdc` against a real
# MariaDB 10.11 (tests/mysql/mysql.sh): a server without binlog_snapshot_file (MySQL) gets the
# first run's binary log position under a brief FLUSH TABLES WITH READ LOCK. MariaDB has the
# variable, so failpoint my_snapshot_lock takes that path here: the least-privilege reader
# without RELOAD is refused naming the privilege, nothing written; with RELOAD the snapshot
# copies every row, the lock is released (a write succeeds at once), and the next run
# streams the changes made after the snapshot, every row once. A binlog event damaged on disk
# stops the stream at its CRC32 checksum, naming the position, nothing of it written.
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

# A damaged binary log: one byte of a logged value changed on disk (the server sends events
# as the file holds them). The stream checks each event's CRC32 (binlog_checksum = CRC32, the
# default), stops at the damaged one naming its position, and takes nothing of it.
[ "$(myq -e "SELECT @@global.binlog_checksum")" = CRC32 ] || fail "the test server does not checksum its binlog"
myq -e "INSERT INTO lk VALUES (6000, 'DAMAGEME'); FLUSH BINARY LOGS"
file=$(myq -e "SHOW BINARY LOGS" | tail -2 | head -1 | cut -f1)
# the last occurrence is the rows event (an annotate event before it holds the statement)
at=$(grep -obUa DAMAGEME "$MY_DIR/data/$file" | tail -1 | cut -d: -f1)
[ -n "$at" ] || fail "the value is not in $file"
printf 'X' | dd of="$MY_DIR/data/$file" bs=1 seek="$at" conv=notrunc status=none
expect_exit 1 ferry run lk.yaml
case $OUT in *"table \`ferry\`.\`lk\`: the binlog event of type "*" ending at ${file}:"*"fails its CRC32 checksum"*) ;;
  *) fail "a damaged binlog event is not refused by its checksum: $OUT" ;; esac
[ "$(q lk.db 'SELECT count(*) FROM lk WHERE id = 6000')" = 0 ] || fail "a row of the damaged event was written"
pass "a binlog event damaged on disk: the stream stops at its CRC32 naming file and offset, nothing of it written"
