#!/usr/bin/env bash
# crash_before_sink_commit and crash_after_sink_commit with a cdc source (PostgreSQL, logical
# replication): the run is crashed by a failpoint (`crash` = _exit, no cleanup) right before
# and right after the sink's commit, in the first run (snapshot then stream) and in later runs
# (stream only: inserts, updates, deletes made while ferry was down), then run again. After
# each resume the destination equals the source's final state (whole rows, psql and sqlite3
# as readers, both ways) with no duplicate key; at_commit (sqlite): after a crash before the
# commit nothing of that run is visible. Sinks: postgres (merge), sqlite (merge, per_apply
# and at_commit), and append change logs into postgres and sqlite (at_commit): each change
# exactly once.
. "$(dirname "$0")/../e2e/lib.sh"
. "$FERRY_SRC/tests/fault/cdc_lib.bash"
cdc_table_t 3000

pipeline() { cdc_pipeline "$1" "$2" t "$3"; } # FILE NAME SINK
pipeline pg.yaml cc_pg "{type: postgres, url: env:DEST_URL, schema: public, write: merge}"
pipeline lite.yaml cc_lite "{type: sqlite, path: $T/lite.db, write: merge}"
pipeline litec.yaml cc_litec "{type: sqlite, path: $T/litec.db, write: merge, durability: at_commit}"
# the append change log: one row per change, exactly once (the checkpoint commits with the data)
pipeline log.yaml cc_log "{type: postgres, url: env:DEST_URL, schema: log, write: append}"
# the same into sqlite, durable only at the commit (a crash after it used to replay the run)
pipeline litelog.yaml cc_litelog "{type: sqlite, path: $T/litelog.db, write: append, durability: at_commit}"

src_rows() { pgq -c "SELECT id || '|' || v || '|' || n FROM t ORDER BY id"; }
dest_rows() { # SINK
  case $1 in
    pg) pgq -d dest -c "SELECT id || '|' || v || '|' || n FROM public.t ORDER BY id" 2>/dev/null || true ;;
    lite) q lite.db "SELECT id || '|' || v || '|' || n FROM t ORDER BY id" 2>/dev/null || true ;;
    litec) q litec.db "SELECT id || '|' || v || '|' || n FROM t ORDER BY id" 2>/dev/null || true ;;
  esac
}
dest_dups() { # SINK
  case $1 in
    pg) pgq -d dest -c "SELECT count(*) - count(DISTINCT id) FROM public.t" ;;
    lite) q lite.db "SELECT count(*) - count(DISTINCT id) FROM t" ;;
    litec) q litec.db "SELECT count(*) - count(DISTINCT id) FROM t" ;;
  esac
}
check_equal() { # SINK LABEL
  src_rows > src.txt
  dest_rows "$1" > dst.txt
  [ "$(dest_dups "$1")" = 0 ] || fail "$2: duplicate keys in the destination"
  cmp -s src.txt dst.txt || fail "$2: destination differs from the source ($(comm -23 src.txt dst.txt | wc -l) missing or stale, $(comm -13 src.txt dst.txt | wc -l) extra or stale)"
}

# check_log LABEL SINK: the change log has CHANGES rows, none twice (same change position, op, key)
check_log() {
  local n d
  if [ "$2" = litelog ]; then
    n=$(q litelog.db "SELECT count(*) FROM t")
    d=$(q litelog.db "SELECT count(*) FROM (SELECT 1 FROM t GROUP BY _ferry_lsn, _ferry_op, id, v, n HAVING count(*) > 1)")
  else
    n=$(pgq -d dest -c "SELECT count(*) FROM log.t")
    d=$(pgq -d dest -c "SELECT count(*) FROM (SELECT 1 FROM log.t GROUP BY _ferry_lsn, _ferry_op, id, v, n HAVING count(*) > 1) x")
  fi
  [ "$d" = 0 ] || fail "$1: $d changes appear more than once in the change log"
  [ "$n" = "$CHANGES" ] || fail "$1: the change log holds $n rows, $CHANGES changes were made"
}

# workload ROUND: inserts, updates and deletes while ferry is down; adds the number of changed
# rows to CHANGES (what a change log must hold)
CHANGES=0
workload() {
  local r=$1 out
  out=$(psql -v ON_ERROR_STOP=1 -X <<SQL
INSERT INTO t SELECT g, md5(g::text || 'r$r'), $r FROM generate_series(3000 + $r * 1000 + 1, 3000 + $r * 1000 + 700) g;
UPDATE t SET v = 'upd$r-' || id, n = $r WHERE id % 7 = $r;
DELETE FROM t WHERE id % 11 = $r;
SQL
)
  cdc_count_changes "$out"
}

round=0
for sink in pg lite litec log litelog; do
  for fp in before_sink_commit after_sink_commit; do
    # the first run of the pipeline (snapshot + stream) crashes, then later runs (stream only)
    for phase in first stream; do
      if [ $phase = stream ]; then round=$((round + 1)); workload $round; fi
      [ $phase = first ] && CHANGES=$(pgq -c "SELECT count(*) FROM t") # the snapshot's rows
      before=$(dest_rows $sink | md5sum)
      expect_exit 137 env FERRY_FAILPOINTS=$fp=crash "$FERRY_BIN" run $sink.yaml --quiet
      if [ $fp = before_sink_commit ] && [ $sink = litec ]; then
        [ "$(dest_rows $sink | md5sum)" = "$before" ] || fail "$sink $fp ($phase): an at_commit run made rows visible before its commit"
      fi
      expect_exit 0 ferry run $sink.yaml --quiet
      if [ $sink = log ] || [ $sink = litelog ]; then
        check_log "$sink $fp ($phase run)" $sink
        expect_exit 0 ferry run $sink.yaml --quiet
        check_log "$sink $fp ($phase run, again)" $sink
        pass "$sink $fp=crash in the $phase run: the change log holds each of the $CHANGES changes exactly once"
        continue
      fi
      check_equal $sink "$sink $fp ($phase run)"
      # a plain run after the resume changes nothing (no replay of what was committed)
      expect_exit 0 ferry run $sink.yaml --quiet
      check_equal $sink "$sink $fp ($phase run, again)"
      pass "$sink $fp=crash in the $phase run: the resume equals the source ($(wc -l < src.txt) rows, whole rows), no duplicate key"
    done
    # the next failpoint starts a fresh pipeline: drop its slot and destination
    expect_exit 0 ferry cdc drop $sink.yaml
    case $sink in
      pg) pgq -d dest -c "DROP TABLE public.t" >/dev/null ;;
      log) pgq -d dest -c "DROP TABLE log.t" >/dev/null ;;
      lite) rm -f lite.db ;;
      litec) rm -f litec.db ;;
      litelog) rm -f litelog.db ;;
    esac
    rm -f "$FERRY_STATE" "$FERRY_STATE"-wal "$FERRY_STATE"-shm
  done
done
