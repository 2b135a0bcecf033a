#!/usr/bin/env bash
# Scale-out benchmark (issue 9): (1) one distributed 5 000 000-row PostgreSQL -> PostgreSQL
# copy (`distribute: true`, 20 keyset shards) with 1, 2 and 3 processes: the coordinator
# (`ferry run`) plus 0, 1, 2 `ferry worker --pull`; wall time and speed-up. (2) control
# plane: requested -> started latency (p50/p95/max) of RUNS short runs (sample -> null)
# through `ferry serve`, with the SQLite store + in-process bus, and with the PostgreSQL
# store (`--store postgres://...`) with its in-process bus and with NATS JetStream
# (`--bus nats://...`, a throw-away nats-server from tests/nats/nats.sh). Writes a markdown
# report to bench/results/scaleout-YYYYMMDD.md. Never gates CI. Uses tests/pg/pg.sh for a
# throw-away PostgreSQL 15.
#   ROWS=5000000 RUNS=500 bash bench/scaleout.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=$PWD
ROWS=${ROWS:-5000000}
RUNS=${RUNS:-500}
SHARD_ROWS=${SHARD_ROWS:-250000}
OUT=${OUT:-bench/results/scaleout-$(date -u +%Y%m%d).md}
jobs=$(nproc 2>/dev/null || echo 2)
[ "$jobs" -gt 2 ] && jobs=2
cmake -S . -B build/scaleout-bench -DCMAKE_BUILD_TYPE=Release -DFERRY_WERROR=OFF > /dev/null
cmake --build build/scaleout-bench -j"$jobs" --target ferry > /dev/null
BIN=$PWD/build/scaleout-bench/ferry

W=$(mktemp -d)
PIDS=""
trap 'for p in $PIDS; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null; rm -rf "$W"' EXIT
# shellcheck source=../tests/pg/pg.sh
. "$SRC/tests/pg/pg.sh"
pg_start
export DEST_URL="$FERRY_PG_URL"
p() { psql "$FERRY_PG_URL" -X -q -v ON_ERROR_STOP=1 -A -t "$@"; }
now() { date +%s.%N; }
load() { cut -d' ' -f1-3 /proc/loadavg; }

echo "loading $ROWS rows..." >&2
p -c "CREATE TABLE public.items (id bigint PRIMARY KEY, name text NOT NULL, qty integer,
        price numeric(12,2), at timestamptz NOT NULL)"
p -c "INSERT INTO public.items SELECT g, 'item-' || g, g % 97, (g % 1000) / 7.0,
        timestamptz '2026-01-01 00:00:00+00' + g * interval '1 second'
      FROM generate_series(1, $ROWS) g"
p -c "VACUUM ANALYZE public.items"

{
  echo "# Scale-out benchmark, $(date -u +%Y-%m-%d)"
  echo
  echo "Machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')),"
  echo "$(free -g | awk '/Mem:/ {print $2}') GiB RAM, shared with other jobs (load averages below)."
  echo "Release build; PostgreSQL 15 (tests/pg/pg.sh: fsync off) holds source and destination;"
  echo "state: SQLite file. \`bash bench/scaleout.sh\` (ROWS=$ROWS, shard_rows $SHARD_ROWS)."
  echo
  echo "## 1. Distributed copy, $ROWS rows PostgreSQL -> PostgreSQL (append)"
  echo
  echo "| processes | wall s | rows/s | speed-up | shards per process | load before | load after |"
  echo "|---|---|---|---|---|---|---|"
} > "$W/report.md"

base=""
for n in 1 2 3; do
  cat > "$W/copy$n.yaml" <<EOF
version: 1
name: scale$n
distribute: true
source:
  type: postgres
  url: env:FERRY_PG_URL
  shard_rows: $SHARD_ROWS
  resources:
    - {table: public.items, mode: full}
sink:
  type: postgres
  url: env:DEST_URL
  schema: dest$n
  write: append
batch: {rows: 50000}
EOF
  STATE="$W/state$n.db"
  WPIDS=""
  for w in $(seq 2 "$n"); do
    "$BIN" worker --pull --owner "w$w" --state "$STATE" > "$W/w$n-$w.log" 2>&1 &
    WPIDS="$WPIDS $!"
    PIDS="$PIDS $!"
  done
  l0=$(load)
  t0=$(now)
  "$BIN" run "$W/copy$n.yaml" --state "$STATE" --quiet > "$W/run$n.log" 2>&1
  t1=$(now)
  l1=$(load)
  for w in $WPIDS; do kill -TERM "$w" 2>/dev/null || true; done
  for w in $WPIDS; do wait "$w" 2>/dev/null || true; done
  got=$(p -c "SELECT count(*) FROM dest$n.items")
  [ "$got" = "$ROWS" ] || { echo "dest$n.items has $got rows, not $ROWS" >&2; exit 1; }
  secs=$(echo "$t1 - $t0" | bc -l)
  [ -z "$base" ] && base=$secs
  per=$(sqlite3 "$STATE" "SELECT group_concat(c, '/') FROM (SELECT count(*) c FROM shard_tasks GROUP BY owner ORDER BY c DESC)")
  printf '| %d | %.1f | %.0f | %.2f | %s | %s | %s |\n' "$n" "$secs" "$(echo "$ROWS / $secs" | bc -l)" \
    "$(echo "$base / $secs" | bc -l)" "$per" "$l0" "$l1" >> "$W/report.md"
  echo "$n process(es): $secs s" >&2
  p -c "DROP SCHEMA dest$n CASCADE"
