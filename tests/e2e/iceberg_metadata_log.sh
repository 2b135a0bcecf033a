#!/usr/bin/env bash
# The metadata log of the iceberg sink's tables and the old metadata files, read back by
# icebird (and DuckDB through check_orders):
#   1. `properties: {write.metadata.previous-versions-max: 3}`: after 7 commits the current
#      metadata's log lists exactly the 3 newest earlier files and every older metadata file
#      is still on disk (Iceberg's default keeps them); changing `properties` on an existing
#      table commits a new metadata file carrying them;
#   2. `ferry iceberg expire --older-than 0s` (retaining every snapshot): a dry run names the
#      metadata files outside the log and deletes nothing; the real run deletes exactly them;
#      the current file, the log's files and version-hint.text stay; time travel to a logged
#      version still reads; a second expire deletes nothing;
#   3. `write.metadata.delete-after-commit.enabled: true` (filesystem and SQL catalogs): each
#      commit deletes the file it trimmed off the log, so the table never holds more than
#      max + 1 metadata files, and the SQL catalog's current and previous pointers exist;
#   4. a `properties` value that is not a map, and a list value: one message naming the key.
. "$(dirname "$0")/lib.sh"
. "$FERRY_SRC/tests/tools/iceberg_lib.sh"

metas() { find "$1/metadata" -name '*.metadata.json' -printf '%f\n' | sort -V; }

# ---- 1. the log is trimmed, the files stay ---------------------------------------------------
pipeline app.yaml app "$ROWS" "type: iceberg" "warehouse: $WH" "namespace: db" \
  "properties: {write.metadata.previous-versions-max: 3}"
for i in 1 2 3 4 5 6; do expect_exit 0 ferry run app.yaml --quiet; done
M=$(latest_meta "$WH/db/orders")
[ "$(basename "$M")" = v7.metadata.json ] || fail "six runs: want v1 (create) + 6 snapshots, got $M"
[ "$(jq -r '.properties."write.metadata.previous-versions-max"' "$M")" = 3 ] \
  || fail "the table property: $(jq -c .properties "$M")"
[ "$(jq -r '[."metadata-log"[]."metadata-file" | sub(".*/"; "")] | join(",")' "$M")" = \
  v4.metadata.json,v5.metadata.json,v6.metadata.json ] || fail "metadata log: $(jq -c '."metadata-log"' "$M")"
[ "$(metas "$WH/db/orders" | wc -l)" = 7 ] || fail "without delete-after-commit every file stays: $(metas "$WH/db/orders")"
check_orders 6
# the same table, a changed property: one more metadata file carries it (no snapshot)
pipeline app2.yaml app "$ROWS" "type: iceberg" "warehouse: $WH" "namespace: db" \
  "properties: {write.metadata.previous-versions-max: 3, comment: ferry test}"
expect_exit 0 ferry run app2.yaml --quiet
M=$(latest_meta "$WH/db/orders")
[ "$(basename "$M")" = v9.metadata.json ] || fail "property change + snapshot: want v9, got $M"
[ "$(jq -r '.properties.comment' "$WH/db/orders/metadata/v8.metadata.json")" = "ferry test" ] \
  || fail "v8 should carry the new property"
[ "$(jq '.snapshots | length' "$WH/db/orders/metadata/v8.metadata.json")" = 6 ] || fail "v8 adds no snapshot"
check_orders 7
pass "previous-versions-max 3: the log holds the 3 newest, older files stay; a changed property is committed"

# ---- 2. expire deletes the metadata files outside the log -------------------------------------
expect_exit 0 ferry iceberg expire orders --warehouse "$WH" --namespace db --older-than 0s \
  --retain-last 100 --dry-run --json
[ "$(json_field "$OUT" .snapshots_expired)" = 0 ] && [ "$(json_field "$OUT" .files_deleted)" = 5 ] \
  || fail "dry run: want the 5 metadata files v1-v5 outside the log: $OUT"
[ "$(metas "$WH/db/orders" | wc -l)" = 9 ] || fail "a dry run deleted files: $(metas "$WH/db/orders")"
expect_exit 0 ferry iceberg expire orders --warehouse "$WH" --namespace db --older-than 0s --retain-last 100
for v in 1 2 3 4 5; do
  grep -q "/v$v.metadata.json$" <<< "$OUT" || fail "expire should name v$v.metadata.json: $OUT"
