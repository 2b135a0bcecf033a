#!/usr/bin/env bash
# disk_full with a cdc source (PostgreSQL, logical replication); real full file systems (small
# tmpfs mounts: needs root, as CI runs - never skipped):
#   a. a files sink (JSON Lines, then Parquet) change log whose folder fills up during a
#      stream-only run: exit non-zero, one error naming the path and "No space left on device";
#      nothing new published (the committed manifests and their rows unchanged); the state's
#      checkpoint readable (sqlite3 integrity_check) and unchanged; the slot's
#      confirmed_flush_lsn not past it; after the filler is removed the resume delivers every
#      change (jq / DuckDB over the listed parts), none twice, and merged on (lsn, key) the log
#      equals the source;
#   b. the state folder fills up during a cdc stream run into a PostgreSQL change log and a
#      PostgreSQL merge table: exit non-zero, an error naming the state file and "No space
#      left on device" (SQLite's "database or disk is full" is how it says it); the previous
#      checkpoint readable; the slot not past it; after freeing space the resume completes: the
#      change log holds each change once (its checkpoint commits with the data), the merge
#      table equals the source.
. "$(dirname "$0")/../e2e/lib.sh"
[ "$(id -u)" = 0 ] || fail "cdc_disk_full needs root to mount a small tmpfs (CI runs as root)"
. "$FERRY_SRC/tests/fault/cdc_lib.bash"
. "$FERRY_SRC/tests/fault/cdc_lake.bash"

cdc_table_t 2000
NEXT=1000000
# load N: one transaction of N inserts of about 200 bytes each, plus updates and deletes;
# adds the rows changed to CHANGES
load() {
  local out
  out=$(psql -v ON_ERROR_STOP=1 -X <<SQL
INSERT INTO t SELECT g, md5(g::text) || md5((g + 1)::text) || md5((g + 2)::text) || md5((g + 3)::text) || md5((g + 4)::text) || md5((g + 5)::text), 1
  FROM generate_series($NEXT, $NEXT + $1 - 1) g;
UPDATE t SET v = 'upd-' || id, n = n + 1 WHERE id % 13 = $((NEXT % 13));
DELETE FROM t WHERE id % 17 = $((NEXT % 17));
SQL
)
  NEXT=$((NEXT + $1))
  cdc_count_changes "$out"
}

# one_error LOG PATH LABEL: the run failed with an error naming PATH and the full disk
one_error() {
  grep -q "$2" "$1" || fail "$3: the error does not name $2: $(cat "$1")"
  grep -qi "No space left on device" "$1" || fail "$3: the error does not say \"No space left on device\": $(cat "$1")"
  [ "$(grep -c "error:" "$1")" = 1 ] || fail "$3: not one error: $(cat "$1")"
}

# ---- a. the files sink's disk fills up during a stream run ------------------------------------
for kind in jsonl parquet; do
  export FERRY_STATE="$T/state-$kind.db"
  mount_small "$T/fs-$kind" 16m
  root="$T/fs-$kind/lake"
  name="df_$kind"
  slot="ferry_${name}_t"
  cdc_pipeline p.yaml "$name" t "$(lake_sink $kind "$root")" "rows: 2000"
  CHANGES=$(pgq -c "SELECT count(*) FROM t")
  expect_exit 0 ferry run p.yaml --quiet
  lake_check $kind "$root" "$CHANGES" - "$kind first run" > /dev/null
  load 30000
  # leave about 300 KiB: far less than the run's parts (several MiB)
  free_kb=$(df -k --output=avail "$T/fs-$kind" | tail -n 1 | tr -d ' ')
  head -c $(( (free_kb - 300) * 1024 )) /dev/zero > "$T/fs-$kind/filler" 2>/dev/null || true
  saved=$(cdc_saved "$name")
  published=$(lake_published $kind "$root")
  set +e
  "$FERRY_BIN" run p.yaml > run.log 2>&1
  rc=$?
  set -e
  [ $rc -ne 0 ] && [ $rc -ne 137 ] || fail "$kind disk full: exit $rc: $(cat run.log)"
  one_error run.log "$root" "$kind disk full"
  [ "$(q "$FERRY_STATE" 'PRAGMA integrity_check')" = ok ] || fail "$kind disk full: the state file is damaged"
  [ "$(cdc_saved "$name")" = "$saved" ] || fail "$kind disk full: the saved position moved ($saved -> $(cdc_saved "$name")) although nothing was published"
  cdc_never_ahead "$name" "$slot" "$kind disk full"
  [ "$(lake_published $kind "$root")" = "$published" ] || fail "$kind disk full: something was published by the failed run"
  rm -f "$T/fs-$kind/filler"
  expect_exit 0 ferry run p.yaml --quiet
  cdc_never_ahead "$name" "$slot" "$kind disk full (resumed)"
  got=$(lake_check $kind "$root" "$CHANGES" - "$kind disk full (resumed)")
  pass "$kind change log, disk full during a stream run: exit $rc, $(grep -io "[^ ]*$root[^:]*: No space left on device" run.log | head -n 1 | cut -c1-120); nothing published, checkpoint intact, slot not past it; resume: $got"
  expect_exit 0 ferry cdc drop p.yaml
