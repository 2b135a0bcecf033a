#!/usr/bin/env bash
# shared: s3
# `filter` transforms pushed down to Parquet row-group statistics (docs/pipeline-file.md,
# "filter"): the files and s3 sources do not plan a row group whose exact min/max prove no
# row passes; the transform still runs on what is read. DuckDB writes the file (row groups
# of 2048 rows) and is the oracle for how many groups each filter rules out (its own
# parquet_metadata statistics) and for the rows that pass:
#   1. files source: greater_than, in, less_than on a timestamp, a filter after a rename
#      (pushed down under the source name): the groups skipped and the rows kept;
#   2. a filter after a cast of its column, and not_equals: nothing skipped, same rows;
#   3. s3 source (the same file on the S3 test server): groups skipped, rows kept;
#   4. iceberg source (a table ferry wrote in three appends of disjoint id ranges): a full
#      read skips the data files whose manifest bounds rule the filter out (counted in
#      row_groups_skipped), the rows kept are DuckDB's;
#   5. iceberg source, mode incremental: the first read skips as a full one; after two more
#      appends (ids above the filter's bound, then below it) the next read skips the data
#      file the filter rules out, and the table holds DuckDB's rows of all five files.
. "$(dirname "$0")/lib.sh"
. "$FERRY_SRC/tests/s3/s3.sh"
DUCK="$FERRY_SRC/tests/tools/duckdb_exec.mjs"
s3_have || fail "node and tests/tools/node_modules (s3rver, aws4) are needed: run scripts/install-deps.sh"
export S3_KEY=S3RVER S3_SECRET=S3RVER AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER
s3_start lake
duck() { nodetool "$DUCK" "$1" || fail "DuckDB failed: $1"; }
mkdir data
duck "COPY (SELECT i::BIGINT AS id, TIMESTAMPTZ '2024-01-01 00:00:00+00' + to_seconds(i::BIGINT) AS ts,
  'v' || i AS s FROM range(0, 9000) t(i)) TO '$T/data/f.parquet' (FORMAT parquet, ROW_GROUP_SIZE 2048)" >/dev/null
s3c "$S3_BUCKET" put in/f.parquet data/f.parquet
# groups DuckDB's statistics rule out: WHERE over (min, max) of column COL
ruled_out() { # COL CONDITION_ON_min_AND_max
  duck "SELECT count(*)::INTEGER FROM (SELECT stats_min_value AS mn, stats_max_value AS mx
    FROM parquet_metadata('$T/data/f.parquet') WHERE path_in_schema = '$1') WHERE $2" | jq '.[0]'
}
groups=$(duck "SELECT count(DISTINCT row_group_id)::INTEGER FROM parquet_metadata('$T/data/f.parquet')" | jq '.[0]')
[ "$groups" -ge 3 ] || fail "DuckDB wrote $groups row groups"
skipped() { # the last run's row_groups_skipped (absent when no filter was pushed down: 0)
  ferry events "$(json_field "$OUT" .run_id)" --json \
    | jq -r 'select(.type == "resource.started") | .payload.row_groups_skipped // 0' | tail -1
}
files_pipe() { # NAME TRANSFORMS...
  local n=$1; shift
  { echo "version: 1"; echo "name: $n"
    echo "source: {type: files, path: \"$T/data/f.parquet\", resources: [{table: t}]}"
    echo "sink: {type: sqlite, path: $T/$n.db}"
    echo "transforms:"; for t in "$@"; do echo "  - $t"; done; } > "$n.yaml"
}
check() { # NAME WANT_SKIPPED DUCKDB_WHERE [ID_COLUMN]
  expect_exit 0 ferry run "$1.yaml" --json
  [ "$(skipped)" = "$2" ] || fail "$1: $(skipped) row groups skipped, DuckDB's statistics rule out $2"
  local want got
  want=$(duck "SELECT count(*)::INTEGER AS n, coalesce(sum(id), 0)::INTEGER AS s FROM '$T/data/f.parquet' WHERE $3" | jq -c .)
  got=$(q "$1.db" "SELECT '[' || count(*) || ',' || CAST(coalesce(sum(${4:-id}), 0) AS INTEGER) || ']' FROM t")
  [ "$got" = "$want" ] || fail "$1: rows (count, sum of ids) $got, DuckDB $want"
}

# ---- 1 ----
files_pipe gt "{filter: id, greater_than: 6000}"
check gt "$(ruled_out id 'mx::BIGINT <= 6000')" "id > 6000"
files_pipe inl "{filter: id, in: [5, 7000]}"
check inl "$(ruled_out id 'NOT (5 BETWEEN mn::BIGINT AND mx::BIGINT) AND NOT (7000 BETWEEN mn::BIGINT AND mx::BIGINT)')" "id IN (5, 7000)"
files_pipe lt "{filter: ts, less_than: '2024-01-01 00:50:00+00'}"
check lt "$(ruled_out ts "mn::TIMESTAMPTZ >= TIMESTAMPTZ '2024-01-01 00:50:00+00'")" "ts < TIMESTAMPTZ '2024-01-01 00:50:00+00'"
files_pipe ren "{rename: {id: k}}" "{filter: k, equals: 8500}"
check ren "$(ruled_out id 'NOT (8500 BETWEEN mn::BIGINT AND mx::BIGINT)')" "id = 8500" k
[ "$(skipped)" -ge 1 ] || fail "a filter after a rename should still skip groups"
pass "files source: filters skip the row groups DuckDB's statistics rule out; the rows kept are DuckDB's"

