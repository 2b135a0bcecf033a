#!/usr/bin/env bash
# sqlite_dest_disk_full: the catalog's disk_full row for the sqlite sink (root: a small
# tmpfs; disk_full.sh covers the state folder and the files sink). The destination database
# sits on a 6 MiB tmpfs that fills during a 200k-row append copy, per_apply and at_commit:
# exit non-zero, the error names the destination file and says the disk is full; the
# destination passes integrity_check and holds whole batches only (per_apply: no duplicate
# id, ferry's checkpoint table in it never ahead of its rows; at_commit: no row); after the
# tmpfs is enlarged the re-run resumes and the destination equals an unfaulted copy (whole
# rows, both ways, no duplicate key).
. "$(dirname "$0")/../e2e/lib.sh"
[ "$(id -u)" = 0 ] || fail "sqlite_dest_disk_full needs root to mount a small tmpfs (CI runs as root)"
mount_small "$T/destfs" 6m
ROWS=200000
write_pipeline ref.yaml ref $ROWS ref.db append full "" "" "batch: {rows: 2000}"
expect_exit 0 ferry run ref.yaml --quiet

for durability in per_apply at_commit; do
  export FERRY_STATE="$T/state-$durability.db"
  dest="$T/destfs/$durability.db"
  write_pipeline p.yaml "full-dest-$durability" $ROWS "$dest" append full "" "  durability: $durability" "batch: {rows: 2000}"
  set +e
  "$FERRY_BIN" run p.yaml > run.log 2>&1
  rc=$?
  set -e
  [ $rc -ne 0 ] && [ $rc -ne 137 ] || fail "$durability: exit $rc: $(cat run.log)"
  grep -q "$dest" run.log || fail "$durability: the error does not name the destination file: $(cat run.log)"
  grep -qi "full\|no space" run.log || fail "$durability: the error does not say the disk is full: $(cat run.log)"
  [ "$(q "$dest" 'PRAGMA integrity_check')" = ok ] || fail "$durability: the destination is damaged"
  got=$(q "$dest" "SELECT CASE WHEN EXISTS (SELECT 1 FROM sqlite_master WHERE name = 'orders') THEN (SELECT count(*) || '|' || count(DISTINCT id) FROM orders) ELSE '0|0' END")
  n=${got%%|*}
  [ "$n" = "${got#*|}" ] || fail "$durability: duplicate ids after the failure: $got"
  [ "$n" -lt $ROWS ] || fail "$durability: the disk did not fill up ($n rows)"
  [ $((n % 2000)) = 0 ] || fail "$durability: $n rows: not whole batches"
  [ $durability = per_apply ] || [ "$n" = 0 ] || fail "at_commit: $n rows visible after a failed run"
  if [ $durability = per_apply ]; then
    cp=$(q "$dest" "SELECT max(json_extract(position, '\$.key[0]')) FROM _ferry_checkpoints")
    [ -n "$cp" ] || fail "per_apply: no checkpoint in the destination after $n rows"
    [ "$cp" -le "$n" ] || fail "per_apply: the destination's checkpoint $cp is ahead of its $n rows"
  fi
  mount -o remount,size=256m "$T/destfs"
  expect_exit 0 ferry run p.yaml --quiet
  same_table ref.db "$dest" orders || fail "$durability: the destination differs from the unfaulted copy after the re-run"
  pass "sqlite sink ($durability), destination disk full: clear error naming $dest, integrity ok, $n rows kept (whole batches), re-run exact"
  rm -f "$dest" "$dest"-wal "$dest"-shm "$dest"-journal
  mount -o remount,size=6m "$T/destfs" || fail "cannot shrink the tmpfs back"
done
