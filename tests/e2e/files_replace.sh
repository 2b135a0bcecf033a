#!/usr/bin/env bash
# `write: replace` into the files sink (Parquet), read back the way a reader is told to
# (docs/connectors.md): <path>/_manifest.json, when present, lists the whole data set.
# DuckDB (tests/tools) reads exactly the files it lists for table t; the rows must equal the
# old input or the new input, whole, never a mix, never empty, after:
#   1. a first replace over a path where another pipeline appended table u (kept);
#   2. crashes at before_sink_commit, files_before_manifest (parts renamed, nothing switched),
#      files_after_switch (switched, run manifest not written) and after_sink_commit
#      (switched, the state store never heard): each leaves old or new complete; the resumed
#      run completes with the new data, without duplicates, and removes the replaced parts;
#   3. kill -9 at random moments of a replace run (slowed by a sleep failpoint): the data set
#      is old or new at every kill; then it completes;
#   4. a paused replace run publishes nothing; resumed, it publishes the whole new input.
. "$(dirname "$0")/lib.sh"
. "$FERRY_SRC/tests/tools/replace_lib.sh"

read_table() { # TABLE: the files the data set lists for TABLE, checked, as DuckDB reads them
  local t=$1 files p bytes crc list
  [ -f out/_manifest.json ] || { echo "NO-DATASET"; return; }
  files=$(jq -r --arg t "$t" '.files[] | select(.table == $t) | "\(.path) \(.bytes) \(.crc32c)"' out/_manifest.json |
  while read -r p bytes crc; do
    [ -f "out/$p" ] || { echo "MISSING $p"; continue; }
    [ "$(stat -c %s "out/$p")" = "$bytes" ] || echo "SIZE $p"
    [ "$(crc32c "out/$p")" = "$crc" ] || echo "CRC $p"
    echo "$p"
  done)
  case "$files" in *MISSING*|*SIZE*|*CRC*) echo "BROKEN: $files"; return ;; esac
  [ -n "$files" ] || { echo "EMPTY"; return; }
  list=$(printf "'out/%s'," $files)
  duck_rows "${list%,}"
}
check_listed() { # WHAT: no part of t that the data set does not list, no temporary file
  [ "$(find out/t -name 'part-*' | wc -l)" = "$(jq '[.files[] | select(.table == "t")] | length' out/_manifest.json)" ] \
    || fail "$1: parts no manifest lists were left: $(find out/t -name 'part-*')"
  [ -z "$(find out -name '.tmp-*')" ] || fail "$1: temporary files left: $(find out -name '.tmp-*')"
}

replace_inputs 50 3000 4500
pipeline() { # FILE NAME TABLE-RESOURCE WRITE [BATCH]
  cat > "$1" <<EOF
version: 1
name: $2
source:
  type: files
  resources:
    - {table: $3, path: in/$3.csv, schema: {id: int64, v: utf8, n: int64}}
sink: {type: files, path: out/, format: parquet, write: $4, part_rows: 1000}
batch: {rows: ${5:-500}}
EOF
}
pipeline u.yaml keep-u u append
pipeline t.yaml replace-t t replace

# ---- 1. append u, then replace t twice ----------------------------------------------------------
replace_twice
pass "replace: the new input replaces table t whole, table u of another pipeline is kept"

# ---- 2. crashes at every step of the commit -----------------------------------------------------
replace_crashes files_before_manifest files_after_switch
pass "replace: a crash at every step of the commit leaves the old or the new complete set; the resumed run publishes the new one"

# ---- 3. kill -9 at random moments ---------------------------------------------------------------
replace_kills 6 30000 15
pass "replace: kill -9 $KILLS times mid-run, the data set was always one complete input"

# ---- 4. pause: nothing published, the resumed run publishes everything -----------------------------
gen in/t.csv 40000 paused
expected in/t.csv > want-paused
FERRY_FAILPOINTS='after_sink_apply=sleep(50)' "$FERRY_BIN" run t.yaml > pause.log 2>&1 &
pid=$!
sleep 1
kill -INT "$pid" 2>/dev/null || true
set +e
wait "$pid"
rc=$?
set -e
state=$(ferry runs --pipeline replace-t --json | jq -r '.[0].state')
[ "$state" = paused ] || fail "SIGINT should pause the run (state $state, exit $rc): $(cat pause.log)"
is_one_of "paused" t want-big
expect_exit 0 ferry run t.yaml
printf '%s' "$OUT" | grep -q resuming || fail "the paused run should resume: $OUT"
is_one_of "resumed after pause" t want-paused
pass "replace: a paused run publishes nothing; resumed, it publishes the whole new input"
