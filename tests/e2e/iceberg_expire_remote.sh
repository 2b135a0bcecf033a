#!/usr/bin/env bash
# shared: pg s3
# `ferry iceberg expire TABLE --pipeline FILE` where the table is not a local folder with a
# local catalog: it opens the catalog and storage of FILE's iceberg sink.
#   1. S3 warehouse (s3rver on loopback, SigV4 checked) + SQL catalog (SQLite): two appends,
#      one replace, then a crash just before a commit (orphan data objects). A dry run
#      counts and changes nothing; expire drops the three old snapshots by a compare-and-swap
#      commit; afterwards icebird (over HTTP) and DuckDB read exactly the replace's rows, the
#      objects the current snapshot references are all still there, and nothing else of ours
#      is: the expired snapshots' manifest lists, the replaced data files and the orphans are
#      gone (listed with the independent signed client); the counts match what was removed.
#      A second expire finds nothing to do.
#   2. the filesystem catalog on an S3 bucket that honours If-None-Match: the same through a
#      conditional vN.metadata.json write; icebird reads the table through version-hint.text.
#   3. the same with the SQL catalog on PostgreSQL (a throw-away server, tests/pg/pg.sh);
#   4. the REST catalog fixture (tests/tools/rest_catalog.mjs, local warehouse): the snapshot
#      removal goes through a commit-table request (remove-snapshots, guarded by the
#      table-UUID / ref requirements the fixture checks), files deleted on the disk; icebird
#      reads the replace's rows by the metadata file the catalog points at.
#   5. the REST catalog fixture on an S3 warehouse (the fixture writes the metadata JSON into
#      the bucket, signed with aws4): the checks of 1 (dry run, one commit-table, remaining
#      objects exactly the live ones, icebird + DuckDB, second expire a no-op).
. "$(dirname "$0")/lib.sh"
. "$FERRY_SRC/tests/s3/s3.sh"
ROWS=${ROWS:-1500}
. "$FERRY_SRC/tests/tools/iceberg_lib.sh"
s3_have || fail "node and tests/tools/node_modules (s3rver, aws4) are needed: run scripts/install-deps.sh"
export S3_KEY=S3RVER S3_SECRET=S3RVER AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER
S3_CONDITIONAL_BUCKETS=cond s3_start lake cond
COND=$(s3_bucket cond)
export S3_ENDPOINT
S3KEYS=("endpoint: \"$S3_ENDPOINT\"" "path_style: true" "access_key_id: env:S3_KEY"
        "secret_access_key: env:S3_SECRET")

# history NAME SINK_LINES...: app twice, replace once, then a crash before a commit (orphans).
history() {
  local name=$1; shift
  pipeline app.yaml "$name" "$ROWS" "$@"
  pipeline rep.yaml "$name" "$ROWS" "$@" "write: replace"
  expect_exit 0 ferry run app.yaml --quiet
  expect_exit 0 ferry run app.yaml --quiet
  expect_exit 0 ferry run rep.yaml --quiet
  expect_exit 137 env FERRY_FAILPOINTS=iceberg_before_catalog_commit=crash "$FERRY_BIN" run app.yaml --quiet
  sleep 1.2 # every file is now older than --older-than 0s, in whole seconds too (S3)
}

# icebird_reads WAREHOUSE METADATA_NAME: the current snapshot holds exactly one copy of the source
icebird_reads() {
  nodetool "$READ" "$1" db orders ${2:-} > ib.jsonl || fail "icebird could not read db.orders ($1)"
  python3 compare.py "$T/ref.db" icebird ib.jsonl 1 || fail "icebird rows differ from the source ($1)"
}

