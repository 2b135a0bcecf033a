#!/usr/bin/env bash
# shared: s3
# The iceberg sink with an S3 warehouse (`warehouse: s3://$S3_BUCKET/wh`) on s3rver (loopback, every
# request's SigV4 checked: tests/s3/server.mjs), committed through the SQL catalog (SQLite).
# Every table is read back by icebird over HTTP from the S3 server (tests/tools/read_iceberg.mjs
# maps the s3:// locations to it and signs with `aws4`), values compared with a reference copy
# of the same sample (set equality of whole rows); the data files the manifests list are
# downloaded with the independent client and read by DuckDB.
#   1. append twice: metadata, manifests and data are objects under s3://$S3_BUCKET/wh/db/<table>/,
#      every location is an s3:// URI, nothing is written locally; rows equal the source;
#   2. a crash (failpoint crash = _exit, as kill -9) just before the catalog commit: no new
#      snapshot, the resumed run commits once and deletes the dead attempt's data objects;
#      a crash right after the commit: the resumed run commits nothing again; a real kill -9
#      at a random moment of a longer run, then resume: exactly one more copy, no orphan;
#   3. replace: an overwrite snapshot with exactly the new rows;
#   4. merge (sqlite source, updates and inserts): equality delete files on S3, read back
#      merged by icebird;
#   5. the filesystem catalog on a bucket whose store ignores If-None-Match (as s3rver does):
#      refused with a clear error naming the warehouse and pointing to `catalog: sql`, exit
#      non-zero, nothing left;
#   6. the filesystem catalog on a bucket where the test server honours If-None-Match as S3
#      does (S3_CONDITIONAL_BUCKETS): vN.metadata.json + version-hint.text objects, read by
#      icebird through the hint; two writers racing for the same version: one conditional PUT
#      is refused, that writer re-reads and commits on top, both appends kept;
#   7. a data file above multipart_chunk goes up as a multipart upload (seen in the request
#      log of a pass-through proxy: CreateMultipartUpload, parts 1..N, Complete), read back
#      whole by icebird and by DuckDB;
#   8. a wrong secret: HTTP 403 named, exit non-zero, the secret never printed.
. "$(dirname "$0")/lib.sh"
. "$FERRY_SRC/tests/s3/s3.sh"
. "$FERRY_SRC/tests/tools/iceberg_lib.sh"
s3_have || fail "node and tests/tools/node_modules (s3rver, aws4) are needed: run scripts/install-deps.sh"
export S3_KEY=S3RVER S3_SECRET=S3RVER AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER
S3_CONDITIONAL_BUCKETS=cond s3_start lake cond
COND=$(s3_bucket cond)
export S3_ENDPOINT
SWH=s3://$S3_BUCKET/wh
CAT="$T/catalog.db"
S3KEYS=("endpoint: \"$S3_ENDPOINT\"" "path_style: true" "access_key_id: env:S3_KEY"
        "secret_access_key: env:S3_SECRET")
SINK=("type: iceberg" "warehouse: $SWH" "namespace: db" "catalog: sql" "catalog_uri: $CAT"
      "${S3KEYS[@]}")

meta_loc() { q "$CAT" "SELECT metadata_location FROM iceberg_tables WHERE table_namespace = 'db' AND table_name = '$1'"; }
meta_name() { basename "$(meta_loc "$1")"; }
meta_json() { local k; k=$(meta_loc "$1"); s3c "$S3_BUCKET" get "${k#s3://$S3_BUCKET/}"; }

