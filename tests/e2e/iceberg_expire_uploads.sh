#!/usr/bin/env bash
# Unfinished multipart uploads on S3: a writer killed mid-file leaves one, which costs storage
# until it is aborted.
#   1. iceberg on an S3 warehouse (s3rver behind tests/s3/server.mjs, which answers
#      ListMultipartUploads / AbortMultipartUpload for the bucket from s3rver's own record of
#      the uploads in progress, one upload per page): a run writes the table, then two runs with
#      a 5 MiB multipart_chunk are killed (failpoint iceberg_upload_part=crash, _exit right after
#      a part went up) mid-file; they are runs of two pipelines (a re-run of the first would
#      resume its run, and the resumed attempt aborts its own dead upload: case 4). The first
#      upload is backdated 2 hours on the server.
#      `expire --older-than 1h` (dry run first: counts, aborts nothing) aborts exactly the old
#      upload and keeps the young one (a writer still running); `--older-than 0s` then aborts
#      the other; a second expire finds none. Uploads are listed with the independent signed
#      client (aws4) and on s3rver's disk; icebird still reads the table's rows.
#   2. a bucket whose store cannot list uploads (s3rver's 501): expire succeeds, aborts nothing,
#      says so in one info line; the upload is still there.
#   3. the s3 sink's sweep (same listing code): a run killed mid-upload (s3_upload_part=crash on
#      the 2nd part) is resumed; its begin() aborts the run's unfinished upload.
#   4. the iceberg sink's resume sweep: a run killed mid-upload is re-run (it resumes) next to
#      uploads it must not touch under the same data/ (another killed run of another pipeline,
#      made-up uploads named as another run, as a run whose id starts with ours, and as a
#      foreign writer's file); begin() aborts exactly the killed attempt's upload, the run
#      completes, and icebird reads exactly the source's rows. The plain bucket (no listing):
#      the resumed run completes, says so in one info line, and the upload is left.
. "$(dirname "$0")/lib.sh"
. "$FERRY_SRC/tests/s3/s3.sh"
ROWS=${ROWS:-1000}
. "$FERRY_SRC/tests/tools/iceberg_lib.sh"
s3_have || fail "node and tests/tools/node_modules (s3rver, aws4) are needed: run scripts/install-deps.sh"
export S3_KEY=S3RVER S3_SECRET=S3RVER AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER
S3_UPLOAD_BUCKETS=lake S3_MAX_UPLOADS=1 s3_start lake plain
export S3_ENDPOINT
S3KEYS=("endpoint: \"$S3_ENDPOINT\"" "path_style: true" "access_key_id: env:S3_KEY"
        "secret_access_key: env:S3_SECRET")

# big FILE NAME BUCKET [WAREHOUSE]: one data file of the orders table well above a 5 MiB chunk
big() {
  local wh=${4:-wh}
  {
    echo "version: 1"; echo "name: $2"
    echo "source: {type: sample, rows: 150000, seed: 7, resources: [{table: orders, mode: full}]}"
    echo "sink:"
    for l in "type: iceberg" "warehouse: s3://$3/$wh" "namespace: db" "catalog: sql" \
             "catalog_uri: $T/$3${4:+-$4}.db" "${S3KEYS[@]}" "multipart_chunk: 5MiB" "compression: none" \
             "dictionary: false"; do echo "  $l"; done
    echo "batch: {rows: 10000}"
  } > "$1"
}
# on_disk BUCKET: the upload ids s3rver holds for BUCKET (its own record, not through S3)
on_disk() { ls "$T/s3data/$1/._S3rver_uploads" 2>/dev/null | sort || true; }
uploads() { s3c "$1" uploads wh/db/orders/data/; }
crash_mid_upload() { # PIPELINE
  expect_exit 137 env FERRY_FAILPOINTS=iceberg_upload_part=crash "$FERRY_BIN" run "$1" --quiet
}

# ---- 1. S3 warehouse that lists uploads ------------------------------------------------------------
pipeline small.yaml lake "$ROWS" "type: iceberg" "warehouse: s3://lake/wh" "namespace: db" "catalog: sql" \
  "catalog_uri: $T/lake.db" "${S3KEYS[@]}"
sed -i '/table: users/d' small.yaml
expect_exit 0 ferry run small.yaml --quiet
s3c lake list wh/db/orders/data/ | grep '\.parquet$' | sort > live.txt
[ -s live.txt ] || fail "the first run wrote no data object"
[ -z "$(uploads lake)" ] || fail "a finished run left uploads: $(uploads lake)"

