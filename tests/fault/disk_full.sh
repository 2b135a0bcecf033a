#!/usr/bin/env bash
# disk_full: real full file systems (small tmpfs mounts; needs root, as CI runs - never skipped)
#   1. the state folder fills up mid-run: exit non-zero, the error names the state file and
#      says the disk is full, the state's previous checkpoint stays readable (integrity_check,
#      `ferry show`), and once space is freed a plain re-run resumes and completes exactly
#      (sqlite destination: set equality, no duplicate);
#   2. a files sink (JSON Lines) on a tmpfs too small for the output: the error names the part
#      file and the disk, nothing is published (no manifest), and after the mount is enlarged
#      the re-run publishes every row exactly once;
#   3. fsync failing (failpoint files_fsync=error): the commit fails naming the file, nothing
#      is published, the re-run publishes every row exactly once.
#   4. the same as 2 with the Parquet format (the writer's row groups and footer hit the
#      full disk): error naming the part and the disk, nothing published, the re-run after
#      enlarging publishes every row once (DuckDB reads the listed parts).
# The state store's own fsync failing: fsync_fail.sh; the Iceberg warehouse: iceberg_disk_full.sh.
. "$(dirname "$0")/../e2e/lib.sh"
[ "$(id -u)" = 0 ] || fail "disk_full needs root to mount a small tmpfs (CI runs as root)"

ROWS=200000
write_pipeline ref.yaml ref $ROWS ref.db append full "" "" "batch: {rows: 200}"
expect_exit 0 ferry run ref.yaml

# ---- 1. the state folder fills up ------------------------------------------------------------
mount_small "$T/statefs" 24m
export FERRY_STATE="$T/statefs/state.db"
write_pipeline p.yaml full-state $ROWS "$T/dest.db" append full "" "" "batch: {rows: 200}"
# leave little room: the events of a thousand batches do not fit
expect_exit 0 ferry check p.yaml
head -c 23000000 /dev/zero > "$T/statefs/filler"
set +e
"$FERRY_BIN" run p.yaml > run.log 2>&1
rc=$?
set -e
[ $rc -ne 0 ] && [ $rc -ne 137 ] || fail "state disk full: exit $rc: $(cat run.log)"
grep -q "$FERRY_STATE" run.log || fail "state disk full: the error does not name the state file: $(cat run.log)"
grep -qi "no space\|disk is full\|full" run.log || fail "state disk full: the error does not say the disk is full: $(cat run.log)"
[ "$(q "$FERRY_STATE" 'PRAGMA integrity_check')" = ok ] || fail "state disk full: the state file is damaged"
expect_exit 0 ferry show 1 --json
cp_before=$(q "$FERRY_STATE" "SELECT count(*) FROM run_checkpoints")
rows_before=$(q "$T/dest.db" "SELECT count(*) FROM orders")
[ "$rows_before" -lt $ROWS ] || fail "state disk full: the run was not cut short"
rm -f "$T/statefs/filler"
expect_exit 0 ferry run p.yaml
grep -q "resum" <<< "$OUT" || fail "state disk full: the re-run did not resume: $OUT"
same_table ref.db "$T/dest.db" orders || fail "state disk full: destination differs after the re-run"
pass "state folder full: clear error ($(grep -o 'state [^ ]*: [^.]*' run.log | head -n 1 | cut -c1-110)), $cp_before checkpoints readable, $rows_before rows kept, re-run exact"