# check_s3 COPIES: orders as icebird (over HTTP from s3rver) and DuckDB (data files fetched
# with the independent client) read it equals the reference COPIES times.
check_s3() {
  local m f files=""
  m=$(meta_name orders)
  nodetool "$READ" "$SWH" db orders "$m" > ib.jsonl || fail "icebird could not read db.orders from S3"
  python3 compare.py "$T/ref.db" icebird ib.jsonl "$1" || fail "icebird rows differ from the source"
  nodetool "$READ" "$SWH" db --files orders "$m" > files.jsonl || fail "icebird: manifests unreadable"
  rm -rf dl && mkdir dl
  local keys="" missing
  for f in $(jq -r '.data_file.file_path' files.jsonl); do
    case "$f" in s3://$S3_BUCKET/wh/db/orders/data/*) ;; *) fail "data file outside the table: $f" ;; esac
    keys="$keys ${f#s3://$S3_BUCKET/}"
    files="$files${files:+,}'$T/dl/${f#s3://$S3_BUCKET/}'"
  done
  # shellcheck disable=SC2086
  [ -z "$keys" ] || missing=$(s3c "$S3_BUCKET" getmany dl $keys) || fail "cannot fetch $missing"
  [ -n "$files" ] || fail "no data file listed"
  nodetool "$DUCK" "SELECT id, customer_id, status, quantity, amount::VARCHAR, discount, express, note, \
    epoch_us(created_at), epoch_us(updated_at) FROM read_parquet([$files])" > dk.jsonl \
    || fail "DuckDB could not read the data files"
  python3 compare.py "$T/ref.db" duckdb dk.jsonl "$1" || fail "DuckDB rows differ from the source"
}
snapshots() { meta_json orders | jq '.snapshots | length'; }
data_objects() { s3c "$S3_BUCKET" list wh/db/orders/data/ | grep -c '\.parquet$' || true; }

# ---- 1. append twice ---------------------------------------------------------------------------
pipeline app.yaml app "$ROWS" "${SINK[@]}"
expect_exit 0 ferry run app.yaml --quiet
loc=$(meta_loc orders)
case "$loc" in s3://$S3_BUCKET/wh/db/orders/metadata/00002-*.metadata.json) ;; *) fail "metadata_location: $loc" ;; esac
meta_json orders > m.json
[ "$(jq -r .location m.json)" = s3://$S3_BUCKET/wh/db/orders ] || fail "table location: $(jq -r .location m.json)"
jq -e '.snapshots | length == 1' m.json >/dev/null || fail "one snapshot after one run"
case "$(jq -r '.snapshots[0]."manifest-list"' m.json)" in s3://$S3_BUCKET/wh/db/orders/metadata/snap-*.avro) ;;
  *) fail "manifest list: $(jq -r '.snapshots[0]."manifest-list"' m.json)" ;; esac
[ ! -e "$T/s3:" ] && [ ! -e "$(pwd)/s3:" ] || fail "an s3:// location was written as a local path"
check_s3 1
[ "$(nodetool "$READ" "$SWH" db users "$(meta_name users)" | wc -l)" = "$ROWS" ] || fail "icebird: users row count"
expect_exit 0 ferry run app.yaml --quiet
[ "$(snapshots)" = 2 ] || fail "two snapshots after two runs"
check_s3 2
pass "append twice into s3://$S3_BUCKET/wh (SQL catalog): s3:// locations, rows equal the source (icebird over HTTP, DuckDB)"

# ---- 2. crashes around the catalog commit ------------------------------------------------------
before=$(meta_loc orders)
expect_exit 137 env FERRY_FAILPOINTS=iceberg_before_catalog_commit=crash "$FERRY_BIN" run app.yaml --quiet
[ "$(meta_loc orders)" = "$before" ] || fail "a crash before the catalog commit moved the table"
check_s3 2
[ "$(data_objects)" -gt "$(wc -l < files.jsonl)" ] || fail "the crashed attempt should have left data objects behind"
expect_exit 0 ferry run app.yaml --quiet   # resumes the run: one commit
[ "$(snapshots)" = 3 ] || fail "after the resume: want 3 snapshots, got $(snapshots)"
check_s3 3
[ "$(data_objects)" = "$(wc -l < files.jsonl)" ] \
  || fail "orphans of the dead attempt left on S3: $(data_objects) objects, $(wc -l < files.jsonl) live files"
