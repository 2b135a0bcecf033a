#!/usr/bin/env bash
# shared: s3
# labels: asan smoke
# The s3 sink end to end against s3rver (a real S3-compatible HTTP server that checks SigV4
# signatures) on loopback; the objects are read back with an independent signed client (the
# `aws4` npm package), never with ferry:
#   1. sample -> s3 csv / jsonl / parquet: only the objects the run's manifest lists, compared
#      with the same sample copied into sqlite; every listed object's size and CRC32-C checked
#      against its bytes; no object under the run that the manifest does not list;
#   2. a part above multipart_chunk goes up as a multipart upload, same checks;
#   3. a crash before the commit and one just before the manifest: nothing published; the next
#      attempt deletes the leftovers and publishes exactly the listed objects; an error before
#      the manifest (no crash): abort deletes what the attempt uploaded;
#   4. a proxy answering every 3rd request with 503 SlowDown: retries, the run completes, equal data;
#   5. a wrong secret: one clear error, the secret never printed;
#   6. bad sink keys: a config error naming the key, before any request.
. "$(dirname "$0")/lib.sh"
. "$FERRY_SRC/tests/s3/s3.sh"
ROWS=${ROWS:-3000}
s3_have || fail "node and tests/tools/node_modules (s3rver, aws4) are needed: run scripts/install-deps.sh"
export S3_KEY=S3RVER S3_SECRET=S3RVER AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER
s3_start lake

s3_pipeline() { # FILE NAME ROWS ENDPOINT SINK_YAML...
  local file=$1 name=$2 rows=$3 ep=$4; shift 4
  sample_pipeline "$file" "$name" "$rows" "type: s3" "bucket: $S3_BUCKET" "endpoint: \"$ep\"" \
    "path_style: true" "access_key_id: env:S3_KEY" "secret_access_key: env:S3_SECRET" "$@"
}


# fetch PREFIX RUN DIR: downloads the run's manifest and every object it lists into DIR, checks
# sizes and CRC32-C, and that no object under PREFIX/*/run=RUN/ is left unlisted.
fetch() {
  local prefix=$1 run=$2 dir=$3 key bytes crc listed stored
  mkdir -p "$dir"
  s3c "$S3_BUCKET" get "$prefix/_runs/run=$run/_manifest.json" > "$dir/_manifest.json" \
    || fail "no manifest for run $run under $prefix"
  jq -r '.objects[] | "\(.key) \(.bytes) \(.crc32c)"' "$dir/_manifest.json" > "$dir/listed.txt"
  local missing
  # shellcheck disable=SC2046
  missing=$(s3c "$S3_BUCKET" getmany "$dir" $(cut -d' ' -f1 "$dir/listed.txt")) ||
    fail "listed object $missing cannot be read"
  while read -r key bytes crc; do
    [ "$(stat -c %s "$dir/$key")" = "$bytes" ] || fail "$key: size differs from the manifest"
    [ "$(crc32c "$dir/$key")" = "$crc" ] || fail "$key: CRC32-C differs from the manifest"
  done < "$dir/listed.txt"
  listed=$(cut -d' ' -f1 "$dir/listed.txt" | sort)
  stored=$(s3c "$S3_BUCKET" list "$prefix/" | grep "/run=$run/attempt=" | sort || true)
  [ "$listed" = "$stored" ] || fail "objects under run $run differ from its manifest: listed [$listed] stored [$stored]"
}

objects() { # table in the manifest in DIR -> local paths of its objects
  jq -r --arg t "$2" '.objects[] | select(.table == $t) | .key' "$1/_manifest.json" | sed "s|^|$1/|"
}

# ---- reference: the same sample in sqlite ----------------------------------------------------
{
  echo "version: 1"; echo "name: ref"
  echo "source: {type: sample, rows: $ROWS, seed: 7, resources: [{table: orders, mode: full}, {table: users, mode: full}]}"
  echo "sink: {type: sqlite, path: ref.db, write: append}"
} > ref.yaml
expect_exit 0 ferry run ref.yaml

