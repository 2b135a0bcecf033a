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
command -v node >/dev/null || fail "node is required (scripts/install-deps.sh)"
[ -d "$FERRY_SRC/tests/tools/node_modules" ] || fail "tests/tools/node_modules missing"
DUCK="$FERRY_SRC/tests/tools/duckdb_exec.mjs"

gen() { # FILE ROWS TAG: id,v,n
  python3 - "$@" <<'PY'
import sys
path, rows, tag = sys.argv[1], int(sys.argv[2]), sys.argv[3]
with open(path, 'w') as f:
    f.write('id,v,n\n')
    for i in range(1, rows + 1):
        f.write('%d,%s-%d,%d\n' % (i, tag, i, i * 3))
PY
}
expected() { # CSV -> "id|v|n" lines sorted
  tail -n +2 "$1" | tr ',' '|' | sort
}
# dataset TABLE: the files the data set lists for TABLE (each checked: exists, size, CRC32-C).
dataset() {
  local t=$1
  [ -f out/_manifest.json ] || { echo "NO-DATASET"; return; }
  jq -r --arg t "$t" '.files[] | select(.table == $t) | "\(.path) \(.bytes) \(.crc32c)"' out/_manifest.json |
  while read -r p bytes crc; do
    [ -f "out/$p" ] || { echo "MISSING $p"; continue; }
    [ "$(stat -c %s "out/$p")" = "$bytes" ] || echo "SIZE $p"
    [ "$(crc32c "out/$p")" = "$crc" ] || echo "CRC $p"
    echo "$p"
  done
}
read_table() { # TABLE -> "id|v|n" lines sorted, as DuckDB reads the listed files
  local t=$1 files list
  files=$(dataset "$t")
  case "$files" in *MISSING*|*SIZE*|*CRC*|NO-DATASET) echo "BROKEN: $files"; return ;; esac
  [ -n "$files" ] || { echo "EMPTY"; return; }
  list=$(printf "'out/%s'," $files)
  node "$DUCK" "SELECT id, v, n FROM read_parquet([${list%,}])" | jq -r '"\(.[0])|\(.[1])|\(.[2])"' | sort
}
is_one_of() { # WHAT TABLE EXPECTED_FILES...: the table equals one of them
  local what=$1 t=$2 got; shift 2
  read_table "$t" > got.txt
  for e in "$@"; do cmp -s got.txt "$e" && return 0; done
  fail "$what: table $t is neither complete input: $(head -c 300 got.txt) ($(wc -l < got.txt) lines)"
}

mkdir -p in
gen in/u.csv 50 keep
gen old.csv 3000 old
gen new.csv 4500 new
expected old.csv > want-old
expected new.csv > want-new
expected in/u.csv > want-u

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
expect_exit 0 ferry run u.yaml
cp old.csv in/t.csv
expect_exit 0 ferry run t.yaml
is_one_of "first replace" t want-old
is_one_of "first replace" u want-u
cp new.csv in/t.csv
expect_exit 0 ferry run t.yaml
is_one_of "second replace" t want-new
is_one_of "second replace" u want-u
old_parts=$(find out/t -name 'part-*' | wc -l)
[ "$old_parts" = "$(jq '[.files[] | select(.table == "t")] | length' out/_manifest.json)" ] \
  || fail "the replaced parts should be removed: $(find out/t -name 'part-*')"
[ -z "$(find out -name '.tmp-*')" ] || fail "temporary files left: $(find out -name '.tmp-*')"
pass "replace: the new input replaces table t whole, table u of another pipeline is kept"

# ---- 2. crashes at every step of the commit -----------------------------------------------------
tag=0
for fp in before_sink_commit files_before_manifest files_after_switch after_sink_commit; do
  tag=$((tag + 1))
  prev=want-new
  gen in/t.csv $((2000 + tag * 100)) "crash$tag"
  expected in/t.csv > want-$fp
  set +e
  FERRY_FAILPOINTS=$fp=crash "$FERRY_BIN" run t.yaml > crash.log 2>&1
  rc=$?
  set -e
  [ "$rc" = 137 ] || fail "$fp: the failpoint should crash the run (exit $rc): $(cat crash.log)"
  case $fp in
    before_sink_commit|files_before_manifest) is_one_of "$fp (crashed)" t "$prev" ;;
    *) is_one_of "$fp (crashed)" t "want-$fp" ;;
  esac
  is_one_of "$fp (crashed)" u want-u
  expect_exit 0 ferry run t.yaml
  printf '%s' "$OUT" | grep -q resuming || fail "$fp: the next run should resume: $OUT"
  is_one_of "$fp (resumed)" t "want-$fp"
  is_one_of "$fp (resumed)" u want-u
  [ "$(find out/t -name 'part-*' | wc -l)" = "$(jq '[.files[] | select(.table == "t")] | length' out/_manifest.json)" ] \
    || fail "$fp: parts no manifest lists were left: $(find out/t -name 'part-*')"
  cp "want-$fp" want-new
done
pass "replace: a crash at every step of the commit leaves the old or the new complete set; the resumed run publishes the new one"

# ---- 3. kill -9 at random moments ---------------------------------------------------------------
gen in/t.csv 30000 big
expected in/t.csv > want-big
kills=0
for i in 1 2 3 4 5 6; do
  FERRY_FAILPOINTS='after_sink_apply=sleep(15)' "$FERRY_BIN" run t.yaml > kill.log 2>&1 &
  pid=$!
  sleep "0.$((RANDOM % 9 + 1))"
  kill -9 "$pid" 2>/dev/null && kills=$((kills + 1)) || true
  wait "$pid" 2>/dev/null || true
  is_one_of "kill -9 #$i" t want-new want-big
  is_one_of "kill -9 #$i" u want-u
done
[ "$kills" -ge 1 ] || fail "no run was killed"
expect_exit 0 ferry run t.yaml
is_one_of "after the kills" t want-big
pass "replace: kill -9 $kills times mid-run, the data set was always one complete input"

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
