# tests/fault/cdc_crash_commit.bash - sourced (not a test) by cdc_crash_commit_files.sh
# (files: jsonl, parquet) and cdc_crash_commit_lake.sh (s3, iceberg merge, iceberg change log),
# after tests/e2e/lib.sh with LAKE_KINDS set: crash_before_sink_commit and
# crash_after_sink_commit with a cdc source (PostgreSQL, logical replication) into the lake
# sinks: files (JSON Lines, Parquet) and s3 (JSON Lines) as a change log (write: append),
# iceberg with write: merge and as a change log. The run is crashed (`crash` = _exit, no
# cleanup) at before_sink_commit, after_sink_commit and the sink's own last step before it
# publishes (files_before_manifest, s3_before_manifest, iceberg_before_catalog_commit), in the
# first run (snapshot + stream) and in a later stream-only run (inserts, updates, deletes made
# while ferry was down), then run again, then once more. Asserts what docs/guarantees.md states:
#   - a crash before the publication publishes nothing: what readers trust (the committed
#     manifests and their rows; the iceberg table's current snapshot) is unchanged;
#   - after each crash the slot's confirmed_flush_lsn is not past the position the state
#     saved (sqlite3), i.e. never past what the destination made durable;
#   - after the resume every change is present (read by jq, DuckDB, the signed S3 client,
#     icebird); a files/s3 change log holds each change once, except after a crash after the
#     commit, where the interrupted run's changes may appear twice: only across two attempts
#     of that run, as identical whole rows, all after the position saved before it
#     (recognisable by _ferry_lsn); merged on (lsn, key) the change log equals the source;
#     iceberg is exactly-once: merge equals the source, every (run, checkpoint) committed
#     once, its change log holds each change exactly once; a further run adds nothing.
if [[ " $LAKE_KINDS " == *" s3 "* ]]; then
  . "$FERRY_SRC/tests/s3/s3.sh"
  s3_have || fail "node and tests/tools/node_modules (s3rver, aws4) are needed: run scripts/install-deps.sh"
  export S3_KEY=S3RVER S3_SECRET=S3RVER
  s3_start lake
fi
. "$FERRY_SRC/tests/fault/cdc_lib.bash"
. "$FERRY_SRC/tests/fault/cdc_lake.bash"

cdc_table_t 2000

# workload ROUND: inserts, updates and deletes while ferry is down (each statement its own
# transaction); adds the rows changed to CHANGES (what a change log must hold)
CHANGES=0
workload() {
  local r=$1 out
  out=$(psql -v ON_ERROR_STOP=1 -X <<SQL
INSERT INTO t SELECT g, md5(g::text || 'r$r'), $r FROM generate_series(100000 * $r + 1, 100000 * $r + 600) g;
UPDATE t SET v = 'upd$r-' || id, n = $r WHERE id % 7 = $r % 7;
DELETE FROM t WHERE id % 11 = $r % 11;
SQL
)
  cdc_count_changes "$out"
}

i=0 round=0
for kind in $LAKE_KINDS; do
  case $kind in
    jsonl | parquet) own=files_before_manifest ;;
    s3) own=s3_before_manifest ;;
    iceberg | iceberg_log) own=iceberg_before_catalog_commit ;;
  esac
  for fp in before_sink_commit $own after_sink_commit; do
    i=$((i + 1))
    name="cl${i}_$kind"
    slot="ferry_${name}_t"
    case $kind in s3) root="cl$i" ;; *) root="$T/cl$i" ;; esac
    cdc_pipeline p.yaml "$name" t "$(lake_sink $kind "$root")" "rows: 400"
    CHANGES=$(pgq -c "SELECT count(*) FROM t") # the first run's snapshot
    allowed=- # the runs interrupted after their commit, "RUN:position saved before it"
    for phase in first stream; do
      if [ $phase = stream ]; then round=$((round + 1)); workload $round; fi
      prev=$(cdc_saved "$name")
      before=$(lake_published $kind "$root")
      expect_exit 137 env FERRY_FAILPOINTS=$fp=crash "$FERRY_BIN" run p.yaml --quiet
      cdc_never_ahead "$name" "$slot" "$kind $fp ($phase run, crashed)"
      if [ $fp != after_sink_commit ]; then
        [ "$(lake_published $kind "$root")" = "$before" ] || fail "$kind $fp ($phase run): published before the commit"
      else
        [ "$(lake_published $kind "$root")" != "$before" ] || fail "$kind $fp ($phase run): the commit published nothing"
        run=$(q "$FERRY_STATE" "SELECT max(id) FROM runs WHERE pipeline = '$name'")
        # iceberg commits ferry's checkpoint with the data: exactly-once, never a duplicate
        [ $kind = iceberg_log ] || allowed=$([ "$allowed" = - ] || echo "$allowed,")$run:$prev
      fi
      expect_exit 0 ferry run p.yaml --quiet
      cdc_never_ahead "$name" "$slot" "$kind $fp ($phase run, resumed)"
      got=$(lake_check $kind "$root" $CHANGES "$allowed" "$kind $fp ($phase run)")
      # a plain run after the resume adds nothing (nothing committed is replayed)
      expect_exit 0 ferry run p.yaml --quiet
      lake_check $kind "$root" $CHANGES "$allowed" "$kind $fp ($phase run, again)" > /dev/null
      pass "$kind $fp=crash in the $phase run: $got; slot never ahead of the saved position"
    done
    expect_exit 0 ferry cdc drop p.yaml
  done
done
