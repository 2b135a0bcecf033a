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

# Single-byte character sets in the stream (greek, cp1251, koi8u, hebrew, macroman: where
# iconv's tables differ from the server's): every byte the set defines arrives as the server
# converts it; a byte the set does not define stops the stream naming table and column.
# (Strict mode refuses the undefined bytes' conversion in the test's own INSERT ... WHERE.)
myq -e "CREATE TABLE csx (id int PRIMARY KEY, g varchar(10) CHARACTER SET greek,
  c varchar(10) CHARACTER SET cp1251, k varchar(10) CHARACTER SET koi8u,
  h varchar(10) CHARACTER SET hebrew, m varchar(10) CHARACTER SET macroman)"
sed -e 's/^name: lk$/name: csx/; s/table: lk$/table: csx/; s/lk.db/csx.db/' lk.yaml > csx.yaml
expect_exit 0 ferry run csx.yaml
i=0
for col in g:greek c:cp1251 k:koi8u h:hebrew m:macroman; do
  myq -e "SET SESSION sql_mode = ''; INSERT INTO csx (id, ${col%%:*}) SELECT $i + seq, CONVERT(UNHEX(LPAD(HEX(seq), 2, '0')) USING ${col#*:})
    FROM seq_32_to_255 WHERE seq = 63 OR HEX(CONVERT(CONVERT(UNHEX(LPAD(HEX(seq), 2, '0')) USING ${col#*:}) USING utf8mb4)) <> '3F'"
  i=$((i + 1000))
done
[ "$(myq -e 'SELECT count(*) FROM csx')" -gt 900 ] || fail "too few characters inserted: $(myq -e 'SELECT count(*) FROM csx')"
expect_exit 0 ferry run csx.yaml
u() { printf "IFNULL(CONVERT(%s USING utf8mb4), '-')" "$1"; }
a=$(myq -r -e "SELECT CONCAT_WS('|', id, $(u g), $(u c), $(u k), $(u h), $(u m)) FROM csx ORDER BY id" | md5sum)
b=$(q csx.db "SELECT id || '|' || IFNULL(g, '-') || '|' || IFNULL(c, '-') || '|' || IFNULL(k, '-') || '|' || IFNULL(h, '-') || '|' || IFNULL(m, '-') FROM csx ORDER BY id" | md5sum)
[ "$a" = "$b" ] || fail "single-byte character sets streamed differ from the server's conversion"
myq -e "SET SESSION sql_mode = ''; INSERT INTO csx (id, g) VALUES (9999, CONVERT(UNHEX('41AE') USING greek))"
expect_exit 1 ferry run csx.yaml
case $OUT in *csx*"column \"g\""*"a byte its character set does not define"*) ;;
  *) fail "a byte greek does not define is not refused naming the column: $OUT" ;; esac
[ "$(q csx.db 'SELECT count(*) FROM csx WHERE id = 9999')" = 0 ] || fail "the undefined byte was written"
pass "cdc of greek, cp1251, koi8u, hebrew and macroman columns: every defined byte as the server converts it; an undefined byte refused naming the column"

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
