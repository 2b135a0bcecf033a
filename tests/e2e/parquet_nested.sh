#!/usr/bin/env bash
# shared: pg
# Nested Parquet fields (LIST, MAP, structs, repeated fields without annotation) read by the
# files source as one JSON column per top-level field (docs/connectors.md, "Nested fields"):
#   1. files DuckDB writes with lists, maps, structs nested in each other, NULLs and empty
#      lists at every level, several row groups, data pages v1 and v2, three codecs: ferry
#      reads them into PostgreSQL; every row (row_to_json) equals DuckDB's to_json of the
#      same file's row (tests/tools/json_rows_equal.mjs: multiset of rows, keys sorted);
#   2. apache/parquet-testing files written by Impala, parquet-rs, parquet-mr and Arrow
#      (3-level and legacy 2-level lists, repeated fields without LIST, maps of lists, lists
#      of maps, maps without values) compared with DuckDB the same way, map_no_value with the
#      values its fixture documents (DuckDB refuses that file);
#   3. only a selected nested column is read, NaN and infinities arrive as JSON strings;
#   4. a crash mid-read of a nested file resumes inside the row group: every row once;
#   5. a nested value out of ferry's range (nested_structs.rust: a timestamp in year 52951)
#      stops the run naming the file and the column, nothing written. (Corrupt levels: every
#      changed byte of a nested file in unit/test_parquet_reader, and fuzz_parquet.)
# Needs node and tests/tools/node_modules (scripts/install-deps.sh: npm ci --prefix tests/tools).
. "$(dirname "$0")/lib.sh"
. "${FERRY_PG_SH:-$FERRY_SRC/tests/pg/pg.sh}"
DUCK="$FERRY_SRC/tests/tools/duckdb_exec.mjs"
EQ="$FERRY_SRC/tests/tools/json_rows_equal.mjs"
FIX="$FERRY_SRC/tests/fixtures/parquet-testing"
command -v node >/dev/null || fail "node is required (scripts/install-deps.sh)"
[ -d "$FERRY_SRC/tests/tools/node_modules" ] || fail "tests/tools/node_modules missing: run npm ci --prefix tests/tools"
duck() { nodetool "$DUCK" "$1" >/dev/null || fail "DuckDB failed: $1"; }
pg_start
export DEST_URL="$FERRY_PG_URL"
p() { psql "$FERRY_PG_URL" -X -q -v ON_ERROR_STOP=1 -A -t "$@"; }

pipe() { # FILE NAME PATH TABLE [RESOURCE_EXTRA]
  cat > "$1" <<EOF2
version: 1
name: $2
source:
  type: files
  path: $3
  resources: [{table: $4, mode: full${5:+, $5}}]
sink: {type: postgres, url: 'env:DEST_URL', schema: public, write: append}
batch: {rows: 300}
EOF2
}
# same_as_duckdb FILE TABLE: ferry's copy in TABLE equals DuckDB's reading of FILE, row by row.
same_as_duckdb() {
  p -c "SELECT row_to_json(x) FROM $2 x" > "$2.ferry.jsonl"
  nodetool "$DUCK" "SET TimeZone = 'UTC'; SELECT to_json(x)::VARCHAR FROM read_parquet('$1') x" \
    > "$2.duck.jsonl" || fail "DuckDB cannot read $1"
  [ -s "$2.ferry.jsonl" ] || fail "$2: nothing loaded"
  nodetool "$EQ" "$2.ferry.jsonl" "$2.duck.jsonl" >/dev/null || fail "$2 differs from DuckDB's reading of $1"
}
load() { # FILE TABLE [RESOURCE_EXTRA]
  pipe "$2.yaml" "pq-$2" "$1" "$2" "${3:-}"
  expect_exit 0 ferry run "$2.yaml"
}

