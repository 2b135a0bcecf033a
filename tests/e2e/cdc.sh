#!/usr/bin/env bash
# labels: asan smoke
# PostgreSQL change data capture (mode: cdc) against a real server with wal_level=logical:
# snapshot then stream into the PostgreSQL sink (merge) and the SQLite sink (merge) while a
# concurrent workload inserts, updates (keys included) and deletes on three tables; after a
# final bounded run both destinations equal the source (set equality of whole rows); the
# slot is acknowledged; an append change log holds the exact operations with increasing
# LSNs; a column added during streaming reaches the destination; a role with only
# REPLICATION, LOGIN and SELECT (publication made by the owner) works; `ferry cdc drop`.
. "$(dirname "$0")/lib.sh"
. "${FERRY_PG_SH:-$FERRY_SRC/tests/pg/pg.sh}"
pg_start

psql -qX -v ON_ERROR_STOP=1 -c "CREATE DATABASE dest" >/dev/null
export SRC_URL="$FERRY_PG_URL"
export DEST_URL="postgresql://ferry_admin:$PGPASSWORD@127.0.0.1:$PGPORT/dest"

pgq >/dev/null <<'SQL'
CREATE TABLE t1 (id bigint PRIMARY KEY, name text NOT NULL, amount numeric(12,2), ts timestamptz,
                 data bytea, u uuid, j jsonb, flag bool, d date, f double precision);
CREATE TABLE t2 (k1 int, k2 text, v double precision, note varchar(40), PRIMARY KEY (k1, k2));
CREATE TABLE t3 (id int PRIMARY KEY, note text);
INSERT INTO t1 SELECT g, 'n' || g, g * 1.25, '2024-01-01'::timestamptz + g * interval '1 minute',
       decode(md5(g::text), 'hex'), md5(g::text)::uuid, jsonb_build_object('g', g), g % 2 = 0,
       '2020-01-01'::date + g, g / 7.0
  FROM generate_series(1, 3000) g;
INSERT INTO t2 SELECT g % 50, 'k' || g, g * 0.5, 'note ' || g FROM generate_series(1, 1500) g;
INSERT INTO t3 SELECT g, 'row ' || g FROM generate_series(1, 200) g;
SQL

pipeline() { # FILE NAME SINK_YAML [URL_ENV] [EXTRA_RESOURCE_KEYS] [TABLES]
  local file=$1 name=$2 sink=$3 url=${4:-SRC_URL} extra=${5:-} tables=${6:-t1 t2 t3}
  {
    echo "version: 1"
    echo "name: $name"
    echo "source:"
    echo "  type: postgres"
    echo "  url: env:$url"
    echo "  parallelism: 2"
    echo "  shard_rows: 1000"
    echo "  resources:"
    for t in $tables; do echo "    - {table: $t, mode: cdc$extra}"; done
    echo "sink: $sink"
    echo "batch: {rows: 500, flush_after: 200ms}"
  } > "$file"
}
pipeline pg.yaml cdc_pg "{type: postgres, url: env:DEST_URL, schema: public, write: merge}"
pipeline lite.yaml cdc_lite "{type: sqlite, path: $T/lite.db, write: merge}"

# The workload: small transactions of inserts, updates (one in five moves a key) and deletes.
workload() {
  local i=0 n=$1
  while [ $i -lt "$n" ]; do
    i=$((i + 1))
    psql -qX -v ON_ERROR_STOP=1 >/dev/null 2>&1 <<SQL || true
BEGIN;
INSERT INTO t1 (id, name, amount, ts, flag) VALUES (100000 + $i, 'w$i', $i.5, now(), true);
UPDATE t1 SET name = name || '+', amount = amount + 1, j = '{"up": $i}' WHERE id = (($i * 37) % 3000) + 1;
DELETE FROM t1 WHERE id = (($i * 53) % 3000) + 1;
UPDATE t2 SET v = v + 1, note = 'w$i' WHERE k1 = $i % 50;
DELETE FROM t2 WHERE k2 = 'k$((i * 7))';
INSERT INTO t2 VALUES ($i % 50, 'w$i', $i, NULL) ON CONFLICT DO NOTHING;
UPDATE t3 SET id = id + 10000 WHERE id = $i;
INSERT INTO t3 VALUES (20000 + $i, 'new $i');
COMMIT;
SQL
  done
}

