# tests/e2e/pipelines.bash - the pipeline-file writers for the sample source, sourced by
# tests/e2e/lib.sh (so every e2e and fault test has them) and by bench/iceberg.sh, which must
# not source lib.sh (it sets an EXIT trap and a work folder of its own). Only functions, no
# state: sourcing it changes nothing else. Not a test itself: CTest only globs *.sh.

# sample_source NAME ROWS [EXTRA_SOURCE_YAML] : prints the head of a pipeline file up to the
# resources of the sample source (seed 7, ROWS rows a table); EXTRA_SOURCE_YAML goes under
# `source:` as it is ("  key: value" lines).
sample_source() {
  echo "version: 1"
  echo "name: $1"
  echo "source:"
  echo "  type: sample"
  echo "  rows: $2"
  echo "  seed: 7"
  [ -z "${3:-}" ] || echo "$3"
}

# write_pipeline FILE NAME ROWS SINKPATH WRITE [MODE] [EXTRA_SOURCE_YAML] [EXTRA_SINK_YAML] [BATCH_YAML]
write_pipeline() {
  local file=$1 name=$2 rows=$3 sinkpath=$4 write=$5 mode=${6:-full}
  local extra_src=${7:-} extra_sink=${8:-} batch=${9:-}
  local cursor=""
  [ "$mode" = incremental ] && cursor="      cursor: [updated_at]"
  {
    sample_source "$name" "$rows" "$extra_src"
    echo "  resources:"
    echo "    - table: orders"
    echo "      mode: $mode"
    [ -n "$cursor" ] && echo "$cursor"
    echo "sink:"
    echo "  type: sqlite"
    echo "  path: $sinkpath"
    echo "  write: $write"
    [ -n "$extra_sink" ] && echo "$extra_sink"
    [ -n "$batch" ] && echo "$batch"
    true
  } > "$file"
}

# sample_pipeline FILE NAME ROWS SINK_LINE... : the sample source (orders and users, full,
# seed 7, ROWS rows each) into the sink described by SINK_LINEs ("key: value"), batches of 700.
sample_pipeline() {
  local file=$1 name=$2 rows=$3; shift 3
  {
    sample_source "$name" "$rows"
    echo "  resources:"
    echo "    - {table: orders, mode: full}"
    echo "    - {table: users, mode: full}"
    echo "sink:"
    for l in "$@"; do echo "  $l"; done
    echo "batch: {rows: 700}"
  } > "$file"
}
