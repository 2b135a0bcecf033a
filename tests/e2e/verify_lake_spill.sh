#!/usr/bin/env bash
# shared: pg
# labels: verify iceberg
# `ferry verify` of a lake destination in bounded memory (issue 20): an iceberg table of
# ROWS rows copied from PostgreSQL is read back through ferry (the stream side), whose
# sorted (key, hash) list is, with the budget lowered by FERRY_VERIFY_SORT_BYTES, spilled in
# several sorted runs to a temporary file under TMPDIR and merged into one file with a
# sparse index (src/verify/vsorted.c). Each check runs twice, the list held in memory
# (the default budget: a quarter of `memory:`) and spilled, and asserts:
#   1. a fresh copy verifies equal both ways, the spilled side reporting several runs;
#   2. a changed, a deleted and an inserted source row are reported by key (different, extra,
#      missing; exit 8), and the whole report (keys, counts, chunks walked, queries, bytes)
#      is the same as with the list in memory: the walk does not change;
#   3. the temporary folder is empty afterwards (the files are unlinked when created);
#   4. the spilled verification's peak RSS (/usr/bin/time %M) stays below the in-memory one
#      by at least 40 bytes per row (the in-memory list holds about 100 bytes per row; not
#      compared for a sanitizer build, whose quarantine keeps freed memory).
. "$(dirname "$0")/lib.sh"
. "${FERRY_PG_SH:-$FERRY_SRC/tests/pg/pg.sh}"
pg_start
export PG_URL="$FERRY_PG_URL"
ROWS=${ROWS:-400000}

pgq >/dev/null <<SQL
CREATE TABLE big (id bigint PRIMARY KEY, name text, amount numeric(12,2));
INSERT INTO big SELECT g, 'n' || g, g * 0.5 FROM generate_series(1, $ROWS) g;
SQL
cat > ice.yaml <<EOF
version: 1
name: vls_ice
source: {type: postgres, url: env:PG_URL, resources: [{table: big}]}
sink: {type: iceberg, warehouse: $T/wh, namespace: db}
EOF
expect_exit 0 ferry run ice.yaml --quiet

mkdir -p vtmp
# vjson MODE: verify with the list in memory (MODE mem) or spilled (MODE disk); the JSON in
# $J, the status in $RC, the peak RSS (KiB) in $RSS
vjson() {
  local budget=
  [ "$1" = disk ] && budget=262144
  set +e
  J=$(TMPDIR=$T/vtmp FERRY_VERIFY_SORT_BYTES=$budget /usr/bin/time -f %M -o rss.txt \
      "$FERRY_BIN" verify ice.yaml --json 2>verify.err)
  RC=$?
  set -e
  RSS=$(tail -n 1 rss.txt)
  [ -z "$(ls -A vtmp)" ] || fail "$1: temporary files left in TMPDIR: $(ls -A vtmp)"
}
runs() { jq -r '.resources[0].dest_sort_runs' <<< "$J"; }
# the report without what may differ between the two modes
same() { jq -S '.resources[0] | del(.seconds, .dest_sort_runs)' <<< "$J"; }

vjson mem
[ "$RC" = 0 ] || fail "mem: a fresh copy should verify equal: exit $RC: $J $(cat verify.err)"
[ "$(runs)" = 0 ] || fail "mem: the default budget should hold $ROWS rows in memory: $J"
mem_rss=$RSS
mem_report=$(same)
vjson disk
[ "$RC" = 0 ] || fail "disk: a fresh copy should verify equal: exit $RC: $J $(cat verify.err)"
[ "$(runs)" -ge 4 ] || fail "disk: the lowered budget should spill several runs: $J"
[ "$(jq -r '.resources[0].dest_rows' <<< "$J")" = "$ROWS" ] || fail "disk: rows: $J"
[ "$(same)" = "$mem_report" ] || fail "disk: reports differ: $mem_report vs $(same)"
echo "peak RSS: list in memory $mem_rss KiB, spilled ($(runs) runs) $RSS KiB, $ROWS rows"
# a sanitizer build keeps freed memory in quarantine: its RSS says nothing about the list
if ldd "$FERRY_BIN" 2>/dev/null | grep -q 'lib[at]san'; then
  echo "sanitizer build: peak RSS not compared"
else
  [ $(((mem_rss - RSS) * 1024)) -ge $((ROWS * 40)) ] ||
    fail "spilled peak RSS $RSS KiB is not 40 B/row below the in-memory $mem_rss KiB"
fi
pass "fresh copy: equal in memory and spilled ($(runs) runs), RSS $mem_rss -> $RSS KiB"

changed=$((ROWS / 5 + 7)) deleted=$((ROWS * 5 / 8))
pgq -c "UPDATE big SET amount = amount + 1 WHERE id = $changed; DELETE FROM big WHERE id = $deleted;
        INSERT INTO big VALUES ($ROWS + 1, 'late', 1)"
for mode in mem disk; do
  vjson $mode
  [ "$RC" = 8 ] || fail "$mode: changed source rows should fail the check with 8: exit $RC: $J $(cat verify.err)"
  k() { jq -r "[.resources[0].$1.keys[]] | join(\",\")" <<< "$J"; }
  [ "$(k different)" = $changed ] && [ "$(k extra)" = $deleted ] && [ "$(k missing)" = $((ROWS + 1)) ] ||
    fail "$mode: different $(k different), extra $(k extra), missing $(k missing): $J"
  jq -e '.resources[0] | .chunks > 3 and .chunks_mismatched < .chunks' <<< "$J" >/dev/null ||
    fail "$mode: the walk should narrow the differences chunk by chunk: $J"
  [ "$mode" = mem ] && mem_report=$(same)
done
[ "$(runs)" -ge 4 ] || fail "disk: several runs expected: $J"
[ "$(same)" = "$mem_report" ] || fail "disk: reports differ: $mem_report vs $(same)"
pass "a changed, a deleted and an inserted row: the same report in memory and spilled"