expect_exit 0 ferry check pg.yaml
[ "$(pgq -c "SELECT count(*) FROM pg_replication_slots") $(pgq -c "SELECT count(*) FROM pg_publication")" = "0 0" ] ||
  fail "ferry check created a slot or a publication"
expect_exit 0 ferry run pg.yaml
expect_exit 0 ferry run lite.yaml
[ "$(pgq -d dest -c 'SELECT count(*) FROM t1')" = 3000 ] || fail "snapshot of t1"
pass "first run: snapshot copied under the slot's exported snapshot"

workload 120 &
wl=$!
for k in 1 2 3; do
  expect_exit 0 ferry run pg.yaml
  expect_exit 0 ferry run lite.yaml
done
wait $wl
expect_exit 0 ferry run pg.yaml
expect_exit 0 ferry run lite.yaml

# PostgreSQL sink: whole rows, in the source's own text forms.
for t in t1 t2 t3; do
  key=id
  [ $t = t2 ] && key="k1, k2"
  a=$(pgq -c "COPY (SELECT * FROM $t ORDER BY $key) TO STDOUT" | md5sum)
  b=$(pgq -d dest -c "COPY (SELECT * FROM public.$t ORDER BY $key) TO STDOUT" | md5sum)
  [ "$a" = "$b" ] || {
    pgq -c "COPY (SELECT * FROM $t ORDER BY $key) TO STDOUT" > src.txt
    pgq -d dest -c "COPY (SELECT * FROM public.$t ORDER BY $key) TO STDOUT" > dst.txt
    diff src.txt dst.txt | head -20
    fail "postgres destination differs from the source for $t"
  }
done
[ "$(pgq -c 'SELECT count(*) FROM t1 WHERE id > 100000')" = 120 ] || fail "workload did not run"
pass "postgres merge: destination equals the source after a concurrent workload"

# SQLite sink: keys and text columns (SQLite has its own value forms for the rest).
a=$(pgq -c "SELECT id || '|' || name || '|' || coalesce(amount::text, '') FROM t1 ORDER BY id" | md5sum)
b=$(q lite.db "SELECT id || '|' || name || '|' || coalesce(printf('%.2f', amount), '') FROM t1 ORDER BY id" | md5sum)
[ "$a" = "$b" ] || fail "sqlite destination differs from the source for t1"
a=$(pgq -c "SELECT id || '|' || note FROM t3 ORDER BY id" | md5sum)
b=$(q lite.db "SELECT id || '|' || note FROM t3 ORDER BY id" | md5sum)
[ "$a" = "$b" ] || fail "sqlite destination differs from the source for t3"
a=$(pgq -c "SELECT k1 || '|' || k2 || '|' || coalesce(note, '') FROM t2 ORDER BY k1, k2 COLLATE \"C\"" | md5sum)
b=$(q lite.db "SELECT k1 || '|' || k2 || '|' || coalesce(note, '') FROM t2 ORDER BY k1, k2" | md5sum)
[ "$a" = "$b" ] || fail "sqlite destination differs from the source for t2"
pass "sqlite merge: destination equals the source after a concurrent workload"

# The pipeline's one slot was acknowledged up to the least saved position of its tables.
min=
for t in t1 t2 t3; do
  saved=$(ferry checkpoints --json 2>/dev/null | jq -r ".[] | select(.pipeline == \"cdc_pg\" and .shard == 0 and (.route | startswith(\"$t \"))) | .position" | jq -r .n)
  [ -n "$saved" ] && [ "$saved" != null ] || fail "no saved position for $t: $(ferry checkpoints 2>&1)"
  if [ -z "$min" ] || [ "$saved" -lt "$min" ]; then min=$saved; fi