# check_s3_expire BUCKET PREFIX NAME_CMD META_JSON_CMD: the checks of one S3 case; NAME_CMD
# prints the current metadata file's name for icebird (nothing: through version-hint.text),
# META_JSON_CMD the current metadata JSON.
check_s3_expire() {
  local bucket=$1 prefix=$2 name_cmd=$3; shift 3
  "$@" > before.json
  s3c "$bucket" list "$prefix/" | grep -E '\.(parquet|avro)$' | sort > before.txt
  nodetool "$READ" "s3://$bucket/${WHNAME:-wh}" db --files orders $($name_cmd) | jq -r .data_file.file_path \
    | sed "s|^s3://$bucket/||" | sort > live.txt
  [ -s live.txt ] || fail "no live data file"
  [ "$(grep -c '\.parquet$' before.txt)" -gt "$(wc -l < live.txt)" ] \
    || fail "the history should leave replaced and orphan data files: $(cat before.txt)"
  [ "$(jq '.snapshots | length' before.json)" = 3 ] || fail "three snapshots before expire"
  cur=$(jq '."current-snapshot-id"' before.json)
  cur_ml=$(jq -r --argjson c "$cur" '.snapshots[] | select(."snapshot-id" == $c) | ."manifest-list"' before.json)
  old_ml=$(jq -r --argjson c "$cur" '.snapshots[] | select(."snapshot-id" != $c) | ."manifest-list"' before.json)

  expect_exit 0 ferry iceberg expire orders --pipeline rep.yaml --older-than 0s --dry-run --json
  dry=$OUT
  [ "$(json_field "$dry" .snapshots_expired)" = 2 ] || fail "dry run: $dry"
  [ "$(json_field "$dry" .dry_run)" = true ] || fail "dry run: $dry"
  s3c "$bucket" list "$prefix/" | grep -E '\.(parquet|avro)$' | sort | cmp -s - before.txt \
    || fail "a dry run deleted objects"
  [ "$("$@" | jq '.snapshots | length')" = 3 ] || fail "a dry run committed"

  expect_exit 0 ferry iceberg expire orders --pipeline rep.yaml --older-than 0s --json
  [ "$(json_field "$OUT" .snapshots_expired)" = 2 ] && [ "$(json_field "$OUT" .snapshots_kept)" = 1 ] \
    || fail "expire: $OUT"
  [ "$(json_field "$OUT" .files_deleted)" = "$(json_field "$dry" .files_deleted)" ] \
    || fail "the dry run counted $(json_field "$dry" .files_deleted) files, expire deleted $(json_field "$OUT" .files_deleted)"
  "$@" > after.json
  jq -e --argjson c "$cur" '(.snapshots | length) == 1 and ."current-snapshot-id" == $c
    and .snapshots[0]."snapshot-id" == $c and ([."snapshot-log"[]."snapshot-id"] | all(. == $c))' after.json >/dev/null \
    || fail "metadata after expire: $(jq -c '{s: [.snapshots[]."snapshot-id"], c: ."current-snapshot-id"}' after.json)"
  s3c "$bucket" list "$prefix/" | grep -E '\.(parquet|avro)$' | sort > after.txt
  [ $(( $(wc -l < before.txt) - $(wc -l < after.txt) )) = "$(json_field "$OUT" .files_deleted)" ] \
    || fail "expire reported $(json_field "$OUT" .files_deleted) deletions, the bucket lost $(( $(wc -l < before.txt) - $(wc -l < after.txt) ))"
  # referenced objects remain, unreferenced ones are gone
  grep '\.parquet$' after.txt | cmp -s - live.txt \
    || fail "data objects after expire: [$(grep '\.parquet$' after.txt | tr '\n' ' ')], live: [$(tr '\n' ' ' < live.txt)]"
  grep -qx "${cur_ml#s3://$bucket/}" after.txt || fail "the current manifest list $cur_ml was deleted"
  for m in $old_ml; do
    ! grep -qx "${m#s3://$bucket/}" after.txt || fail "the expired snapshot's manifest list $m is still there"
  done
  icebird_reads "s3://$bucket/${WHNAME:-wh}" "$($name_cmd)"
  local files=""
  rm -rf dl && mkdir dl
  local missing
  for f in $(cat live.txt); do
    files="$files${files:+,}'$T/dl/$f'"
  done
  # shellcheck disable=SC2046
  missing=$(s3c "$bucket" getmany dl $(cat live.txt)) || fail "cannot fetch $missing"
  nodetool "$DUCK" "SELECT id, customer_id, status, quantity, amount::VARCHAR, discount, express, note, \
    epoch_us(created_at), epoch_us(updated_at) FROM read_parquet([$files])" > dk.jsonl \
    || fail "DuckDB could not read the data files"
  python3 compare.py "$T/ref.db" duckdb dk.jsonl 1 || fail "DuckDB rows differ from the source"

  expect_exit 0 ferry iceberg expire orders --pipeline rep.yaml --older-than 0s --json
  [ "$(json_field "$OUT" .snapshots_expired)" = 0 ] && [ "$(json_field "$OUT" .files_deleted)" = 0 ] \
    || fail "a second expire: $OUT"
}

