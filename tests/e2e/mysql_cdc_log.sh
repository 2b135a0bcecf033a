#!/usr/bin/env bash
# labels: asan
# tests/e2e/mysql_cdc_log.sh - `mode: cdc` of the mysql source written as a change log
# (`write: append`) and with `soft_delete`, against one real MariaDB 10.11
# (tests/mysql/mysql.sh) read by the least-privilege user:
# - change log into PostgreSQL and JSON Lines: snapshot rows (insert, sequence 0, no commit
#   time, `_ferry_lsn` before every change), then autocommit changes and one transaction that
#   changes a key five times and changes another key's primary key; ordered by
#   (`_ferry_lsn`, `_ferry_seq`) the log is the changes in order, and merged (the last row of
#   each key; a delete removes it) it equals MariaDB; the commit time is the transaction's;
# - a 100 000-row transaction, kill -9 while its rows are written, resumed: every change
#   once, numbered 1..100 000 in order, one `_ferry_lsn`;
# - soft_delete into PostgreSQL and SQLite: deleted rows stay with their values, marked with
#   the delete's time; a key change marks the old key;
# - a TRUNCATE stops both runs naming the table and the statement.
# (A change log refusing another server's positions after a failover: e2e/mysql_cdc.)
. "$FERRY_SRC/tests/e2e/lib.sh"
. "$FERRY_SRC/tests/mysql/mysql.sh"
my_pg_start
export PGTZ=UTC

pipeline() { # FILE NAME SINK RESOURCE_EXTRA TABLES...
  local f=$1 n=$2 sink=$3 extra=$4; shift 4
  { printf 'version: 1\nname: %s\nsource:\n  type: mysql\n  url: env:FERRY_MY_READER_URL\n  resources:\n' "$n"
    for t in "$@"; do printf '    - {table: %s, mode: cdc%s}\n' "$t" "$extra"; done
    printf 'sink: %s\n' "$sink"
    printf 'batch: {rows: 5000}\n'
  } > "$f"
}
pgq -c "CREATE SCHEMA log" >/dev/null

myq -e "CREATE TABLE t (id int PRIMARY KEY, v varchar(20), n int NOT NULL);
        INSERT INTO t SELECT seq, CONCAT('v', seq), seq FROM seq_1_to_50"
pipeline log.yaml mylog "{type: postgres, url: env:FERRY_PG_URL, schema: log, write: append}" "" t
pipeline files.yaml myfiles "{type: files, path: $T/out/, format: jsonl, write: append}" "" t
pipeline soft.yaml mysoft "{type: postgres, url: env:FERRY_PG_URL, schema: public, write: merge}" \
  ", soft_delete: deleted_at" t
pipeline softlite.yaml mysoftlite "{type: sqlite, path: $T/soft.db, write: merge}" \
  ", soft_delete: deleted_at" t
for f in log files soft softlite; do expect_exit 0 ferry run $f.yaml; done

# ---- the snapshot ----------------------------------------------------------------------------
[ "$(pgq -c "SELECT count(*), count(DISTINCT _ferry_lsn), min(_ferry_seq), max(_ferry_seq), count(_ferry_commit_time), bool_and(_ferry_op = 'insert') FROM log.t")" = "50|1|0|0|0|t" ] ||
  fail "snapshot rows: $(pgq -c "SELECT _ferry_op, _ferry_lsn, _ferry_seq, _ferry_commit_time FROM log.t LIMIT 3")"
[ "$(pgq -c "SELECT is_nullable FROM information_schema.columns WHERE table_schema = 'log' AND table_name = 't' AND column_name = 'n'")" = NO ] ||
  fail "a NOT NULL column became nullable in the change log (binlog images are whole rows)"
[ "$(pgq -c "SELECT count(*), count(deleted_at) FROM public.t")" = "50|0" ] || fail "soft_delete snapshot"
pass "snapshot: 50 insert rows of sequence 0 without a commit time; soft_delete's column empty"

# ---- changes -----------------------------------------------------------------------------------
snap_lsn=$(pgq -c "SELECT _ferry_lsn FROM log.t LIMIT 1")
myq <<'SQL'
INSERT INTO t VALUES (51, 'a', 51), (52, 'b', 52);
UPDATE t SET v = 'two' WHERE id = 2;
DELETE FROM t WHERE id = 3;
BEGIN;
INSERT INTO t VALUES (60, 'c1', 60);
UPDATE t SET v = 'c2' WHERE id = 60;
UPDATE t SET v = 'c3', n = 61 WHERE id = 60;
DELETE FROM t WHERE id = 60;
INSERT INTO t VALUES (60, 'c4', 62);
UPDATE t SET id = 70, v = 'moved' WHERE id = 5;
DELETE FROM t WHERE id = 6;
DO SLEEP(3);
COMMIT;
SQL
t_commit=$(date +%s)
for f in log files soft softlite; do expect_exit 0 ferry run $f.yaml; done

got=$(pgq -c "SELECT string_agg(_ferry_op || ':' || id || ':' || coalesce(v, '-') || ':' || _ferry_seq, ' ' ORDER BY _ferry_lsn, _ferry_seq) FROM log.t WHERE _ferry_seq > 0")
want="insert:51:a:1 insert:52:b:2 update:2:two:1 delete:3:v3:1 insert:60:c1:1 update:60:c2:2 update:60:c3:3 delete:60:c3:4 insert:60:c4:5 delete:5:v5:6 insert:70:moved:7 delete:6:v6:8"
[ "$got" = "$want" ] || fail "change log in (_ferry_lsn, _ferry_seq) order:
 got  $got
 want $want"
