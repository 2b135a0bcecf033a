#!/usr/bin/env bash
# Files benchmark (issue 4), one run, same data for every tool:
#   1. ferry sample (orders, ROWS rows) -> CSV (files sink), then from the same data
#      a. ferry sample -> Parquet zstd (files sink, format parquet)
#      b. DuckDB: COPY (SELECT * FROM read_csv_auto('<the CSV>')) TO 'x.parquet'
#         (FORMAT parquet, COMPRESSION zstd), through tests/tools/duckdb_exec.mjs
#      wall time, rows/s, peak RSS (/usr/bin/time %M), file sizes, Parquet size ferry/DuckDB.
#   2. that CSV (or a ROWS_CSV-row one) -> PostgreSQL (tests/pg/pg.sh) with
#      a. psql \copy orders from 'x.csv' csv header
#      b. ferry files source (csv, declared schema) -> postgres sink, write: append
#      c. pgloader LOAD CSV (its error is recorded when it fails)
#      each into the same pre-created table (emptied before each run), row count verified.
# Prints a markdown table and writes bench/results/files-<date>[-<rows>rows].md. Never a CTest
# test, never gates CI.
#   ROWS=5000000 ROWS_CSV=5000000 PGLOADER_TIMEOUT=900 bash bench/files.sh
# SUFFIX=name adds "-name" to the result file's name (files-<date>[-<rows>rows]-name.md), so a
# re-run on the same day keeps the earlier result.
set -euo pipefail
cd "$(dirname "$0")/.."
FERRY_SRC=$PWD
ROWS=${ROWS:-5000000}
ROWS_CSV=${ROWS_CSV:-$ROWS}
NODE_TOOLS=$FERRY_SRC/tests/tools
# pgloader loads this CSV at ~25 000 rows/s here: bound it so one run stays bounded.
PGLOADER_TIMEOUT=${PGLOADER_TIMEOUT:-900}

need=()
for p in postgresql pgloader time jq bc; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ "${#need[@]}" -gt 0 ]; then
  echo "installing: ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
[ -d "$NODE_TOOLS/node_modules/@duckdb/node-api" ] || (cd "$NODE_TOOLS" && npm ci --silent)

# ---- ferry, Release --------------------------------------------------------------------------
echo "building ferry (Release) in build/bench" >&2
cmake -S . -B build/bench -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build/bench -j2 --target ferry >/dev/null
FERRY=$FERRY_SRC/build/bench/ferry

W=$(mktemp -d "${TMPDIR:-/tmp}/ferry-filesbench.XXXXXX")
chmod 755 "$W"
trap 'rm -rf "$W"' EXIT
cd "$W"

now() { date +%s.%N; }
LOADS=""
load() { LOADS="$LOADS $(cut -d' ' -f1 /proc/loadavg)"; }
# timed NAME CMD...: runs CMD under /usr/bin/time; sets T_<NAME> (wall s) and M_<NAME> (peak
# RSS KiB), or E_<NAME> (the error) when it fails. stdout/stderr go to $W/NAME.out/.err.
timed() {
  local name=$1 t0 t1; shift
  load
  t0=$(now)
  if /usr/bin/time -f '%M' -o "$W/$name.rss" "$@" >"$W/$name.out" 2>"$W/$name.err"; then
    t1=$(now)
    printf -v "T_$name" '%s' "$(echo "$t1 - $t0" | bc)"
    printf -v "M_$name" '%s' "$(tail -n1 "$W/$name.rss")"
  else
    printf -v "E_$name" '%s' "$(grep -v -E '^Command exited' "$W/$name.err" "$W/$name.out" 2>/dev/null |
      grep -m1 -i -E 'error|fatal|fail' | sed -E 's#[a-z]+://[^ @]*@#…@#g' | cut -c1-220)"
    [ -n "$(eval echo "\${E_$name}")" ] || printf -v "E_$name" '%s' "exit status non-zero"
  fi
}
# ferry_run NAME YAML [ROWS]: a fresh ferry run; fails the measurement if the rows differ.
ferry_run() {
  local name=$1 yaml=$2 want=$3
  rm -f "$W"/state.db*
  timed "$name" "$FERRY" run "$yaml" --json --fresh --state "$W/state.db"
  if [ -z "$(eval echo "\${E_$name:-}")" ]; then
    local got; got=$(jq -r .rows "$W/$name.out")
    [ "$got" = "$want" ] || printf -v "E_$name" '%s' "ferry reported $got rows, want $want"
  fi
}

