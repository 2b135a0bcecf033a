# tests/fault/iceberg_faults.bash - checks shared by iceberg_conn_reset.sh and
# iceberg_disk_full.sh (sourced after tests/tools/iceberg_lib.sh; not a test itself: CTest
# only globs *.sh).

# ice_pipeline FILE NAME SINK_LINES...: the orders table only (the users table's data is
# ten times larger and would not tell more)
ice_pipeline() {
  local file=$1
  pipeline "$@"
  sed -i '/- {table: users, mode: full}/d' "$file"
}

# snapshots_once META: every snapshot commits a distinct (run, checkpoint); prints the count
snapshots_once() {
  local n u
  n=$(jq '.snapshots | length' "$1")
  u=$(jq '[.snapshots[].summary | [."ferry.run-id", ."ferry.checkpoint"]] | unique | length' "$1")
  [ "$n" = "$u" ] || fail "$n snapshots but only $u distinct (run, checkpoint): a checkpoint committed twice: $(jq -c '[.snapshots[].summary | [."ferry.run-id", ."ferry.checkpoint"]]' "$1")"
  echo "$n"
}

# complete META: every snapshot's manifest list exists (the current snapshot's manifests and
# data files are then read by icebird / DuckDB, which fail on a missing one)
complete() {
  local meta=$1 ml
  for ml in $(jq -r '.snapshots[]."manifest-list"' "$meta" | sed 's|^file://||'); do
    [ -s "$ml" ] || fail "half snapshot: manifest list $ml of $meta is missing"
  done
}
