#!/usr/bin/env bash
# iceberg_disk_full: the catalog's disk_full row for the Iceberg sink (root: a small tmpfs),
# read back by readers ferry did not write (icebird over HTTP, DuckDB on the data files the
# manifests list; tests/tools/iceberg_lib.sh), compared with a sqlite copy of the sample:
# the warehouse fills up during the second run: exit non-zero, the error names the warehouse
# path and says the disk is full; no new metadata file, the table still readable at its
# previous snapshot (the first run's rows, every file it reaches present); after the filler
# is removed a plain re-run resumes and commits once: two snapshots, each (run, checkpoint)
# committed once, rows equal two copies of the source.
. "$(dirname "$0")/../e2e/lib.sh"
ROWS=60000
. "$FERRY_SRC/tests/tools/iceberg_lib.sh"
[ "$(id -u)" = 0 ] || fail "iceberg_disk_full needs root to mount a small tmpfs (CI runs as root)"

. "$FERRY_SRC/tests/fault/iceberg_faults.bash"

# ---- 1. disk_full ----------------------------------------------------------------------------
mount_small "$T/icefs" 4m
WH="$T/icefs/wh"
export FERRY_STATE="$T/state1.db"
ice_pipeline full.yaml ice-full "$ROWS" "type: iceberg" "warehouse: $WH" "namespace: db"
expect_exit 0 ferry run full.yaml --quiet
M1=$(latest_meta "$WH/db/orders")
[ "$(snapshots_once "$M1")" = 1 ] || fail "disk_full: one snapshot after the first run"
check_orders 1
# leave about 300 KiB: less than one run's data file (about 1 MiB)
free_kb=$(df -k --output=avail "$T/icefs" | tail -n 1 | tr -d ' ')
head -c $(( (free_kb - 300) * 1024 )) /dev/zero > "$T/icefs/filler" 2>/dev/null || true
set +e
"$FERRY_BIN" run full.yaml > run.log 2>&1
rc=$?
set -e
[ $rc -ne 0 ] && [ $rc -ne 137 ] || fail "disk_full: exit $rc: $(cat run.log)"
grep -q "$WH" run.log || fail "disk_full: the error does not name the warehouse path: $(cat run.log)"
grep -qi "no space" run.log || fail "disk_full: the error does not say the disk is full: $(cat run.log)"
M=$(latest_meta "$WH/db/orders")
[ "$M" = "$M1" ] || fail "disk_full: a new metadata file after the failed run: $M"
complete "$M"
check_orders 1
rm -f "$T/icefs/filler"
expect_exit 0 ferry run full.yaml --quiet
M=$(latest_meta "$WH/db/orders")
n=$(snapshots_once "$M")
[ "$n" = 2 ] || fail "disk_full: $n snapshots after the resume, want 2"
complete "$M"
check_orders 2
[ "$(q "$FERRY_STATE" "SELECT count(*) FROM runs WHERE state = 'completed'")" = 2 ] || fail "disk_full: runs not completed"
pass "disk_full: clear error ($(grep -io "[^:]*: no space[^(]*" run.log | head -n 1 | cut -c1-100)), previous snapshot readable, resume committed once: 2 snapshots, rows exact"