sample_yaml() { # sample_yaml FILE ROWS DIR FORMAT
  cat > "$1" <<YAML
version: 1
name: bench_$4
source:
  type: sample
  rows: $2
  resources:
    - table: orders
sink:
  type: files
  path: $3
  format: $4
  part_bytes: 1TiB
$( [ "$4" = parquet ] && echo "  compression: zstd" )
YAML
}

# ---- 1. sample -> CSV, then Parquet by ferry and by DuckDB --------------------------------
echo "1. ferry sample -> CSV ($ROWS rows)" >&2
sample_yaml "$W/csv.yaml" "$ROWS" "$W/csv" csv
ferry_run csv "$W/csv.yaml" "$ROWS"
[ -z "${E_csv:-}" ] || { echo "files.sh: sample -> CSV failed: $E_csv" >&2; exit 1; }
CSV=$(ls "$W"/csv/orders/part-*.csv)
[ "$(echo "$CSV" | wc -l)" = 1 ] || { echo "files.sh: expected one CSV part, got: $CSV" >&2; exit 1; }
S_csv=$(stat -c %s "$CSV")

echo "1a. ferry sample -> Parquet zstd" >&2
sample_yaml "$W/pq.yaml" "$ROWS" "$W/pq" parquet
ferry_run pq "$W/pq.yaml" "$ROWS"
PQ_FERRY=$(ls "$W"/pq/orders/part-*.parquet 2>/dev/null || true)
S_pq=$( [ -n "$PQ_FERRY" ] && du -cb $PQ_FERRY | tail -n1 | cut -f1 || echo "")
# A second ferry Parquet from the CSV itself (files source, declared schema), so the
# Parquet comparison also has a CSV -> Parquet row like DuckDB's.
SCHEMA='{id: int64, customer_id: int32, status: utf8, quantity: int16, amount: "decimal128(12,2)", discount: float64, express: bool, note: utf8, created_at: timestamptz, updated_at: timestamptz}'
cat > "$W/csvpq.yaml" <<YAML
version: 1
name: bench_csvpq
source:
  type: files
  format: csv
  resources:
    - table: orders
      path: "$CSV"
      schema: $SCHEMA
sink:
  type: files
  path: $W/csvpq
  format: parquet
  compression: zstd
  part_bytes: 1TiB
YAML
echo "1a'. ferry CSV -> Parquet zstd" >&2
ferry_run csvpq "$W/csvpq.yaml" "$ROWS"
PQ_CSVPQ=$(ls "$W"/csvpq/orders/part-*.parquet 2>/dev/null || true)
S_csvpq=$( [ -n "$PQ_CSVPQ" ] && du -cb $PQ_CSVPQ | tail -n1 | cut -f1 || echo "")

echo "1b. DuckDB CSV -> Parquet zstd" >&2
timed duck node "$NODE_TOOLS/duckdb_exec.mjs" \
  "COPY (SELECT * FROM read_csv_auto('$CSV')) TO '$W/duck.parquet' (FORMAT parquet, COMPRESSION zstd)"
S_duck=$( [ -f "$W/duck.parquet" ] && stat -c %s "$W/duck.parquet" || echo "")
DUCK_TYPES=$(node "$NODE_TOOLS/duckdb_exec.mjs" \
  "SELECT string_agg(column_name || ' ' || column_type, ', ') FROM (DESCRIBE SELECT * FROM '$W/duck.parquet')" 2>/dev/null |
  jq -r '.[0]' || echo "?")
