# tests/tools/replace_lib.sh - what the `write: replace` tests of the lake sinks share
# (tests/e2e/files_replace.sh, tests/e2e/s3_replace.sh); sourced after tests/e2e/lib.sh, never
# run on its own. Tables t (replaced) and u (appended by another pipeline, must be kept) come
# from CSV files in/<table>.csv with columns id,v,n through the pipelines t.yaml and u.yaml.
# The test defines, before calling the steps:
#   read_table TABLE   the rows ("id|v|n", sorted) as an independent reader reads the parts
#                      the data set manifest lists (each checked: exists, size, CRC32-C), or
#                      a NO-DATASET / BROKEN / EMPTY marker;
#   check_listed WHAT  fails unless every part of table t is listed by the data set manifest.
command -v node >/dev/null || fail "node is required (scripts/install-deps.sh)"
[ -d "$FERRY_SRC/tests/tools/node_modules" ] || fail "tests/tools/node_modules missing: npm ci --prefix tests/tools"
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
expected() { tail -n +2 "$1" | tr ',' '|' | sort; } # CSV -> "id|v|n" lines sorted

duck_rows() { # 'FILE','FILE',... -> "id|v|n" lines sorted, as DuckDB reads those Parquet files
  nodetool "$DUCK" "SELECT id, v, n FROM read_parquet([$1])" | jq -r '"\(.[0])|\(.[1])|\(.[2])"' | sort
}

is_one_of() { # WHAT TABLE EXPECTED_FILES...: the table equals one of them
  local what=$1 t=$2; shift 2
  read_table "$t" > got.txt
  for e in "$@"; do cmp -s got.txt "$e" && return 0; done
  fail "$what: table $t is neither complete input: $(head -c 300 got.txt) ($(wc -l < got.txt) lines)"
}

replace_inputs() { # U_ROWS OLD_ROWS NEW_ROWS: in/u.csv, old.csv, new.csv and their want-* files
  mkdir -p in
  gen in/u.csv "$1" keep
  gen old.csv "$2" old
  gen new.csv "$3" new
  expected old.csv > want-old
  expected new.csv > want-new
  expected in/u.csv > want-u
}

replace_twice() { # append u, then replace t with old.csv and with new.csv: t is each whole, u kept
  expect_exit 0 ferry run u.yaml
  cp old.csv in/t.csv
  expect_exit 0 ferry run t.yaml
  is_one_of "first replace" t want-old
  is_one_of "first replace" u want-u
  cp new.csv in/t.csv
  expect_exit 0 ferry run t.yaml
  is_one_of "second replace" t want-new
  is_one_of "second replace" u want-u
  check_listed "second replace"
}

# replace_crashes BEFORE_MANIFEST AFTER_SWITCH: a crash at each step of the commit
# (before_sink_commit, the sink's BEFORE_MANIFEST and AFTER_SWITCH failpoints, after_sink_commit)
# leaves the previous input (before the switch) or the new one (after it), whole; the resumed
# run publishes the new one and leaves nothing unlisted.
replace_crashes() {
  local before=$1 tag=0 fp rc
  for fp in before_sink_commit "$1" "$2" after_sink_commit; do
    tag=$((tag + 1))
    gen in/t.csv $((2000 + tag * 100)) "crash$tag"
    expected in/t.csv > "want-$fp"
    set +e
    FERRY_FAILPOINTS=$fp=crash "$FERRY_BIN" run t.yaml > crash.log 2>&1
    rc=$?
    set -e
    [ "$rc" = 137 ] || fail "$fp: the failpoint should crash the run (exit $rc): $(cat crash.log)"
    if [ "$fp" = before_sink_commit ] || [ "$fp" = "$before" ]; then
      is_one_of "$fp (crashed)" t want-new
    else
      is_one_of "$fp (crashed)" t "want-$fp"
    fi
    is_one_of "$fp (crashed)" u want-u
    expect_exit 0 ferry run t.yaml
    printf '%s' "$OUT" | grep -q resuming || fail "$fp: the next run should resume: $OUT"
    is_one_of "$fp (resumed)" t "want-$fp"
    is_one_of "$fp (resumed)" u want-u
    check_listed "$fp (resumed)"
    cp "want-$fp" want-new
  done
}

# replace_kills TIMES ROWS SLEEP_MS: kill -9 at random moments of a replace run of ROWS rows
# (each apply slowed by SLEEP_MS): the data set is the previous or the new input at every
# kill; the next run completes with the new one. Sets KILLS.
replace_kills() {
  local times=$1 i pid
  gen in/t.csv "$2" big
  expected in/t.csv > want-big
  KILLS=0
  for i in $(seq 1 "$times"); do
    FERRY_FAILPOINTS="after_sink_apply=sleep($3)" "$FERRY_BIN" run t.yaml > kill.log 2>&1 &
    pid=$!
    sleep "0.$((RANDOM % 9 + 1))"
    kill -9 "$pid" 2>/dev/null && KILLS=$((KILLS + 1)) || true
    wait "$pid" 2>/dev/null || true
    is_one_of "kill -9 #$i" t want-new want-big
    is_one_of "kill -9 #$i" u want-u
  done
  [ "$KILLS" -ge 1 ] || fail "no run was killed"
  expect_exit 0 ferry run t.yaml
  is_one_of "after the kills" t want-big
  check_listed "after the kills"
}
