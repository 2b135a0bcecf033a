#!/usr/bin/env bash
# Iceberg benchmark (issue 10), one run, same data for both:
#   a. ferry sample (orders, ROWS rows) -> plain Parquet zstd (files sink, format parquet)
#   b. ferry sample (orders, ROWS rows) -> Iceberg table, filesystem catalog, zstd
# alternated REPS times; reports the median wall time of each, the Iceberg overhead
# ((b - a) / a) and the commit latency of one snapshot (what the sink logs at info level:
# close + fsync of the data files, manifest, manifest list, metadata swap), plus the
# commit latency of SMALL appends (SMALL_RUNS runs of 1000 rows on a table that grows one
# snapshot per run: the cost of carrying the manifest list forward).
#   c. with S3=1 (default when tests/tools has s3rver): the same Iceberg run into an S3
#      warehouse (s3://lake/wh, SQL catalog) on s3rver on loopback (tests/s3/server.mjs, which
#      checks every SigV4 signature and CRC32-C in JavaScript and stores objects on the same
#      disk): what the S3 write path costs on top, dominated by that local test server, not a
#      figure for AWS.
# CPU seconds (user + system, /usr/bin/time) of each run are reported next to the wall
# time: on a shared machine wall time is noisy, CPU time is what an A/B comparison needs.
# FERRY=path uses that binary instead of building one (A/B of two builds).
# Prints a markdown table and writes bench/results/iceberg-<date>-<rows>rows.md (RESULT=0:
# print only). Never a CTest test, never gates CI.
#   ROWS=5000000 REPS=3 SMALL_RUNS=30 bash bench/iceberg.sh        (the quiet-machine run)
#   ROWS=1000000 REPS=5 SMALL_RUNS=0 S3=0 RESULT=0 bash bench/iceberg.sh   (a quick A/B)
set -euo pipefail
cd "$(dirname "$0")/.."
FERRY_SRC=$PWD
ROWS=${ROWS:-5000000}
REPS=${REPS:-3}
SMALL_RUNS=${SMALL_RUNS:-30}
S3=${S3:-$([ -d tests/tools/node_modules/s3rver ] && echo 1 || echo 0)}
RESULT=${RESULT:-1}

if [ -z "${FERRY:-}" ]; then
  echo "building ferry (Release) in build/iceberg-rel" >&2
  cmake -S . -B build/iceberg-rel -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build build/iceberg-rel -j2 --target ferry >/dev/null
  FERRY=$FERRY_SRC/build/iceberg-rel/ferry
fi

W=$(mktemp -d "${TMPDIR:-/tmp}/ferry-icebench.XXXXXX")
S3PID=
trap '[ -n "$S3PID" ] && kill "$S3PID" 2>/dev/null; rm -rf "$W"' EXIT
cd "$W"
if [ "$S3" = 1 ]; then
  mkdir -p s3data
  node "$FERRY_SRC/tests/s3/server.mjs" "$W/s3data" "$W/s3.port" lake > s3rver.log 2>&1 &
  S3PID=$!
  for _ in $(seq 1 100); do [ -s s3.port ] && break; sleep 0.1; done
  [ -s s3.port ] || { cat s3rver.log >&2; echo "s3rver did not start" >&2; exit 1; }
  export S3_KEY=S3RVER S3_SECRET=S3RVER
fi

. "$FERRY_SRC/tests/e2e/pipelines.bash" # sample_source (not lib.sh: its trap and work folder)
pipeline() { # FILE NAME ROWS SINK_LINES...
  local file=$1 name=$2 rows=$3; shift 3
  {
    sample_source "$name" "$rows"
    echo "  resources:"
    echo "    - {table: orders, mode: full}"
    echo "sink:"
    for l in "$@"; do echo "  $l"; done
    echo "batch: {rows: 50000}"
  } > "$file"
}

now() { date +%s.%N; }
# cpu FILE CMD...: runs CMD, appends its user + system CPU seconds to FILE
cpu() { local f=$1; shift; /usr/bin/time -f '%U %S' -o "$W/cpu.one" "$@"; awk '{print $1 + $2}' "$W/cpu.one" >> "$f"; }
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