count_pq() { node "$NODE_TOOLS/duckdb_exec.mjs" "SELECT count(*)::BIGINT FROM read_parquet([$(printf "'%s'," $1 | sed 's/,$//')])" | jq -r '.[0]'; }
V_pq=$( [ -n "$PQ_FERRY" ] && count_pq "$PQ_FERRY" || echo "-")
V_csvpq=$( [ -n "$PQ_CSVPQ" ] && count_pq "$PQ_CSVPQ" || echo "-")
V_duck=$( [ -n "$S_duck" ] && count_pq "$W/duck.parquet" || echo "-")

# ---- 2. CSV -> PostgreSQL ------------------------------------------------------------------
if [ "$ROWS_CSV" != "$ROWS" ]; then
  echo "2. ferry sample -> CSV ($ROWS_CSV rows) for the PostgreSQL loads" >&2
  sample_yaml "$W/csv2.yaml" "$ROWS_CSV" "$W/csv2" csv
  ferry_run csv2 "$W/csv2.yaml" "$ROWS_CSV"
  [ -z "${E_csv2:-}" ] || { echo "files.sh: sample -> CSV failed: $E_csv2" >&2; exit 1; }
  CSV=$(ls "$W"/csv2/orders/part-*.csv)
fi
S_csvpg=$(stat -c %s "$CSV")
# shellcheck source=../tests/pg/pg.sh
. "$FERRY_SRC/tests/pg/pg.sh"
pg_start
export BENCH_PG_URL=$FERRY_PG_URL
q() { psql -v ON_ERROR_STOP=1 -qXAt "$@"; }
q -c "CREATE TABLE public.orders (id bigint NOT NULL, customer_id int NOT NULL, status text NOT NULL,
  quantity smallint NOT NULL, amount numeric(12,2) NOT NULL, discount float8, express bool NOT NULL,
  note text, created_at timestamptz NOT NULL, updated_at timestamptz NOT NULL)"
fresh() { PGOPTIONS="-c client_min_messages=warning" q -c "TRUNCATE public.orders" -c "DROP SCHEMA IF EXISTS _ferry CASCADE" -c "CHECKPOINT" >/dev/null; }
verify() { # verify NAME: row count and NULL notes against the CSV's row count
  local n; n=$(q -c "SELECT count(*) FROM public.orders" 2>&1) || n="query failed"
  if [ "$n" = "$ROWS_CSV" ]; then printf -v "V_$1" '%s' "ok ($n rows)"; else printf -v "V_$1" '%s' "WRONG ($n rows)"; fi
}
NULLS=""
nulls() { NULLS="$NULLS $1:$(q -c "SELECT count(*) FILTER (WHERE note IS NULL) || '/' || count(*) FILTER (WHERE discount IS NULL) FROM public.orders")"; }

echo "2a. psql \\copy" >&2
fresh
timed copy psql -v ON_ERROR_STOP=1 -qX -c "\\copy public.orders from '$CSV' csv header"
verify copy; nulls copy

cat > "$W/pg.yaml" <<YAML
version: 1
name: bench_csv_pg
source:
  type: files
  format: csv
  resources:
    - table: orders
      path: "$CSV"
      schema: $SCHEMA
sink:
  type: postgres
  url: env:BENCH_PG_URL
  schema: public
  write: append
YAML
echo "2b. ferry files (csv) -> postgres append" >&2
fresh
ferry_run fpg "$W/pg.yaml" "$ROWS_CSV"
verify fpg; nulls ferry

cat > "$W/load.pgl" <<EOF
LOAD CSV
  FROM '$CSV'
    (id, customer_id, status, quantity, amount, discount, express, note, created_at, updated_at)
  INTO postgresql://$PGUSER:$PGPASSWORD@127.0.0.1:$PGPORT/ferry
  TARGET TABLE public.orders
  WITH skip header = 1, fields optionally enclosed by '"', fields escaped by double-quote,
       fields terminated by ',', workers = 2, concurrency = 1;
EOF
echo "2c. pgloader" >&2
fresh
timed pgl timeout "$PGLOADER_TIMEOUT" pgloader --on-error-stop -D "$W/pgloader" "$W/load.pgl"
verify pgl; nulls pgloader