big big.yaml lake-big lake
crash_mid_upload big.yaml
uploads lake > u1.txt
[ "$(wc -l < u1.txt)" = 1 ] || fail "want one unfinished upload after the kill, listed: $(cat u1.txt)"
old_key=$(cut -d' ' -f1 u1.txt) old_id=$(cut -d' ' -f2 u1.txt)
[[ $old_key == wh/db/orders/data/*.parquet ]] || fail "the upload is not a data file of the table: $old_key"
[ "$(on_disk lake)" = "$old_id" ] || fail "s3rver holds [$(on_disk lake)], the listing said $old_id"
ls "$T/s3data/lake/._S3rver_uploads/$old_id" | grep -qx 1 || fail "the killed upload has no part on the server"
touch -d '2 hours ago' "$T/s3data/lake/._S3rver_uploads/$old_id/key"  # initiated 2 h ago
big big2.yaml lake-big2 lake # another run of the same table: a re-run of big.yaml would resume
crash_mid_upload big2.yaml
uploads lake > u2.txt
[ "$(wc -l < u2.txt)" = 2 ] || fail "want two unfinished uploads, listed (one per page): $(cat u2.txt)"
young_id=$(grep -v " $old_id " u2.txt | cut -d' ' -f2)
[ -n "$young_id" ] || fail "no second upload: $(cat u2.txt)"

expect_exit 0 ferry iceberg expire orders --pipeline big.yaml --older-than 0s --dry-run --json
[ "$(json_field "$OUT" .uploads_aborted)" = 2 ] || fail "dry run --older-than 0s (two pages): $OUT"
expect_exit 0 ferry iceberg expire orders --pipeline big.yaml --older-than 1h --dry-run --json
[ "$(json_field "$OUT" .uploads_aborted)" = 1 ] || fail "dry run: $OUT"
uploads lake | cmp -s - u2.txt || fail "a dry run aborted uploads: $(uploads lake)"

expect_exit 0 ferry iceberg expire orders --pipeline big.yaml --older-than 1h
grep -qF "unfinished upload s3://lake/$old_key (upload id $old_id)" <<< "$OUT" || fail "the aborted upload is not named: $OUT"
grep -q "; 1 unfinished upload aborted" <<< "$OUT" || fail "expire's summary: $OUT"
[ "$(uploads lake | cut -d' ' -f2)" = "$young_id" ] || fail "after --older-than 1h want only the young upload, listed: $(uploads lake)"
[ "$(on_disk lake)" = "$young_id" ] || fail "s3rver still holds [$(on_disk lake)]"
pass "expire aborts the unfinished upload initiated before the cut-off and keeps the younger one"

sleep 1.1 # the young upload is now older than --older-than 0s in whole seconds too
expect_exit 0 ferry iceberg expire orders --pipeline big.yaml --older-than 0s --json
[ "$(json_field "$OUT" .uploads_aborted)" = 1 ] || fail "expire --older-than 0s: $OUT"
[ -z "$(uploads lake)" ] || fail "uploads left: $(uploads lake)"
[ -z "$(on_disk lake)" ] || fail "s3rver still holds uploads: $(on_disk lake)"
expect_exit 0 ferry iceberg expire orders --pipeline big.yaml --older-than 0s --json
[ "$(json_field "$OUT" .uploads_aborted)" = 0 ] && [ "$(json_field "$OUT" .files_deleted)" = 0 ] \
  || fail "a second expire: $OUT"
s3c lake list wh/db/orders/data/ | grep '\.parquet$' | sort | cmp -s - live.txt \
  || fail "the table's data objects changed: $(s3c lake list wh/db/orders/data/)"
loc=$(q "$T/lake.db" "SELECT metadata_location FROM iceberg_tables WHERE table_namespace = 'db' AND table_name = 'orders'")
nodetool "$READ" "s3://lake/wh" db orders "$(basename "$loc")" > ib.jsonl || fail "icebird could not read db.orders"
python3 compare.py "$T/ref.db" icebird ib.jsonl 1 || fail "icebird rows differ from the source"
pass "expire --older-than 0s aborts the other, a second expire none; the table reads the same"

# ---- 2. a store that cannot list uploads --------------------------------------------------------------
sed -e 's|s3://lake/wh|s3://plain/wh|' -e "s|$T/lake.db|$T/plain.db|" small.yaml > psmall.yaml
expect_exit 0 ferry run psmall.yaml --quiet
big pbig.yaml plain-big plain
crash_mid_upload pbig.yaml
[ "$(on_disk plain | wc -l)" = 1 ] || fail "want one unfinished upload in the plain bucket: $(on_disk plain)"
expect_exit 0 env FERRY_LOG=info "$FERRY_BIN" iceberg expire orders --pipeline pbig.yaml --older-than 0s --json
[ "$(json_field "$OUT" .uploads_aborted)" = 0 ] || fail "plain bucket: $OUT"
[ "$(grep -c "cannot list the multipart uploads under s3://plain/wh/db/orders/data/" <<< "$OUT")" = 1 ] \
  || fail "want one info line about the listing: $OUT"
grep -q "ferry info: .*cannot list the multipart uploads" <<< "$OUT" || fail "the line is not at info level: $OUT"
! grep -q "ferry \(warning\|error\)" <<< "$OUT" || fail "a store that cannot list uploads is not an error: $OUT"
expect_exit 0 ferry iceberg expire orders --pipeline pbig.yaml --older-than 0s
grep -q "^db.orders: 0 snapshots expired" <<< "$OUT" && ! grep -q "upload" <<< "$OUT" \
  || fail "where uploads cannot be listed the summary should not count them: $OUT"
[ "$(on_disk plain | wc -l)" = 1 ] || fail "the upload should be left alone"
pass "a store that cannot list uploads: expire goes on, one info line, nothing aborted"

plain_id=$(on_disk plain)
expect_exit 0 env FERRY_LOG=info "$FERRY_BIN" run pbig.yaml
grep -q "^resuming run " <<< "$OUT" || fail "the re-run of the killed plain-bucket run did not resume it: $OUT"
[ "$(grep -c "iceberg sink: cannot list the multipart uploads under s3://plain/wh/db/orders/data/" <<< "$OUT")" = 1 ] \
  || fail "want one info line from the sink's sweep: $OUT"
grep -q "ferry info: iceberg sink: cannot list the multipart uploads" <<< "$OUT" || fail "the sink's line is not at info level: $OUT"
! grep -q "ferry \(warning\|error\)" <<< "$OUT" || fail "a store that cannot list uploads is not an error for the sink: $OUT"
[ "$(q "$FERRY_STATE" "SELECT state FROM runs WHERE pipeline = 'plain-big'")" = completed ] \
  || fail "the resumed plain-bucket run: $(q "$FERRY_STATE" "SELECT id, state, error FROM runs WHERE pipeline = 'plain-big'")"
[ "$(on_disk plain)" = "$plain_id" ] || fail "the unlistable upload $plain_id should be left, s3rver holds [$(on_disk plain)]"
pass "a store that cannot list uploads: the resumed run completes, one info line, the upload is left"

# ---- 3. the s3 sink's sweep of its run's uploads ------------------------------------------------------
sample_pipeline s3.yaml s3mp 60000 "type: s3" "bucket: lake" "${S3KEYS[@]}" "prefix: mp" "format: csv" \
  "multipart_chunk: 5MiB"
sed -i '/table: users/d' s3.yaml
expect_exit 137 env FERRY_FAILPOINTS=s3_upload_part=crash@2 "$FERRY_BIN" run s3.yaml --quiet
s3c lake uploads mp/ > s1.txt
[ "$(wc -l < s1.txt)" = 1 ] && grep -q "^mp/orders/run=" s1.txt || fail "want the run's unfinished upload: $(cat s1.txt)"
expect_exit 0 ferry run s3.yaml --json
json_field "$OUT" .state | grep -qx completed || fail "the resumed run: $OUT"
[ -z "$(s3c lake uploads mp/)" ] || fail "the resumed run left uploads: $(s3c lake uploads mp/)"
[ -z "$(on_disk lake)" ] || fail "s3rver still holds uploads: $(on_disk lake)"
pass "the s3 sink's resumed run aborts its killed attempt's unfinished upload"

# ---- 4. the iceberg sink's resume sweep of its run's uploads ------------------------------------------
D=wr/db/orders/data/
big other.yaml resume-other lake wr
crash_mid_upload other.yaml
big me.yaml resume-me lake wr
crash_mid_upload me.yaml
run_id=$(q "$FERRY_STATE" "SELECT id FROM runs WHERE pipeline = 'resume-me'")
[[ $run_id =~ ^[0-9]+$ ]] || fail "no single run of resume-me: [$run_id]"
s3c lake uploads "$D" > r1.txt
[ "$(wc -l < r1.txt)" = 2 ] || fail "want the two killed runs' uploads, listed: $(cat r1.txt)"
me_key=$(grep -E "^${D}[0-9]+-$run_id-1-[^/ ]*\.parquet " r1.txt | cut -d' ' -f1)
me_id=$(grep -E "^${D}[0-9]+-$run_id-1-[^/ ]*\.parquet " r1.txt | cut -d' ' -f2)
[ -n "$me_key" ] && [ -n "$me_id" ] || fail "no upload named as attempt 1 of run $run_id: $(cat r1.txt)"
keep=$(grep -v " $me_id " r1.txt | cut -d' ' -f2)
[ -n "$keep" ] || fail "no upload of the other run: $(cat r1.txt)"
# uploads of other writers under the same data/, made with the independent client
for k in "00000-$((run_id + 1000))-1-0000feed.parquet" "00000-${run_id}7-1-0000beef.parquet" \
         "part-00000-foreign.parquet"; do
  id=$(s3c lake mkupload "$D$k") && [ -n "$id" ] || fail "could not create an upload of $D$k"
  keep+=$'\n'"$id"
done
# one named as a dead attempt of this run in a partition folder: the sweep covers sub-folders
sub_id=$(s3c lake mkupload "${D}k=1/00001-$run_id-1-0000cafe.parquet") && [ -n "$sub_id" ] \
  || fail "could not create the partition folder's upload"
keep=$(sort <<< "$keep")
[ "$(s3c lake uploads "$D" | wc -l)" = 6 ] || fail "want 6 uploads before the resume: $(s3c lake uploads "$D")"

expect_exit 0 env FERRY_LOG=info "$FERRY_BIN" run me.yaml
grep -q "^resuming run $run_id " <<< "$OUT" || fail "the re-run did not resume run $run_id: $OUT"
grep -qF "iceberg sink: aborted the unfinished upload of s3://lake/$me_key (attempt 1 of run $run_id died mid-file)" <<< "$OUT" \
  || fail "the killed attempt's upload is not named: $OUT"
[ "$(grep -c "iceberg sink: aborted the unfinished upload" <<< "$OUT")" = 2 ] \
  || fail "want exactly two uploads aborted (the killed attempt's and the partition folder's): $OUT"
! grep -q "ferry \(warning\|error\)" <<< "$OUT" || fail "the resumed run warned: $OUT"
[ "$(q "$FERRY_STATE" "SELECT state FROM runs WHERE pipeline = 'resume-me'")" = completed ] \
  || fail "the resumed run: $(q "$FERRY_STATE" "SELECT id, state, error FROM runs WHERE pipeline = 'resume-me'")"
left=$(s3c lake uploads "$D" | cut -d' ' -f2 | sort)
[ "$left" = "$keep" ] || fail "after the resume want exactly [$keep] listed, got [$left]"
[ "$(on_disk lake)" = "$keep" ] || fail "after the resume s3rver should hold exactly [$keep], holds [$(on_disk lake)]"
for id in "$me_id" "$sub_id"; do
  [ ! -e "$T/s3data/lake/._S3rver_uploads/$id" ] || fail "upload $id is still on s3rver's disk"
done
{
  echo "version: 1"; echo "name: big-ref"
  echo "source: {type: sample, rows: 150000, seed: 7, resources: [{table: orders, mode: full}]}"
  echo "sink: {type: sqlite, path: $T/big-ref.db}"
} > big-ref.yaml
expect_exit 0 ferry run big-ref.yaml --quiet --state "$T/ref-state.db"
loc=$(q "$T/lake-wr.db" "SELECT metadata_location FROM iceberg_tables WHERE table_namespace = 'db' AND table_name = 'orders'")
nodetool "$READ" "s3://lake/wr" db orders "$(basename "$loc")" > ib4.jsonl || fail "icebird could not read db.orders of s3://lake/wr"
python3 compare.py "$T/big-ref.db" icebird ib4.jsonl 1 || fail "icebird rows of the resumed run differ from the source"
pass "the iceberg sink's resumed run aborts exactly its killed attempt's upload; others stay; rows exact"
