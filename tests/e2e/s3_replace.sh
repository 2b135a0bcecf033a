#!/usr/bin/env bash
# shared: s3
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
. "$FERRY_SRC/tests/tools/replace_lib.sh"

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
  bucket: $S3_BUCKET
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
  local t=$1 d key bytes crc list="" missing
  d=$(mktemp -d "$T/fetch.XXXXXX")
  s3c "$S3_BUCKET" get lake/raw/_manifest.json > "$d/m.json" 2>/dev/null || { echo "NO-DATASET"; return; }
  jq -r --arg t "$t" '.objects[] | select(.table == $t) | "\(.key) \(.bytes) \(.crc32c)"' "$d/m.json" > "$d/objects"
  # every listed object in one client process (a node start per object made this test slow)
  # shellcheck disable=SC2046
  missing=$(s3c "$S3_BUCKET" getmany "$d" $(awk '{print $1}' "$d/objects") 2>/dev/null) ||
    { echo "BROKEN: $missing missing"; return; }
  while read -r key bytes crc; do
    [ "$(stat -c %s "$d/$key")" = "$bytes" ] || { echo "BROKEN: $key size"; return; }
    [ "$(crc32c "$d/$key")" = "$crc" ] || { echo "BROKEN: $key crc"; return; }
    list="$list'$d/$key',"
  done < "$d/objects"
  [ -n "$list" ] || { echo "EMPTY"; return; }
  duck_rows "${list%,}"
}
check_listed() { # WHAT: every object under lake/raw/t/ is listed by the data set manifest
  local listed stored
  listed=$(s3c "$S3_BUCKET" get lake/raw/_manifest.json | jq -r '.objects[] | select(.table == "t") | .key' | sort)
  stored=$(s3c "$S3_BUCKET" list lake/raw/t/ | sort || true)
  [ "$listed" = "$stored" ] || fail "$1: objects of t differ from the data set: listed [$listed] stored [$stored]"
}

replace_inputs 40 2500 3500
pipeline u.yaml s3-keep-u u append
pipeline t.yaml s3-replace-t t replace

# ---- 1 -----------------------------------------------------------------------------------------
replace_twice
[ "$(s3c "$S3_BUCKET" list lake/raw/_runs/ | grep -c _manifest.json)" = 2 ] \
  || fail "the replaced run's manifest should be deleted: $(s3c "$S3_BUCKET" list lake/raw/_runs/)"
pass "s3 replace: the new input replaces table t whole, table u is kept, replaced objects deleted"

# ---- 2 -----------------------------------------------------------------------------------------
replace_crashes s3_before_manifest s3_after_switch
pass "s3 replace: a crash at every step of the commit leaves the old or the new complete set"

# ---- 3 -----------------------------------------------------------------------------------------
replace_kills 4 20000 20
pass "s3 replace: kill -9 $KILLS times mid-run, the data set was always one complete input"