# ---- report --------------------------------------------------------------------------------
mib() { awk -v b="$1" 'BEGIN{ if (b == "") print "-"; else printf "%.1f", b/1048576 }'; }
# row LABEL NAME ROWS SIZE_BYTES REF_SECONDS VERIFIED
row() {
  local label=$1 n=$2 r=$3 size=$4 ref=$5 ver=$6 t m e
  t=$(eval echo "\${T_$n:-}") m=$(eval echo "\${M_$n:-}") e=$(eval echo "\${E_$n:-}")
  if [ -n "$e" ]; then printf '| %s | failed | | | %s | | %s |\n' "$label" "$(mib "$size")" "$e"; return; fi
  awk -v l="$label" -v s="$t" -v m="$m" -v r="$r" -v z="$(mib "$size")" -v p="$ref" -v v="$ver" 'BEGIN{
    ratio = (p ~ /^[0-9.]+$/) ? sprintf("%.2f×", s/p) : "-";
    printf "| %s | %.2f | %.0f | %.1f | %s | %s | %s |\n", l, s, r/s, m/1024, z, ratio, v }'
}
ratio_pq=$(awk -v a="$S_pq" -v b="$S_duck" 'BEGIN{ if (a == "" || b == "") print "n/a"; else printf "%.3f", a/b }')
ratio_csvpq=$(awk -v a="$S_csvpq" -v b="$S_duck" 'BEGIN{ if (a == "" || b == "") print "n/a"; else printf "%.3f", a/b }')
ratio_pg=$( [ -n "${T_fpg:-}" ] && [ -n "${T_copy:-}" ] && awk -v a="$T_fpg" -v b="$T_copy" 'BEGIN{printf "%.2f", a/b}' || echo "n/a")

