#!/usr/bin/env bash
# The iceberg sink (part 2 of 2, see iceberg.sh), read back by icebird over HTTP and by
# DuckDB, as in part 1.
# Rows are compared with a reference copy of the same sample written by the sqlite sink:
# set equality of whole rows and each column's type (tests/tools/iceberg_lib.sh).
#   2b. kill -9 at a random moment then resume: exactly one copy and no orphan data file;
#      two writers committing at once: one retries, both appends kept;
#   4. partitioned by day(created_at) and bucket(4, id): readable, each file holds one
#      partition, the partition values match the rows;
#   5. the SQL catalog (SQLite): iceberg_tables points at the current metadata, readable;
#      incremental runs append only new rows; manifest merging keeps the list short;
#      schema evolution: new columns get fresh field ids, int widens to long, an
#      incompatible type change is refused naming the column; upsert through equality
#      delete files (merge with deletes and same-commit updates: tests/unit/test_iceberg.c);
#   6. bad config: one clear message, nothing written.
. "$(dirname "$0")/lib.sh"
. "$FERRY_SRC/tests/tools/iceberg_lib.sh"

# ---- 2b. kill -9 and concurrent writers ----------------------------------------------------
# kill -9 at a random moment of a longer run, then resume: exactly one more copy
pipeline kill.yaml kill 30000 "type: iceberg" "warehouse: $T/wk" "namespace: db"
"$FERRY_BIN" run kill.yaml --quiet > kill.log 2>&1 &
pid=$!
sleep "0.$((2 + RANDOM % 7))"
kill -9 "$pid" 2>/dev/null || true
st=0
wait "$pid" 2>/dev/null || st=$?
copies=$(copies_after_kill kill "$st")
expect_exit 0 ferry run kill.yaml --quiet
for t in orders users; do
  got=$(nodetool "$READ" "$T/wk" db $t | jq -r .id | sort -n | uniq -c | awk -v c=$copies '$1 != c' | wc -l)
  [ "$got" = 0 ] || fail "after kill -9 and resume: $got ids of $t not exactly $copies times"
  [ "$(nodetool "$READ" "$T/wk" db $t | wc -l)" = $((30000 * copies)) ] || fail "after kill -9 and resume: $t row count"
done
for t in orders users; do # files of the killed attempt that no snapshot names were removed
  listed=$(nodetool "$READ" "$T/wk" db --files $t | jq -r '.data_file.file_path' | sed 's|^file://||' | sort)
  on_disk=$(find "$T/wk/db/$t/data" -name '*.parquet' | sort)
  [ "$listed" = "$on_disk" ] || fail "$t: data files on disk differ from the snapshot's: [$on_disk] vs [$listed]"
done
pass "kill -9 mid-run then resume: exactly one copy, no orphan data file"

# two writers append to the same tables at once: both read version N, sleep, one commits
# N+1, the other's exclusive link fails, it re-reads and commits N+2 on top
pipeline ca.yaml conc-a "$ROWS" "type: iceberg" "warehouse: $T/wc" "namespace: db"
pipeline cb.yaml conc-b "$ROWS" "type: iceberg" "warehouse: $T/wc" "namespace: db"
expect_exit 0 ferry run ca.yaml --quiet --state "$T/ca.db"
FERRY_FAILPOINTS='iceberg_before_catalog_commit=sleep(1500)' FERRY_LOG=info "$FERRY_BIN" run ca.yaml \
  --quiet --state "$T/ca.db" > ca.log 2>&1 &
pa=$!
FERRY_FAILPOINTS='iceberg_before_catalog_commit=sleep(1500)' FERRY_LOG=info "$FERRY_BIN" run cb.yaml \
  --quiet --state "$T/cb.db" > cb.log 2>&1 &