# ---- 1. S3 warehouse, SQL catalog (SQLite) ---------------------------------------------------------
CAT="$T/catalog.db"
meta_loc() { q "$CAT" "SELECT metadata_location FROM iceberg_tables WHERE table_namespace = 'db' AND table_name = 'orders'"; }
sql_meta() { local k; k=$(meta_loc); s3c "$S3_BUCKET" get "${k#s3://$S3_BUCKET/}"; }
sql_name() { basename "$(meta_loc)"; }
history p1 "type: iceberg" "warehouse: s3://$S3_BUCKET/wh" "namespace: db" "catalog: sql" "catalog_uri: $CAT" "${S3KEYS[@]}"
before_loc=$(meta_loc)
check_s3_expire "$S3_BUCKET" wh/db/orders sql_name sql_meta
[ "$(meta_loc)" != "$before_loc" ] || fail "the SQL catalog still points at the old metadata"
pass "S3 warehouse + SQL catalog: old snapshots expired by a catalog swap, unreferenced objects deleted, referenced ones kept; icebird and DuckDB read the current rows"

# ---- 2. filesystem catalog on a bucket with conditional writes ----------------------------------------
hint_meta() { local v; v=$(s3c "$COND" get wh/db/orders/metadata/version-hint.text); s3c "$COND" get "wh/db/orders/metadata/v$v.metadata.json"; }
hint_name() { :; }
history p2 "type: iceberg" "warehouse: s3://$COND/wh" "namespace: db" "${S3KEYS[@]}"
v_before=$(s3c "$COND" get wh/db/orders/metadata/version-hint.text)
check_s3_expire "$COND" wh/db/orders hint_name hint_meta
[ "$(s3c "$COND" get wh/db/orders/metadata/version-hint.text)" -gt "$v_before" ] || fail "version-hint.text did not move"
pass "S3 warehouse + filesystem catalog (conditional write): expired, files cleaned, icebird reads through the hint"

# ---- 3. S3 warehouse, SQL catalog on PostgreSQL (tests/pg/pg.sh) ------------------------------------
. "${FERRY_PG_SH:-$FERRY_SRC/tests/pg/pg.sh}"
pg_start
export ICE_CATALOG_URL="$FERRY_PG_URL"
pg_loc() { psql "$FERRY_PG_URL" -X -A -t -q -c "SELECT metadata_location FROM iceberg_tables WHERE table_namespace = 'db' AND table_name = 'orders'"; }
pg_name() { basename "$(pg_loc)"; }
pg_meta() { local k; k=$(pg_loc); s3c "$S3_BUCKET" get "${k#s3://$S3_BUCKET/}"; }
history p4 "type: iceberg" "warehouse: s3://$S3_BUCKET/pgwh" "namespace: db" "catalog: sql" \
  "catalog_uri: env:ICE_CATALOG_URL" "${S3KEYS[@]}"
before_loc=$(pg_loc)
WHNAME=pgwh check_s3_expire "$S3_BUCKET" pgwh/db/orders pg_name pg_meta
[ "$(pg_loc)" != "$before_loc" ] || fail "the PostgreSQL catalog still points at the old metadata"
! grep -qF "$FERRY_PG_URL" <<< "$OUT" || fail "the catalog URL was printed"
pass "S3 warehouse + SQL catalog on PostgreSQL: expired by the compare-and-swap UPDATE, objects cleaned, icebird and DuckDB read the current rows"

# ---- 4. REST catalog ----------------------------------------------------------------------------------
export REST_TOKEN="rest-token-$RANDOM$RANDOM"
rest_start "$T/rest"
URI=$REST_URI
rest_loc() { jq -r --arg k "db"$'\x1f'"orders" '.tables[$k]' "$T/rest/catalog.json"; }
rest_meta() { local l; l=$(rest_loc); cat "${l#file://}"; }
history p3 "type: iceberg" "warehouse: $WH" "namespace: db" "catalog: rest" "catalog_uri: \"$URI\"" \
  "catalog_token: env:REST_TOKEN"
