#!/usr/bin/env bash
# labels: asan
# The iceberg sink through an Iceberg REST catalog (`catalog: rest`): tests/tools/rest_catalog.mjs
# is a small REST catalog on loopback (a fixture written from the REST OpenAPI spec: it checks
# the commit requirements, applies the updates and writes the metadata files); the tables are
# read back by icebird (by the metadata file the catalog points at) and compared with the source.
#   1. append twice: config, create-namespace, create-table, commit-table requests with the
#      bearer token; rows equal the source (icebird); the catalog's metadata has two snapshots;
#   2. two writers racing: the catalog refuses the stale one (assert-ref-snapshot-id), it
#      re-reads and commits on top, both appends kept;
#   3. crash before the catalog commit: nothing visible; crash after it: the resumed run commits
#      nothing again (checkpoints read back through list-tables / load-table);
#   4. schema evolution: a new source column goes in by add-schema + set-current-schema;
#   5. a commit whose answer is lost (the catalog applies it, then cuts the connection): ferry
#      loads the table, finds its snapshot on `main`, counts the commit as done: one snapshot,
#      no error, no duplicate on the next run;
#   6. a wrong token: a clear error (HTTP 401, "check catalog_token"), exit non-zero, the token
#      never printed.
#   7. `properties` on an existing table: sent as set-properties, kept by the catalog.
. "$(dirname "$0")/lib.sh"
. "$FERRY_SRC/tests/tools/iceberg_lib.sh"
export REST_TOKEN="rest-token-$RANDOM$RANDOM"
rest_start "$T/rest"
URI=$REST_URI
SINK=("type: iceberg" "warehouse: $WH" "namespace: db" "catalog: rest" "catalog_uri: \"$URI\""
      "catalog_token: env:REST_TOKEN")

meta_loc() { jq -r --arg k "db"$'\x1f'"$1" '.tables[$k]' "$T/rest/catalog.json"; }
meta_file() { basename "$(meta_loc "$1")"; }
meta_json() { local l; l=$(meta_loc "$1"); cat "${l#file://}"; }
rest_orders() { # COPIES
  nodetool "$READ" "$WH" db orders "$(meta_file orders)" > ib.jsonl || fail "icebird could not read db.orders"
  python3 compare.py "$T/ref.db" icebird ib.jsonl "$1" || fail "icebird rows differ from the source"
}

# ---- 1. append twice ------------------------------------------------------------------------------
pipeline app.yaml app "$ROWS" "${SINK[@]}"
expect_exit 0 ferry run app.yaml --quiet
for r in "GET /v1/config 200" "POST /v1/ferry-test/namespaces 200" "POST /v1/ferry-test/namespaces/db/tables 200" \
         "POST /v1/ferry-test/namespaces/db/tables/orders 200"; do
  grep -qx "$r" "$T/rest/requests.log" || fail "no request \"$r\": $(sort -u "$T/rest/requests.log")"
done
! grep -q ' 401$' "$T/rest/requests.log" || fail "a request went without the bearer token"
rest_orders 1
expect_exit 0 ferry run app.yaml --quiet
rest_orders 2
meta_json orders | jq -e '(.snapshots | length) == 2 and .snapshots[1]."parent-snapshot-id" == .snapshots[0]."snapshot-id"
  and ."current-snapshot-id" == .snapshots[1]."snapshot-id" and (."metadata-log" | length) >= 2' >/dev/null \
  || fail "catalog metadata after two appends: $(meta_json orders | jq -c '{s: [.snapshots[]."snapshot-id"], c: ."current-snapshot-id"}')"
[ "$(nodetool "$READ" "$WH" db users "$(meta_file users)" | wc -l)" = $((2 * ROWS)) ] || fail "icebird: users row count"
pass "append twice through the REST catalog: create-namespace, create-table, commit-table; rows equal the source"

# ---- 2. two writers racing -----------------------------------------------------------------------
pipeline ra.yaml rest-a "$ROWS" "${SINK[@]}"
pipeline rb.yaml rest-b "$ROWS" "${SINK[@]}"
FERRY_FAILPOINTS='iceberg_before_catalog_commit=sleep(1500)' FERRY_LOG=info "$FERRY_BIN" run ra.yaml \
  --quiet --state "$T/ra.db" > ra.log 2>&1 &
pa=$!
FERRY_FAILPOINTS='iceberg_before_catalog_commit=sleep(1500)' FERRY_LOG=info "$FERRY_BIN" run rb.yaml \
  --quiet --state "$T/rb.db" > rb.log 2>&1 &
pb=$!
wait "$pa" || fail "writer a failed: $(cat ra.log)"
wait "$pb" || fail "writer b failed: $(cat rb.log)"
grep -q "conflict, retrying" ra.log rb.log || fail "the racing commits never conflicted"
grep -q "POST /v1/ferry-test/namespaces/db/tables/orders 409" "$T/rest/requests.log" \
  || fail "the catalog never refused a stale commit"