# ---- 2. the files sink fills its disk ------------------------------------------------------
export FERRY_STATE="$T/state2.db"
mount_small "$T/outfs" 8m
cat > f.yaml <<EOF
version: 1
name: full-files
source: {type: sample, rows: $ROWS, seed: 7, resources: [{table: orders, mode: full}]}
sink: {type: files, path: $T/outfs/lake, format: jsonl}
batch: {rows: 5000}
EOF
set +e
"$FERRY_BIN" run f.yaml > run.log 2>&1
rc=$?
set -e
[ $rc -ne 0 ] && [ $rc -ne 137 ] || fail "files disk full: exit $rc: $(cat run.log)"
grep -q "$T/outfs/lake" run.log || fail "files disk full: the error does not name the path: $(cat run.log)"
grep -qi "no space" run.log || fail "files disk full: the error does not say the disk is full: $(cat run.log)"
[ -z "$(find "$T/outfs/lake" -name '_manifest.json' 2>/dev/null)" ] || fail "files disk full: a manifest was published"
mount -o remount,size=256m "$T/outfs"
expect_exit 0 ferry run f.yaml
manifests=$(find "$T/outfs/lake" -name '_manifest.json' | wc -l)
[ "$manifests" = 1 ] || fail "files disk full: $manifests manifests after the re-run"
(cd "$T/outfs/lake" && cat $(jq -r '.files[].path' _runs/*/_manifest.json)) | sort > got.sorted
[ "$(wc -l < got.sorted)" = $ROWS ] || fail "files disk full: $(wc -l < got.sorted) rows published"
[ -z "$(uniq -d got.sorted | head -n 1)" ] || fail "files disk full: duplicate rows published"
[ "$(jq -r .id got.sorted | sort -n | uniq | wc -l)" = $ROWS ] || fail "files disk full: ids missing"
pass "files sink disk full: clear error naming the part, nothing published, re-run after enlarging publishes $ROWS rows once"

# ---- 3. fsync fails --------------------------------------------------------------------------
export FERRY_STATE="$T/state3.db"
sed "s|name: full-files|name: fsync-files|; s|$T/outfs/lake|$T/fsync-lake|" f.yaml > g.yaml
FERRY_FAILPOINTS=files_fsync=error@3 expect_exit 1 ferry run g.yaml
grep -q "fsync" <<< "$OUT" && grep -q "$T/fsync-lake" <<< "$OUT" || fail "fsync failure: message: $OUT"
[ -z "$(find "$T/fsync-lake" -name '_manifest.json' 2>/dev/null)" ] || fail "fsync failure: a manifest was published"
expect_exit 0 ferry run g.yaml
(cd "$T/fsync-lake" && cat $(jq -r '.files[].path' _runs/*/_manifest.json)) | sort > got3.sorted
cmp -s got.sorted got3.sorted || fail "fsync failure: the re-run did not publish the same rows"
pass "fsync failure: clear error ($(grep -o 'files sink: fsync [^:]*' <<< "$OUT" | head -n 1)), nothing published, re-run exact"

# ---- 4. the files sink fills its disk, Parquet ---------------------------------------------
export FERRY_STATE="$T/state4.db"
mount_small "$T/pqfs" 3m
sed "s|name: full-files|name: full-parquet|; s|$T/outfs/lake|$T/pqfs/lake|; s|format: jsonl|format: parquet|" f.yaml > pq.yaml
set +e
"$FERRY_BIN" run pq.yaml > run.log 2>&1
rc=$?
set -e
[ $rc -ne 0 ] && [ $rc -ne 137 ] || fail "parquet disk full: exit $rc: $(cat run.log)"
grep -q "$T/pqfs/lake" run.log || fail "parquet disk full: the error does not name the path: $(cat run.log)"
grep -qi "no space" run.log || fail "parquet disk full: the error does not say the disk is full: $(cat run.log)"
[ -z "$(find "$T/pqfs/lake" -name '_manifest.json' 2>/dev/null)" ] || fail "parquet disk full: a manifest was published"
mount -o remount,size=256m "$T/pqfs"
expect_exit 0 ferry run pq.yaml
m=$(find "$T/pqfs/lake" -name '_manifest.json')
[ "$(printf '%s\n' "$m" | grep -c .)" = 1 ] || fail "parquet disk full: $(printf '%s\n' "$m" | grep -c .) manifests after the re-run"
files=$(jq -r '.files[].path' "$m" | awk -v d="$T/pqfs/lake" '{printf "%s\x27%s/%s\x27", (NR>1?",":""), d, $0}')
got=$(nodetool "$FERRY_SRC/tests/tools/duckdb_exec.mjs" "SELECT count(*), count(DISTINCT id), min(id), max(id) FROM read_parquet([$files])" | jq -r 'map(tostring) | join(" ")')
[ "$got" = "$ROWS $ROWS 1 $ROWS" ] || fail "parquet disk full: published parts hold [$got], want [$ROWS $ROWS 1 $ROWS]"
pass "files sink (parquet) disk full: clear error naming the part, nothing published, re-run publishes $ROWS rows once"
