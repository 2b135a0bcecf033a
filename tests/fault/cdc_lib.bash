# tests/fault/cdc_lib.bash - the PostgreSQL-with-a-slot setup the cdc fault tests share
# (sourced after tests/e2e/lib.sh; not a test itself: CTest only globs *.sh). Sourcing it
# starts a throw-away PostgreSQL 15 with wal_level=logical (tests/pg/pg.sh), creates the
# database `dest` beside the source database `ferry`, and exports
#   SRC_URL   the source (admin: ferry creates its publication and slot)
#   DEST_URL  the destination database `dest` on the same server
# A test that routes the source through a proxy overrides SRC_URL afterwards.
# Used by cdc_conn_reset.sh, cdc_big_transaction.sh, gapx_cdc_crash_commit.sh,
# cdc_disk_full.sh, cdc_backpressure.sh and cdc_crash_commit_lake.sh.
. "${FERRY_PG_SH:-$FERRY_SRC/tests/pg/pg.sh}"
pg_start
psql -qX -v ON_ERROR_STOP=1 -c "CREATE DATABASE dest" >/dev/null
export SRC_URL="$FERRY_PG_URL"
export DEST_URL="postgresql://ferry_admin:$PGPASSWORD@127.0.0.1:$PGPORT/dest"

# cdc_pipeline FILE NAME TABLE SINK [BATCH] [SOURCE_LINES]: one cdc resource TABLE of the
# source into SINK (a flow mapping); BATCH is the batch mapping's body (default rows: 500);
# SOURCE_LINES are more keys of the source, one "key: value" a line.
cdc_pipeline() {
  local file=$1 name=$2 table=$3 sink=$4 batch=${5:-rows: 500} extra=${6:-} l
  {
    echo "version: 1"
    echo "name: $name"
    echo "source:"
    echo "  type: postgres"
    echo "  url: env:SRC_URL"
    if [ -n "$extra" ]; then
      while IFS= read -r l; do echo "  $l"; done <<< "$extra"
    fi
    echo "  resources:"
    echo "    - {table: $table, mode: cdc}"
    echo "sink: $sink"
    echo "batch: {$batch}"
  } > "$file"
}

# cdc_confirmed SLOT: the slot's confirmed_flush_lsn as a number (0 when unset or missing)
cdc_confirmed() {
  local v
  v=$(pgq -c "SELECT coalesce((confirmed_flush_lsn - '0/0')::bigint, 0) FROM pg_replication_slots WHERE slot_name = '$1'")
  echo "${v:-0}"
}

# cdc_saved PIPELINE: the stream position (`n`) the state file saved for PIPELINE's route,
# read with sqlite3 (not through ferry); 0 when none
cdc_saved() {
  local v
  v=$(q -cmd ".timeout 5000" "$FERRY_STATE" \
    "SELECT max(json_extract(position, '\$.n')) FROM route_checkpoints WHERE pipeline = '$1' AND shard = 0" 2>/dev/null || true)
  echo "${v:-0}"
}

# cdc_never_ahead PIPELINE SLOT LABEL: the slot's confirmed position is not past the position
# the state saved after the sink made it durable (the slot is read first: a save in between
# can only make the check stricter)
cdc_never_ahead() {
  local c s
  c=$(cdc_confirmed "$2")
  s=$(cdc_saved "$1")
  if [ "$s" = 0 ]; then # no run completed yet: the slot must still be at its creation point
    s=$(q -cmd ".timeout 5000" "$FERRY_STATE" "SELECT json_extract(p.plan, '\$.start') FROM plans p
      JOIN runs r ON r.id = p.run_id WHERE r.pipeline = '$1' ORDER BY p.run_id DESC LIMIT 1")
    s=$(pgq -c "SELECT ('${s:-0/0}'::pg_lsn - '0/0')::bigint")
  fi
  [ "$c" -le "$s" ] || fail "$3: the slot $2 is confirmed at $c, past the saved position $s"
}

# cdc_table_t ROWS: the captured table t (id, v, n) with ids 1..ROWS
cdc_table_t() {
  pgq -c "CREATE TABLE t (id bigint PRIMARY KEY, v text NOT NULL, n int NOT NULL)" >/dev/null
  pgq -c "INSERT INTO t SELECT g, md5(g::text), 0 FROM generate_series(1, $1) g" >/dev/null
}

# cdc_count_changes PSQL_OUTPUT: adds to CHANGES the rows that psql's command tags (INSERT 0 N,
# UPDATE N, DELETE N) say were changed: what a change log must hold
cdc_count_changes() {
  CHANGES=$((CHANGES + $(printf '%s\n' "$1" | awk '/^(INSERT 0|UPDATE|DELETE) [0-9]+$/ { s += $NF } END { print s + 0 }')))
}