CSV_SIDE="SELECT CAST(id AS INTEGER), CAST(customer_id AS INTEGER), status, CAST(quantity AS INTEGER),
  amount, CAST(NULLIF(discount, '') AS REAL), CASE express WHEN 'true' THEN 1 WHEN 'false' THEN 0 END,
  note, strftime('%Y-%m-%d %H:%M:%f', substr(created_at, 1, length(created_at) - 3)) FROM main.c_orders"
REF_SIDE="SELECT id, customer_id, status, quantity, amount, discount, express, coalesce(note, ''),
  strftime('%Y-%m-%d %H:%M:%f', created_at) FROM r.orders"
csv_equal() { # DIR DB ROWS: imports the listed orders CSV objects and compares with the sample
  local dir=$1 db=$2 rows=$3 first=1 p d1 d2
  for p in $(objects "$dir" orders); do
    if [ $first = 1 ]; then q "$db" ".import --csv $p c_orders"; first=0
    else q "$db" ".import --csv --skip 1 $p c_orders"; fi
  done
  [ "$(q "$db" 'SELECT count(*) FROM c_orders')" = "$rows" ] || fail "$dir: orders row count"
  d1=$(q "$db" "ATTACH 'ref.db' AS r; SELECT count(*) FROM ($CSV_SIDE EXCEPT $REF_SIDE)")
  d2=$(q "$db" "ATTACH 'ref.db' AS r; SELECT count(*) FROM ($REF_SIDE EXCEPT $CSV_SIDE)")
  [ "$d1" = 0 ] && [ "$d2" = 0 ] || fail "$dir: CSV objects differ from the sample: $d1 / $d2 rows"
}

# ---- 1. sample -> s3 csv, jsonl, parquet --------------------------------------------------------
s3_pipeline csv.yaml to-csv "$ROWS" "$S3_ENDPOINT" "prefix: csv" "format: csv" "part_rows: 1000"
expect_exit 0 ferry run csv.yaml --json
run=$(json_field "$OUT" '.run_id')
fetch csv "$run" got-csv
[ "$(jq '.rows' got-csv/_manifest.json)" = $((2 * ROWS)) ] || fail "csv manifest rows"
[ "$(objects got-csv orders | wc -l)" -ge 3 ] || fail "part_rows: 1000 should make several objects"
csv_equal got-csv imp.db "$ROWS"
pass "sample -> s3 csv: the listed objects equal the sample; sizes and CRC32-C hold; nothing unlisted"