done
[ "$(pgq -c "SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'ferry_cdc_pg%'")" = 1 ] ||
  fail "not one slot for the pipeline: $(pgq -c 'SELECT slot_name FROM pg_replication_slots')"
conf=$(pgq -c "SELECT (confirmed_flush_lsn - '0/0')::bigint FROM pg_replication_slots WHERE slot_name = 'ferry_cdc_pg'")
[ "$conf" = "$min" ] || fail "the slot is confirmed at $conf, the least saved position is $min"
pass "one slot for the pipeline, acknowledged exactly up to the least saved checkpoint"

# Observability: the stream's position and lag in the events and in `ferry show`.
run=$(ferry runs --pipeline cdc_pg --json | jq '.[0].id')
ferry events "$run" > ev.txt
grep -q 'cursor.watermark_advanced' ev.txt || fail "no watermark event: $(cat ev.txt)"
grep 'cursor.watermark_advanced' ev.txt | grep -q '"lag_bytes"' || fail "no lag in the watermark event"
ferry show "$run" > show.txt
grep -q 'cdc position .*lag .* bytes' show.txt || fail "ferry show has no cdc lag: $(cat show.txt)"
pass "lag in events and ferry show: $(grep -m1 'cdc position' show.txt | sed 's/^ *//')"

# Append: a change log with the operation, LSN, commit time and sequence of each change.
pipeline log.yaml cdc_log "{type: postgres, url: env:DEST_URL, schema: log, write: append}" SRC_URL "" t3
expect_exit 0 ferry run log.yaml
[ "$(pgq -d dest -c "SELECT count(*) FROM log.t3 WHERE _ferry_seq <> 0 OR _ferry_commit_time IS NOT NULL OR _ferry_op <> 'insert'")" = 0 ] ||
  fail "snapshot rows of the change log are not inserts of sequence 0 without a commit time"
# A log written before `_ferry_seq` existed: the next run adds the column.
pgq -d dest -c "ALTER TABLE log.t3 DROP COLUMN _ferry_seq" >/dev/null
pgq >/dev/null <<'SQL'
INSERT INTO t3 VALUES (90001, 'a'), (90002, 'b');
UPDATE t3 SET note = 'b2' WHERE id = 90002;
DELETE FROM t3 WHERE id = 90001;
BEGIN;
INSERT INTO t3 VALUES (90003, 'c1');
UPDATE t3 SET note = 'c2' WHERE id = 90003;
UPDATE t3 SET note = 'c3' WHERE id = 90003;
DELETE FROM t3 WHERE id = 90003;
INSERT INTO t3 VALUES (90003, 'c4');
UPDATE t3 SET note = 'b3' WHERE id = 90002;
UPDATE t3 SET note = 'c5' WHERE id = 90003;
INSERT INTO t3 VALUES (90006, 'k');
UPDATE t3 SET id = 90007, note = 'k2' WHERE id = 90006;
COMMIT;
SQL
expect_exit 0 ferry run log.yaml
got=$(pgq -d dest -c "SELECT string_agg(_ferry_op || ':' || id || ':' || coalesce(note, '-'), ' ' ORDER BY _ferry_lsn, _ferry_seq) FROM log.t3 WHERE id > 90000")
[ "$got" = "insert:90001:a insert:90002:b update:90002:b2 delete:90001:- insert:90003:c1 update:90003:c2 update:90003:c3 delete:90003:- insert:90003:c4 update:90002:b3 update:90003:c5 insert:90006:k delete:90006:- insert:90007:k2" ] ||
  fail "change log in (_ferry_lsn, _ferry_seq) order: $got"