# ---- 2 ----
files_pipe cast "{cast: id, to: float64}" "{filter: id, greater_than: 6000}"
check cast 0 "id > 6000"
files_pipe ne "{filter: id, not_equals: 3}"
check ne 0 "id <> 3"
pass "a filter after a cast, and not_equals: nothing skipped, the same rows"

# ---- 3 ----
cat > s3gt.yaml <<YAML
version: 1
name: s3gt
source:
  type: s3
  bucket: $S3_BUCKET
  endpoint: "$S3_ENDPOINT"
  path_style: true
  access_key_id: env:S3_KEY
  secret_access_key: env:S3_SECRET
  prefix: in/
  resources: [{table: t}]
sink: {type: sqlite, path: $T/s3gt.db}
transforms:
  - {filter: id, greater_than: 6000}
YAML
check s3gt "$(ruled_out id 'mx::BIGINT <= 6000')" "id > 6000"
[ "$(skipped)" -ge 1 ] || fail "the s3 source skipped no group"
pass "s3 source: the same row groups skipped, the same rows"

# ---- 4 ----
for part in 0 1 2; do
  duck "COPY (SELECT * FROM '$T/data/f.parquet' WHERE id >= $((part * 3000)) AND id < $((part * 3000 + 3000)))
    TO '$T/data/part$part.parquet' (FORMAT parquet)" >/dev/null
  cat > "to_ice$part.yaml" <<YAML
version: 1
name: to_ice$part
source: {type: files, path: "$T/data/part$part.parquet", resources: [{table: t}]}
sink: {type: iceberg, warehouse: $T/wh, namespace: db, write: append}
YAML
  expect_exit 0 ferry run "to_ice$part.yaml"
done
ice_pipe() { # NAME TRANSFORM
  cat > "$1.yaml" <<YAML
version: 1
name: $1
source: {type: iceberg, warehouse: $T/wh, namespace: db, resources: [{table: t}]}
sink: {type: sqlite, path: $T/$1.db}
transforms:
  - $2
YAML
}
ice_pipe icegt "{filter: id, greater_than: 6500}"
check icegt 2 "id > 6500"
ice_pipe icein "{filter: id, in: [10, 8999]}"
check icein 1 "id IN (10, 8999)"
ice_pipe icene "{filter: id, not_equals: 4}"
check icene 0 "id <> 4"
pass "iceberg source: data files ruled out by their manifest bounds are not read; the rows kept are DuckDB's"

# ---- 5 ----
ice_append() { # PART SELECT
  duck "COPY ($2) TO '$T/data/part$1.parquet' (FORMAT parquet)" >/dev/null
  sed -e "s/part0/part$1/; s/to_ice0/to_ice$1/" to_ice0.yaml > "to_ice$1.yaml"
  expect_exit 0 ferry run "to_ice$1.yaml"
}
cat > iceinc.yaml <<YAML
version: 1
name: iceinc
source: {type: iceberg, warehouse: $T/wh, namespace: db, resources: [{table: t, mode: incremental}]}
sink: {type: sqlite, path: $T/iceinc.db, write: append}
transforms:
  - {filter: id, greater_than: 6500}
YAML
expect_exit 0 ferry run iceinc.yaml --json
[ "$(skipped)" = 2 ] || fail "incremental, first read: $(skipped) data files skipped, 2 ruled out"
ice_append 3 "SELECT (20000 + i)::BIGINT AS id, TIMESTAMPTZ '2024-01-01 00:00:00+00' + to_seconds(i::BIGINT) AS ts,
  'w' || i AS s FROM range(0, 1000) t(i)"
ice_append 4 "SELECT (100 + i)::BIGINT AS id, TIMESTAMPTZ '2024-01-01 00:00:00+00' + to_seconds(i::BIGINT) AS ts,
  'x' || i AS s FROM range(0, 1000) t(i)"
expect_exit 0 ferry run iceinc.yaml --json
[ "$(skipped)" = 1 ] || fail "incremental: $(skipped) added data files skipped, the filter rules out 1 (ids 100..1099)"
want=$(duck "SELECT count(*)::INTEGER AS n, sum(id)::INTEGER AS s FROM read_parquet(['$T/data/part0.parquet',
  '$T/data/part1.parquet', '$T/data/part2.parquet', '$T/data/part3.parquet', '$T/data/part4.parquet']) WHERE id > 6500" | jq -c .)
got=$(q iceinc.db "SELECT '[' || count(*) || ',' || CAST(sum(id) AS INTEGER) || ']' FROM t")
[ "$got" = "$want" ] || fail "incremental: rows (count, sum of ids) $got, DuckDB $want"
pass "iceberg source, incremental: added data files ruled out by their bounds are not read; the rows kept are DuckDB's"