: > pq.times
: > ice.times
: > pq.cpu
: > ice.cpu
: > ice.commit
: > s3.times
: > s3.commit
for i in $(seq "$REPS"); do
  rm -rf out-pq wh st-*.db
  pipeline pq.yaml pq "$ROWS" "type: files" "path: $W/out-pq" "format: parquet" "compression: zstd"
  t0=$(now)
  cpu pq.cpu "$FERRY" run pq.yaml --quiet --state "$W/st-pq.db"
  echo "$(now) - $t0" | bc >> pq.times
  pipeline ice.yaml ice "$ROWS" "type: iceberg" "warehouse: $W/wh" "namespace: db" "compression: zstd"
  t0=$(now)
  FERRY_LOG=info cpu ice.cpu "$FERRY" run ice.yaml --quiet --state "$W/st-ice.db" 2> ice.log
  echo "$(now) - $t0" | bc >> ice.times
  sed -n 's/.*committed in \([0-9.]*\) ms.*/\1/p' ice.log >> ice.commit
  rows=$(find wh -name 'v*.metadata.json' | sort -V | tail -n 1 | xargs jq -r '.snapshots[-1].summary."total-records"')
  [ "$rows" = "$ROWS" ] || { echo "iceberg table holds $rows rows, want $ROWS" >&2; exit 1; }
  if [ "$S3" = 1 ]; then
    rm -f cat.db
    pipeline s3.yaml s3ice "$ROWS" "type: iceberg" "warehouse: s3://lake/wh$i" "namespace: db" \
      "compression: zstd" "catalog: sql" "catalog_uri: $W/cat.db" \
      "endpoint: \"http://127.0.0.1:$(cat s3.port)\"" "path_style: true" \
      "access_key_id: env:S3_KEY" "secret_access_key: env:S3_SECRET"
    t0=$(now)
    FERRY_LOG=info "$FERRY" run s3.yaml --quiet --state "$W/st-s3.db" 2> s3.log
    echo "$(now) - $t0" | bc >> s3.times
    sed -n 's/.*committed in \([0-9.]*\) ms.*/\1/p' s3.log >> s3.commit
    rm -f st-s3.db
  fi
done
T_PQ=$(median < pq.times)
T_ICE=$(median < ice.times)
C_BIG=$(median < ice.commit)
OVER=$(echo "scale=2; ($T_ICE - $T_PQ) * 100 / $T_PQ" | bc)
U_PQ=$(median < pq.cpu)
U_ICE=$(median < ice.cpu)
OVER_CPU=$(echo "scale=2; ($U_ICE - $U_PQ) * 100 / $U_PQ" | bc)
if [ "$S3" = 1 ]; then
  T_S3=$(median < s3.times)
  C_S3=$(median < s3.commit)
  OVER_S3=$(echo "scale=2; ($T_S3 - $T_ICE) * 100 / $T_ICE" | bc)
fi

# small appends: one snapshot per run on a growing table
pipeline small.yaml small 1000 "type: iceberg" "warehouse: $W/whs" "namespace: db"
: > small.commit
for i in $(seq "$SMALL_RUNS"); do
  FERRY_LOG=info "$FERRY" run small.yaml --quiet --state "$W/st-small.db" 2> small.log
  sed -n 's/.*committed in \([0-9.]*\) ms.*/\1/p' small.log >> small.commit
done
C_SMALL=-
C_LAST=-
if [ "$SMALL_RUNS" -gt 0 ]; then
  C_SMALL=$(median < small.commit)
  C_LAST=$(tail -n 1 small.commit)
fi

DATE=$(date -u +%Y-%m-%d)
OUTF="$FERRY_SRC/bench/results/iceberg-$DATE-${ROWS}rows.md"
[ "$RESULT" = 1 ] || OUTF=/dev/null
{
  echo "# Iceberg sink vs plain Parquet ($ROWS rows of sample orders, zstd, $REPS runs each, median)"
  echo
  echo "| | wall s | rows/s | CPU s (user + sys) |"
  echo "|---|---|---|---|"
  echo "| ferry -> Parquet (files sink) | $T_PQ | $(echo "$ROWS / $T_PQ" | bc) | $U_PQ |"
  echo "| ferry -> Iceberg (filesystem catalog) | $T_ICE | $(echo "$ROWS / $T_ICE" | bc) | $U_ICE |"
  [ "$S3" = 1 ] && echo "| ferry -> Iceberg on S3 (s3rver on loopback, SQL catalog) | $T_S3 | $(echo "$ROWS / $T_S3" | bc) | |"
  echo
  echo "Iceberg overhead: **$OVER %** of the Parquet run's wall time (target <= 5 %); CPU: $OVER_CPU %."
  echo
  echo "| commit latency (ms) | median |"
  echo "|---|---|"
  echo "| one snapshot of the $ROWS-row run (close + fsync data, manifest, manifest list, swap) | $C_BIG |"
  echo "| a 1000-row append, $SMALL_RUNS runs on a growing table | $C_SMALL (last: $C_LAST) |"
  if [ "$S3" = 1 ]; then
    echo "| one snapshot of the $ROWS-row run on S3 (last part + complete, manifest, list, metadata PUTs, SQL swap) | $C_S3 |"
    echo
    echo "S3 warehouse vs local: **$OVER_S3 %** wall time, against a JavaScript test server on the"
    echo "same 2 cores and disk (it re-hashes every body for SigV4 and CRC32-C): an upper bound of"
    echo "the client-side cost, not a figure for AWS."
  fi
  echo
  echo "Machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg) at the end (shared with other jobs)."
} | tee "$OUTF"