seqs=$(pgq -d dest -c "SELECT string_agg(_ferry_seq::text, ',' ORDER BY _ferry_seq) FROM log.t3 WHERE _ferry_lsn = (SELECT _ferry_lsn FROM log.t3 WHERE note = 'c1')")
[ "$seqs" = "1,2,3,4,5,6,7,8,9,10" ] || fail "one transaction's sequences: $seqs"
[ "$(pgq -d dest -c "SELECT count(*) FROM log.t3 WHERE id > 90000 AND (_ferry_commit_time IS NULL OR _ferry_commit_time < now() - interval '1 hour')")" = 0 ] ||
  fail "change log commit times"
# Merged by (_ferry_lsn, _ferry_seq), the log is the source: the last change of each key.
a=$(pgq -c "SELECT id || '|' || coalesce(note, '') FROM t3 ORDER BY id" | md5sum)
b=$(pgq -d dest -c "SELECT id || '|' || coalesce(note, '') FROM (SELECT DISTINCT ON (id) id, note, _ferry_op FROM log.t3 ORDER BY id, _ferry_lsn DESC, _ferry_seq DESC) l WHERE _ferry_op <> 'delete' ORDER BY id" | md5sum)
[ "$a" = "$b" ] || fail "the change log merged by (_ferry_lsn, _ferry_seq) differs from the source"
pass "append writes a change log, ordered within a transaction by _ferry_seq, a key change as a delete and an insert (added to an older log): $got"

# The change log into files (JSON Lines, read back with jq).
pipeline files.yaml cdc_files "{type: files, path: $T/out-jsonl/, format: jsonl, write: append}" SRC_URL "" t3
expect_exit 0 ferry run files.yaml
pgq -c "UPDATE t3 SET note = 'f' WHERE id = 90002; DELETE FROM t3 WHERE id = 90002" >/dev/null
expect_exit 0 ferry run files.yaml
ops=$(find out-jsonl -name 'part-*' -exec cat {} + | jq -rs 'map(select(.id == 90002)) | sort_by([._ferry_lsn, ._ferry_seq]) | map(._ferry_op + ":" + (._ferry_seq | tostring)) | join(" ")')
[ "$ops" = "insert:0 update:1 delete:2" ] || fail "files change log for 90002: $ops"
[ "$(find out-jsonl -name 'part-*' -exec cat {} + | jq -s 'length')" = "$(( $(pgq -c 'SELECT count(*) FROM t3') + 3 ))" ] ||
  fail "files change log row count"
pass "files take the change log (jsonl): $ops"

# A column added while streaming: the run stops before the change that carries it, the
# next one (started at once) adds it to the destination and goes on. A workload keeps
# writing while the column is added, so the ALTER lands inside the streamed range.
pgq -c "INSERT INTO t3 VALUES (95001, 'before')" >/dev/null
( sleep 0.3; pgq -c "ALTER TABLE t3 ADD COLUMN extra int" -c "INSERT INTO t3 VALUES (95002, 'after', 42)" >/dev/null ) &
alt=$!
workload 20
wait $alt
expect_exit 0 ferry run pg.yaml
[ "$(pgq -d dest -c "SELECT coalesce(extra::text, 'null') FROM public.t3 WHERE id = 95002")" = 42 ] ||
  fail "the added column did not arrive: $OUT"
[ "$(pgq -d dest -c "SELECT note FROM public.t3 WHERE id = 95001")" = before ] || fail "row before the change"
pass "a column added during streaming is added to the destination before its rows"

# A column dropped while changes that carry it are not captured yet: under schema_changes:
# evolve (the default) its values are not written (the destination keeps the column, NULL),
# said by a warning and a schema.changed event naming table and column (cdc_schema_changes.sh
# covers the other policies).
pgq -c "INSERT INTO t3 VALUES (95003, 'with extra', 7)" >/dev/null
pgq -c "ALTER TABLE t3 DROP COLUMN extra" >/dev/null
expect_exit 0 env FERRY_LOG=info "$FERRY_BIN" run pg.yaml
printf '%s' "$OUT" | grep -q 'column "extra" was dropped while changes carrying it were not yet captured' ||
  fail "dropped column warning: $OUT"