pb=$!
wait "$pa" || fail "concurrent writer a failed: $(cat ca.log)"
wait "$pb" || fail "concurrent writer b failed: $(cat cb.log)"
grep -q "conflict, retrying" ca.log cb.log || fail "the concurrent commits never conflicted"
M=$(latest_meta "$T/wc/db/orders")
[ "$(jq '.snapshots | length' "$M")" = 3 ] || fail "concurrent appends: want 3 snapshots"
[ "$(jq '[.snapshots[] | ."parent-snapshot-id"] | .[1:] | map(. != null) | all' "$M")" = true ] || fail "snapshot chain"
got=$(nodetool "$READ" "$T/wc" db orders | jq -r .id | sort -n | uniq -c | awk '$1 != 3' | wc -l)
[ "$got" = 0 ] || fail "concurrent appends: $got ids not exactly 3 times"
pass "concurrent writers: a conflict re-reads the metadata and retries; both appends kept"

# ---- 4. partitioned ---------------------------------------------------------------------------
pipeline part.yaml part "$ROWS" "type: iceberg" "warehouse: $T/wp" "namespace: db" \
  "partition: {orders: [day(created_at), 'bucket(4, id)'], users: ['bucket[3](id)', identity(active)]}"
expect_exit 0 ferry run part.yaml --quiet
M=$(latest_meta "$T/wp/db/orders")
[ "$(jq -c '[."partition-specs"[0].fields[] | [.name, .transform, ."source-id", ."field-id"]]' "$M")" = \
  '[["created_at_day","day",9,1000],["id_bucket","bucket[4]",1,1001]]' ] || fail "partition spec: $(jq -c '."partition-specs"' "$M")"
