#!/usr/bin/env bash
# shared: pg s3
# The iceberg source reads back what the iceberg sink wrote: PostgreSQL -> Iceberg -> PostgreSQL,
# set equality of whole rows every time (EXCEPT ALL both ways), on one PostgreSQL server:
#   1. full read of a local warehouse (filesystem catalog) with every type the sink writes;
#   2. incremental reads (write: merge) after an upsert (overwrite snapshot with equality
#      deletes), after an append, after `write: replace` with rows deleted in the source
#      (files removed: deletes by key), and after `ferry iceberg expire`; a run with nothing new
#      reads nothing;
#   3. time travel: snapshot_id and as_of give the first snapshot's rows;
#   4. an S3 warehouse (SQL catalog on SQLite) read in full and incrementally;
#   5. a table written by cdc with write: merge (position deletes of rows a change of the same
#      commit replaced, equality deletes of deleted keys) read in full and incrementally, and
#      in full again with a crash after three batches and a resume (write: append);
#   6. bad input: a missing data file, a truncated data file, a missing metadata file, a
#      missing SQL catalog file (never created by a reader): one
#      message naming the file, exit 7 or 1, nothing written;
#   7. schema evolution (a column added, an int widened) on a bucket-partitioned upsert table
#      (equality deletes per partition): full and incremental reads;
#   8. the REST catalog (tests/tools/rest_catalog.mjs, a bearer token): full and incremental.
. "$(dirname "$0")/lib.sh"
. "$FERRY_SRC/tests/s3/s3.sh"
. "${FERRY_PG_SH:-$FERRY_SRC/tests/pg/pg.sh}"
s3_have || fail "node and tests/tools/node_modules (s3rver, aws4) are needed: run scripts/install-deps.sh"
export S3_KEY=S3RVER S3_SECRET=S3RVER AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER
S3_CONDITIONAL_BUCKETS=cond s3_start lake cond
COND=$(s3_bucket cond)
export S3_ENDPOINT
pg_start
export PG_URL="$FERRY_PG_URL"

pgq >/dev/null <<'SQL'
CREATE TABLE t (id bigint PRIMARY KEY, name text NOT NULL, amount numeric(12,2), flag bool,
                d date, tm time, ts timestamp, tz timestamptz, u uuid, b bytea, f float8,
                i int, s smallint);
INSERT INTO t SELECT g, 'n' || g, CASE WHEN g % 7 = 0 THEN NULL ELSE g * 1.25 END, g % 3 = 0,
  '2024-01-01'::date + g, '08:00'::time + g * interval '1 second',
  '2024-01-01'::timestamp + g * interval '1 minute', '2024-02-01 00:00+00'::timestamptz + g * interval '1 hour',
  md5(g::text)::uuid, decode(md5(g::text), 'hex'), g / 3.0, g * 10, (g % 100)::smallint
  FROM generate_series(1, 300) g;
CREATE TABLE t_more (LIKE t INCLUDING ALL);
CREATE TABLE t_v1 AS SELECT * FROM t;
CREATE SCHEMA back; CREATE SCHEMA inc; CREATE SCHEMA tt; CREATE SCHEMA s3b; CREATE SCHEMA bad;
SQL

writer() { # FILE NAME TABLE WRITE [WAREHOUSE_LINES...]
  local file=$1 name=$2 table=$3 write=$4; shift 4
  {
    echo "version: 1"
    echo "name: $name"
    echo "source: {type: postgres, url: env:PG_URL, resources: [{table: $table, target: t, key: [id]}]}"
    echo "sink:"
    echo "  type: iceberg"
    echo "  write: $write"
    for l in "$@"; do echo "  $l"; done
  } > "$file"
}
reader() { # FILE NAME SCHEMA MODE WRITE EXTRA_RESOURCE_KEYS [SOURCE_LINES...]
  local file=$1 name=$2 schema=$3 mode=$4 write=$5 extra=$6; shift 6
  {
    echo "version: 1"
    echo "name: $name"
    echo "source:"
    echo "  type: iceberg"
    for l in "$@"; do echo "  $l"; done
    echo "  resources: [{table: t, mode: $mode$extra}]"
    echo "sink: {type: postgres, url: env:PG_URL, schema: $schema, write: $write}"
    echo "batch: {rows: 70}"
  } > "$file"
}
LOCAL=("warehouse: $T/wh" "namespace: db")
# rows of $1 (a table) that $2 lacks and the reverse, counted
diff_rows() {
  pgq -c "SELECT count(*) FROM ((SELECT * FROM $1 EXCEPT ALL SELECT * FROM $2)
          UNION ALL (SELECT * FROM $2 EXCEPT ALL SELECT * FROM $1)) x"
}
same() { # SOURCE_TABLE COPY WHAT
  local n; n=$(diff_rows "$1" "$2") || fail "$3: compare failed"
  [ "$n" = 0 ] || fail "$3: $n rows differ between $1 and $2"
  [ "$(pgq -c "SELECT count(*) FROM $2")" = "$(pgq -c "SELECT count(*) FROM $1")" ] || fail "$3: counts"
}
meta() { ls -v "$T"/wh/db/t/metadata/v*.metadata.json | tail -1; }

