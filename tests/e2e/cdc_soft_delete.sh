#!/usr/bin/env bash
# shared: pg
# cdc `soft_delete: COLUMN` against a real PostgreSQL: deletes at the source mark the row in
# the destination (COLUMN = the delete's commit time) and keep every other value, into the
# PostgreSQL and SQLite sinks (merge). Covers a row inserted and deleted inside one batch
# (kept, marked, with its inserted values), a row updated then deleted, a row deleted then
# re-inserted (live again, mark cleared), and the policy refusals.
. "$(dirname "$0")/lib.sh"
. "${FERRY_PG_SH:-$FERRY_SRC/tests/pg/pg.sh}"
pg_start

dest=$(pg_db dest)
export SRC_URL="$FERRY_PG_URL"
export DEST_URL="postgresql://ferry_admin:$PGPASSWORD@127.0.0.1:$PGPORT/$dest"

pgq >/dev/null <<'SQL'
CREATE TABLE s1 (id int PRIMARY KEY, name text NOT NULL, amount int);
INSERT INTO s1 SELECT g, 'n' || g, g * 10 FROM generate_series(1, 100) g;
CREATE TABLE s2 (id int PRIMARY KEY, gone_at timestamptz);
SQL

pipeline() { # FILE NAME SINK_YAML RESOURCE_YAML
  printf 'version: 1\nname: %s\nsource:\n  type: postgres\n  url: env:SRC_URL\n  resources:\n    - %s\nsink: %s\nbatch: {rows: 500, flush_after: 200ms}\n' \
    "$2" "$4" "$3" > "$1"
}
pipeline pg.yaml sd_pg "{type: postgres, url: env:DEST_URL, schema: public, write: merge}" \
  "{table: s1, mode: cdc, soft_delete: deleted_at}"
pipeline lite.yaml sd_lite "{type: sqlite, path: $T/lite.db, write: merge}" \
  "{table: s1, mode: cdc, soft_delete: deleted_at}"

# Policy: soft_delete only with cdc + merge, and never onto a column the table has.
pipeline bad1.yaml sd_bad1 "{type: sqlite, path: $T/bad.db, write: append}" \
  "{table: s1, mode: cdc, soft_delete: deleted_at}"
expect_exit 3 ferry run bad1.yaml
case "$OUT" in *soft_delete*merge*) ;; *) fail "append + soft_delete not refused clearly: $OUT" ;; esac
pipeline bad2.yaml sd_bad2 "{type: sqlite, path: $T/bad.db, write: merge}" \
  "{table: s1, mode: full, soft_delete: deleted_at}"
expect_exit 3 ferry run bad2.yaml
case "$OUT" in *soft_delete*cdc*) ;; *) fail "full + soft_delete not refused clearly: $OUT" ;; esac
pipeline bad3.yaml sd_bad3 "{type: sqlite, path: $T/bad.db, write: merge}" \
  "{table: s2, mode: cdc, soft_delete: gone_at}"
expect_exit 2 ferry run bad3.yaml
case "$OUT" in *gone_at*) ;; *) fail "soft_delete onto an existing column not refused: $OUT" ;; esac
[ "$(pgq -c "SELECT count(*) FROM pg_replication_slots WHERE database = current_database()")" = 0 ] || fail "a refused run left a slot"
pass "policy: soft_delete needs cdc + merge and a column the table does not have"

expect_exit 0 ferry run pg.yaml
expect_exit 0 ferry run lite.yaml
[ "$(pgq -d "$dest" -c 'SELECT count(*), count(deleted_at) FROM s1')" = "100|0" ] ||
  fail "snapshot: $(pgq -d "$dest" -c 'SELECT count(*), count(deleted_at) FROM s1')"
[ "$(q lite.db 'SELECT count(*), count(deleted_at) FROM s1')" = "100|0" ] || fail "sqlite snapshot"
# a mark column named like a change-log column is still a mark: NULL in the snapshot
pipeline seqname.yaml sd_seqname "{type: sqlite, path: $T/seqname.db, write: merge}" \
  "{table: s1, mode: cdc, soft_delete: _ferry_seq}"
expect_exit 0 ferry run seqname.yaml
[ "$(q seqname.db 'SELECT count(*), count(_ferry_seq) FROM s1')" = "100|0" ] ||
  fail "a soft_delete column named _ferry_seq got values in the snapshot: $(q seqname.db 'SELECT _ferry_seq FROM s1 LIMIT 2')"
