#!/usr/bin/env bash
# A bounded `ferry run` of a cdc table releases the WAL it applied (issue 22), against a real
# PostgreSQL 15 of its own (restart_lsn depends on every transaction of the server, so no
# shared server): after the copy, WAL written in two parts each closed by a CHECKPOINT
# (which logs a running-transactions record) and changes to the table, two bounded runs:
#  1. the slot's confirmed_flush_lsn equals the position ferry saved, after each run;
#  2. after the first bounded run, its restart_lsn is past the second part (the old code left
#     it at the first running-transactions record after where the run began, so the next
#     session decoded the run's WAL again);
#  3. the destination equals the source; the slot is released.
. "$(dirname "$0")/lib.sh"
. "${FERRY_PG_SH:-$FERRY_SRC/tests/pg/pg.sh}"
pg_start

export SRC_URL="$FERRY_PG_URL"
# No autovacuum on these tables: an ANALYZE in progress at a CHECKPOINT holds restart_lsn
# back (its transaction started before), whatever ferry does.
pgq >/dev/null <<'SQL'
CREATE TABLE r1 (id int PRIMARY KEY, v text) WITH (autovacuum_enabled = off);
INSERT INTO r1 SELECT g, 'v' || g FROM generate_series(1, 50) g;
CREATE TABLE filler (id int, v text) WITH (autovacuum_enabled = off);
SQL
cat > rl.yaml <<EOF2
version: 1
name: rl
source:
  type: postgres
  url: env:SRC_URL
  resources:
    - {table: r1, mode: cdc}
sink: {type: sqlite, path: $T/rl.db, write: merge}
batch: {rows: 1000, flush_after: 100ms}
EOF2
lsn_num() { pgq -c "SELECT ($1 - '0/0')::bigint"; }
slot_col() { pgq -c "SELECT ($1 - '0/0')::bigint FROM pg_replication_slots WHERE slot_name = 'ferry_rl'"; }
saved_n() { ferry checkpoints --json | jq -r '.[] | select(.pipeline == "rl" and .shard == 0) | .position' | jq -r .n; }
confirmed_is_saved() { # WHY
  local conf saved
  conf=$(slot_col confirmed_flush_lsn); saved=$(saved_n)
  [ -n "$saved" ] && [ "$saved" != null ] && [ "$conf" = "$saved" ] ||
    fail "$1: slot confirmed at $conf, ferry saved $saved"
}
same() {
  local a b
  a=$(pgq -c "SELECT id || '|' || v FROM r1 ORDER BY id" | md5sum)
  b=$(q rl.db "SELECT id || '|' || v FROM r1 ORDER BY id" | md5sum)
  [ "$a" = "$b" ] || fail "$1: the destination differs from the source"
}
# bulk N K: N rows of 200 bytes (about N * 260 bytes of WAL), a change to r1, then (in $at
# the WAL position before it) a CHECKPOINT.
bulk() {
  pgq -c "INSERT INTO filler SELECT g, repeat('x', 200) FROM generate_series(1, $1) g" \
      -c "UPDATE r1 SET v = v || '.' WHERE id % 7 = $2" >/dev/null
  at=$(lsn_num "pg_current_wal_lsn()")
  pgq -c "CHECKPOINT" >/dev/null
}

expect_exit 0 ferry run rl.yaml
confirmed_is_saved "after the copy"
bulk 40000 1
bulk 40000 2
second=$at
bulk 1000 3
expect_exit 0 ferry run rl.yaml
confirmed_is_saved "after the first bounded run"
# Checked before another session decodes the slot: one from restart_lsn would move it too.
restart=$(slot_col restart_lsn)
[ "$restart" -ge "$second" ] ||
  fail "restart_lsn $restart is behind the second CHECKPOINT ($second): the next session decodes $(( $(slot_col confirmed_flush_lsn) - restart )) bytes again"
pass "restart_lsn ($restart) past the WAL already applied (>= $second)"
pgq -c "UPDATE r1 SET v = v || '!' WHERE id < 5" >/dev/null
expect_exit 0 ferry run rl.yaml
confirmed_is_saved "after the second bounded run"
pass "after each run the slot is confirmed at the position ferry saved"
same "after two bounded runs"
[ "$(pgq -c "SELECT count(*) FROM pg_replication_slots WHERE active")" = 0 ] || fail "a slot is still held"
pass "destination equal to the source, slot released"