# ---- 1. DuckDB's nested files --------------------------------------------------------------------
# NULL or empty at every level: the field, the list, the element, the struct, its members.
SEL="SELECT i AS id,
 CASE WHEN i % 7 = 0 THEN NULL WHEN i % 5 = 0 THEN [] ELSE [i, NULL, i * 2] END AS li,
 CASE WHEN i % 11 = 0 THEN NULL ELSE [[i, i + 1], [], NULL, [NULL]] END AS lli,
 CASE WHEN i % 13 = 0 THEN NULL ELSE {'a': CASE WHEN i % 3 = 0 THEN NULL ELSE i END,
   'b': 'x' || i || repeat('é\"\\', i % 3), 'c': CASE WHEN i % 4 = 0 THEN NULL ELSE [i / 4.0, -0.5] END,
   'd': {'e': (i % 2 = 0), 'f': CASE WHEN i % 6 = 0 THEN NULL ELSE DATE '2000-01-01' + i::INT END}} END AS st,
 CASE WHEN i % 9 = 0 THEN NULL WHEN i % 4 = 0 THEN MAP {} ELSE MAP {'k' || i: i, 'z': NULL} END AS mp,
 MAP {i: [i, i + 1], i + 1: NULL} AS mil,
 CASE WHEN i % 8 = 0 THEN NULL ELSE [{'x': i, 'y': [('t' || i), NULL]}, NULL, {'x': NULL, 'y': []}] END AS ls,
 [MAP {'a': {'p': i}}] AS lm,
 [(i * 1.25)::DECIMAL(9,2), (i * 100000.001)::DECIMAL(20,3), NULL] AS dec,
 [TIMESTAMP '2020-02-29 12:00:00' + to_microseconds(i::BIGINT * 1000001), NULL] AS ts,
 [TIMESTAMPTZ '1969-12-31 23:59:59+00' + to_microseconds(i::BIGINT * 7)] AS tz,
 [TIME '00:00:00' + to_microseconds(i::BIGINT * 1000003 % 86400000000)] AS tm,
 [md5(i::VARCHAR)::UUID] AS uu, [(i % 100)::TINYINT, (-i)::SMALLINT] AS small,
 [(i * 4294967)::UBIGINT, 18446744073709551615::UBIGINT] AS ub,
 [(i / 3.0)::FLOAT, i / 7.0, 1e300, -0.0] AS fl, [true, i % 2 = 0, NULL] AS bo,
 'flat ' || i AS flat
 FROM range(0, 2500) t(i)"
mkdir data
duck "COPY ($SEL) TO 'data/a.parquet' (FORMAT parquet, COMPRESSION snappy, ROW_GROUP_SIZE 1024);
 COPY ($SEL) TO 'data/b.parquet' (FORMAT parquet, COMPRESSION zstd, PARQUET_VERSION V2, ROW_GROUP_SIZE 1024);
 COPY ($SEL) TO 'data/c.parquet' (FORMAT parquet, COMPRESSION uncompressed, PARQUET_VERSION V2)"
groups=$(nodetool "$DUCK" "SELECT count(DISTINCT (file_name, row_group_id)) FROM parquet_metadata('data/[ab].parquet')" | tr -d '[]"')
[ "$groups" -ge 4 ] || fail "DuckDB should write several row groups per file ($groups)"
for f in a b c; do
  load "$T/data/$f.parquet" "d_$f"
  same_as_duckdb "$T/data/$f.parquet" "d_$f"
done
[ "$(p -c "SELECT data_type FROM information_schema.columns WHERE table_name = 'd_a' AND column_name = 'st'")" = jsonb ] \
  || fail "a nested field should arrive as jsonb"
[ "$(p -c "SELECT data_type FROM information_schema.columns WHERE table_name = 'd_a' AND column_name = 'flat'")" = text ] \
  || fail "a flat field keeps its type"
[ "$(p -c "SELECT st->'d'->>'f' FROM d_a WHERE id = 1")" = 2000-01-02 ] || fail "a date inside a struct"
[ "$(p -c "SELECT li::text FROM d_a WHERE id = 5")" = '[]' ] || fail "an empty list is []"
[ "$(p -c "SELECT count(*) FROM d_a WHERE li IS NULL")" = 358 ] || fail "a NULL list is NULL (not json null)"
pass "DuckDB nested files (3 codecs, pages v1/v2, several row groups) -> postgres equal DuckDB's to_json, row by row"

