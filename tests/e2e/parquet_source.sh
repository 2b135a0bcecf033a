#!/usr/bin/env bash
# shared: pg
# labels: asan
# The files source with Parquet files, against readers ferry did not write:
#   1. DuckDB writes the same table of every type it writes (signed and unsigned integers,
#      float, double, decimals on INT32/INT64/FIXED_LEN_BYTE_ARRAY, text, blob, bool, date,
#      time, timestamp, timestamptz, timestamp_ms, timestamp_ns, uuid, json, enum; NULLs) four
#      times: snappy + data pages v1, zstd + v2 pages (DELTA_BINARY_PACKED,
#      DELTA_LENGTH_BYTE_ARRAY, BYTE_STREAM_SPLIT, RLE dictionaries), gzip + v1, uncompressed + v2,
#      small row groups (several shards per file); ferry reads the four files into PostgreSQL
#      and into SQLite; DuckDB's own reading of the files is loaded into PostgreSQL and both
#      copies are compared with it value by value (set equality of whole rows, both ways);
#   2. only selected columns (`columns:`) are read;
#   3. apache/parquet-testing files (DELTA_BYTE_ARRAY, optional delta columns, byte stream
#      split; tests/fixtures/parquet-testing) compared with DuckDB's reading the same way;
#   4. ferry's own Parquet output (sample -> files parquet) read back into SQLite equals the
#      sample written to SQLite directly;
#   5. a truncated file, a footer that lies about its column chunks, a corrupt page and an
#      INT96 out of range: one clear error naming the file, nothing written.
# Needs node and tests/tools/node_modules (scripts/install-deps.sh: npm ci --prefix tests/tools).
. "$(dirname "$0")/lib.sh"
. "${FERRY_PG_SH:-$FERRY_SRC/tests/pg/pg.sh}"
DUCK="$FERRY_SRC/tests/tools/duckdb_exec.mjs"
FIX="$FERRY_SRC/tests/fixtures/parquet-testing"
command -v node >/dev/null || fail "node is required (scripts/install-deps.sh)"
[ -d "$FERRY_SRC/tests/tools/node_modules" ] || fail "tests/tools/node_modules missing: run npm ci --prefix tests/tools"
duck() { nodetool "$DUCK" "$1" >/dev/null || fail "DuckDB failed: $1"; }
pg_start
export DEST_URL="$FERRY_PG_URL"
p() { psql "$FERRY_PG_URL" -X -q -v ON_ERROR_STOP=1 -A -t "$@"; }

# ---- data: one table of every type, four encodings ----------------------------------------------
nul() { echo "CASE WHEN (i + $1) % 13 = 0 THEN NULL ELSE $2 END"; }
SEL="SELECT (i + @N@ * 100000)::BIGINT AS id,
 $(nul 1 '(i % 200 - 100)::TINYINT') AS ti, $(nul 2 '(i * 3 % 60000 - 30000)::SMALLINT') AS si,
 $(nul 3 '(i * 7919 - 2000000000)::INTEGER') AS ii, $(nul 4 '(i::BIGINT * 1000000007 - 4611686018427387904)') AS bi,
 $(nul 5 '(i % 256)::UTINYINT') AS uti, $(nul 6 '(i % 65536)::USMALLINT') AS usi,
 $(nul 7 '(4294967295 - i * 65537)::UINTEGER') AS ui, $(nul 8 '(18446744073709551615 - i)::UBIGINT') AS ubi,
 $(nul 9 '(i / 3.0 - 500)::FLOAT') AS fl, $(nul 10 '(i / 7.0 - 1e6)::DOUBLE') AS db,
 $(nul 11 '((i % 19999 - 9999) / 100.0)::DECIMAL(4,2)') AS d4, $(nul 12 '(i * 1.001 - 3)::DECIMAL(18,3)') AS d18,
 $(nul 0 '(i * 12345.6789 - 99999.5)::DECIMAL(38,10)') AS d38,
 $(nul 1 "'str-' || (i % 37) || repeat('é', i % 5) || repeat('x', i % 11)") AS s,
 $(nul 2 "unhex(printf('%02x%04x00ff', i % 256, i))") AS bl, $(nul 3 '(i % 3 = 0)') AS b,
 $(nul 4 "DATE '1900-01-01' + (i * 17 % 80000)::INT") AS dt,
 $(nul 5 "TIME '00:00:00' + to_microseconds(i::BIGINT * 1000003 % 86400000000)") AS tm,
 $(nul 6 "TIMESTAMP '1950-12-31 10:00:00' + to_microseconds(i::BIGINT * 123456789)") AS ts,
 $(nul 7 "TIMESTAMPTZ '2020-01-01 00:00:00+00' + to_microseconds(i::BIGINT * 98765)") AS tstz,
 $(nul 8 "(TIMESTAMP '2001-01-01' + to_milliseconds(i::BIGINT * 1111))::TIMESTAMP_MS") AS tsms,
 $(nul 9 "(TIMESTAMP '2001-01-01' + to_microseconds(i::BIGINT * 7))::TIMESTAMP_NS") AS tsns,
 $(nul 10 'md5(i::VARCHAR)::UUID') AS u,
 $(nul 11 "json_object('k', i, 'v', 'x' || i, 'a', [i, i + 1])::JSON") AS js,
 $(nul 12 "(['red', 'green', 'blue'])[i % 3 + 1]::ENUM('red', 'green', 'blue')") AS en
 FROM range(0, 5000) t(i)"