rest_meta > before.json
find "$WH/db/orders" \( -name '*.parquet' -o -name '*.avro' \) | sort > before.txt
nodetool "$READ" "$WH" db --files orders "$(basename "$(rest_loc)")" | jq -r .data_file.file_path | sed 's|^file://||' | sort > live.txt
cur=$(jq '."current-snapshot-id"' before.json)
[ "$(jq '.snapshots | length' before.json)" = 3 ] || fail "REST: three snapshots before expire"
commits=$(grep -c "^POST /v1/ferry-test/namespaces/db/tables/orders 200$" "$T/rest/requests.log")
expect_exit 0 ferry iceberg expire orders --pipeline rep.yaml --older-than 0s --json
[ "$(json_field "$OUT" .snapshots_expired)" = 2 ] || fail "REST expire: $OUT"
[ "$(grep -c "^POST /v1/ferry-test/namespaces/db/tables/orders 200$" "$T/rest/requests.log")" = $((commits + 1)) ] \
  || fail "REST: expire should commit once through commit-table"
rest_meta | jq -e --argjson c "$cur" '(.snapshots | length) == 1 and ."current-snapshot-id" == $c' >/dev/null \
  || fail "REST metadata after expire: $(rest_meta | jq -c '[.snapshots[]."snapshot-id"]')"
find "$WH/db/orders" \( -name '*.parquet' -o -name '*.avro' \) | sort > after.txt
[ $(( $(wc -l < before.txt) - $(wc -l < after.txt) )) = "$(json_field "$OUT" .files_deleted)" ] || fail "REST: deletions miscounted: $OUT"
grep '\.parquet$' after.txt | cmp -s - live.txt || fail "REST: data files after expire differ from the live ones"
icebird_reads "$WH" "$(basename "$(rest_loc)")"
! grep -qF "$REST_TOKEN" <<< "$OUT" || fail "the token was printed"
pass "REST catalog: snapshot removal committed through commit-table, unreferenced files deleted, icebird reads the current rows"

# ---- 5. REST catalog, S3 warehouse ----------------------------------------------------------------------
# The fixture writes the metadata JSON into the bucket itself (signed with aws4), next to the
# objects ferry writes; a second instance, so that db.orders is a new table.
REST_S3_ENDPOINT="$S3_ENDPOINT" rest_start "$T/rest-s3"
URI2=$REST_URI
rs3_loc() { jq -r --arg k "db"$'\x1f'"orders" '.tables[$k]' "$T/rest-s3/catalog.json"; }
rs3_name() { basename "$(rs3_loc)"; }
rs3_meta() { local l; l=$(rs3_loc); s3c "$S3_BUCKET" get "${l#s3://$S3_BUCKET/}"; }
history p5 "type: iceberg" "warehouse: s3://$S3_BUCKET/restwh" "namespace: db" "catalog: rest" \
  "catalog_uri: \"$URI2\"" "catalog_token: env:REST_TOKEN" "${S3KEYS[@]}"
[[ $(rs3_loc) == s3://$S3_BUCKET/restwh/db/orders/metadata/*.metadata.json ]] || fail "REST on S3: the table's metadata is at $(rs3_loc)"
before_loc=$(rs3_loc)
commits=$(grep -c "^POST /v1/ferry-test/namespaces/db/tables/orders 200$" "$T/rest-s3/requests.log")
WHNAME=restwh check_s3_expire "$S3_BUCKET" restwh/db/orders rs3_name rs3_meta
# the dry run commits nothing, each expire that removes snapshots commits once, the second none
[ "$(grep -c "^POST /v1/ferry-test/namespaces/db/tables/orders 200$" "$T/rest-s3/requests.log")" = $((commits + 1)) ] \
  || fail "REST on S3: expire should commit once through commit-table: $(grep POST "$T/rest-s3/requests.log" | tail -n 5)"
[ "$(rs3_loc)" != "$before_loc" ] || fail "REST on S3: the catalog still points at the old metadata"
! grep -qF "$REST_TOKEN" <<< "$OUT" || fail "the token was printed"
pass "REST catalog on an S3 warehouse: snapshots removed by commit-table, unreferenced objects deleted, referenced ones kept; icebird and DuckDB read the current rows"