expect_exit 137 env FERRY_FAILPOINTS=after_sink_commit=crash "$FERRY_BIN" run app.yaml --quiet
check_s3 4
n=$(snapshots)
expect_exit 0 ferry run app.yaml --quiet   # resumes: the table already holds its checkpoint
[ "$(snapshots)" = "$n" ] || fail "the resumed run committed the same checkpoint again"
check_s3 4
meta_json orders | jq -e '[.snapshots[].summary."ferry.run-id"] | group_by(.) | map(length) | max == 1' >/dev/null \
  || fail "a run committed two snapshots"
# kill -9 at a random moment of a longer run (its own namespace), then resume
pipeline kill.yaml kill 20000 "${SINK[@]}"
sed -i -e 's|namespace: db$|namespace: kill|' -e '/- {table: users, mode: full}/d' kill.yaml
"$FERRY_BIN" run kill.yaml --quiet > kill.log 2>&1 &
pid=$!
sleep "0.$((2 + RANDOM % 7))"
kill -9 "$pid" 2>/dev/null || true
st=0
wait "$pid" 2>/dev/null || st=$?
copies=$(copies_after_kill kill "$st")
expect_exit 0 ferry run kill.yaml --quiet
kloc=$(q "$CAT" "SELECT metadata_location FROM iceberg_tables WHERE table_namespace = 'kill' AND table_name = 'orders'")
got=$(nodetool "$READ" "$SWH" kill orders "$(basename "$kloc")" | jq -r .id | sort -n | uniq -c | awk -v c=$copies '$1 != c' | wc -l)
[ "$got" = 0 ] || fail "after kill -9 and resume: $got ids not exactly $copies times"
listed=$(nodetool "$READ" "$SWH" kill --files orders "$(basename "$kloc")" | jq -r '.data_file.file_path' | sed "s|^s3://$S3_BUCKET/||" | sort)
stored=$(s3c "$S3_BUCKET" list wh/kill/orders/data/ | sort)
[ "$listed" = "$stored" ] || fail "after kill -9: data objects differ from the snapshot's: [$stored] vs [$listed]"
pass "crash before / after the catalog commit, kill -9 mid-run: no half snapshot, no second commit of a checkpoint, orphans removed"

# ---- 3. replace ----------------------------------------------------------------------------------
pipeline rep.yaml app "$ROWS" "${SINK[@]}" "write: replace"
expect_exit 0 ferry run rep.yaml --quiet
meta_json orders | jq -e '.snapshots[-1].summary | .operation == "overwrite" and ."total-records" == "'"$ROWS"'"' >/dev/null \
  || fail "replace: an overwrite snapshot with the new rows only"
check_s3 1
pass "replace on S3: an overwrite snapshot, readers see exactly the new rows"

# ---- 4. merge: equality deletes on S3 ----------------------------------------------------------
q "$T/src.db" "CREATE TABLE u (id INTEGER PRIMARY KEY, v TEXT NOT NULL); INSERT INTO u VALUES (1, 'a'), (2, 'b'), (3, 'c');"
{
  echo "version: 1"; echo "name: mrg"
  echo "source: {type: sqlite, path: $T/src.db, resources: [{table: u, mode: full}]}"
  echo "sink:"; for l in "${SINK[@]}" "write: merge"; do echo "  $l"; done
} > mrg.yaml
expect_exit 0 ferry run mrg.yaml --quiet
q "$T/src.db" "UPDATE u SET v = 'B' WHERE id = 2; INSERT INTO u VALUES (4, 'd');"
expect_exit 0 ferry run mrg.yaml --quiet
got=$(nodetool "$READ" "$SWH" db u "$(meta_name u)" | jq -r '"\(.id)=\(.v)"' | sort | tr '\n' ' ')
want=$(q "$T/src.db" "SELECT id || '=' || v FROM u ORDER BY id" | tr '\n' ' ')
[ "$got" = "$want" ] || fail "merge read back by icebird: [$got], want [$want]"
meta_json u | jq -e '.snapshots[1].summary | .operation == "overwrite" and ."added-delete-files" == "1"' >/dev/null \
  || fail "merge snapshot summary: $(meta_json u | jq -c '.snapshots[1].summary')"
