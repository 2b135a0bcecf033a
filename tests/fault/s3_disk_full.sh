#!/usr/bin/env bash
# s3_disk_full: the catalog's disk_full row for the s3 sink. The S3 server (s3rver behind the
# signing front, tests/s3/) keeps its objects on a small tmpfs (root, as CI runs - never
# skipped) that fills up during a 200k-row Parquet copy, so its PUTs and multipart parts fail
# for real (the server answers 500 with the file system's error):
#   - ferry exits non-zero with one error naming the bucket and the object key (s3://bp/...),
#     never the secret; nothing is published (no manifest object);
#   - after the tmpfs is enlarged a plain re-run publishes every row exactly once: the objects
#     its manifest lists, downloaded by the independent signed client, hold each id once
#     (DuckDB), with the size and CRC32-C the manifest records;
#   - the leftovers of the failed attempt are gone (no object under its run that the
#     manifest does not list).
. "$(dirname "$0")/../e2e/lib.sh"
. "$FERRY_SRC/tests/s3/s3.sh"
DUCK="$FERRY_SRC/tests/tools/duckdb_exec.mjs"
[ "$(id -u)" = 0 ] || fail "s3_disk_full needs root to mount a small tmpfs (CI runs as root)"
s3_have || fail "node and tests/tools/node_modules (s3rver, aws4) are needed: run scripts/install-deps.sh"
ROWS=200000

export S3_KEY=S3RVER S3_SECRET=S3RVER

# the server must stop before the mount goes
mount_small "$T/s3data" 3m s3_stop
s3_start bp

export FERRY_STATE="$T/state.db"
cat > p.yaml <<YAML
version: 1
name: s3-full
source: {type: sample, rows: $ROWS, seed: 7, resources: [{table: orders, mode: full}]}
sink: {type: s3, bucket: bp, prefix: lake, format: parquet, max_attempts: 2, endpoint: "$S3_ENDPOINT", path_style: true, access_key_id: env:S3_KEY, secret_access_key: env:S3_SECRET}
batch: {rows: 5000}
YAML
set +e
"$FERRY_BIN" run p.yaml > run.log 2>&1
rc=$?
set -e
[ $rc -ne 0 ] && [ $rc -ne 137 ] || fail "s3 disk full: exit $rc: $(cat run.log)"
grep -Eq "s3://bp/lake/" run.log || fail "s3 disk full: the error does not name the bucket and key: $(cat run.log)"
grep -Eq "HTTP 5[0-9][0-9]" run.log || fail "s3 disk full: the error does not give the server's status: $(cat run.log)"
[ -z "$(s3c bp list lake/ | grep '_manifest.json$' || true)" ] || fail "s3 disk full: a manifest was published"
err_line=$(grep -m1 "s3://bp/lake/" run.log)

mount -o remount,size=256m "$T/s3data"
expect_exit 0 ferry run p.yaml
manifests=$(s3c bp list lake/ | grep -c '_manifest.json$' || true)
[ "$manifests" = 1 ] || fail "s3 disk full: $manifests manifests after the re-run"
m=$(s3c bp list lake/ | grep '_manifest.json$')
s3c bp get "$m" > manifest.json
mkdir -p got
i=0
while read -r key bytes crc; do
  i=$((i + 1))
  s3c bp get "$key" > "got/$i.parquet" || fail "listed object $key cannot be read"
  [ "$(stat -c %s "got/$i.parquet")" = "$bytes" ] || fail "$key: size differs from the manifest"
  [ "$(crc32c "got/$i.parquet")" = "$crc" ] || fail "$key: CRC32-C differs from the manifest"
done < <(jq -r '.objects[] | "\(.key) \(.bytes) \(.crc32c)"' manifest.json)
[ $i -gt 0 ] || fail "s3 disk full: the manifest lists no object"
got=$(nodetool "$DUCK" "SELECT count(*), count(DISTINCT id), min(id), max(id) FROM read_parquet('$T/got/*.parquet')" | jq -r 'map(tostring) | join(" ")')
[ "$got" = "$ROWS $ROWS 1 $ROWS" ] || fail "s3 disk full: published objects hold [$got] (count distinct min max), want [$ROWS $ROWS 1 $ROWS]"
listed=$(jq -r '.objects[].key' manifest.json | sort)
stored=$(s3c bp list lake/ | grep -v '_manifest.json$' | grep -v '/_runs/' | sort || true)
[ "$listed" = "$stored" ] || fail "s3 disk full: objects not listed by the manifest remain: listed [$listed] stored [$stored]"
pass "s3 sink on a full server disk: [$err_line]; nothing published; re-run after enlarging publishes $ROWS rows once, no leftovers"