# ---- 1. full read ----------------------------------------------------------------------------
writer in.yaml ice_in t upsert "${LOCAL[@]}"
expect_exit 0 ferry run in.yaml --quiet
reader full.yaml ice_full back full replace "" "${LOCAL[@]}"
expect_exit 0 ferry run full.yaml --quiet
same t back.t "full read"
[ "$(pgq -c "SELECT data_type FROM information_schema.columns WHERE table_schema = 'back' AND table_name = 't' AND column_name = 'amount'")" = numeric ] \
  || fail "amount should arrive as numeric"
[ "$(pgq -c "SELECT numeric_precision || ',' || numeric_scale FROM information_schema.columns WHERE table_schema = 'back' AND column_name = 'amount'")" = "12,2" ] \
  || fail "decimal(12,2) should stay numeric(12,2)"
pass "full read: every type back exactly (set equality)"

# ---- 2. incremental ----------------------------------------------------------------------------
reader cur.yaml ice_cur inc incremental merge ", cursor: [id]" "${LOCAL[@]}"
expect_exit 2 ferry run cur.yaml --quiet
grep -q "cursor.*iceberg keeps its own position" <<< "$OUT" || fail "a cursor should be refused: $OUT"
reader incr.yaml ice_incr inc incremental merge "" "${LOCAL[@]}"
expect_exit 0 ferry run incr.yaml --quiet
same t inc.t "incremental, first run (the whole snapshot)"
pgq -c "CREATE SCHEMA incu"
reader incu.yaml ice_incu incu incremental upsert "" "${LOCAL[@]}"
expect_exit 0 ferry run incu.yaml --quiet
# snapshot ids use all 63 bits: jq would round them
first_snap=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["current-snapshot-id"])' "$(meta)")

pgq -c "UPDATE t SET name = 'upd' || id, amount = NULL WHERE id <= 30;
        INSERT INTO t SELECT id + 300, name, amount, flag, d, tm, ts, tz, u, b, f, i, s FROM t_v1 WHERE id <= 40"
expect_exit 0 ferry run in.yaml --quiet
[ "$(jq -r '.snapshots[-1].summary.operation' "$(meta)")" = overwrite ] || fail "the upsert should commit an overwrite"
[ "$(jq -r '.snapshots[-1].summary."added-delete-files" // "0"' "$(meta)")" != 0 ] || fail "the upsert wrote no delete file"
expect_exit 0 ferry run incr.yaml --quiet
same t inc.t "incremental after an upsert (equality deletes)"
upsnap=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["current-snapshot-id"])' "$(meta)")
expect_exit 3 ferry run incu.yaml --quiet
grep -q "snapshot $upsnap is an overwrite.*write: merge" <<< "$OUT" || fail "write: upsert must refuse deletes: $OUT"
pass "incremental: an upsert's overwrite snapshot replayed (equality deletes by key)"

# ---- 3. time travel ---------------------------------------------------------------------------
reader tt.yaml ice_tt tt full replace ", snapshot_id: $first_snap" "${LOCAL[@]}"
expect_exit 0 ferry run tt.yaml --quiet
same t_v1 tt.t "time travel by snapshot_id"
ms=$(python3 -c 'import json,sys; print([s["timestamp-ms"] for s in json.load(open(sys.argv[1]))["snapshots"] if s["snapshot-id"] == int(sys.argv[2])][0])' "$(meta)" "$first_snap")
as_of=$(date -u -d "@$((ms / 1000))" +%Y-%m-%dT%H:%M:%S).$(printf %03d $((ms % 1000)))Z
pgq -c "DROP TABLE tt.t"
reader asof.yaml ice_asof tt full replace ", as_of: '$as_of'" "${LOCAL[@]}"
expect_exit 0 ferry run asof.yaml --quiet
same t_v1 tt.t "time travel by as_of"
pass "time travel: snapshot_id and as_of read the first snapshot"