s3c "$S3_BUCKET" list wh/db/u/data/ | grep -q . || fail "no data objects for db.u"
pass "merge on S3: equality delete files, read back merged by icebird"

# ---- 5. the filesystem catalog where conditional writes are not honoured ------------------------
pipeline fs.yaml fsc 100 "type: iceberg" "warehouse: s3://$S3_BUCKET/fswh" "namespace: db" "${S3KEYS[@]}"
expect_exit 2 ferry run fs.yaml --quiet
echo "$OUT" | grep -q "s3://$S3_BUCKET/fswh" || fail "the refusal should name the warehouse: $OUT"
echo "$OUT" | grep -q "If-None-Match" || fail "the refusal should say why: $OUT"
echo "$OUT" | grep -q "catalog: sql" || fail "the refusal should point to the SQL catalog: $OUT"
[ -z "$(s3c "$S3_BUCKET" list fswh/)" ] || fail "a refused run left objects: $(s3c "$S3_BUCKET" list fswh/)"
pass "filesystem catalog on a store without conditional writes: refused clearly, exit non-zero, nothing written"

# ---- 6. the filesystem catalog where conditional writes are honoured ----------------------------
pipeline fa.yaml fs-a "$ROWS" "type: iceberg" "warehouse: s3://$COND/wh" "namespace: db" "${S3KEYS[@]}"
pipeline fb.yaml fs-b "$ROWS" "type: iceberg" "warehouse: s3://$COND/wh" "namespace: db" "${S3KEYS[@]}"
expect_exit 0 ferry run fa.yaml --quiet
[ "$(s3c "$COND" get wh/db/orders/metadata/version-hint.text)" = 2 ] || fail "version-hint.text should say 2"
s3c "$COND" list wh/db/orders/metadata/ | grep -q '/v2.metadata.json$' || fail "no v2.metadata.json object"
nodetool "$READ" s3://$COND/wh db orders > ib.jsonl || fail "icebird could not read s3://$COND/wh (version hint)"
python3 compare.py "$T/ref.db" icebird ib.jsonl 1 || fail "filesystem catalog on S3: rows differ"
FERRY_FAILPOINTS='iceberg_before_catalog_commit=sleep(1500)' FERRY_LOG=info "$FERRY_BIN" run fa.yaml \
  --quiet --state "$T/fa.db" > fa.log 2>&1 &
pa=$!
FERRY_FAILPOINTS='iceberg_before_catalog_commit=sleep(1500)' FERRY_LOG=info "$FERRY_BIN" run fb.yaml \
  --quiet --state "$T/fb.db" > fb.log 2>&1 &
pb=$!
wait "$pa" || fail "concurrent writer a failed: $(cat fa.log)"
wait "$pb" || fail "concurrent writer b failed: $(cat fb.log)"
grep -q "conflict, retrying" fa.log fb.log || fail "the concurrent commits never conflicted"
nodetool "$READ" s3://$COND/wh db orders > ib.jsonl || fail "icebird could not read s3://$COND/wh"
python3 compare.py "$T/ref.db" icebird ib.jsonl 3 || fail "concurrent appends on S3: not exactly 3 copies"
[ "$(nodetool "$READ" s3://$COND/wh db --metadata orders | jq '.snapshots | length')" = 3 ] || fail "want 3 snapshots"
pass "filesystem catalog on S3 with conditional writes: committed by If-None-Match, a racing writer retries, both appends kept"

