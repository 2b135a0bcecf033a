# tests/fault/cdc_lake.bash - readers of what a cdc run published into the lake sinks (files
# JSON Lines and Parquet, s3, iceberg), shared by cdc_crash_commit_lake.sh and
# cdc_disk_full.sh (sourced after tests/e2e/lib.sh and cdc_lib.bash; not a test itself).
# Every reader is one ferry did not write: jq over the parts the committed manifests list,
# DuckDB over the Parquet parts, the signed S3 client over the objects the manifests list,
# icebird over the Iceberg table's current snapshot.
DUCK="$FERRY_SRC/tests/tools/duckdb_exec.mjs"
READ="$FERRY_SRC/tests/tools/read_iceberg.mjs"
ORACLE="$FERRY_SRC/tests/fault/cdc_changelog.py"
command -v node > /dev/null || fail "node is needed (scripts/install-deps.sh)"
[ -d "$FERRY_SRC/tests/tools/node_modules/icebird" ] || fail "tests/tools/node_modules/icebird missing: npm ci --prefix tests/tools"

# lake_sink KIND ROOT: the sink of a cdc pipeline into ROOT (a folder, or an S3 prefix of the
# bucket $S3_BUCKET: s3_start lake); files and s3 cannot delete: a change log (append);
# iceberg merges, and iceberg_log is a change log (append) into an Iceberg table
lake_sink() {
  case $1 in
    jsonl | parquet) echo "{type: files, path: $2, format: $1, write: append}" ;;
    s3) echo "{type: s3, bucket: $S3_BUCKET, prefix: $2, format: jsonl, write: append, endpoint: \"$S3_ENDPOINT\", path_style: true, access_key_id: env:S3_KEY, secret_access_key: env:S3_SECRET}" ;;
    iceberg) echo "{type: iceberg, warehouse: $2, namespace: db, write: merge}" ;;
    iceberg_log) echo "{type: iceberg, warehouse: $2, namespace: db, write: append}" ;;
  esac
}

# lake_log KIND ROOT: every change the committed manifests publish, one a line:
# "lsn op id v n run:attempt" (tab-separated; NULL as an empty field). An Iceberg table does not
# say which attempt wrote a row: "table:1" (any duplicate is then refused)
lake_log() {
  local kind=$1 root=$2 m p files
  case $kind in
    jsonl)
      # every listed part in one jq (xargs may split a long list): part-<run>-<attempt>-<n>.jsonl
      for m in "$root"/_runs/*/_manifest.json; do
        [ -e "$m" ] || continue
        jq -r --arg d "$root" '.files[].path | "\($d)/\(.)"' "$m"
      done | tr '\n' '\0' | xargs -0 -r jq -r '[._ferry_lsn, ._ferry_op, .id, .v, .n,
          (input_filename | capture("part-(?<r>[0-9]+)-(?<a>[0-9]+)-[^/]*$") | "\(.r):\(.a)")] | @tsv' ;;
    parquet)
      files=$(for m in "$root"/_runs/*/_manifest.json; do
        [ -e "$m" ] && jq -r '.files[].path' "$m"; done | awk -v d="$root" '{printf "%s\x27%s/%s\x27", (NR>1?",":""), d, $0}')
      [ -n "$files" ] || return 0
      nodetool "$DUCK" "SELECT _ferry_lsn, _ferry_op, id, v, n,
          regexp_extract(filename, 'part-([0-9]+)-([0-9]+)-', 1) || ':' || regexp_extract(filename, 'part-([0-9]+)-([0-9]+)-', 2)
        FROM read_parquet([$files], filename = true)" | jq -r '@tsv' ;;
    s3)
      local keys="" dl p
      for m in $(s3c "$S3_BUCKET" list "$root/_runs/" | grep '_manifest.json$'); do
        keys="$keys $(s3c "$S3_BUCKET" get "$m" | jq -r '.objects[].key')"
      done
      dl=$(mktemp -d "$T/dl.XXXXXX")
      # every listed object in one client process
      # shellcheck disable=SC2086
      [ -z "${keys// /}" ] || s3c "$S3_BUCKET" getmany "$dl" $keys > /dev/null
      # every object in one jq (xargs may split a long list): <table>/run=<run>/attempt=<a>/part-<n>.jsonl
      # shellcheck disable=SC2086
      [ -z "${keys// /}" ] || (cd "$dl" && printf '%s\0' $keys | xargs -0 jq -r '[._ferry_lsn, ._ferry_op, .id, .v, .n,
          (input_filename | capture("run=(?<r>[0-9]+)/attempt=(?<a>[0-9]+)/") | "\(.r):\(.a)")] | @tsv')
      rm -rf "$dl" ;;
    iceberg_log)
      [ "$(lake_published iceberg "$root")" != none ] || return 0
      nodetool "$READ" "$root" db t | jq -r '[._ferry_lsn, ._ferry_op, .id, .v, .n, "table:1"] | @tsv' ;;
  esac
}