pgq -c "INSERT INTO t_more SELECT id + 1000, name, amount, flag, d, tm, ts, tz, u, b, f, i, s FROM t_v1 WHERE id <= 25;
        INSERT INTO t SELECT * FROM t_more"
writer app.yaml ice_app t_more append "${LOCAL[@]}"
expect_exit 0 ferry run app.yaml --quiet
[ "$(jq -r '.snapshots[-1].summary.operation' "$(meta)")" = append ] || fail "want an append snapshot"
expect_exit 0 ferry run incr.yaml --json
[ "$(tail -n 1 <<< "$OUT" | jq .rows)" = 25 ] || fail "the append run should read its 25 rows only: $OUT"
same t inc.t "incremental after an append"
expect_exit 0 ferry run incr.yaml --quiet
same t inc.t "incremental with nothing new"
pass "incremental: an append read alone; a run with nothing new changes nothing"

pgq -c "DELETE FROM t WHERE id % 10 = 5; UPDATE t SET flag = NULL WHERE id BETWEEN 100 AND 110"
writer rep.yaml ice_rep t replace "${LOCAL[@]}"
expect_exit 0 ferry run rep.yaml --quiet
expect_exit 0 ferry run incr.yaml --quiet
same t inc.t "incremental after a replace with deleted rows"
pass "incremental: a replace (files removed) applied as deletes by key, then inserts"

expect_exit 0 ferry iceberg expire t --warehouse "$T/wh" --namespace db --older-than 0s --retain-last 1
[ "$(jq '.snapshots | length' "$(meta)")" = 1 ] || fail "expire should keep one snapshot"
pgq -c "DELETE FROM t_more; INSERT INTO t_more SELECT id + 2000, name, amount, flag, d, tm, ts, tz, u, b, f, i, s FROM t_v1 WHERE id <= 5;
        INSERT INTO t SELECT * FROM t_more"
expect_exit 0 ferry run app.yaml --quiet
expect_exit 0 ferry run incr.yaml --quiet
same t inc.t "incremental after expire"
pass "incremental after \`ferry iceberg expire\`: the new snapshot read on top of the kept one"

for k in 1 2; do
  pgq -c "DELETE FROM t_more; INSERT INTO t_more SELECT id + 3000 + $k * 10, name, amount, flag, d, tm, ts, tz, u, b, f, i, s FROM t_v1 WHERE id <= 3;
          INSERT INTO t SELECT * FROM t_more"
  expect_exit 0 ferry run app.yaml --quiet
done
expect_exit 0 ferry iceberg expire t --warehouse "$T/wh" --namespace db --older-than 0s --retain-last 1
expect_exit 7 ferry run incr.yaml --quiet
grep -q "is not an ancestor of the current snapshot" <<< "$OUT" || fail "a broken chain: $OUT"
sed 's/name: ice_incr/name: ice_incr_again/' incr.yaml > incr2.yaml
expect_exit 0 ferry run incr2.yaml --quiet
same t inc.t "incremental read again in full (a new pipeline name)"
pass "incremental: a checkpoint expired past its child is refused; a new pipeline reads the table again"

# a replace (which lists no DELETED entries) whose parent was expired: its deletes are unknowable
pgq -c "DELETE FROM t WHERE id = 3"
expect_exit 0 ferry run rep.yaml --quiet
rep_snap=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["current-snapshot-id"])' "$(meta)")
expect_exit 0 ferry iceberg expire t --warehouse "$T/wh" --namespace db --older-than 0s --retain-last 1
expect_exit 1 ferry run incr2.yaml --quiet
grep -q "snapshot $rep_snap removed .* data files that its manifests do not list" <<< "$OUT" \
  || fail "a replace whose parent was expired must be refused: $OUT"
pass "incremental: a replace whose parent was expired is refused naming it (its deletes are unknowable)"

expect_exit 7 ferry run tt.yaml --quiet
grep -q "no snapshot $first_snap" <<< "$OUT" || fail "an expired snapshot should be named: $OUT"
pass "time travel to an expired snapshot: refused naming it"