# ---- 7. multipart data files ---------------------------------------------------------------------
{
  echo "version: 1"; echo "name: mp"
  echo "source: {type: sample, rows: 150000, seed: 7, resources: [{table: orders, mode: full}]}"
  echo "sink:"
  for l in "${SINK[@]}" "multipart_chunk: 5MiB" "compression: none" "dictionary: false"; do echo "  $l"; done
  echo "batch: {rows: 10000}"
} > mp.yaml
s3_flaky 0   # a proxy that fails nothing and logs every request line
sed -i -e 's|namespace: db$|namespace: mp|' -e "s|endpoint: \"$S3_ENDPOINT\"|endpoint: \"$FLAKY_ENDPOINT\"|" mp.yaml
grep -q "$FLAKY_ENDPOINT" mp.yaml || fail "mp.yaml does not go through the proxy"
expect_exit 0 ferry run mp.yaml --quiet
s3_flaky_stop
loc=$(q "$CAT" "SELECT metadata_location FROM iceberg_tables WHERE table_namespace = 'mp' AND table_name = 'orders'")
nodetool "$READ" "$SWH" mp --files orders "$(basename "$loc")" > mpfiles.jsonl || fail "multipart: manifests unreadable"
f=$(jq -r '.data_file.file_path' mpfiles.jsonl)
[ "$(wc -l <<< "$f")" = 1 ] || fail "multipart: want one data file, got: $f"
k="/$S3_BUCKET/${f#s3://$S3_BUCKET/}"
grep -q "^POST $k?uploads" "$T/flaky.count.requests" && grep -q "^PUT $k?partNumber=2&" "$T/flaky.count.requests" \
  && grep -q "^POST $k?uploadId=" "$T/flaky.count.requests" \
  || fail "multipart: $f was not a multipart upload of 2+ parts: $(grep -F "$k" "$T/flaky.count.requests" | cut -c1-120)"
parts=$(grep -c "^PUT $k?partNumber=" "$T/flaky.count.requests")
[ "$(nodetool "$READ" "$SWH" mp orders "$(basename "$loc")" | jq -r .id | sort -u | wc -l)" = 150000 ] \
  || fail "multipart: icebird does not read 150000 distinct rows"
s3c "$S3_BUCKET" get "${f#s3://$S3_BUCKET/}" > mp.parquet
[ "$(nodetool "$DUCK" "SELECT count(*), count(DISTINCT id) FROM read_parquet('$T/mp.parquet')" | jq -c 'map(tonumber)')" = '[150000,150000]' ] \
  || fail "multipart: DuckDB does not read 150000 rows"
pass "a data file above multipart_chunk: a multipart upload of $parts parts, read whole by icebird and DuckDB"

# ---- 8. a wrong secret ------------------------------------------------------------------------------
pipeline bad.yaml badsecret 100 "type: iceberg" "warehouse: s3://$S3_BUCKET/badwh" "namespace: db" "catalog: sql" \
  "catalog_uri: $T/bad.db" "endpoint: \"$S3_ENDPOINT\"" "path_style: true" "access_key_id: env:S3_KEY" \
  "secret_access_key: env:BAD_SECRET"
set +e
OUT=$(BAD_SECRET=canary-secret-4711 "$FERRY_BIN" run bad.yaml --quiet 2>&1)
st=$?
set -e
[ "$st" != 0 ] || fail "a wrong secret should fail the run"
grep -q "403" <<< "$OUT" && grep -q "secret_access_key" <<< "$OUT" || fail "wrong secret: unclear error: $OUT"
! grep -q "canary-secret-4711" <<< "$OUT" || fail "the secret was printed: $OUT"
[ -z "$(s3c "$S3_BUCKET" list badwh/)" ] || fail "a refused run left objects: $(s3c "$S3_BUCKET" list badwh/)"
pass "wrong secret: HTTP 403 named with a hint, exit $st, the secret never printed, nothing written"