s3_pipeline jsonl.yaml to-jsonl "$ROWS" "$S3_ENDPOINT" "prefix: js" "format: jsonl"
expect_exit 0 ferry run jsonl.yaml --json
run=$(json_field "$OUT" '.run_id')
fetch js "$run" got-js
# shellcheck disable=SC2046
jq -r '[.id, .customer_id, .status, .quantity, .amount, (.discount | tostring),
        (if .express then 1 else 0 end), (.note // "<NULL>"), .created_at[0:19]] | @tsv' \
  $(objects got-js orders) | sort > jq_orders.tsv
q ref.db "SELECT json_object('id', id, 'customer_id', customer_id, 'status', status,
  'quantity', quantity, 'amount', amount, 'discount', discount, 'express', express, 'note', note,
  'created_at', replace(substr(created_at, 1, 23), ' ', 'T')) FROM orders" \
  | jq -r '[.id, .customer_id, .status, .quantity, .amount, (.discount | tostring), .express,
           (.note // "<NULL>"), .created_at[0:19]] | @tsv' | sort > ref_orders.tsv
diff -q jq_orders.tsv ref_orders.tsv >/dev/null || fail "s3 jsonl differs from the sample"
[ "$(wc -l < jq_orders.tsv)" = "$ROWS" ] || fail "jsonl row count"
pass "sample -> s3 jsonl: jq reads the listed objects equal to the sample"

s3_pipeline pq.yaml to-pq "$ROWS" "$S3_ENDPOINT" "prefix: pq" "format: parquet"
expect_exit 0 ferry run pq.yaml --json
run=$(json_field "$OUT" '.run_id')
fetch pq "$run" got-pq
: > pq_orders.tsv
for p in $(objects got-pq orders); do
  FERRY_READ_SQL='SELECT id, customer_id, status, quantity FROM read_parquet($1)' \
    nodetool "$FERRY_SRC/tests/tools/read_parquet.mjs" "$p" | tail -n +2 | jq -r '@tsv' >> pq_orders.tsv
done
sort -o pq_orders.tsv pq_orders.tsv
q -separator $'\t' ref.db "SELECT id, customer_id, status, quantity FROM orders" | sort > ref_pq.tsv
diff -q pq_orders.tsv ref_pq.tsv >/dev/null || { diff pq_orders.tsv ref_pq.tsv | head -5 >&2; fail "s3 parquet (read by DuckDB) differs from the sample"; }
pass "sample -> s3 parquet: DuckDB reads the listed objects equal to the sample"

# ---- 2. multipart upload ------------------------------------------------------------------------
s3_flaky 0   # a proxy that fails nothing and logs the request lines
s3_pipeline mp.yaml to-mp 60000 "$FLAKY_ENDPOINT" "prefix: mp" "format: csv" "multipart_chunk: 5MiB"
expect_exit 0 ferry run mp.yaml --json
s3_flaky_stop
run=$(json_field "$OUT" '.run_id')
fetch mp "$run" got-mp
big=$(jq '[.objects[] | select(.table == "orders") | .bytes] | max' got-mp/_manifest.json)
[ "$big" -gt $((5 * 1024 * 1024)) ] || fail "the orders object ($big bytes) should exceed one 5 MiB chunk"
[ "$(jq '.rows' got-mp/_manifest.json)" = 120000 ] || fail "multipart manifest rows"
csv_rows() { # FILE...: data records of CSV files with a header (quoted line breaks allowed)
  python3 -c 'import csv,sys; print(sum(sum(1 for _ in csv.reader(open(f, newline=""))) - 1 for f in sys.argv[1:]))' "$@"
}
# shellcheck disable=SC2046
[ "$(csv_rows $(objects got-mp orders))" = 60000 ] || fail "multipart: csv record count"
key=$(jq -r '.objects[] | select(.table == "orders") | .key' got-mp/_manifest.json)
key=${key//=/%3D}   # as the request line has it (URI-encoded)
reqs="$T/flaky.count.requests"
grep -q "^POST /$S3_BUCKET/$key?uploads" "$reqs" || fail "$key: no CreateMultipartUpload"
[ "$(grep -c "^PUT /$S3_BUCKET/$key?partNumber=" "$reqs")" = 2 ] || fail "$key: want 2 UploadPart requests"
grep -q "^POST /$S3_BUCKET/$key?uploadId=" "$reqs" || fail "$key: no CompleteMultipartUpload"
pass "a part above multipart_chunk: multipart upload, size and CRC32-C match the manifest"

# ---- 3. crashes and errors before publishing ----------------------------------------------------
s3_pipeline crash.yaml crash 6000 "$S3_ENDPOINT" "prefix: crash" "format: csv" "part_rows: 1000"
expect_exit 137 env FERRY_FAILPOINTS=before_sink_commit=crash "$FERRY_BIN" run crash.yaml --quiet
[ -z "$(s3c "$S3_BUCKET" list crash/_runs/)" ] || fail "a crash before commit wrote a manifest"
[ -n "$(s3c "$S3_BUCKET" list crash/ | grep '/attempt=')" ] || fail "the crashed attempt should have left objects"
expect_exit 137 env FERRY_FAILPOINTS=s3_before_manifest=crash "$FERRY_BIN" run crash.yaml --quiet
[ -z "$(s3c "$S3_BUCKET" list crash/_runs/)" ] || fail "no manifest before the failpoint"
expect_exit 0 ferry run crash.yaml --json
json_field "$OUT" '.state' | grep -qx completed || fail "resume after the crashes: $OUT"
run=$(json_field "$OUT" '.run_id')
fetch crash "$run" got-crash   # also: no leftover object of the crashed attempts
[ "$(jq '.rows' got-crash/_manifest.json)" = 12000 ] || fail "resumed run: manifest rows"
# shellcheck disable=SC2046
n=$(csv_rows $(objects got-crash orders))
[ "$n" = 6000 ] || fail "resumed run: $n orders rows in the listed objects"

s3_pipeline err.yaml err 3000 "$S3_ENDPOINT" "prefix: err" "format: csv" "part_rows: 1000"
expect_exit 1 env FERRY_FAILPOINTS=s3_before_manifest=error "$FERRY_BIN" run err.yaml --quiet
[ -z "$(s3c "$S3_BUCKET" list err/)" ] || fail "abort should delete the attempt's objects: $(s3c "$S3_BUCKET" list err/)"
pass "crash before commit / before the manifest: nothing published, leftovers removed; abort deletes uploads"

# ---- 4. a store that throttles every 3rd request ------------------------------------------------
s3_flaky 3
s3_pipeline flaky.yaml flaky "$ROWS" "$FLAKY_ENDPOINT" "prefix: flaky" "format: csv" "part_rows: 500"
expect_exit 0 env FERRY_LOG=info "$FERRY_BIN" run flaky.yaml --json
run=$(json_field "$OUT" '.run_id')
s3_flaky_stop
read -r forwarded failed < "$T/flaky.count"
[ "$failed" -ge 3 ] || fail "the proxy should have failed some requests ($forwarded forwarded, $failed failed)"
printf '%s' "$OUT" | grep -q 'retry' || fail "retries should be logged at info: $OUT"
fetch flaky "$run" got-flaky
csv_equal got-flaky flaky.db "$ROWS"
pass "503 SlowDown on every 3rd request: $failed retried, the data arrives equal"

# ---- 5. a wrong secret --------------------------------------------------------------------------
export WRONG_SECRET='not-the-secret-9f8e7d'
s3_pipeline wrong.yaml wrong 100 "$S3_ENDPOINT" "prefix: wrong" "format: csv"
sed -i 's/env:S3_SECRET/env:WRONG_SECRET/' wrong.yaml
set +e
OUT=$("$FERRY_BIN" run wrong.yaml 2>&1)
rc=$?
set -e
[ "$rc" != 0 ] || fail "a wrong secret should fail the run"
printf '%s' "$OUT" | grep -q 'SignatureDoesNotMatch' || fail "the error should say the signature does not match: $OUT"
printf '%s' "$OUT" | grep -q 'secret_access_key' || fail "the error should point at the credentials: $OUT"
if printf '%s' "$OUT" | grep -q "$WRONG_SECRET"; then fail "the secret was printed: $OUT"; fi
if printf '%s' "$OUT" | grep -qi 'authorization'; then fail "a header value was printed: $OUT"; fi
[ -z "$(s3c "$S3_BUCKET" list wrong/)" ] || fail "a failed run should leave nothing"
pass "a wrong secret: one clear error, the secret never printed"

# ---- 6. bad sink keys ---------------------------------------------------------------------------
bad() { # WANT_IN_MESSAGE SED_EXPR
  s3_pipeline bad.yaml bad 10 "$S3_ENDPOINT" "prefix: bad" "format: csv"
  sed -i "$2" bad.yaml
  expect_exit 2 ferry run bad.yaml
  printf '%s' "$OUT" | grep -q -- "$1" || fail "bad config: want \"$1\" in: $OUT"
}
bad 'format' 's/format: csv/format: avro/'
bad 'endpoint' 's|endpoint: .*|endpoint: "ftp://127.0.0.1:1"|'
bad 'multipart_chunk' 's/format: csv/format: csv\n  multipart_chunk: 1MiB/'
bad 'secret_access_key' 's/env:S3_SECRET/plain-secret-value/'
if printf '%s' "$OUT" | grep -q 'plain-secret-value'; then fail "a plain secret was echoed: $OUT"; fi
bad 'bucket' "s/bucket: $S3_BUCKET/bucket: Bad_Bucket/"
[ -z "$(s3c "$S3_BUCKET" list bad/)" ] || fail "a config error should send nothing"
pass "bad sink keys: a config error naming the key, nothing sent"