# ---- 4. S3 warehouse ------------------------------------------------------------------------------
pgq -c "CREATE TABLE t_local AS SELECT * FROM t" # what the local warehouse holds
S3W=("warehouse: s3://$S3_BUCKET/wh" "namespace: db" "catalog: sql" "catalog_uri: $T/catalog.db"
     "endpoint: \"$S3_ENDPOINT\"" "path_style: true" "access_key_id: env:S3_KEY"
     "secret_access_key: env:S3_SECRET")
writer s3in.yaml ice_s3in t upsert "${S3W[@]}"
expect_exit 0 ferry run s3in.yaml --quiet
reader s3full.yaml ice_s3full s3b full replace "" "${S3W[@]}"
expect_exit 0 ferry run s3full.yaml --quiet
same t s3b.t "S3 warehouse, full read"
pgq -c "CREATE SCHEMA s3i"
reader s3incr.yaml ice_s3incr s3i incremental merge "" "${S3W[@]}"
expect_exit 0 ferry run s3incr.yaml --quiet
pgq -c "UPDATE t SET name = name || '!' WHERE id < 20; INSERT INTO t SELECT id + 5000, name, amount, flag, d, tm, ts, tz, u, b, f, i, s FROM t_v1 WHERE id <= 10"
expect_exit 0 ferry run s3in.yaml --quiet
expect_exit 0 ferry run s3incr.yaml --quiet
same t s3i.t "S3 warehouse, incremental after an upsert"
pass "S3 warehouse (SQL catalog): full and incremental reads back exactly"

# the filesystem catalog on S3 (a bucket honouring If-None-Match, as the writer needs)
S3F=("warehouse: s3://$COND/wh" "namespace: db" "endpoint: \"$S3_ENDPOINT\"" "path_style: true"
     "access_key_id: env:S3_KEY" "secret_access_key: env:S3_SECRET")
pgq -c "CREATE SCHEMA s3f"
writer s3fin.yaml ice_s3fin t append "${S3F[@]}"
expect_exit 0 ferry run s3fin.yaml --quiet
reader s3ffull.yaml ice_s3ffull s3f full replace "" "${S3F[@]}"
expect_exit 0 ferry run s3ffull.yaml --quiet
same t s3f.t "S3 warehouse, filesystem catalog, full read"
[ -z "$(s3c "$COND" list wh/ | grep -F .ferry-probe)" ] || fail "a probe object was left behind"
pass "S3 warehouse (filesystem catalog): full read back exactly"

# ---- 5. a cdc merge table: position and equality deletes ------------------------------------------
pgq >/dev/null <<'SQL'
CREATE TABLE c (id int PRIMARY KEY, v text, n numeric(10,3));
INSERT INTO c SELECT g, 'v' || g, g / 8.0 FROM generate_series(1, 400) g;
CREATE SCHEMA cf; CREATE SCHEMA ci;
SQL
cat > cdc.yaml <<YAML
version: 1
name: ice_cdc_src
source: {type: postgres, url: env:PG_URL, resources: [{table: c, mode: cdc}]}
sink: {type: iceberg, warehouse: $T/wh, namespace: db, write: merge}
batch: {rows: 100, flush_after: 200ms}
YAML
reader_c() { # FILE NAME SCHEMA MODE WRITE
  sed -e "s/resources: \[{table: t, mode: incremental}\]/resources: [{table: c, mode: $4}]/" \
      -e "s/name: ice_incr/name: $2/" -e "s/schema: inc, write: merge/schema: $3, write: $5/" incr.yaml > "$1"
  grep -q "table: c, mode: $4" "$1" && grep -q "schema: $3" "$1" || fail "$1: $(cat "$1")"
}
reader_c cincr.yaml ice_cincr ci incremental merge
reader_c cfull.yaml ice_cfull cf full replace
expect_exit 0 ferry run cdc.yaml --quiet
expect_exit 0 ferry run cincr.yaml --quiet
same c ci.c "cdc merge table, incremental read of its first snapshot"
pgq >/dev/null <<'SQL'
UPDATE c SET v = v || '+' WHERE id % 4 = 0;
UPDATE c SET v = v || '+' WHERE id % 8 = 0;    -- twice in one run: a position delete
DELETE FROM c WHERE id % 9 = 0;
INSERT INTO c VALUES (1000, 'short', 1);
DELETE FROM c WHERE id = 1000;
INSERT INTO c SELECT g, 'new', g FROM generate_series(401, 450) g;
SQL
expect_exit 0 ferry run cdc.yaml --quiet
M=$(ls -v "$T"/wh/db/c/metadata/v*.metadata.json | tail -1)
jq -e '.snapshots[-1].summary | (."added-position-deletes" // "0" | tonumber) > 0 and (."added-equality-deletes" | tonumber) > 0' "$M" >/dev/null \
  || fail "the cdc run should write position and equality deletes: $(jq -c '.snapshots[-1].summary' "$M")"