done

# ---- 2. control plane: requested -> started ----
export FERRY_API_TOKEN="bench-$RANDOM$RANDOM"
H="Authorization: Bearer $FERRY_API_TOKEN"
latency() { # STORE LABEL [BUS]: prints one table row
  local store=$1 label=$2 bus=${3:-inproc} pid base t0 t1
  "$BIN" serve --listen 127.0.0.1:0 --store "$store" --bus "$bus" --workers 4 --log-dir "$W/logs" \
    > "$W/serve.out" 2> "$W/serve.err" &
  pid=$!
  PIDS="$PIDS $pid"
  for _ in $(seq 1 200); do grep -q listening "$W/serve.out" && break; sleep 0.05; done
  base=$(grep -o 'http://127.0.0.1:[0-9]*' "$W/serve.out") || { cat "$W/serve.err" >&2; return 1; }
  curl -sS -H "$H" -X POST "$base/v1/pipelines" --data-binary @- > /dev/null <<YAML
version: 1
name: short
source: {type: sample, rows: 1000, seed: 1, resources: [{table: orders}]}
sink: {type: "null"}
YAML
  local l0 l1
  l0=$(load)
  t0=$(now)
  for i in $(seq 1 "$RUNS"); do
    curl -sS -H "$H" -X POST "$base/v1/pipelines/short/runs" -d "{\"idempotency_key\":\"b$i\"}" > /dev/null
  done
  while :; do
    local n
    n=$(curl -sS -H "$H" "$base/metrics" |
      awk '/^ferry_runs\{state="(completed|failed|canceled)"\}/ {n += $2} END {print n + 0}')
    [ "${n:-0}" -ge "$RUNS" ] && break
    sleep 0.5
  done
  t1=$(now)
  l1=$(load)
  # requested -> started per run, from the store's run rows (µs): the same for every bus
  local sql="SELECT round((started_us - created_us) / 1000.0, 1) FROM runs WHERE started_us > 0"
  if [ "${store#postgres}" != "$store" ]; then
    psql "$FERRY_PG_URL" -X -q -A -t -c "SET search_path = ${store##*schema=}; $sql" > "$W/lat.txt"
  else
    sqlite3 -cmd '.timeout 5000' "$store" "$sql" > "$W/lat.txt"
  fi
  local failed
  failed=$(curl -sS -H "$H" "$base/metrics" | awk '/^ferry_runs\{state="failed"\}/ {print $2 + 0}')
  kill -TERM "$pid"
  wait "$pid" 2> /dev/null || true
  local n50 n95 max cnt
  cnt=$(wc -l < "$W/lat.txt")
  if [ "$cnt" -gt 0 ]; then
    sort -n "$W/lat.txt" > "$W/lat.sorted"
    n50=$(awk -v n="$cnt" 'NR == int(n * 0.50 + 0.5) {print}' "$W/lat.sorted")
    n95=$(awk -v n="$cnt" 'NR == int(n * 0.95 + 0.5) {print}' "$W/lat.sorted")
    max=$(tail -n 1 "$W/lat.sorted")
  else
    n50=n/a n95=n/a max=n/a
  fi
  printf '| %s | %d (%s failed) | %.1f | %.1f | %s | %s | %s | %s | %s |\n' "$label" "$RUNS" "$failed" \
    "$(echo "$t1 - $t0" | bc -l)" "$(echo "$RUNS / ($t1 - $t0)" | bc -l)" "$n50" "$n95" "$max" "$l0" "$l1"
}
{
  echo
  echo "## 2. Control plane: $RUNS short runs (sample 1000 rows -> null), --workers 4, local dispatch"
  echo
  echo "requested -> started: each run's created and started times in the store's run rows (ms)."
  echo
  echo "| store + bus | runs | wall s | runs/s | p50 ms | p95 ms | max ms | load before | load after |"
  echo "|---|---|---|---|---|---|---|---|---|"
} >> "$W/report.md"
latency "$W/cp-state.db" "SQLite + in-process" >> "$W/report.md"
latency "$FERRY_PG_URL?schema=ferry_bench" "PostgreSQL store + in-process (events in PostgreSQL)" >> "$W/report.md" ||
  echo "| PostgreSQL store | not run: serve failed: $(head -c 200 "$W/serve.err") |" >> "$W/report.md"
T=$W
fail() { echo "bench: $*" >&2; exit 1; }
# shellcheck source=../tests/nats/nats.sh
. "$SRC/tests/nats/nats.sh"
nats_start
latency "$FERRY_PG_URL?schema=ferry_bench_nats" "PostgreSQL store + NATS JetStream" "$NATS_URL" >> "$W/report.md" ||
  echo "| PostgreSQL store + NATS | not run: serve failed: $(head -c 200 "$W/serve.err") |" >> "$W/report.md"
mkdir -p "$(dirname "$OUT")"
cp "$W/report.md" "$OUT"
cat "$OUT"