[ "$(pgq -d dest -c "SELECT note || '|' || coalesce(extra::text, 'null') FROM public.t3 WHERE id = 95003")" = 'with extra|null' ] ||
  fail "row 95003 after the drop"
run=$(ferry runs --pipeline cdc_pg --json | jq '.[0].id')
ferry events "$run" --json | jq -c 'select(.type == "schema.changed") | .payload | if type == "string" then fromjson else . end' |
  grep -qF '"column":"extra","change":"gone"' || fail "no schema.changed event for the dropped column: $(ferry events "$run")"
pass "a dropped column: kept in the destination, said on the run's events"

# Least privilege: REPLICATION, LOGIN and SELECT; the owner made the publication.
pgq >/dev/null <<SQL
CREATE ROLE cdc_ro LOGIN REPLICATION PASSWORD 'ro-pw-$$';
GRANT CONNECT ON DATABASE ferry TO cdc_ro;
GRANT USAGE ON SCHEMA public TO cdc_ro;
GRANT SELECT ON t1, t2 TO cdc_ro;
CREATE PUBLICATION ro_pub FOR TABLE t1, t2;
SQL
export RO_URL="postgresql://cdc_ro:ro-pw-$$@127.0.0.1:$PGPORT/ferry"
pipeline ro.yaml cdc_ro "{type: sqlite, path: $T/ro.db, write: merge}" RO_URL ", publication: ro_pub" "t1 t2"
expect_exit 0 ferry run ro.yaml
pgq -c "UPDATE t1 SET name = 'ro-upd' WHERE id <= 5; DELETE FROM t1 WHERE id BETWEEN 6 AND 9" >/dev/null
expect_exit 0 ferry run ro.yaml
a=$(pgq -c "SELECT id || '|' || name FROM t1 ORDER BY id" | md5sum)
b=$(q ro.db "SELECT id || '|' || name FROM t1 ORDER BY id" | md5sum)
[ "$a" = "$b" ] || fail "REPLICATION/LOGIN/SELECT role: destination differs"
[ "$(q ro.db "SELECT count(*) FROM t1 WHERE name = 'ro-upd'")" -ge 1 ] || fail "ro: no streamed update"
saved=$(ferry checkpoints --json | jq -r '.[] | select(.pipeline == "cdc_ro" and .shard == 0) | .position' | jq -r .n | sort -n | head -n 1)
conf=$(pgq -c "SELECT (confirmed_flush_lsn - '0/0')::bigint FROM pg_replication_slots WHERE slot_name = 'ferry_cdc_ro'")
[ "$conf" = "$saved" ] || fail "ro: the slot was not acknowledged (confirmed $conf, saved $saved)"
pass "a role with only REPLICATION, LOGIN and SELECT streams (publication made by the owner)"

# ferry cdc drop: slots and ferry's publications go; the next run takes a new snapshot.
expect_exit 0 ferry cdc drop pg.yaml
[ "$(pgq -c "SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'ferry_cdc_pg%'")" = 0 ] || fail "slot left"
[ "$(pgq -c "SELECT count(*) FROM pg_publication WHERE pubname LIKE 'ferry_cdc_pg%'")" = 0 ] || fail "publication left"
expect_exit 0 ferry run pg.yaml
[ "$(pgq -c "SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'ferry_cdc_pg%'")" = 1 ] || fail "no new slot"
pass "cdc drop removes the slot and the publication; the next run resnapshots"

# Policy: cdc with upsert would lose deletes.
pipeline up.yaml cdc_up "{type: sqlite, path: $T/up.db, write: upsert}"
expect_exit 3 ferry run up.yaml
pass "policy refuses cdc with upsert"