# ---- 2. parquet-testing files from other writers ------------------------------------------------------
for f in list_columns nested_lists.snappy nested_maps.snappy nonnullable.impala nullable.impala null_list \
         old_list_structure repeated_no_annotation repeated_primitive_no_list; do
  tb=$(echo "pt_$f" | tr '.' '_')
  load "$FIX/$f.parquet" "$tb"
  same_as_duckdb "$FIX/$f.parquet" "$tb"
done
load "$FIX/map_no_value.parquet" pt_map_no_value
[ "$(p -c "SELECT my_map::text || ' ' || my_map_no_v::text || ' ' || my_list::text FROM pt_map_no_value ORDER BY my_list->>0")" = \
'{"1": null, "2": null, "3": null} {"1": null, "2": null, "3": null} [1, 2, 3]
{"4": null, "5": null, "6": null} {"4": null, "5": null, "6": null} [4, 5, 6]
{"7": null, "8": null, "9": null} {"7": null, "8": null, "9": null} [7, 8, 9]' ] \
  || fail "map_no_value: $(p -c 'SELECT * FROM pt_map_no_value')"
pass "parquet-testing nested files (Impala, parquet-rs, parquet-mr, Arrow; legacy lists, maps without values) equal DuckDB's / their documented values"

# ---- 3. a selected nested column; NaN and infinities --------------------------------------------------
load "$T/data/b.parquet" d_sel "columns: [lm, id]"
[ "$(p -c "SELECT string_agg(column_name, ',' ORDER BY ordinal_position) FROM information_schema.columns WHERE table_name = 'd_sel'")" = lm,id ] \
  || fail "columns: should select lm, id"
[ "$(p -c "SELECT count(*) FROM d_sel s JOIN d_b b USING (id) WHERE s.lm = b.lm")" = 2500 ] || fail "selected column differs"
duck "COPY (SELECT 1 AS id, ['nan'::DOUBLE, 'inf'::DOUBLE, '-inf'::DOUBLE, 1.5] AS sp) TO '$T/sp.parquet' (FORMAT parquet)"
load "$T/sp.parquet" sp
[ "$(p -c "SELECT sp::text FROM sp")" = '["NaN", "Infinity", "-Infinity", 1.5]' ] || fail "specials: $(p -c 'SELECT sp FROM sp')"
pass "a selected nested column; NaN and infinities as JSON strings"

# ---- 4. a crash mid-read resumes inside the row group --------------------------------------------------
pipe crash.yaml pq-crash "$T/data/a.parquet" crash
expect_exit 137 env FERRY_FAILPOINTS=after_sink_apply=crash@3 "$FERRY_BIN" run crash.yaml --quiet
partial=$(p -c 'SELECT count(*) FROM crash')
[ "$partial" -gt 0 ] && [ "$partial" -lt 2500 ] || fail "the crash should leave a partial copy ($partial rows)"
expect_exit 0 ferry run crash.yaml
printf '%s' "$OUT" | grep -q 'resuming' || fail "the run after the crash should resume: $OUT"
[ "$(p -c 'SELECT count(*), count(DISTINCT id) FROM crash')" = "2500|2500" ] || fail "after the crash: $(p -c 'SELECT count(*), count(DISTINCT id) FROM crash')"
[ "$(p -c 'SELECT count(*) FROM (SELECT * FROM crash EXCEPT SELECT * FROM d_a) x')" = 0 ] || fail "resumed rows differ"
pass "crash mid-read of nested rows: resumed inside the row group, every row once and equal"

# ---- 5. bad nested input ------------------------------------------------------------------------------
bad_run() { # NAME FILE WANT...
  local name=$1 file=$2; shift 2
  pipe "bad_$name.yaml" "bad-$name" "$file" "bad_$name"
  expect_exit 1 ferry run "bad_$name.yaml"
  for w in "$file" "$@"; do printf '%s\n' "$OUT" | grep -qF "$w" || fail "$name: the error should say '$w': $OUT"; done
  [ -z "$(p -c "SELECT to_regclass('public.bad_$name')")" ] || [ "$(p -c "SELECT count(*) FROM bad_$name")" = 0 ] \
    || fail "$name: rows were written"
}
bad_run range "$FIX/nested_structs.rust.parquet" "column ul_observation_date.min" "out of its type's range"
pass "a nested value out of range: one error naming file and column, nothing written"