mkdir -p "$FERRY_SRC/bench/results"
out="$FERRY_SRC/bench/results/files-$(date -u +%Y%m%d).md"
[ "$ROWS" = 5000000 ] && [ "$ROWS_CSV" = 5000000 ] || out="${out%.md}-${ROWS}rows.md"
[ -z "${SUFFIX:-}" ] || out="${out%.md}-$SUFFIX.md"
{
  echo "# Files benchmark ($(date -u +%Y-%m-%d))"
  echo
  echo "One run of each tool (no repetitions), same data: ferry's \`sample\` orders table (id int64,"
  echo "customer_id int32, status utf8, quantity int16, amount decimal128(12,2), discount float64 ~20 %"
  echo "NULL, express bool, note utf8 ~30 % NULL with quotes/commas/newlines/multibyte text,"
  echo "created_at/updated_at timestamptz). Peak RSS is /usr/bin/time %M of the tool's process"
  echo "(for DuckDB: the node process that hosts it; for \\copy: the psql client, not the server backend)."
  echo
  echo "## 1. Parquet (zstd), $ROWS rows"
  echo
  echo "CSV written by ferry (sample -> files csv): $S_csv bytes ($(mib "$S_csv") MiB)."
  echo
  echo "| tool | wall s | rows/s | peak RSS MiB | output MiB | × DuckDB time | rows read back (DuckDB) |"
  echo "|---|---|---|---|---|---|---|"
  row "ferry sample -> CSV" csv "$ROWS" "$S_csv" "" "-"
  row "a. ferry sample -> Parquet zstd" pq "$ROWS" "$S_pq" "${T_duck:-}" "$V_pq"
  row "a'. ferry CSV (declared schema) -> Parquet zstd" csvpq "$ROWS" "$S_csvpq" "${T_duck:-}" "$V_csvpq"
  row "b. DuckDB COPY read_csv_auto -> Parquet zstd" duck "$ROWS" "$S_duck" "${T_duck:-}" "$V_duck"
  echo
  echo "Parquet size ferry / DuckDB: **$ratio_pq** (sample -> Parquet), **$ratio_csvpq** (CSV -> Parquet);"
  echo "target ≤ 1.000: $(awk -v r="$ratio_pq" 'BEGIN{ if (r == "n/a") print "n/a"; else print (r <= 1.0) ? "met" : "NOT met" }')."
  echo "ferry peak RSS writing Parquet: $(mib "$(( ${M_pq:-0} * 1024 ))") MiB (sample), $(mib "$(( ${M_csvpq:-0} * 1024 ))") MiB (from CSV); target ≤ 64 MiB + one row group (row_group_bytes default 64 MiB): $(awk -v a="${M_pq:-0}" -v b="${M_csvpq:-0}" 'BEGIN{ print (a > 0 && a <= 131072 && b <= 131072) ? "met" : "NOT met" }')."
  echo "Exact sizes: ferry $S_pq B, ferry from CSV $S_csvpq B, DuckDB $S_duck B."
  echo "Types differ: read_csv_auto infers DuckDB's own types ($DUCK_TYPES),"
  echo "while ferry writes the declared types (amount DECIMAL(12,2) on INT64, quantity INT16, customer_id INT32)."
  echo
  echo "## 2. CSV -> PostgreSQL, $ROWS_CSV rows ($(mib "$S_csvpg") MiB of CSV)"
  echo
  echo "Each load goes into the same pre-created table \`public.orders\` (no key, no index), emptied"
  echo "(TRUNCATE + CHECKPOINT, untimed) before it. Server: tests/pg/pg.sh (fsync off, synchronous_commit off)."
  echo
  echo "| tool | wall s | rows/s | peak RSS MiB | input MiB | × \\copy | verified (count) |"
  echo "|---|---|---|---|---|---|---|"
  row "a. psql \\copy … csv header" copy "$ROWS_CSV" "$S_csvpg" "${T_copy:-}" "${V_copy:-}"
  row "b. ferry files csv (declared schema) -> postgres append" fpg "$ROWS_CSV" "$S_csvpg" "${T_copy:-}" "${V_fpg:-}"
  row "c. pgloader LOAD CSV (workers 2, concurrency 1)" pgl "$ROWS_CSV" "$S_csvpg" "${T_copy:-}" "${V_pgl:-}"
  echo
  echo "ferry / \\copy wall time: **${ratio_pg}×** (target ≤ 1.10×: $(awk -v r="$ratio_pg" 'BEGIN{ if (r == "n/a") print "n/a"; else print (r <= 1.10) ? "met" : "NOT met" }'))."
  echo "NULL counts (note/discount) per loader:$NULLS."
  echo "Why ferry can beat \\copy: \\copy sends the CSV text and the single server backend parses it;"
  echo "ferry parses the CSV in its own process and sends COPY binary, so parsing and inserting run on"
  echo "two cores at once. pgloader exceeding PGLOADER_TIMEOUT=${PGLOADER_TIMEOUT}s is reported as failed."
  echo
  echo "## Machine"
  echo
  echo "- $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), $(awk '/MemTotal/{printf "%.0f GiB", $2/1048576}' /proc/meminfo) RAM, $(uname -sr)"
  echo "- **Shared machine**: other jobs (builds and tests of other sessions) ran at the same time;"
  echo "  1-minute load average at the start of each measured run: $(echo $LOADS | tr ' ' ',') (min $(echo $LOADS | tr ' ' '\n' | sort -g | head -n1), max $(echo $LOADS | tr ' ' '\n' | sort -g | tail -n1)) on $(nproc) cores. Single runs: treat the numbers as rough."
  echo "- ferry $(git -C "$FERRY_SRC" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$FERRY_SRC" diff --quiet 2>/dev/null || echo ' (work tree modified)'), Release build (build/bench), default batch settings"
  echo "- DuckDB $(node "$NODE_TOOLS/duckdb_exec.mjs" "SELECT version()" 2>/dev/null | jq -r '.[0]') (@duckdb/node-api, node $(node --version)), default threads; $(pgloader --version 2>&1 | head -n1); $(psql --version); server $(q -c 'SHOW server_version')"
} | tee "$out"
echo "written to $out"