expect_exit 0 ferry run cfull.yaml --quiet
same c cf.c "cdc merge table, full read (position + equality deletes applied)"
expect_exit 0 ferry run cincr.yaml --quiet
same c ci.c "cdc merge table, incremental read"
pass "a cdc merge table (position and equality deletes) read in full and incrementally"

# a crash after some batches are durable, then the run resumed: no row lost or doubled
pgq -c "CREATE SCHEMA res"
reader_c cres.yaml ice_cres res full append
expect_exit 137 env FERRY_FAILPOINTS=after_sink_apply=crash@3 "$FERRY_BIN" run cres.yaml --quiet
partial=$(pgq -c "SELECT count(*) FROM res.c")
[ "$partial" -gt 0 ] && [ "$partial" -lt "$(pgq -c "SELECT count(*) FROM c")" ] || fail "the crash should leave a partial copy ($partial rows)"
expect_exit 0 ferry run cres.yaml
grep -q resuming <<< "$OUT" || fail "the run after the crash should resume: $OUT"
same c res.c "a full read resumed after a crash (deletes applied, positions skipped)"
pass "a crash mid-read, then resume: exactly the table, no row lost or doubled"

# ---- 6. bad input ---------------------------------------------------------------------------------
reader bad.yaml ice_bad bad full replace "" "${LOCAL[@]}"
live=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["current-snapshot-id"])' "$(meta)")
# a data file of the current snapshot: the newest one (the last append wrote it)
victim=$(ls -t $(find "$T/wh/db/t/data" -name '*.parquet') | head -1)
[ -n "$victim" ] || fail "no data file"
cp "$victim" saved.parquet
rm "$victim"
expect_exit 7 ferry run bad.yaml --quiet
grep -q "$victim is missing" <<< "$OUT" && grep -q "snapshot $live" <<< "$OUT" || fail "a missing data file: $OUT"
[ "$(pgq -c "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'bad'")" = 0 ] || fail "a table was made"
head -c 100 saved.parquet > "$victim"
expect_exit 1 ferry run bad.yaml --quiet
grep -q "$victim is 100 bytes" <<< "$OUT" || fail "a truncated data file: $OUT"
cp saved.parquet "$victim"
expect_exit 0 ferry run bad.yaml --quiet
same t_local bad.t "the restored file"
pgq -c "DROP TABLE bad.t"
gone=$(meta)
mv "$gone" saved.json
expect_exit 7 ferry run bad.yaml --quiet
grep -q "$gone: No such file" <<< "$OUT" || fail "a missing metadata file should be named: $OUT"
[ "$(pgq -c "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'bad'")" = 0 ] || fail "a table was made"
mv saved.json "$gone"
reader nocat.yaml ice_nocat bad full replace "" "warehouse: $T/wh" "namespace: db" "catalog: sql" \
  "catalog_uri: $T/nope/catalog.db"
expect_exit 7 ferry run nocat.yaml --quiet
grep -q "cannot open the SQL catalog $T/nope/catalog.db" <<< "$OUT" || fail "a missing catalog file: $OUT"
[ ! -e "$T/nope" ] || fail "reading created the catalog's folder"
pass "bad input: a missing or truncated data file and a missing metadata file named, nothing written"

# ---- 7. schema evolution and a partitioned table ----------------------------------------------------
pgq >/dev/null <<'SQL'
CREATE TABLE e (id int PRIMARY KEY, a text, x int);
INSERT INTO e SELECT g, 'a' || g, g FROM generate_series(1, 200) g;
CREATE SCHEMA ef; CREATE SCHEMA ei;
SQL
cat > e_in.yaml <<YAML
version: 1
name: ice_e_in
source: {type: postgres, url: env:PG_URL, resources: [{table: e}]}
sink:
  type: iceberg
  warehouse: $T/wh
  namespace: db
  write: upsert
  partition: {e: ["bucket(4, id)"]}