mkdir data
duck "COPY (${SEL//@N@/1}) TO 'data/a.parquet' (FORMAT parquet, COMPRESSION snappy, ROW_GROUP_SIZE 2048);
 COPY (${SEL//@N@/2}) TO 'data/b.parquet' (FORMAT parquet, COMPRESSION zstd, PARQUET_VERSION V2, ROW_GROUP_SIZE 1500);
 COPY (${SEL//@N@/3}) TO 'data/c.parquet' (FORMAT parquet, COMPRESSION gzip, ROW_GROUP_SIZE 4096);
 COPY (${SEL//@N@/4}) TO 'data/d.parquet' (FORMAT parquet, COMPRESSION uncompressed, PARQUET_VERSION V2)"
encs=$(nodetool "$DUCK" "SELECT string_agg(DISTINCT encodings, ',') FROM parquet_metadata('data/*.parquet')")
for e in DELTA_BINARY_PACKED DELTA_LENGTH_BYTE_ARRAY BYTE_STREAM_SPLIT RLE_DICTIONARY PLAIN_DICTIONARY; do
  case "$encs" in *"$e"*) ;; *) fail "DuckDB wrote no $e page (encodings: $encs)" ;; esac
done

# DuckDB's reading of a glob as CSV PostgreSQL's COPY reads into a table LIKE ferry's
# (blobs as \x hex, instants in UTC).
duck_csv() { # GLOB OUT [COLUMNS]
  local cols=${3:-*}
  duck "SET TimeZone = 'UTC'; COPY (SELECT $cols FROM (SELECT * REPLACE ('\\x' || lower(hex(bl)) AS bl) FROM read_parquet('$1')))
        TO '$2' (FORMAT csv, HEADER false)"
}
# compare_pg TABLE REF_TABLE: set equality both ways and equal counts.
compare_pg() {
  local a b c1 c2
  a=$(p -c "SELECT count(*) FROM (SELECT * FROM $1 EXCEPT ALL SELECT * FROM $2) x")
  b=$(p -c "SELECT count(*) FROM (SELECT * FROM $2 EXCEPT ALL SELECT * FROM $1) x")
  c1=$(p -c "SELECT count(*) FROM $1"); c2=$(p -c "SELECT count(*) FROM $2")
  if [ "$a" != 0 ] || [ "$b" != 0 ] || [ "$c1" != "$c2" ]; then
    p -c "SELECT * FROM (SELECT * FROM $1 EXCEPT ALL SELECT * FROM $2) x LIMIT 3" >&2
    p -c "SELECT * FROM (SELECT * FROM $2 EXCEPT ALL SELECT * FROM $1) x LIMIT 3" >&2
    fail "$1 differs from $2: $a / $b rows ($c1 vs $c2)"
  fi
}

# ---- 1. into PostgreSQL and SQLite -----------------------------------------------------------------
pipe() { # FILE NAME GLOB TABLE SINK [RESOURCE_EXTRA]
  cat > "$1" <<EOF
version: 1
name: $2
source:
  type: files
  path: $3
  resources: [{table: $4, mode: full${6:+, $6}}]
sink: $5
batch: {rows: 700}
EOF
}
pipe pg.yaml pq-pg "$T/data/*.parquet" t "{type: postgres, url: 'env:DEST_URL', schema: public, write: append}"
expect_exit 0 ferry run pg.yaml
pipe sq.yaml pq-sq "$T/data/*.parquet" t "{type: sqlite, path: $T/out.db, write: append}"
expect_exit 0 ferry run sq.yaml
[ "$(p -c 'SELECT count(*) FROM t')" = 20000 ] || fail "postgres: row count"
[ "$(p -c "SELECT data_type FROM information_schema.columns WHERE table_name = 't' AND column_name = 'ubi'")" = numeric ] \
  || fail "UBIGINT should arrive as numeric (decimal128(20,0))"
duck_csv "$T/data/*.parquet" ref.csv
p -c "CREATE TABLE ref (LIKE t)"
p -c "\\copy ref FROM '$T/ref.csv' WITH (FORMAT csv)"
compare_pg t ref
pass "DuckDB files (4 codecs, pages v1/v2, delta/dictionary/byte-stream-split) -> postgres equal DuckDB's reading"

# SQLite's copy, rendered for PostgreSQL: blobs as \x hex, floats with 17 digits.
cols=$(q out.db "SELECT group_concat(CASE name WHEN 'bl' THEN 'iif(bl IS NULL, NULL, ''\\x''||lower(hex(bl)))'
  WHEN 'fl' THEN 'iif(fl IS NULL, NULL, printf(''%!.17g'',fl))'
  WHEN 'db' THEN 'iif(db IS NULL, NULL, printf(''%!.17g'',db))' ELSE '\"'||name||'\"' END, ',')
  FROM pragma_table_info('t')")
q -csv out.db "SELECT $cols FROM t" > sq.csv
[ "$(wc -l < sq.csv)" = 20000 ] || fail "sqlite: row count"
p -c "CREATE TABLE sq (LIKE t)"
p -c "\\copy sq FROM '$T/sq.csv' WITH (FORMAT csv)"
compare_pg sq ref
pass "the same files -> sqlite equal DuckDB's reading"

# ---- 2. selected columns ------------------------------------------------------------------------------
pipe sel.yaml pq-sel "$T/data/b.parquet" t_sel "{type: postgres, url: 'env:DEST_URL', schema: public, write: append}" \
  "columns: [js, id, bl]"
expect_exit 0 ferry run sel.yaml
[ "$(p -c "SELECT string_agg(column_name, ',' ORDER BY ordinal_position) FROM information_schema.columns WHERE table_name = 't_sel'")" = "js,id,bl" ] \
  || fail "columns: should select js, id, bl in that order"
duck_csv "$T/data/b.parquet" sel.csv "js, id, bl"
p -c "CREATE TABLE ref_sel (LIKE t_sel)"
p -c "\\copy ref_sel FROM '$T/sel.csv' WITH (FORMAT csv)"
compare_pg t_sel ref_sel
pass "columns: reads only the selected columns, in their order"

# ---- 3. apache/parquet-testing files ---------------------------------------------------------------------
for f in delta_byte_array delta_encoding_optional_column delta_length_byte_array byte_stream_split.zstd; do
  tb=$(echo "pt_$f" | tr '.' '_')
  pipe "$tb.yaml" "$tb" "$FIX/$f.parquet" "$tb" "{type: postgres, url: 'env:DEST_URL', schema: public, write: append}"
  expect_exit 0 ferry run "$tb.yaml"
  nodetool "$DUCK" "SET TimeZone = 'UTC'; COPY (SELECT * FROM read_parquet('$FIX/$f.parquet')) TO '$T/$tb.csv' (FORMAT csv, HEADER false)" >/dev/null \
    || fail "DuckDB cannot read $f"
  p -c "CREATE TABLE ref_$tb (LIKE $tb)"
  p -c "\\copy ref_$tb FROM '$T/$tb.csv' WITH (FORMAT csv)"
  compare_pg "$tb" "ref_$tb"
done
pass "parquet-testing files (DELTA_BYTE_ARRAY, optional delta columns, byte stream split) equal DuckDB's reading"

# ---- 4. ferry's own Parquet read back --------------------------------------------------------------------
sample_pipeline ref.yaml ref 3000 "type: sqlite" "path: $T/ref.db" "write: append"
expect_exit 0 ferry run ref.yaml
sample_pipeline own.yaml own 3000 "type: files" "path: $T/own/" "format: parquet" "write: append" \
  "row_group_bytes: 64KiB"
expect_exit 0 ferry run own.yaml
for tb in orders users; do
  cat > "back_$tb.yaml" <<EOF
version: 1
name: back-$tb
source: {type: files, path: "$T/own/$tb/*.parquet", resources: [{table: $tb, mode: full}]}
sink: {type: sqlite, path: $T/back.db, write: append}
EOF
  ls own/$tb/*.parquet >/dev/null 2>&1 || fail "no parquet part for $tb under own/$tb/ ($(find own -name '*.parquet' | head -3))"
  expect_exit 0 ferry run "back_$tb.yaml"
  same_table ref.db back.db "$tb"
done
pass "ferry's own Parquet output reads back equal to the sample"

# ---- 5. bad files: one clear error naming the file, nothing written ----------------------------------------
mkdir bad
bad_run() { # NAME FILE WANT
  pipe "bad_$1.yaml" "bad-$1" "$2" "bad_$1" "{type: postgres, url: 'env:DEST_URL', schema: public, write: append}"
  expect_exit 1 ferry run "bad_$1.yaml"
  printf '%s\n' "$OUT" | grep -q "$2" || fail "$1: the error should name $2: $OUT"
  printf '%s\n' "$OUT" | grep -q "$3" || fail "$1: the error should say '$3': $OUT"
  [ -z "$(p -c "SELECT to_regclass('public.bad_$1')")" ] || [ "$(p -c "SELECT count(*) FROM bad_$1")" = 0 ] \
    || fail "$1: rows were written"
}
size=$(stat -c %s data/c.parquet)
head -c $((size / 2)) data/c.parquet > bad/truncated.parquet
bad_run truncated "$T/bad/truncated.parquet" "no PAR1 magic at its end"
# The footer kept, the data before it cut: every column chunk offset now lies.
flen=$(python3 -c "import struct,sys; d=open('data/c.parquet','rb').read(); print(struct.unpack('<I', d[-8:-4])[0])")
{ head -c 1000 data/c.parquet; tail -c $((flen + 8)) data/c.parquet; } > bad/lying.parquet
bad_run lying "$T/bad/lying.parquet" "column chunk lies outside"
# The page header of column s overwritten (Parquet pages carry no checksum DuckDB writes:
# a header is what a reader can tell is broken).
duck "COPY (${SEL//@N@/5}) TO '$T/bad/one.parquet' (FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE 100000)"
cp bad/one.parquet bad/corrupt.parquet
off=$(nodetool "$DUCK" "SELECT coalesce(dictionary_page_offset, data_page_offset) FROM parquet_metadata('$T/bad/one.parquet') WHERE path_in_schema = 's'" | tr -d '[]"')
[ "$off" -gt 4 ] || fail "no offset for column s: $off"
printf '\377\377\377\377\377\377\377\377\377\377\377\377\377\377\377\377' \
  | dd of=bad/corrupt.parquet bs=1 seek="$off" conv=notrunc status=none
bad_run corrupt "$T/bad/corrupt.parquet" "parquet"
bad_run int96 "$FIX/int96_from_spark.parquet" "INT96 timestamp beyond"
pass "truncated, lying footer, corrupt page, INT96 out of range: one error naming the file, nothing written"

# ---- 6. a crash mid-read: resumed inside the row group, no missing and no duplicate row ---------------
cat > crash.yaml <<EOF
version: 1
name: pq-crash
source: {type: files, path: "$T/data/*.parquet", resources: [{table: t, mode: full}]}
sink: {type: sqlite, path: $T/crash.db, write: append}
batch: {rows: 300}
EOF
expect_exit 137 env FERRY_FAILPOINTS=after_sink_apply=crash@7 "$FERRY_BIN" run crash.yaml --quiet
partial=$(q crash.db 'SELECT count(*) FROM t')
[ "$partial" -gt 0 ] && [ "$partial" -lt 20000 ] || fail "the crash should leave a partial copy ($partial rows)"
expect_exit 0 ferry run crash.yaml
printf '%s' "$OUT" | grep -q 'resuming' || fail "the run after the crash should resume: $OUT"
[ "$(q crash.db 'SELECT count(*), count(DISTINCT id) FROM t')" = "20000|20000" ] \
  || fail "after the crash: $(q crash.db 'SELECT count(*), count(DISTINCT id) FROM t') rows/ids, want 20000|20000"
d=$(q crash.db "ATTACH '$T/out.db' AS o; SELECT count(*) FROM (SELECT * FROM t EXCEPT SELECT * FROM o.t)")
[ "$d" = 0 ] || fail "after the crash the copy differs from the uninterrupted one: $d rows"
pass "crash mid-read: resumed inside the row group, every row once"