WH_SAVE=$WH; WH=$T/wp
check_orders 1
nodetool "$READ" "$WH" db --files orders > pfiles.jsonl
[ "$(wc -l < pfiles.jsonl)" = 4 ] || fail "partitioned: want one file per bucket of the one day"
while read -r line; do
  p=$(jq -r '.data_file.file_path' <<< "$line" | sed 's|^file://||')
  day=$(jq -r '.data_file.partition.created_at_day' <<< "$line")
  case "$p" in */created_at_day=*/id_bucket=*/*.parquet) ;; *) fail "partition path: $p" ;; esac
  got=$(nodetool "$DUCK" "SELECT count(DISTINCT (epoch_us(created_at) // 86400000000)), min(epoch_us(created_at) // 86400000000) FROM read_parquet('$p')" | jq -r 'map(tostring) | join(" ")')
  [ "$got" = "1 $day" ] || fail "$p: rows of day $got, partition value $day"
done < pfiles.jsonl
[ "$(nodetool "$READ" "$WH" db users | wc -l)" = "$ROWS" ] || fail "partitioned users: row count"
WH=$WH_SAVE
pass "partitioned by day/bucket/identity: one partition per file, values match, readable"

# ---- 5. SQL catalog --------------------------------------------------------------------------
pipeline sql.yaml sql "$ROWS" "type: iceberg" "warehouse: $T/ws" "namespace: db" "catalog: sql" \
  "catalog_uri: $T/catalog.db"
expect_exit 0 ferry run sql.yaml --quiet
expect_exit 0 ferry run sql.yaml --quiet
loc=$(q "$T/catalog.db" "SELECT metadata_location FROM iceberg_tables WHERE catalog_name = 'ferry' AND table_namespace = 'db' AND table_name = 'orders'")
prev=$(q "$T/catalog.db" "SELECT previous_metadata_location FROM iceberg_tables WHERE table_name = 'orders'")
[ -f "${loc#file://}" ] && [ -f "${prev#file://}" ] || fail "SQL catalog: metadata files $loc / $prev"
[ "$(jq '.snapshots | length' "${loc#file://}")" = 2 ] || fail "SQL catalog: two snapshots"
[ "$(q "$T/catalog.db" "SELECT property_value FROM iceberg_namespace_properties WHERE namespace = 'db' AND property_key = 'exists'")" = true ] \
  || fail "SQL catalog: namespace property"
[ "$(nodetool "$READ" "$T/ws" db orders "$(basename "$loc")" | wc -l)" = $((2 * ROWS)) ] || fail "SQL catalog: icebird row count"
pass "SQL catalog: iceberg_tables swapped by compare-and-swap, readable"

# ---- 5b. schema evolution (a SQLite source whose table changes between runs) -----------------
sqlite_pipeline() { # FILE
  cat > "$1" <<EOF2
version: 1
name: evo
source:
  type: sqlite
  path: $T/src.db
  resources:
    - {table: t, mode: full}
sink:
  type: iceberg
  warehouse: $T/we
  namespace: db
EOF2
}
sqlite_pipeline evo.yaml
q "$T/src.db" "CREATE TABLE t (id INTEGER PRIMARY KEY, n INT4, s TEXT); INSERT INTO t VALUES (1, 10, 'a'), (2, 20, 'b');"
expect_exit 0 ferry run evo.yaml --quiet
q "$T/src.db" "DROP TABLE t; CREATE TABLE t (id INTEGER PRIMARY KEY, n INTEGER, s TEXT, extra TEXT); INSERT INTO t VALUES (3, 5000000000, 'c', 'x');"
expect_exit 0 ferry run evo.yaml --quiet
M=$(latest_meta "$T/we/db/t")
[ "$(jq -c '[.schemas[-1].fields[] | [.id, .name, .type, .required]]' "$M")" = \
  '[[1,"id","long",true],[2,"n","long",false],[3,"s","string",false],[4,"extra","string",false]]' ] \
  || fail "evolved schema: $(jq -c '.schemas' "$M")"
[ "$(jq '."current-schema-id"' "$M")" = 1 ] && [ "$(jq '."last-column-id"' "$M")" = 4 ] || fail "schema id / last column id"
got=$(nodetool "$READ" "$T/we" db t | jq -c '[.id, .n, .s, .extra]' | sort | tr '\n' ' ')
[ "$got" = '["1",10,"a",null] ["2",20,"b",null] ["3","5000000000","c","x"] ' ] || fail "icebird after evolution: $got"
q "$T/src.db" "DROP TABLE t; CREATE TABLE t (id INTEGER PRIMARY KEY, n INTEGER, s REAL); INSERT INTO t VALUES (4, 1, 2.5);"
expect_exit 1 ferry run evo.yaml --quiet
grep -q "column s is string in the table and double in the source" <<< "$OUT" || fail "incompatible change: $OUT"
pass "schema evolution: new columns get fresh ids, int widens to long, an incompatible change is refused"

# ---- 5b'. incremental: each run appends only what is new; nothing new, no snapshot ----------
cat > inc.yaml <<EOF2
version: 1
name: inc
source:
  type: sqlite
  path: $T/src3.db
  resources:
    - {table: e, mode: incremental, cursor: [at]}
sink:
  type: iceberg
  warehouse: $T/wi
  namespace: db
EOF2
q "$T/src3.db" "CREATE TABLE e (id INTEGER PRIMARY KEY, at INTEGER NOT NULL, v TEXT); INSERT INTO e VALUES (1, 10, 'a'), (2, 20, 'b');"
expect_exit 0 ferry run inc.yaml --quiet
expect_exit 0 ferry run inc.yaml --quiet
[ "$(jq '.snapshots | length' "$(latest_meta "$T/wi/db/e")")" = 1 ] || fail "incremental run with nothing new made a snapshot"
q "$T/src3.db" "INSERT INTO e VALUES (3, 30, 'c'), (4, 40, 'd');"
expect_exit 137 env FERRY_FAILPOINTS=after_sink_commit=crash "$FERRY_BIN" run inc.yaml --quiet
expect_exit 0 ferry run inc.yaml --quiet    # resumes: the table holds the run's checkpoint
expect_exit 0 ferry run inc.yaml --quiet    # a new run: nothing new
M=$(latest_meta "$T/wi/db/e")
[ "$(jq '.snapshots | length' "$M")" = 2 ] || fail "incremental: want 2 snapshots, got $(jq '.snapshots | length' "$M")"
got=$(nodetool "$READ" "$T/wi" db e | jq -r .id | sort -n | tr '\n' ' ')
[ "$got" = "1 2 3 4 " ] || fail "incremental read back: $got"
pass "incremental: new rows appended once, a crash after commit commits nothing twice, no empty snapshots"

# ---- 5b''. manifest merging: many small appends keep a short manifest list -------------------
pipeline mrg.yaml mrg 500 "type: iceberg" "warehouse: $T/wm" "namespace: db" "manifest_merge_count: 3"
for _ in 1 2 3 4; do expect_exit 0 ferry run mrg.yaml --quiet; done
nodetool "$READ" "$T/wm" db --files orders > mfiles.jsonl || fail "merged manifests unreadable"
[ "$(jq -r .status mfiles.jsonl | sort | tr '\n' ' ')" = "0 0 0 1 " ] \
  || fail "after the merge: want 3 EXISTING entries and 1 ADDED, got $(jq -r .status mfiles.jsonl | tr '\n' ' ')"
[ "$(jq -r .sequence_number mfiles.jsonl | sort -n | tr '\n' ' ')" = "1 2 3 4 " ] \
  || fail "merged entries keep their data sequence numbers: $(jq -r .sequence_number mfiles.jsonl | tr '\n' ' ')"
got=$(nodetool "$READ" "$T/wm" db orders | jq -r .id | sort -n | uniq -c | awk '$1 != 4' | wc -l)
[ "$got" = 0 ] && [ "$(nodetool "$READ" "$T/wm" db orders | wc -l)" = 2000 ] || fail "after the merge: rows"
pass "manifest merging: earlier data manifests rewritten as one, EXISTING entries, rows intact"

# ---- 5c. upsert: equality deletes by the key (merge-on-read) ---------------------------------
cat > ups.yaml <<EOF2
version: 1
name: ups
source:
  type: sqlite
  path: $T/src2.db
  resources:
    - {table: u, mode: full}
sink:
  type: iceberg
  warehouse: $T/wu
  namespace: db
  write: upsert
EOF2
q "$T/src2.db" "CREATE TABLE u (id INTEGER PRIMARY KEY, v TEXT NOT NULL); INSERT INTO u VALUES (1, 'a'), (2, 'b'), (3, 'c');"
expect_exit 0 ferry run ups.yaml --quiet
q "$T/src2.db" "UPDATE u SET v = 'B' WHERE id = 2; INSERT INTO u VALUES (4, 'd');"
expect_exit 0 ferry run ups.yaml --quiet
got=$(nodetool "$READ" "$T/wu" db u | jq -r '"\(.id)=\(.v)"' | sort | tr '\n' ' ')
[ "$got" = "1=a 2=B 3=c 4=d " ] || fail "upsert read back by icebird: $got"
M=$(latest_meta "$T/wu/db/u")
jq -e '.snapshots[1].summary | .operation == "overwrite" and ."added-delete-files" == "1" and
  ."added-equality-deletes" == "4" and ."total-records" == "7"' "$M" >/dev/null \
  || fail "upsert snapshot summary: $(jq -c '.snapshots[1].summary' "$M")"
nodetool "$READ" "$T/wu" db --files u > /dev/null || fail "upsert: manifests unreadable"
pass "upsert: equality delete files keyed by the identifier field, read back merged by icebird"

# ---- 6. bad config ---------------------------------------------------------------------------
pipeline bad1.yaml bad1 10 "type: iceberg" "namespace: db"
expect_exit 2 ferry run bad1.yaml --quiet
grep -q "sink.warehouse" <<< "$OUT" || fail "missing warehouse: $OUT"
# (the filesystem catalog on an S3 store without conditional writes: iceberg_s3.sh)
pipeline bad2.yaml bad2 10 "type: iceberg" "warehouse: gs://bucket/wh"
expect_exit 2 ferry run bad2.yaml --quiet
grep -q "s3://BUCKET/PATH" <<< "$OUT" || fail "unsupported object store: $OUT"
[ "$(grep -c . <<< "$OUT")" -le 2 ] || fail "one clear message, got: $OUT"
pipeline bad3.yaml bad3 10 "type: iceberg" "warehouse: $T/wb" "partition: {orders: [month(created_at)]}"
expect_exit 2 ferry run bad3.yaml --quiet
grep -q "month" <<< "$OUT" || fail "unknown transform: $OUT"
[ ! -e "$T/wb/db" ] || [ -z "$(find "$T/wb" -name '*.parquet')" ] || fail "a refused pipeline wrote data"
pass "bad config: one clear message naming the key"
