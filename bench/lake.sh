#!/usr/bin/env bash
# Lake benchmark (issue 20), one run, same file for both tools:
#   DuckDB writes ROWS rows (orders-like: ints, text, decimal, double, bool, timestamptz; zstd,
#   row groups of 122880) to one Parquet file; then into the same PostgreSQL server
#   (tests/pg/pg.sh), into an empty table each time:
#     a. ferry: files source (format parquet) -> postgres sink, write: append
#     b. DuckDB reading the file and piping CSV into psql \copy ... from stdin (node + psql)
#   wall time, rows/s, peak RSS (/usr/bin/time %M; for b. the larger of node and psql), row
#   count checked.
# Prints a markdown table and writes bench/results/lake-<date>[-<rows>rows].md. Never a CTest
# test, never gates CI.
#   ROWS=5000000 bash bench/lake.sh
set -euo pipefail
cd "$(dirname "$0")/.."
FERRY_SRC=$PWD
ROWS=${ROWS:-5000000}
NODE_TOOLS=$FERRY_SRC/tests/tools
DUCK=$NODE_TOOLS/duckdb_exec.mjs
[ -d "$NODE_TOOLS/node_modules/@duckdb/node-api" ] || (cd "$NODE_TOOLS" && npm ci --silent)
command -v /usr/bin/time >/dev/null || { echo "lake.sh: needs /usr/bin/time (apt-get install time)" >&2; exit 1; }

echo "building ferry (Release) in build/bench" >&2
cmake -S . -B build/bench -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build/bench -j2 --target ferry >/dev/null
FERRY=$FERRY_SRC/build/bench/ferry

W=$(mktemp -d "${TMPDIR:-/tmp}/ferry-lakebench.XXXXXX")
chmod 755 "$W"
T=$W
trap 'rm -rf "$W"' EXIT
cd "$W"
# shellcheck source=../tests/pg/pg.sh
. "$FERRY_SRC/tests/pg/pg.sh"
pg_start
export BENCH_PG_URL=$FERRY_PG_URL
q() { psql -v ON_ERROR_STOP=1 -qXAt "$@"; }
now() { date +%s.%N; }

echo "DuckDB writes $ROWS rows to orders.parquet" >&2
node "$DUCK" "COPY (SELECT i::BIGINT AS id, (i % 100000)::INTEGER AS customer_id,
  (['new', 'paid', 'shipped', 'cancelled'])[i % 4 + 1] AS status, (i % 50)::SMALLINT AS quantity,
  ((i % 1000000) / 100.0)::DECIMAL(12,2) AS amount, (i % 7) / 10.0 AS discount, i % 3 = 0 AS express,
  CASE WHEN i % 5 = 0 THEN NULL ELSE 'note ' || (i % 997) END AS note,
  TIMESTAMPTZ '2024-01-01 00:00:00+00' + to_microseconds(i::BIGINT * 1000) AS created_at
  FROM range(0, $ROWS) t(i)) TO '$W/orders.parquet' (FORMAT parquet, COMPRESSION zstd)" >/dev/null
S_pq=$(stat -c %s orders.parquet)

cat > ferry.yaml <<YAML
version: 1
name: bench_lake
source:
  type: files
  path: $W/orders.parquet
  resources: [{table: orders, mode: full}]
sink: {type: postgres, url: "env:BENCH_PG_URL", schema: public, write: append}
YAML

echo "a. ferry files (parquet) -> postgres" >&2
t0=$(now)
/usr/bin/time -f '%M' -o ferry.rss "$FERRY" run ferry.yaml --fresh --state "$W/state.db" >ferry.out 2>&1
T_ferry=$(echo "$(now) - $t0" | bc)
M_ferry=$(tail -n1 ferry.rss)
[ "$(q -c 'SELECT count(*) FROM orders')" = "$ROWS" ] || { echo "ferry: row count" >&2; exit 1; }
q -c "TRUNCATE orders; CHECKPOINT"

echo "b. DuckDB -> CSV -> psql \\copy" >&2
t0=$(now)
# duckdb_exec.mjs prints the row COPY returns (its count) after the CSV: head drops it
/usr/bin/time -f '%M' -o duck.rss node "$DUCK" "COPY (SELECT * FROM '$W/orders.parquet') TO '/dev/stdout' (FORMAT csv, HEADER false)" \
  | head -n -1 | /usr/bin/time -f '%M' -o psql.rss psql -v ON_ERROR_STOP=1 -qX -c "\\copy orders FROM STDIN WITH (FORMAT csv)"
T_duck=$(echo "$(now) - $t0" | bc)
M_duck=$(tail -n1 duck.rss); M_psql=$(tail -n1 psql.rss)
[ "$(q -c 'SELECT count(*) FROM orders')" = "$ROWS" ] || { echo "duckdb|copy: row count" >&2; exit 1; }

mkdir -p "$FERRY_SRC/bench/results"
out="$FERRY_SRC/bench/results/lake-$(date -u +%Y%m%d)$([ "$ROWS" = 5000000 ] || echo "-${ROWS}rows").md"
{
  echo "# Lake benchmark: one Parquet file ($ROWS rows, $((S_pq / 1048576)) MiB zstd) into PostgreSQL"
  echo
  echo "| tool | wall s | rows/s | peak RSS MiB | ferry / DuckDB |"
  echo "|---|---|---|---|---|"
  printf '| ferry files (parquet) -> postgres | %.2f | %.0f | %.1f | %.2f |\n' "$T_ferry" \
    "$(echo "$ROWS / $T_ferry" | bc -l)" "$(echo "$M_ferry / 1024" | bc -l)" "$(echo "$T_ferry / $T_duck" | bc -l)"
  printf '| DuckDB read_parquet -> CSV -> psql \\copy | %.2f | %.0f | %.1f (node) / %.1f (psql) | |\n' "$T_duck" \
    "$(echo "$ROWS / $T_duck" | bc -l)" "$(echo "$M_duck / 1024" | bc -l)" "$(echo "$M_psql / 1024" | bc -l)"
  echo
  echo "Same run, same server (tests/pg/pg.sh: fsync off), the table emptied (TRUNCATE + CHECKPOINT) between."
  echo "Machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)."
} | tee "$out"
