#!/usr/bin/env bash
# Lake benchmark (issue 20), one run, same inputs for both tools:
#   DuckDB writes ROWS rows (orders-like: ints, text, decimal, double, bool, timestamptz; zstd,
#   row groups of 122880) to one Parquet file; then into the same PostgreSQL server
#   (tests/pg/pg.sh), into an empty table each time:
#     a. ferry: files source (format parquet) -> postgres sink, write: append
#     b. DuckDB reading the file and piping CSV into psql \copy ... from stdin (node + psql)
#     c. ferry: iceberg source (the same rows as a table ferry wrote, local warehouse) -> postgres
#     d. DuckDB reading that table's data files (read_parquet) -> CSV -> psql \copy
#     e. ferry: a nested Parquet file (lists, struct, map) -> postgres jsonb columns
#     f. DuckDB to_json of the same file -> CSV -> psql \copy into the same table
#     g. ferry: s3 source (S3_OBJECTS copies of orders.parquet on s3rver, tests/s3/server.mjs)
#        -> null sink: every column decoded, nothing written
#     h. curl --aws-sigv4 downloading the same objects to /dev/null, one after another
#     i. ferry: files source over local copies of the same objects -> null sink (the decoding
#        cost alone: g - i is what reading from S3 adds)
#   S3_ONLY=1 runs g, h and i only; PARALLELISM=N gives g and i N readers (default 1);
#   S3_ROUNDS=N (default 3) runs g and h N times in alternating order, and i, and reports the
#   medians, every round's time and the CPU the store's processes used during g and h.
#   S3_NET=RATE_MIB[,LATENCY_MS]: g and h go through bench/s3_net.mjs, which makes the store
#   behave like one across a network (all bodies together at RATE_MIB MiB/s, each response's
#   first byte LATENCY_MS late, default 20); without it they read s3rver on loopback.
#   PIN=1 (with S3_ONLY=1): the store's node processes run on CPU 1 only and g, h and i on
#   CPU 0 only (taskset), as if the store were another machine: the client keeps one core
#   to itself and is not slowed by the store's work. Needs 2 CPUs or more.
#   wall time, rows/s, peak RSS (/usr/bin/time %M; DuckDB's node and psql apart), row
#   count checked (g: the null sink's count in ferry's summary).
# Prints a markdown table and writes bench/results/lake-<date>[-<rows>rows][-s3][-pN][-netR].md;
# OUT=NAME writes bench/results/NAME.md instead (a second run on the same day keeps the first's
# file). Never a CTest test, never gates CI.
#   ROWS=5000000 bash bench/lake.sh
set -euo pipefail
case "${OUT:-}" in */* | .*) echo "lake.sh: OUT=$OUT: a file name under bench/results, without .md" >&2; exit 2 ;; esac
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
S3PID="" NETPID=""
trap '[ -n "$S3PID" ] && kill "$S3PID" 2>/dev/null; [ -n "$NETPID" ] && kill "$NETPID" 2>/dev/null; rm -rf "$W"' EXIT
cd "$W"
S3_OBJECTS=${S3_OBJECTS:-4}
PARALLELISM=${PARALLELISM:-1} # the s3 and local files sources' readers (g, i)
S3_ROUNDS=${S3_ROUNDS:-3}     # g, h and i are each run this many times; medians reported
mkdir -p s3data
wait_port() { # PORTFILE LOG WHAT: a node server started in the background wrote its port
  for _ in $(seq 1 100); do [ -s "$1" ] && return 0; sleep 0.1; done
  cat "$2" >&2; echo "$3 did not start" >&2; exit 1
}
node "$FERRY_SRC/tests/s3/server.mjs" "$W/s3data" "$W/s3.port" lake > s3rver.log 2>&1 &
S3PID=$!
wait_port s3.port s3rver.log s3rver
S3_ENDPOINT=http://127.0.0.1:$(cat s3.port)
S3_READ_ENDPOINT=$S3_ENDPOINT S3_WHERE="s3rver (loopback)"
if [ -n "${S3_NET:-}" ]; then
  net_rate=${S3_NET%%,*} net_latency=20
  [ "$S3_NET" = "$net_rate" ] || net_latency=${S3_NET#*,}
  node "$FERRY_SRC/bench/s3_net.mjs" "$(cat s3.port)" "$net_rate" "$net_latency" "$W/net.port" > s3net.log 2>&1 &
  NETPID=$!
  wait_port net.port s3net.log bench/s3_net.mjs
  S3_READ_ENDPOINT=http://127.0.0.1:$(cat net.port)
  S3_WHERE="s3rver behind bench/s3_net.mjs: $net_rate MiB/s shared by all responses, first byte $net_latency ms late"
fi
export S3_KEY=S3RVER S3_SECRET=S3RVER AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER
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

# run_ferry NAME YAML TABLE: one timed ferry run into TABLE (emptied after the count check).
run_ferry() {
  local t0; t0=$(now)
  /usr/bin/time -f '%M' -o "$1.rss" "$FERRY" run "$2" --fresh --state "$W/state-$1.db" >"$1.out" 2>&1 \
    || { cat "$1.out" >&2; exit 1; }
  eval "T_$1=$(echo "$(now) - $t0" | bc)"
  eval "M_$1=$(tail -n1 "$1.rss")"
  [ "$(q -c "SELECT count(*) FROM $3")" = "$ROWS" ] || { echo "$1: row count" >&2; exit 1; }
  q -c "TRUNCATE $3; CHECKPOINT"
}
# run_duck NAME SELECT TABLE: DuckDB's SELECT as CSV piped into psql \copy TABLE.
run_duck() {
  local t0; t0=$(now)
  # duckdb_exec.mjs prints the row COPY returns (its count) after the CSV: head drops it
  /usr/bin/time -f '%M' -o "$1.rss" node "$DUCK" "SET TimeZone = 'UTC'; COPY ($2) TO '/dev/stdout' (FORMAT csv, HEADER false)" \
    | head -n -1 | /usr/bin/time -f '%M' -o "$1.psql.rss" psql -v ON_ERROR_STOP=1 -qX -c "\\copy $3 FROM STDIN WITH (FORMAT csv)"
  eval "T_$1=$(echo "$(now) - $t0" | bc)"
  eval "M_$1=$(tail -n1 "$1.rss")"
  eval "P_$1=$(tail -n1 "$1.psql.rss")"
  [ "$(q -c "SELECT count(*) FROM $3")" = "$ROWS" ] || { echo "$1: row count" >&2; exit 1; }
  q -c "TRUNCATE $3; CHECKPOINT"
}

if [ "${S3_ONLY:-0}" != 1 ]; then
echo "a. ferry files (parquet) -> postgres" >&2
run_ferry pq ferry.yaml orders
echo "b. DuckDB -> CSV -> psql \\copy" >&2
run_duck pqd "SELECT * FROM '$W/orders.parquet'" orders

# ---- Iceberg: the same rows as a table ferry writes (not timed), read back by both ---------------
echo "iceberg table written by ferry (setup)" >&2
"$FERRY" run ferry.yaml --fresh --state "$W/state-setup.db" >/dev/null 2>&1
cat > to_ice.yaml <<YAML
version: 1
name: bench_lake_ice_in
source: {type: postgres, url: "env:BENCH_PG_URL", resources: [{table: orders, key: [id]}]}
sink: {type: iceberg, write: append, warehouse: $W/wh, namespace: db}
YAML
"$FERRY" run to_ice.yaml --fresh --state "$W/state-ice-in.db" >ice_in.out 2>&1 || { cat ice_in.out >&2; exit 1; }
q -c "TRUNCATE orders; CHECKPOINT"
cat > ice.yaml <<YAML
version: 1
name: bench_lake_ice
source: {type: iceberg, warehouse: $W/wh, namespace: db, resources: [{table: orders, mode: full}]}
sink: {type: postgres, url: "env:BENCH_PG_URL", schema: public, write: append}
YAML
echo "c. ferry iceberg -> postgres" >&2
run_ferry ice ice.yaml orders
echo "d. DuckDB read_parquet(the table's data files) -> CSV -> psql \\copy" >&2
run_duck iced "SELECT * FROM read_parquet('$W/wh/db/orders/data/*.parquet')" orders

# ---- nested: lists, a struct, a map as JSON columns ---------------------------------------------------
echo "DuckDB writes $ROWS rows of nested data to nested.parquet" >&2
node "$DUCK" "COPY (SELECT i::BIGINT AS id,
  [{'sku': 'sku-' || (i % 5000), 'qty': (i % 7)::INTEGER, 'price': ((i % 10000) / 100.0)::DECIMAL(10,2)},
   {'sku': 'sku-' || (i % 333), 'qty': 1, 'price': 9.99::DECIMAL(10,2)}] AS items,
  CASE WHEN i % 4 = 0 THEN [] ELSE ['t' || (i % 10), 'x'] END AS tags,
  {'city': 'city ' || (i % 100), 'zip': (10000 + i % 90000)::INTEGER} AS addr,
  MAP {'src': 'web', 'n': (i % 3)::VARCHAR} AS attrs
  FROM range(0, $ROWS) t(i)) TO '$W/nested.parquet' (FORMAT parquet, COMPRESSION zstd)" >/dev/null
S_nest=$(stat -c %s nested.parquet)
q -c "CREATE TABLE nested (id bigint, items jsonb, tags jsonb, addr jsonb, attrs jsonb)"
sed -e "s#orders.parquet#nested.parquet#; s#table: orders#table: nested#; s#name: bench_lake#name: bench_lake_nested#" ferry.yaml > nested.yaml
echo "e. ferry files (nested parquet, JSON columns) -> postgres" >&2
run_ferry nest nested.yaml nested
echo "f. DuckDB to_json -> CSV -> psql \\copy" >&2
run_duck nestd "SELECT id, to_json(items), to_json(tags), to_json(addr), to_json(attrs) FROM '$W/nested.parquet'" nested

fi

# ---- S3 source against a plain download of the same objects ---------------------------------------
echo "uploading $S3_OBJECTS copies of orders.parquet to s3rver (setup)" >&2
for i in $(seq 1 "$S3_OBJECTS"); do
  node "$FERRY_SRC/tests/s3/client.mjs" "$S3_ENDPOINT" lake put "orders/part-$i.parquet" orders.parquet
done
cat > s3.yaml <<YAML
version: 1
name: bench_lake_s3
source:
  type: s3
  bucket: lake
  endpoint: "$S3_READ_ENDPOINT"
  path_style: true
  access_key_id: env:S3_KEY
  secret_access_key: env:S3_SECRET
  parallelism: $PARALLELISM
  resources: [{table: orders, prefix: orders/, glob: "*.parquet", mode: full}]
sink: {type: "null"}
YAML
mkdir -p local
for i in $(seq 1 "$S3_OBJECTS"); do cp orders.parquet "local/part-$i.parquet"; done
cat > local.yaml <<YAML
version: 1
name: bench_lake_local
source: {type: files, path: "$W/local/*.parquet", parallelism: $PARALLELISM,
         resources: [{table: orders, mode: full}]}
sink: {type: "null"}
YAML
# CPU (clock ticks) the store's node processes (s3rver, s3_net.mjs) have used so far: they
# share this machine's cores with the client measured
TCK=$(getconf CLK_TCK)
store_ticks() {
  local c; c=$(awk '{print $14 + $15}' "/proc/$S3PID/stat")
  [ -z "$NETPID" ] || c=$((c + $(awk '{print $14 + $15}' "/proc/$NETPID/stat")))
  echo "$c"
}
# PIN=1: the client measured on CPU 0, the store's processes (every thread) on CPU 1
CLIENT=()
if [ "${PIN:-0}" = 1 ]; then
  [ "$(nproc)" -ge 2 ] || { echo "lake.sh: PIN=1 needs 2 CPUs" >&2; exit 2; }
  CLIENT=(taskset -c 0)
  taskset -a -pc 1 "$S3PID" >/dev/null
  [ -z "$NETPID" ] || taskset -a -pc 1 "$NETPID" >/dev/null
fi
s3_g() {
  local t0 c0; t0=$(now) c0=$(store_ticks)
  "${CLIENT[@]}" /usr/bin/time -f '%M %U %S' -o s3.rss "$FERRY" run s3.yaml --fresh --state "$W/state-s3.db" >s3.out 2>&1 \
    || { cat s3.out >&2; exit 1; }
  L_s3="$L_s3 $(printf %.2f "$(echo "$(now) - $t0" | bc)")" C_s3="$C_s3 $(printf %.2f "$(echo "scale=2; ($(store_ticks) - $c0) / $TCK" | bc)")"
  U_s3="$U_s3 $(tail -n1 s3.rss | awk '{print $2 + $3}')"
  M_s3=$(tail -n1 s3.rss | cut -d' ' -f1)
  grep -q "$((ROWS * S3_OBJECTS))" s3.out || { echo "g: ferry's summary lacks $((ROWS * S3_OBJECTS)) rows:" >&2; cat s3.out >&2; exit 1; }
}
s3_h() {
  local t0 c0; t0=$(now) c0=$(store_ticks)
  for i in $(seq 1 "$S3_OBJECTS"); do
    # curl signs the header given (the hash of an empty body); s3rver refuses a request without it
    "${CLIENT[@]}" /usr/bin/time -f '%M' -o curl.rss curl -sSf --aws-sigv4 "aws:amz:us-east-1:s3" --user "S3RVER:S3RVER" \
      -H "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" -o /dev/null "$S3_READ_ENDPOINT/lake/orders/part-$i.parquet"
  done
  L_curl="$L_curl $(printf %.2f "$(echo "$(now) - $t0" | bc)")" C_curl="$C_curl $(printf %.2f "$(echo "scale=2; ($(store_ticks) - $c0) / $TCK" | bc)")"
  M_curl=$(tail -n1 curl.rss)
}
s3_i() {
  local t0; t0=$(now)
  "${CLIENT[@]}" /usr/bin/time -f '%M %U %S' -o local.rss "$FERRY" run local.yaml --fresh --state "$W/state-local.db" >local.out 2>&1 \
    || { cat local.out >&2; exit 1; }
  L_local="$L_local $(printf %.2f "$(echo "$(now) - $t0" | bc)")" U_local="$U_local $(tail -n1 local.rss | awk '{print $2 + $3}')"
  M_local=$(tail -n1 local.rss | cut -d' ' -f1)
}
median() { tr ' ' '\n' | grep . | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
L_s3="" L_curl="" L_local="" C_s3="" C_curl="" U_s3="" U_local=""
for r in $(seq 1 "$S3_ROUNDS"); do
  echo "round $r of $S3_ROUNDS: g. ferry s3 source (parquet) -> null sink, h. curl downloads of the same objects, i. ferry files source (local copies) -> null sink" >&2
  if [ $((r % 2)) = 1 ]; then s3_g; s3_h; else s3_h; s3_g; fi
  s3_i
done
T_s3=$(echo "$L_s3" | median) T_curl=$(echo "$L_curl" | median) T_local=$(echo "$L_local" | median)
row() { # LABEL NAME [DUCK_NAME]
  local t m; eval "t=\$T_$2; m=\$M_$2"
  if [ -n "${3:-}" ]; then
    local td; eval "td=\$T_$3"
    printf '| %s | %.2f | %.0f | %.1f | %.2f |\n' "$1" "$t" "$(echo "$ROWS / $t" | bc -l)" \
      "$(echo "$m / 1024" | bc -l)" "$(echo "$t / $td" | bc -l)"
  else
    local p; eval "p=\$P_$2"
    printf '| %s | %.2f | %.0f | %.1f (node) / %.1f (psql) | |\n' "$1" "$t" "$(echo "$ROWS / $t" | bc -l)" \
      "$(echo "$m / 1024" | bc -l)" "$(echo "$p / 1024" | bc -l)"
  fi
}

mkdir -p "$FERRY_SRC/bench/results"
out="$FERRY_SRC/bench/results/${OUT:+$OUT.md}"
[ -n "${OUT:-}" ] || out="$FERRY_SRC/bench/results/lake-$(date -u +%Y%m%d)$([ "$ROWS" = 5000000 ] || echo "-${ROWS}rows")$([ "${S3_ONLY:-0}" != 1 ] || echo "-s3")$([ "$PARALLELISM" = 1 ] || echo "-p$PARALLELISM")$([ -z "${S3_NET:-}" ] || echo "-net${S3_NET%%,*}").md"
{
  if [ "${S3_ONLY:-0}" != 1 ]; then
  echo "# Lake benchmark: $ROWS rows into PostgreSQL, ferry against DuckDB"
  echo
  echo "Inputs: orders.parquet ($((S_pq / 1048576)) MiB zstd, flat), the same rows as an Iceberg table"
  echo "ferry wrote (local warehouse, filesystem catalog), nested.parquet ($((S_nest / 1048576)) MiB zstd:"
  echo "a list of structs, a list of strings, a struct, a map; JSON columns in PostgreSQL)."
  echo
  echo "| tool | wall s | rows/s | peak RSS MiB | ferry / DuckDB |"
  echo "|---|---|---|---|---|"
  row "ferry files (parquet) -> postgres" pq pqd
  row "DuckDB read_parquet -> CSV -> psql \\copy" pqd
  row "ferry iceberg -> postgres" ice iced
  row "DuckDB read_parquet(data files) -> CSV -> psql \\copy" iced
  row "ferry files (nested parquet -> jsonb) -> postgres" nest nestd
  row "DuckDB to_json -> CSV -> psql \\copy" nestd
  fi
  echo
  echo "S3 source: $S3_OBJECTS objects of $((S_pq / 1048576)) MiB ($((ROWS * S3_OBJECTS)) rows) on $S3_WHERE, source parallelism $PARALLELISM."
  [ "${PIN:-0}" = 1 ] && echo "PIN=1: the store's node processes on CPU 1 only, ferry and curl on CPU 0 only (taskset)."
  echo
  echo "| tool | wall s | MiB/s | peak RSS MiB | ferry / curl |"
  echo "|---|---|---|---|---|"
  printf '| ferry s3 source (parquet, every column decoded) -> null | %.2f | %.1f | %.1f | %.2f |\n' "$T_s3" \
    "$(echo "$S_pq * $S3_OBJECTS / 1048576 / $T_s3" | bc -l)" "$(echo "$M_s3 / 1024" | bc -l)" "$(echo "$T_s3 / $T_curl" | bc -l)"
  printf '| curl --aws-sigv4 GET -> /dev/null, one object after another | %.2f | %.1f | %.1f | |\n' "$T_curl" \
    "$(echo "$S_pq * $S3_OBJECTS / 1048576 / $T_curl" | bc -l)" "$(echo "$M_curl / 1024" | bc -l)"
  printf '| ferry files source (local copies, every column decoded) -> null | %.2f | %.1f | %.1f | %.2f |\n' "$T_local" \
    "$(echo "$S_pq * $S3_OBJECTS / 1048576 / $T_local" | bc -l)" "$(echo "$M_local / 1024" | bc -l)" "$(echo "$T_local / $T_curl" | bc -l)"
  echo
  echo "Medians of $S3_ROUNDS rounds (g and h in alternating order, then i). Every round, wall s:"
  echo "ferry s3 [$L_s3 ], curl [$L_curl ], ferry files [$L_local ]."
  echo "CPU s of ferry (user + sys): s3 [$U_s3 ], files [$U_local ]. CPU s the store's node"
  echo "processes used on this machine meanwhile: during ferry's s3 runs [$C_s3 ], during curl's [$C_curl ]."
  echo
  if [ "${S3_ONLY:-0}" != 1 ]; then
  echo "Same run, same server (tests/pg/pg.sh: fsync off), the table emptied (TRUNCATE + CHECKPOINT) between."
  echo "DuckDB reads the Iceberg table's data files directly (no deletes in it; no iceberg extension offline)."
  fi
  echo "Machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)."
} | tee "$out"