rest_orders 4
pass "two writers racing: the stale commit refused by the catalog (409), retried on top, both kept"

# ---- 3. crashes around the catalog commit --------------------------------------------------------
before=$(meta_loc orders)
expect_exit 137 env FERRY_FAILPOINTS=iceberg_before_catalog_commit=crash "$FERRY_BIN" run app.yaml --quiet
[ "$(meta_loc orders)" = "$before" ] || fail "a crash before the catalog commit moved the table"
rest_orders 4
expect_exit 0 ferry run app.yaml --quiet
rest_orders 5
expect_exit 137 env FERRY_FAILPOINTS=after_sink_commit=crash "$FERRY_BIN" run app.yaml --quiet
rest_orders 6
n=$(meta_json orders | jq '.snapshots | length')
expect_exit 0 ferry run app.yaml --quiet
[ "$(meta_json orders | jq '.snapshots | length')" = "$n" ] || fail "the resumed run committed its checkpoint again"
rest_orders 6
pass "crash before / after the commit: nothing half visible, no checkpoint committed twice"

# ---- 4. schema evolution ---------------------------------------------------------------------------
q "$T/src.db" "CREATE TABLE ev (id INTEGER PRIMARY KEY, v TEXT NOT NULL); INSERT INTO ev VALUES (1, 'a'), (2, 'b');"
{
  echo "version: 1"; echo "name: ev"
  echo "source: {type: sqlite, path: $T/src.db, resources: [{table: ev, mode: full}]}"
  echo "sink:"; for l in "${SINK[@]}"; do echo "  $l"; done
} > ev.yaml
expect_exit 0 ferry run ev.yaml --quiet
q "$T/src.db" "ALTER TABLE ev ADD COLUMN w INTEGER; INSERT INTO ev VALUES (3, 'c', 42);"
expect_exit 0 ferry run ev.yaml --quiet
meta_json ev | jq -e '(.schemas | length) == 2 and ."current-schema-id" == .schemas[1]."schema-id"
  and (.schemas[1].fields | map(.name) | index("w")) != null' >/dev/null \
  || fail "schema evolution through the REST catalog: $(meta_json ev | jq -c '[.schemas[] | [."schema-id", [.fields[].name]]]')"
got=$(nodetool "$READ" "$WH" db ev "$(meta_file ev)" | jq -r '"\(.id):\(.v):\(.w)"' | sort | tr '\n' ' ')
[ "$got" = "1:a:null 1:a:null 2:b:null 2:b:null 3:c:42 " ] || fail "icebird after the new column: $got"
pass "schema evolution: add-schema and set-current-schema through the REST catalog, new column readable"

# ---- 5. a commit whose answer is lost -----------------------------------------------------------
n=$(meta_json orders | jq '.snapshots | length')
touch "$T/rest/lose-next-answer"
expect_exit 0 ferry run app.yaml --quiet
grep -q "POST /v1/ferry-test/namespaces/db/tables/.* lost" "$T/rest/requests.log" || fail "no answer was lost"
[ "$(meta_json orders | jq '.snapshots | length')" = $((n + 1)) ] || fail "lost answer: want exactly one more snapshot"
rest_orders 7
expect_exit 0 ferry run app.yaml --quiet
rest_orders 8
pass "a lost commit answer: the table shows the commit, counted once, nothing removed"

# ---- 6. a wrong token ------------------------------------------------------------------------------
pipeline bad.yaml bad 10 "type: iceberg" "warehouse: $T/wbad" "namespace: db" "catalog: rest" \
  "catalog_uri: \"$URI\"" "catalog_token: env:BAD_TOKEN"
set +e
OUT=$(BAD_TOKEN=wrong-token-canary-123 "$FERRY_BIN" run bad.yaml --quiet 2>&1)
st=$?
set -e
[ "$st" != 0 ] || fail "a wrong token should fail the run"
grep -q "401" <<< "$OUT" && grep -q "catalog_token" <<< "$OUT" || fail "wrong token: unclear error: $OUT"
! grep -q "wrong-token-canary-123" <<< "$OUT" || fail "the token was printed: $OUT"
pass "wrong token: HTTP 401 named, exit $st, the token never printed"

# ---- 7. table properties ---------------------------------------------------------------------------
pipeline props.yaml app "$ROWS" "${SINK[@]}" "properties: {comment: set by ferry, write.metadata.previous-versions-max: 5}"
expect_exit 0 ferry run props.yaml --quiet
meta_json orders | jq -e '.properties.comment == "set by ferry" and .properties."write.metadata.previous-versions-max" == "5"' \
  >/dev/null || fail "properties through set-properties: $(meta_json orders | jq -c .properties)"
rest_orders 9
pass "table properties reach a REST catalog's table (set-properties)"