[ "$(pgq -c "SELECT count(*) FROM log.t WHERE _ferry_seq > 0 AND _ferry_lsn <= $snap_lsn")" = 0 ] ||
  fail "a change sorts before the snapshot rows"
# the transaction's commit time: its COMMIT, after the sleep (whole seconds)
ct=$(pgq -c "SELECT DISTINCT extract(epoch FROM _ferry_commit_time)::bigint FROM log.t WHERE v = 'c1'")
[ -n "$ct" ] && [ $((t_commit - ct)) -ge 0 ] && [ $((t_commit - ct)) -le 1 ] ||
  fail "the transaction's commit time $ct is not its commit ($t_commit)"
a=$(myq -e "SELECT CONCAT_WS('|', id, v, n) FROM t ORDER BY id" | md5sum)
b=$(pgq -c "SELECT concat_ws('|', id, v, n) FROM (SELECT DISTINCT ON (id) id, v, n, _ferry_op FROM log.t ORDER BY id, _ferry_lsn DESC, _ferry_seq DESC) l WHERE _ferry_op <> 'delete' ORDER BY id" | md5sum)
[ "$a" = "$b" ] || fail "the change log merged by (_ferry_lsn, _ferry_seq) differs from MariaDB"
c=$(find out -name 'part-*' -exec cat {} + | jq -rs 'group_by(.id) | map(sort_by([._ferry_lsn, ._ferry_seq]) | last | select(._ferry_op != "delete")) | sort_by(.id) | .[] | "\(.id)|\(.v)|\(.n)"' | md5sum)
[ "$a" = "$c" ] || fail "the JSON Lines change log merged by (_ferry_lsn, _ferry_seq) differs from MariaDB"
pass "change log (PostgreSQL, JSON Lines): the changes in order, a key change as a delete and an insert, merged equal to MariaDB"

# soft_delete: deleted keys (3, 60 between, 5 by its key change, 6) keep their values, marked
for db in pg lite; do
  if [ $db = pg ]; then
    marks=$(pgq -c "SELECT string_agg(id || ':' || v, ',' ORDER BY id) FROM public.t WHERE deleted_at IS NOT NULL")
    live=$(pgq -c "SELECT concat_ws('|', id, v, n) FROM public.t WHERE deleted_at IS NULL ORDER BY id" | md5sum)
  else
    marks=$(q soft.db "SELECT group_concat(id || ':' || v, ',') FROM (SELECT * FROM t WHERE deleted_at IS NOT NULL ORDER BY id)")
    live=$(q soft.db "SELECT id || '|' || v || '|' || n FROM t WHERE deleted_at IS NULL ORDER BY id" | md5sum)
  fi
  [ "$marks" = "3:v3,5:v5,6:v6" ] || fail "$db soft_delete marks: $marks"
  [ "$live" = "$a" ] || fail "$db soft_delete: the live rows differ from MariaDB"
done
pass "soft_delete (PostgreSQL, SQLite): deleted rows kept and marked, the live ones equal MariaDB"

# ---- a large transaction, kill -9 while it is written, resumed --------------------------------
ROWS=${ROWS:-100000}
myq -e "INSERT INTO t SELECT 1000 + seq, LEFT(MD5(seq), 16), seq FROM seq_1_to_$ROWS"
before=$(pgq -c "SELECT count(*) FROM log.t")
FERRY_FAILPOINTS="before_sink_apply=sleep(150)" "$FERRY_BIN" run log.yaml --quiet > kill.log 2>&1 &
pid=$!
for _ in $(seq 1 600); do
  [ "$(pgq -c "SELECT count(*) FROM log.t")" -ge $((before + 10000)) ] && break
  sleep 0.05
done
kill -9 $pid
wait $pid 2>/dev/null || true
at_kill=$(pgq -c "SELECT count(*) FROM log.t")
[ "$at_kill" -gt "$before" ] && [ "$at_kill" -lt $((before + ROWS)) ] ||
  fail "the kill did not land inside the transaction ($before -> $at_kill rows)"
expect_exit 0 ferry run log.yaml
r=$(pgq -c "SELECT count(*), count(DISTINCT _ferry_seq), min(_ferry_seq), max(_ferry_seq), count(DISTINCT _ferry_lsn), bool_and(_ferry_seq = id - 1000) FROM log.t WHERE id > 1000")
[ "$r" = "$ROWS|$ROWS|1|$ROWS|1|t" ] || fail "the resumed transaction's change log (rows, sequences, min, max, lsns, in order): $r"
pass "a $ROWS-row transaction killed after $((at_kill - before)) rows, resumed: every change once, numbered in order, one _ferry_lsn"

# ---- a TRUNCATE stops soft_delete and the change log ---------------------------------------------
myq -e "INSERT INTO t VALUES (99, 'before', 99); TRUNCATE TABLE t"
for f in soft log; do
  expect_exit 1 ferry run $f.yaml
  case $OUT in *"table \`${MY_DB:-ferry}\`.\`t\`"*"TRUNCATE TABLE t"*"a truncate is applied only by"*) ;;
    *) fail "$f: TRUNCATE not refused naming the table and the statement: $OUT" ;; esac
done
pass "a TRUNCATE stops soft_delete and the change log, naming table and statement"