YAML
sed -e 's/resources: \[{table: t, mode: incremental}\]/resources: [{table: e, mode: incremental}]/' \
    -e 's/name: ice_incr/name: ice_ei/' -e 's/schema: inc,/schema: ei,/' incr.yaml > e_incr.yaml
sed -e 's/resources: \[{table: t, mode: incremental}\]/resources: [{table: e, mode: full}]/' \
    -e 's/name: ice_incr/name: ice_ef/' -e 's/schema: inc, write: merge/schema: ef, write: replace/' incr.yaml > e_full.yaml
expect_exit 0 ferry run e_in.yaml --quiet
expect_exit 0 ferry run e_incr.yaml --quiet
pgq -c "ALTER TABLE e ADD COLUMN b numeric(8,2), ALTER COLUMN x TYPE bigint;
        UPDATE e SET a = a || '*', b = id / 4.0 WHERE id % 5 = 0;
        INSERT INTO e SELECT g, 'new' || g, g, g / 2.0 FROM generate_series(201, 230) g"
expect_exit 0 ferry run e_in.yaml --quiet
M=$(ls -v "$T"/wh/db/e/metadata/v*.metadata.json | tail -1)
[ "$(jq '.schemas | length' "$M")" -ge 2 ] && [ "$(jq '."partition-specs"[0].fields | length' "$M")" = 1 ] \
  || fail "want a new schema version and a bucket partition: $(jq -c '{schemas: .schemas | length, specs: ."partition-specs"}' "$M")"
expect_exit 0 ferry run e_full.yaml --quiet
same e ef.e "a partitioned table with a column added and widened, full read"
# the postgres sink adds columns but never changes a type: widen x as the table did
pgq -c "ALTER TABLE ei.e ALTER COLUMN x TYPE bigint"
expect_exit 0 ferry run e_incr.yaml --quiet
same e ei.e "a partitioned table with a column added and widened, incremental"
pass "schema evolution (a column added, int widened to long) and bucket partitions: full and incremental"

# ---- 8. the REST catalog ------------------------------------------------------------------------------
export REST_TOKEN="rest-token-$RANDOM$RANDOM"
node "$FERRY_SRC/tests/tools/rest_catalog.mjs" "$T/rest" "$T/rest.port" > "$T/rest.log" 2>&1 &
rest_pid=$!
# shellcheck disable=SC2064 # the pid and the trap so far are expanded now, on purpose
trap "__rc=\$?; set +e; kill $rest_pid 2>/dev/null; wait $rest_pid 2>/dev/null; (exit \$__rc); $(trap -p EXIT | sed "s/^trap -- '//; s/' EXIT\$//")" EXIT
for _ in $(seq 1 100); do [ -s "$T/rest.port" ] && break; sleep 0.1; done
[ -s "$T/rest.port" ] || fail "the REST catalog did not start: $(cat "$T/rest.log")"
REST=("warehouse: $T/rwh" "namespace: db" "catalog: rest" "catalog_uri: \"http://127.0.0.1:$(cat "$T/rest.port")\""
      "catalog_token: env:REST_TOKEN")
pgq -c "CREATE SCHEMA rb; CREATE SCHEMA ri; CREATE TABLE t_rest AS SELECT * FROM t"
writer rin.yaml ice_rin t upsert "${REST[@]}"
expect_exit 0 ferry run rin.yaml --quiet
reader rfull.yaml ice_rfull rb full replace "" "${REST[@]}"
expect_exit 0 ferry run rfull.yaml --quiet
same t rb.t "REST catalog, full read"
reader rincr.yaml ice_rincr ri incremental merge "" "${REST[@]}"
expect_exit 0 ferry run rincr.yaml --quiet
pgq -c "UPDATE t SET name = name || '#' WHERE id % 13 = 0"
expect_exit 0 ferry run rin.yaml --quiet
expect_exit 0 ferry run rincr.yaml --quiet
same t ri.t "REST catalog, incremental after an upsert"
grep -q "$REST_TOKEN" <<< "$OUT$(cat ./*.yaml)" && fail "the token appears in output or files"
pass "REST catalog (bearer token): full and incremental reads back exactly"
