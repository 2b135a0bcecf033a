#!/usr/bin/env bash
# shared: pg
# The files source reading Parquet files incrementally by a cursor column, with row groups
# skipped by their column statistics (docs/connectors.md, "Cursor reads of Parquet files"):
#   1. a first run reads every row; files added later (new row groups, higher cursors) are
#      read by the next run: only the rows above the saved cursor, the old files' row groups
#      skipped by statistics (counted in resource.started's row_groups_skipped), and the
#      table equals DuckDB's reading of every file (set equality);
#   2. the same with a cursor whose statistics are not usable (an unsigned column: its order
#      differs): nothing is skipped, the groups are read and filtered, the rows are the same;
#   3. a timestamp cursor; a run with nothing new reads no row and skips every group;
#   4. a cursor on a CSV file or on a text column: one error naming it.
. "$(dirname "$0")/lib.sh"
. "${FERRY_PG_SH:-$FERRY_SRC/tests/pg/pg.sh}"
DUCK="$FERRY_SRC/tests/tools/duckdb_exec.mjs"
command -v node >/dev/null || fail "node is required (scripts/install-deps.sh)"
[ -d "$FERRY_SRC/tests/tools/node_modules" ] || fail "tests/tools/node_modules missing: run npm ci --prefix tests/tools"
duck() { nodetool "$DUCK" "$1" >/dev/null || fail "DuckDB failed: $1"; }
pg_start
export DEST_URL="$FERRY_PG_URL"
p() { psql "$FERRY_PG_URL" -X -q -v ON_ERROR_STOP=1 -A -t "$@"; }

# rows FROM TO FILE: ids FROM..TO-1 (groups of 2048 rows), the cursor columns rising with id
rows() {
  duck "COPY (SELECT i::BIGINT AS id, i::UINTEGER AS u,
   TIMESTAMP '2024-01-01' + to_seconds(i::BIGINT) AS ts, 'v' || i AS s
   FROM range($1, $2) t(i)) TO '$T/data/$3' (FORMAT parquet, ROW_GROUP_SIZE 2048)"
}
pipe() { # NAME TABLE CURSOR
  cat > "$1.yaml" <<EOF2
version: 1
name: $1
source: {type: files, path: "$T/data/*.parquet", resources: [{table: $2, mode: incremental, cursor: [$3]}]}
sink: {type: postgres, url: 'env:DEST_URL', schema: public, write: append}
batch: {rows: 1000}
EOF2
}
skipped() { # the last run's row_groups_skipped
  ferry events "$(json_field "$OUT" .run_id)" --json | jq -r 'select(.type == "resource.started") | .payload.row_groups_skipped' | tail -1
}
run() { expect_exit 0 ferry run "$1.yaml" --json; }
same_as_duck() { # TABLE
  nodetool "$DUCK" "COPY (SELECT id, u, ts, s FROM read_parquet('$T/data/*.parquet')) TO '$T/ref.csv' (FORMAT csv, HEADER false)" >/dev/null
  p -c "DROP TABLE IF EXISTS ref; CREATE TABLE ref (LIKE $1)"
  p -c "\\copy ref FROM '$T/ref.csv' WITH (FORMAT csv)"
  local a b
  a=$(p -c "SELECT count(*) FROM (SELECT * FROM $1 EXCEPT ALL SELECT * FROM ref) x")
  b=$(p -c "SELECT count(*) FROM (SELECT * FROM ref EXCEPT ALL SELECT * FROM $1) x")
  [ "$a/$b" = 0/0 ] || fail "$1 differs from DuckDB's reading of the files: $a / $b rows"
}

mkdir data
rows 0 5000 a.parquet # 3 row groups
pipe by_id t_id id
pipe by_u t_u u
pipe by_ts t_ts ts

# ---- 1. statistics skip the old groups -------------------------------------------------------
run by_id
[ "$(p -c 'SELECT count(*) FROM t_id')" = 5000 ] || fail "first run: every row"
[ "$(skipped)" = 0 ] || fail "first run: nothing to skip ($(skipped))"
rows 5000 7000 b.parquet
run by_id
[ "$(skipped)" = 3 ] || fail "second run: a.parquet's 3 groups should be skipped ($(skipped))"
[ "$(p -c 'SELECT count(*), count(DISTINCT id), min(id) FILTER (WHERE id >= 5000) FROM t_id')" = "7000|7000|5000" ] \
  || fail "second run: $(p -c 'SELECT count(*), count(DISTINCT id) FROM t_id')"
same_as_duck t_id
pass "cursor read of Parquet files: new rows only, old row groups skipped by statistics (3, counted)"

# ---- 2. no usable statistics: read and filtered ------------------------------------------------
rm data/b.parquet
run by_u
rows 5000 7000 b.parquet
run by_u
[ "$(skipped)" = 0 ] || fail "an unsigned cursor has no usable statistics: nothing skipped ($(skipped))"
[ "$(p -c 'SELECT count(*), count(DISTINCT id) FROM t_u')" = "7000|7000" ] || fail "unsigned cursor: $(p -c 'SELECT count(*), count(DISTINCT id) FROM t_u')"
same_as_duck t_u
pass "a cursor without usable statistics: groups read and filtered, same rows"

# ---- 3. timestamp cursor, nothing new --------------------------------------------------------------
run by_ts
[ "$(p -c 'SELECT count(*) FROM t_ts')" = 7000 ] || fail "timestamp cursor, first run"
rows 7000 7100 c.parquet
run by_ts
[ "$(skipped)" = 4 ] || fail "timestamp cursor: a and b's 4 groups skipped ($(skipped))"
same_as_duck t_ts
run by_ts
[ "$(skipped)" = 5 ] || fail "nothing new: every group skipped ($(skipped))"
[ "$(p -c 'SELECT count(*) FROM t_ts')" = 7100 ] || fail "nothing new: no row"
pass "timestamp cursor; a run with nothing new reads nothing"

# ---- 4. refused cursors ------------------------------------------------------------------------------
pipe by_s t_s s
expect_exit 2 ferry run by_s.yaml
grep -q 'cursor column "s" is not an integer, date or timestamp' <<< "$OUT" || fail "a text cursor should be refused: $OUT"
mkdir csv && printf 'id\n1\n' > csv/x.csv
sed -e "s#$T/data/\*.parquet#$T/csv/*.csv#" by_id.yaml > csv.yaml
expect_exit 2 ferry run csv.yaml
grep -q 'x.csv: a `cursor:` is read from Parquet files only' <<< "$OUT" || fail "a CSV cursor should be refused: $OUT"
pass "a text cursor column and a cursor over CSV: one error naming it"