done
[ "$(metas "$WH/db/orders" | tr '\n' ' ')" = "v6.metadata.json v7.metadata.json v8.metadata.json v9.metadata.json " ] \
  || fail "after expire want v6-v9 (log + current): $(metas "$WH/db/orders")"
[ "$(cat "$WH/db/orders/metadata/version-hint.text")" = 9 ] || fail "version-hint.text changed"
check_orders 7
check_orders 5 v6.metadata.json # time travel to a logged version
expect_exit 0 ferry iceberg expire orders --warehouse "$WH" --namespace db --older-than 0s \
  --retain-last 100 --json
[ "$(json_field "$OUT" .files_deleted)" = 0 ] || fail "a second expire found more: $OUT"
pass "expire: exactly the metadata files outside the log deleted; current, log and hint kept; time travel reads"

# ---- 3. delete-after-commit ------------------------------------------------------------------
props='properties: {write.metadata.previous-versions-max: 2, write.metadata.delete-after-commit.enabled: true}'
pipeline del.yaml del "$ROWS" "type: iceberg" "warehouse: $T/wd" "namespace: db" "$props"
for i in 1 2 3 4 5; do
  expect_exit 0 ferry run del.yaml --quiet
  n=$(metas "$T/wd/db/orders" | wc -l)
  [ "$n" -le 3 ] || fail "run $i: $n metadata files, want at most 3: $(metas "$T/wd/db/orders")"
done
M=$(latest_meta "$T/wd/db/orders")
[ "$(metas "$T/wd/db/orders" | tr '\n' ' ')" = "v4.metadata.json v5.metadata.json v6.metadata.json " ] \
  || fail "filesystem catalog: want v4-v6: $(metas "$T/wd/db/orders")"
[ "$(nodetool "$READ" "$T/wd" db orders | wc -l)" = $((ROWS * 5)) ] || fail "icebird: rows after 5 runs"
pipeline sqld.yaml sqld "$ROWS" "type: iceberg" "warehouse: $T/ws" "namespace: db" "catalog: sql" \
  "catalog_uri: $T/cat.db" "$props"
for i in 1 2 3 4; do expect_exit 0 ferry run sqld.yaml --quiet; done
[ "$(metas "$T/ws/db/orders" | wc -l)" = 3 ] || fail "SQL catalog: want 3 metadata files: $(metas "$T/ws/db/orders")"
cur=$(q "$T/cat.db" "SELECT metadata_location FROM iceberg_tables WHERE table_name = 'orders'" | sed 's|^file://||')
prev=$(q "$T/cat.db" "SELECT previous_metadata_location FROM iceberg_tables WHERE table_name = 'orders'" | sed 's|^file://||')
[ -f "$cur" ] && [ -f "$prev" ] || fail "SQL catalog: current $cur or previous $prev missing"
[ "$(jq '."metadata-log" | length' "$cur")" = 2 ] || fail "SQL catalog log: $(jq -c '."metadata-log"' "$cur")"
[ "$(nodetool "$READ" "$T/ws" db orders "$(basename "$cur")" | wc -l)" = $((ROWS * 4)) ] || fail "icebird: SQL catalog rows"
pass "delete-after-commit: each commit deletes the file it trimmed (filesystem and SQL catalogs)"

# ---- 4. bad properties -----------------------------------------------------------------------
pipeline bad.yaml bad 10 "type: iceberg" "warehouse: $T/wb" "namespace: db" "properties: [a, b]"
expect_exit 2 ferry run bad.yaml --quiet
grep -q "properties" <<< "$OUT" && grep -q "must map Iceberg table property names" <<< "$OUT" \
  || fail "not a map: $OUT"
pipeline bad2.yaml bad2 10 "type: iceberg" "warehouse: $T/wb" "namespace: db" "properties: {comment: [a]}"
expect_exit 2 ferry run bad2.yaml --quiet
grep -q "properties.comment" <<< "$OUT" || fail "a list value: $OUT"
[ ! -e "$T/wb/db" ] || fail "a refused pipeline created the table"
pass "bad properties: one message naming the key, nothing written"
