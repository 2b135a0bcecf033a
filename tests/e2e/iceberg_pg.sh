#!/usr/bin/env bash
# The iceberg sink's SQL catalog on PostgreSQL (tests/pg/pg.sh starts a throw-away server):
#   1. two runs append two snapshots; iceberg_tables (the JDBC catalog / PyIceberg SqlCatalog
#      table) points at the current metadata file and keeps the previous one; the namespace
#      has its `exists` property; icebird reads the table (by the metadata file the catalog
#      names) with both copies of the rows;
#   2. two writers commit at once: the compare-and-swap UPDATE lets one through, the other
#      re-reads and commits on top; both appends are kept;
#   3. a wrong password: one message naming the catalog, never the URL's password.
. "$(dirname "$0")/lib.sh"
. "${FERRY_PG_SH:-$FERRY_SRC/tests/pg/pg.sh}"
pg_start
[ -n "${FERRY_PG_URL:-}" ] || fail "pg_start exported no FERRY_PG_URL"
READ="$FERRY_SRC/tests/tools/read_iceberg.mjs"
[ -d "$FERRY_SRC/tests/tools/node_modules/icebird" ] || fail "tests/tools/node_modules/icebird missing: npm ci --prefix tests/tools"
ROWS=2000
export ICE_CATALOG_URL="$FERRY_PG_URL"

pipeline() { # FILE NAME WAREHOUSE [CATALOG_URI_REF]
  cat > "$1" <<EOF
version: 1
name: $2
source:
  type: sample
  rows: $ROWS
  seed: 7
  resources:
    - {table: orders, mode: full}
sink:
  type: iceberg
  warehouse: $3
  namespace: lake
  catalog: sql
  catalog_uri: ${4:-env:ICE_CATALOG_URL}
  catalog_name: prod
batch: {rows: 500}
EOF
}
psql_q() { psql "$FERRY_PG_URL" -X -A -t -q -c "$1"; }

# ---- 1. two runs, two snapshots -------------------------------------------------------------
pipeline a.yaml pga "$T/wh"
expect_exit 0 ferry run a.yaml --quiet
expect_exit 0 ferry run a.yaml --quiet
loc=$(psql_q "SELECT metadata_location FROM iceberg_tables WHERE catalog_name = 'prod' AND table_namespace = 'lake' AND table_name = 'orders'")
prev=$(psql_q "SELECT previous_metadata_location FROM iceberg_tables WHERE table_name = 'orders'")
[ -f "${loc#file://}" ] && [ -f "${prev#file://}" ] && [ "$loc" != "$prev" ] || fail "catalog row: $loc / $prev"
[ "$(jq '.snapshots | length' "${loc#file://}")" = 2 ] || fail "two snapshots after two runs"
[ "$(psql_q "SELECT property_value FROM iceberg_namespace_properties WHERE catalog_name = 'prod' AND namespace = 'lake' AND property_key = 'exists'")" = true ] \
  || fail "namespace property"
got=$(nodetool "$READ" "$T/wh" lake orders "$(basename "$loc")" | jq -r .id | sort -n | uniq -c | awk '$1 != 2' | wc -l)
[ "$got" = 0 ] || fail "icebird: $got ids not exactly twice"
[ "$(nodetool "$READ" "$T/wh" lake orders "$(basename "$loc")" | wc -l)" = $((2 * ROWS)) ] || fail "icebird row count"
pass "PostgreSQL catalog: two snapshots, iceberg_tables swapped, readable by icebird"

# ---- 2. concurrent writers ------------------------------------------------------------------
pipeline b.yaml pgb "$T/wh"
FERRY_FAILPOINTS='iceberg_before_catalog_commit=sleep(1500)' FERRY_LOG=info "$FERRY_BIN" run a.yaml \
  --quiet > a.log 2>&1 &
pa=$!
FERRY_FAILPOINTS='iceberg_before_catalog_commit=sleep(1500)' FERRY_LOG=info "$FERRY_BIN" run b.yaml \
  --quiet --state "$T/b.db" > b.log 2>&1 &
pb=$!
wait "$pa" || fail "writer a: $(cat a.log)"
wait "$pb" || fail "writer b: $(cat b.log)"
grep -q "conflict, retrying" a.log b.log || fail "the concurrent commits never conflicted"
loc=$(psql_q "SELECT metadata_location FROM iceberg_tables WHERE table_name = 'orders'")
[ "$(jq '.snapshots | length' "${loc#file://}")" = 4 ] || fail "want 4 snapshots"
got=$(nodetool "$READ" "$T/wh" lake orders "$(basename "$loc")" | jq -r .id | sort -n | uniq -c | awk '$1 != 4' | wc -l)
[ "$got" = 0 ] || fail "concurrent appends: $got ids not exactly 4 times"
pass "PostgreSQL catalog: compare-and-swap conflict retried, both appends kept"

# ---- 3. a wrong password never shows ----------------------------------------------------------
canary="canary-pw-$RANDOM$RANDOM"
export BAD_URL="postgresql://ferry_admin:$canary@127.0.0.1:$PGPORT/ferry"
pipeline c.yaml pgc "$T/wc" env:BAD_URL
expect_exit 1 ferry run c.yaml --quiet
grep -q "PostgreSQL catalog" <<< "$OUT" || fail "the message should name the catalog: $OUT"
grep -q "$canary" <<< "$OUT" && fail "the password appears in: $OUT"
[ -z "$(find "$T/wc" -name '*.parquet' 2>/dev/null)" ] || fail "data written without a catalog"
pass "PostgreSQL catalog: a failed login names the catalog, never the password"
