#!/usr/bin/env bash
# `write: replace` into the s3 sink (Parquet) against s3rver on loopback, read back the way a
# reader is told to (docs/connectors.md): <prefix>/_manifest.json lists the whole data set.
# Objects are fetched with the independent signed client (tests/s3), their sizes and CRC32-C
# checked against the manifest, and read by DuckDB; table t must equal the old input or the
# new input, whole, after:
#   1. a first replace over a prefix where another pipeline appended table u (kept), then a
#      second one (the replaced objects and run manifests are deleted);
#   2. crashes at before_sink_commit, s3_before_manifest, s3_after_switch, after_sink_commit;
#      each resumed run publishes the new input without duplicates;
#   3. kill -9 at random moments of a replace run.
. "$(dirname "$0")/lib.sh"
. "$FERRY_SRC/tests/s3/s3.sh"
s3_have || fail "node and tests/tools/node_modules (s3rver, aws4) are needed: run scripts/install-deps.sh"
export S3_KEY=S3RVER S3_SECRET=S3RVER
s3_start lake
DUCK="$FERRY_SRC/tests/tools/duckdb_exec.mjs"

gen() { # FILE ROWS TAG
  python3 - "$@" <<'PY'
import sys
path, rows, tag = sys.argv[1], int(sys.argv[2]), sys.argv[3]
with open(path, 'w') as f:
    f.write('id,v,n\n')
    for i in range(1, rows + 1):
        f.write('%d,%s-%d,%d\n' % (i, tag, i, i * 3))
PY
}
expected() { tail -n +2 "$1" | tr ',' '|' | sort; }

pipeline() { # FILE NAME TABLE WRITE
  cat > "$1" <<EOF
version: 1
name: $2
source:
  type: files
  resources:
    - {table: $3, path: in/$3.csv, schema: {id: int64, v: utf8, n: int64}}
sink:
  type: s3
  bucket: lake
  prefix: lake/raw
  endpoint: "$S3_ENDPOINT"
  path_style: true
  access_key_id: env:S3_KEY
  secret_access_key: env:S3_SECRET
  format: parquet
  write: $4
  part_rows: 1000
batch: {rows: 500}
EOF
}

# read_table TABLE: fetches the data set manifest and TABLE's objects it lists (checked), prints
# the rows as DuckDB reads them ("id|v|n", sorted), or a BROKEN/EMPTY marker.
read_table() {
  local t=$1 d key bytes crc list=""
  d=$(mktemp -d "$T/fetch.XXXXXX")
  s3c lake get lake/raw/_manifest.json > "$d/m.json" 2>/dev/null || { echo "NO-DATASET"; return; }
  while read -r key bytes crc; do
    mkdir -p "$d/$(dirname "$key")"
    s3c lake get "$key" > "$d/$key" 2>/dev/null || { echo "BROKEN: $key missing"; return; }
    [ "$(stat -c %s "$d/$key")" = "$bytes" ] || { echo "BROKEN: $key size"; return; }
    [ "$(crc32c "$d/$key")" = "$crc" ] || { echo "BROKEN: $key crc"; return; }
    list="$list'$d/$key',"
  done < <(jq -r --arg t "$t" '.objects[] | select(.table == $t) | "\(.key) \(.bytes) \(.crc32c)"' "$d/m.json")
  [ -n "$list" ] || { echo "EMPTY"; return; }
  node "$DUCK" "SELECT id, v, n FROM read_parquet([${list%,}])" | jq -r '"\(.[0])|\(.[1])|\(.[2])"' | sort
}
is_one_of() { # WHAT TABLE EXPECTED...
  local what=$1 t=$2; shift 2
  read_table "$t" > got.txt
  for e in "$@"; do cmp -s got.txt "$e" && return 0; done
  fail "$what: table $t is neither complete input: $(head -c 300 got.txt) ($(wc -l < got.txt) lines)"
}
only_listed() { # WHAT: every object under lake/raw/t/ is listed by the data set manifest
  local listed stored
  listed=$(s3c lake get lake/raw/_manifest.json | jq -r '.objects[] | select(.table == "t") | .key' | sort)
  stored=$(s3c lake list lake/raw/t/ | sort || true)
  [ "$listed" = "$stored" ] || fail "$1: objects of t differ from the data set: listed [$listed] stored [$stored]"
}

mkdir -p in
gen in/u.csv 40 keep
gen old.csv 2500 old
gen new.csv 3500 new
expected old.csv > want-old
expected new.csv > want-new
expected in/u.csv > want-u
pipeline u.yaml s3-keep-u u append
pipeline t.yaml s3-replace-t t replace

# ---- 1 -----------------------------------------------------------------------------------------
expect_exit 0 ferry run u.yaml
cp old.csv in/t.csv
expect_exit 0 ferry run t.yaml
is_one_of "first replace" t want-old
is_one_of "first replace" u want-u
cp new.csv in/t.csv
expect_exit 0 ferry run t.yaml
is_one_of "second replace" t want-new
is_one_of "second replace" u want-u
only_listed "second replace"
[ "$(s3c lake list lake/raw/_runs/ | grep -c _manifest.json)" = 2 ] \
  || fail "the replaced run's manifest should be deleted: $(s3c lake list lake/raw/_runs/)"
pass "s3 replace: the new input replaces table t whole, table u is kept, replaced objects deleted"

# ---- 2 -----------------------------------------------------------------------------------------
tag=0
for fp in before_sink_commit s3_before_manifest s3_after_switch after_sink_commit; do
  tag=$((tag + 1))
  gen in/t.csv $((2000 + tag * 100)) "crash$tag"
  expected in/t.csv > want-$fp
  set +e
  FERRY_FAILPOINTS=$fp=crash "$FERRY_BIN" run t.yaml > crash.log 2>&1
  rc=$?
  set -e
  [ "$rc" = 137 ] || fail "$fp: the failpoint should crash the run (exit $rc): $(cat crash.log)"
  case $fp in
    before_sink_commit|s3_before_manifest) is_one_of "$fp (crashed)" t want-new ;;
    *) is_one_of "$fp (crashed)" t "want-$fp" ;;
  esac
  expect_exit 0 ferry run t.yaml
  printf '%s' "$OUT" | grep -q resuming || fail "$fp: the next run should resume: $OUT"
  is_one_of "$fp (resumed)" t "want-$fp"
  is_one_of "$fp (resumed)" u want-u
  only_listed "$fp (resumed)"
  cp "want-$fp" want-new
done
pass "s3 replace: a crash at every step of the commit leaves the old or the new complete set"

# ---- 3 -----------------------------------------------------------------------------------------
gen in/t.csv 20000 big
expected in/t.csv > want-big
kills=0
for i in 1 2 3 4; do
  FERRY_FAILPOINTS='after_sink_apply=sleep(20)' "$FERRY_BIN" run t.yaml > kill.log 2>&1 &
  pid=$!
  sleep "0.$((RANDOM % 9 + 1))"
  kill -9 "$pid" 2>/dev/null && kills=$((kills + 1)) || true
  wait "$pid" 2>/dev/null || true
  is_one_of "kill -9 #$i" t want-new want-big
done
[ "$kills" -ge 1 ] || fail "no run was killed"
expect_exit 0 ferry run t.yaml
is_one_of "after the kills" t want-big
only_listed "after the kills"
pass "s3 replace: kill -9 $kills times mid-run, the data set was always one complete input"