done

# ---- b. the state folder fills up during a cdc run ------------------------------------------------
mount_small "$T/statefs" 24m
export FERRY_STATE="$T/statefs/state.db"
cdc_pipeline log.yaml df_log t "{type: postgres, url: env:DEST_URL, schema: log, write: append}" "rows: 100"
cdc_pipeline merge.yaml df_merge t "{type: postgres, url: env:DEST_URL, schema: public, write: merge}" "rows: 100"
CHANGES=$(pgq -c "SELECT count(*) FROM t")
expect_exit 0 ferry run log.yaml --quiet
expect_exit 0 ferry run merge.yaml --quiet
log_tsv() { pgq -d dest -F $'\t' -c "SELECT _ferry_lsn, _ferry_op, id, coalesce(v, ''), coalesce(n::text, ''), 'log:1' FROM log.t"; }
merge_state() { pgq -d dest -c "SELECT id || '|' || v || '|' || n FROM public.t ORDER BY id"; }
load 40000
# leave little room: the events of 400 batches do not fit
free_kb=$(df -k --output=avail "$T/statefs" | tail -n 1 | tr -d ' ')
head -c $(( (free_kb - 400) * 1024 )) /dev/zero > "$T/statefs/filler" 2>/dev/null || true
for p in log merge; do
  name="df_$p"
  slot="ferry_${name}_t"
  saved=$(cdc_saved "$name")
  set +e
  "$FERRY_BIN" run $p.yaml > run.log 2>&1
  rc=$?
  set -e
  [ $rc -ne 0 ] && [ $rc -ne 137 ] || fail "state disk full ($p): exit $rc: $(cat run.log)"
  grep -q "$FERRY_STATE" run.log || fail "state disk full ($p): the error does not name the state file: $(cat run.log)"
  grep -qi "No space left on device\|database or disk is full" run.log || fail "state disk full ($p): the error does not say the disk is full: $(cat run.log)"
  [ "$(q "$FERRY_STATE" 'PRAGMA integrity_check')" = ok ] || fail "state disk full ($p): the state file is damaged"
  [ "$(cdc_saved "$name")" = "$saved" ] || fail "state disk full ($p): the route position moved in a failed run"
  cdc_never_ahead "$name" "$slot" "state disk full ($p)"
  pass "state folder full during the $p cdc run: exit $rc, $(grep -o "state [^ ]*: [^.]*" run.log | head -n 1 | cut -c1-120); checkpoint readable, slot not past it"
done
rm -f "$T/statefs/filler"
for p in log merge; do
  expect_exit 0 ferry run $p.yaml --quiet
  cdc_never_ahead "df_$p" "ferry_df_${p}" "state disk full ($p, resumed)"
done
src_state > src.state
merge_state > merge.state
cmp -s src.state merge.state || fail "state disk full: the merge table differs from the source after the resume"
out=$(log_tsv | python3 "$ORACLE" "$CHANGES" - src.state 2>&1) || fail "state disk full: change log: $out"
pass "state folder full, resumed: merge table equals the source ($(wc -l < src.state) rows); change log: every one of $CHANGES changes once, merged on (lsn, key) equal to the source"
