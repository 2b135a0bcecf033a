#!/usr/bin/env bash
# shared: s3
# backpressure_sinks: the catalog's slow_sink_backpressure row for the sinks besides
# postgres (pg_faults.sh stops the PostgreSQL backend): sqlite, files (jsonl, parquet),
# iceberg and s3 (Parquet objects in s3rver, read back with the independent signed client). The sink stalls for 9 s at its 5th batch (before_sink_apply=sleep(9000)@5) while
# the sample source could produce the whole million rows (well over 80 MiB) in that time:
# from the moment the stall begins to 8 s into it, ferry's peak RSS (VmHWM,
# /proc/PID/status) grows < 32 MiB (bounded queues), the process is alive, and afterwards
# the run completes with every id exactly once.
. "$(dirname "$0")/../e2e/lib.sh"
DUCK="$FERRY_SRC/tests/tools/duckdb_exec.mjs"
command -v node > /dev/null || fail "node is needed (scripts/install-deps.sh)"
. "$FERRY_SRC/tests/s3/s3.sh"
s3_have || fail "tests/tools/node_modules (s3rver, aws4) is needed: run scripts/install-deps.sh"
export S3_KEY=S3RVER S3_SECRET=S3RVER
s3_start bp
ROWS=1000000

sink_yaml() { # KIND
  case $1 in
    sqlite) echo "{type: sqlite, path: $T/bp.db}" ;;
    jsonl | parquet) echo "{type: files, path: $T/bp-$1, format: $1}" ;;
    iceberg) echo "{type: iceberg, warehouse: $T/bp-wh, namespace: db}" ;;
    s3) echo "{type: s3, bucket: $S3_BUCKET, prefix: bp, format: parquet, endpoint: \"$S3_ENDPOINT\", path_style: true, access_key_id: env:S3_KEY, secret_access_key: env:S3_SECRET}" ;;
  esac
}
ids_of() { # KIND: "count distinct min max" of the ids a reader sees
  local files m
  case $1 in
    sqlite) q "$T/bp.db" "SELECT count(*) || ' ' || count(DISTINCT id) || ' ' || min(id) || ' ' || max(id) FROM orders" ;;
    jsonl)
      m=$(ls "$T"/bp-jsonl/_runs/*/_manifest.json)
      (cd "$T/bp-jsonl" && cat $(jq -r '.files[].path' "$m")) | jq -r .id | sort -n \
        | awk 'NR == 1 {lo = $1} {n++; if ($1 != prev) d++; prev = $1} END {print n, d, lo, prev}' ;;
    parquet)
      m=$(ls "$T"/bp-parquet/_runs/*/_manifest.json)
      files=$(jq -r '.files[].path' "$m" | awk -v d="$T/bp-parquet" '{printf "%s\x27%s/%s\x27", (NR>1?",":""), d, $0}')
      nodetool "$DUCK" "SELECT count(*), count(DISTINCT id), min(id), max(id) FROM read_parquet([$files])" | jq -r 'map(tostring) | join(" ")' ;;
    iceberg)
      files=$(nodetool "$FERRY_SRC/tests/tools/read_iceberg.mjs" "$T/bp-wh" db --files orders | jq -r '.data_file.file_path' | sed 's|^file://||' \
        | awk '{printf "%s\x27%s\x27", (NR>1?",":""), $0}')
      nodetool "$DUCK" "SELECT count(*), count(DISTINCT id), min(id), max(id) FROM read_parquet([$files])" | jq -r 'map(tostring) | join(" ")' ;;
    s3) # the objects the run's manifest lists, downloaded by the signed client
      mkdir -p "$T/bp-s3"
      m=$(s3c "$S3_BUCKET" list bp/ | grep '/_manifest.json$' | head -n 1)
      s3c "$S3_BUCKET" get "$m" > "$T/bp-s3/manifest.json"
      local i=0 key
      for key in $(jq -r '.objects[].key' "$T/bp-s3/manifest.json"); do
        i=$((i + 1)); s3c "$S3_BUCKET" get "$key" > "$T/bp-s3/$i.parquet"
      done
      nodetool "$DUCK" "SELECT count(*), count(DISTINCT id), min(id), max(id) FROM read_parquet('$T/bp-s3/*.parquet')" | jq -r 'map(tostring) | join(" ")' ;;
  esac
}

for kind in ${BP_KINDS:-sqlite jsonl parquet iceberg s3}; do
  export FERRY_STATE="$T/state-$kind.db"
  cat > bp.yaml <<EOF
version: 1
name: bp-$kind
source: {type: sample, rows: $ROWS, seed: 7, resources: [{table: orders, mode: full}]}
sink: $(sink_yaml $kind)
batch: {rows: 2000}
EOF
  FERRY_FAILPOINTS="before_sink_apply=sleep(9000)@5" "$FERRY_BIN" run bp.yaml > bp.log 2>&1 &
  pid=$!
  wait_for_log bp.log "failpoint before_sink_apply fired: sleep (hit 5)" $pid 600 || fail "$kind: the sink never stalled: $(cat bp.log)"
  h1=$(vmhwm_kb $pid)
  sleep 8
  kill -0 $pid 2>/dev/null || fail "$kind: ferry ended while its sink was stalled: $(cat bp.log)"
  h2=$(vmhwm_kb $pid)
  set +e; wait $pid; rc=$?; set -e
  [ $rc = 0 ] || fail "$kind: exit $rc after the stall: $(cat bp.log)"
  growth=$(( (h2 - h1) / 1024 ))
  [ $growth -lt 32 ] || fail "$kind: peak RSS grew by $growth MiB while the sink was stalled ($h1 -> $h2 KiB): unbounded buffering"
  [ "$h2" -lt $((1024 * 1024)) ] || fail "$kind: peak RSS $h2 KiB"
  got=$(ids_of $kind)
  [ "$got" = "$ROWS $ROWS 1 $ROWS" ] || fail "$kind: the destination holds [$got] (count distinct min max), want [$ROWS $ROWS 1 $ROWS]"
  pass "$kind sink stalled 9 s: peak RSS $((h1 / 1024)) -> $((h2 / 1024)) MiB during the stall, then every id once"
done