# lake_published KIND ROOT: a digest of what readers trust now (manifests and their rows; the
# iceberg table's current snapshot)
lake_published() {
  case $1 in
    iceberg | iceberg_log) # the current snapshot (the sink creates the table, without one, before any data)
      local m
      m=$({ ls "$2"/db/t/metadata/v*.metadata.json 2>/dev/null || true; } | sort -V | tail -n 1)
      if [ -n "$m" ]; then jq -r '."current-snapshot-id" // "none"' "$m"; else echo none; fi ;;
    *) lake_log "$1" "$2" | sort | md5sum ;;
  esac
}

# src_state: the source table's final state, "id|v|n" ordered by id
src_state() { pgq -c "SELECT id || '|' || v || '|' || n FROM t ORDER BY id"; }

# lake_check KIND ROOT CHANGES ALLOWED LABEL: the destination against the source. Change
# logs: cdc_changelog.py (each change present, duplicates only as allowed, merged on (lsn,
# key) equal to the source). Iceberg (merge): icebird's rows equal the source's, whole rows,
# every snapshot commits a distinct (run, checkpoint), no run commits twice (a resumed attempt
# never repeats its crashed attempt's commit). Prints a short summary.
lake_check() {
  local kind=$1 root=$2 changes=$3 allowed=$4 label=$5 out m
  src_state > src.state
  if [ "$kind" = iceberg ]; then
    nodetool "$READ" "$root" db t > ice.json || fail "$label: icebird cannot read the table"
    jq -r '"\(.id)|\(.v)|\(.n)"' ice.json | sort -t '|' -k1,1n > ice.state
    cmp -s src.state ice.state || fail "$label: the iceberg table differs from the source ($(comm -23 <(sort src.state) <(sort ice.state) | wc -l) missing or stale, $(comm -13 <(sort src.state) <(sort ice.state) | wc -l) extra or stale, $(wc -l < ice.state) rows read)"
    m=$(ls "$root"/db/t/metadata/v*.metadata.json | sort -V | tail -n 1)
    n=$(jq '.snapshots | length' "$m")
    u=$(jq '[.snapshots[].summary | [."ferry.run-id", ."ferry.checkpoint"]] | unique | length' "$m")
    [ "$n" = "$u" ] || fail "$label: $n snapshots but $u distinct (run, checkpoint): a checkpoint committed twice"
    jq -e '[.snapshots[].summary."ferry.run-id"] | group_by(.) | map(length) | max // 0 | . <= 1' "$m" > /dev/null \
      || fail "$label: a run committed two snapshots: $(jq -c '[.snapshots[].summary | [."ferry.run-id", ."ferry.attempt"]]' "$m")"
    echo "$(wc -l < ice.state) rows, $n snapshots"
    return 0
  fi
  lake_log "$kind" "$root" > log.tsv
  out=$(python3 "$ORACLE" "$changes" "$allowed" src.state < log.tsv 2>&1) || fail "$label: $out"
  echo "$out" | awk '{print $1 " rows, " $2 " changes, " $3 " duplicated"}'
}