pass "first run: snapshot copied with an empty deleted_at column (also when it is named _ferry_seq)"

t0=$(pgq -c "SELECT extract(epoch FROM clock_timestamp())::numeric(20,6)")
pgq >/dev/null <<'SQL'
DELETE FROM s1 WHERE id <= 10;
BEGIN; UPDATE s1 SET name = 'changed', amount = -1 WHERE id = 11; DELETE FROM s1 WHERE id = 11; COMMIT;
BEGIN; INSERT INTO s1 VALUES (1000, 'brief', 7); COMMIT;
DELETE FROM s1 WHERE id = 1000;
DELETE FROM s1 WHERE id = 20;
INSERT INTO s1 VALUES (20, 'back', 2000);
UPDATE s1 SET amount = 333 WHERE id = 30;
SQL
t1=$(pgq -c "SELECT extract(epoch FROM clock_timestamp())::numeric(20,6)")
expect_exit 0 ferry run pg.yaml
expect_exit 0 ferry run lite.yaml

# Live rows: exactly the source.
a=$(pgq -c "COPY (SELECT id, name, amount FROM s1 ORDER BY id) TO STDOUT" | md5sum)
b=$(pgq -d "$dest" -c "COPY (SELECT id, name, amount FROM s1 WHERE deleted_at IS NULL ORDER BY id) TO STDOUT" | md5sum)
[ "$a" = "$b" ] || fail "postgres: live rows differ from the source"
a=$(pgq -c "SELECT id || '|' || name || '|' || amount FROM s1 ORDER BY id" | md5sum)
b=$(q lite.db "SELECT id || '|' || name || '|' || amount FROM s1 WHERE deleted_at IS NULL ORDER BY id" | md5sum)
[ "$a" = "$b" ] || fail "sqlite: live rows differ from the source"
# Deleted rows: kept with their last values, marked with the delete's commit time.
want=$( (for i in $(seq 1 10); do echo "$i|n$i|$((i * 10))"; done; echo "11|changed|-1"; echo "1000|brief|7") | sort)
got=$(pgq -d "$dest" -c "SELECT id || '|' || name || '|' || amount FROM s1 WHERE deleted_at IS NOT NULL" | sort)
[ "$got" = "$want" ] || fail "postgres: marked rows: $got"
got=$(q lite.db "SELECT id || '|' || name || '|' || amount FROM s1 WHERE deleted_at IS NOT NULL" | sort)
[ "$got" = "$want" ] || fail "sqlite: marked rows: $got"
bad=$(pgq -d "$dest" -c "SELECT count(*) FROM s1 WHERE deleted_at IS NOT NULL AND
  (extract(epoch FROM deleted_at) < $t0 - 1 OR extract(epoch FROM deleted_at) > $t1 + 1)")
[ "$bad" = 0 ] || fail "postgres: $bad deleted_at values outside the deletes' time"
[ "$(pgq -d "$dest" -c 'SELECT deleted_at IS NULL FROM s1 WHERE id = 20')" = t ] || fail "re-inserted row still marked"
pass "deletes mark the row (commit time), keep its values; a re-insert clears the mark (postgres, sqlite)"

# A later delete of a re-inserted row marks it again; an unrelated run changes nothing.
pgq -c "DELETE FROM s1 WHERE id = 20" >/dev/null
expect_exit 0 ferry run pg.yaml
expect_exit 0 ferry run lite.yaml
[ "$(pgq -d "$dest" -c "SELECT name, deleted_at IS NOT NULL FROM s1 WHERE id = 20")" = "back|t" ] ||
  fail "postgres: second delete of id 20"
[ "$(q lite.db "SELECT name, deleted_at IS NOT NULL FROM s1 WHERE id = 20")" = "back|1" ] ||
  fail "sqlite: second delete of id 20"
[ "$(pgq -d "$dest" -c 'SELECT count(*) FROM s1')" = 101 ] || fail "postgres: rows were removed"
[ "$(q lite.db 'SELECT count(*) FROM s1')" = 101 ] || fail "sqlite: rows were removed"
pass "no row is ever removed; marks follow the source's deletes"

expect_exit 0 ferry cdc drop pg.yaml
expect_exit 0 ferry cdc drop lite.yaml
