#!/usr/bin/env bash
# shared: s3
# labels: asan
# The s3 source (Parquet objects by ranged GETs) against the S3 test server:
#   1. DuckDB Parquet files (snappy v1 and zstd v2 pages, several row groups) uploaded under a
#      prefix next to objects the glob excludes; the s3 source through a proxy that fails
#      every 4th request with 503 (retries) reads them into SQLite equal to the files
#      source's reading of the same files (tests/e2e/parquet_source.sh checks that one
#      against DuckDB), and only the matching objects; one listing, and no range of an
#      object fetched twice (footers kept from discovery and plan, groups fetched ahead);
#   2. selected columns only; a shard of several row groups killed in its middle (after a
#      batch that crossed groups) and resumed: rows equal, none twice;
#   3. a truncated object, a corrupt footer, a footer that lies about its column chunks, an
#      object deleted between the frozen plan and its read (a run failed at its first sink
#      write, the object deleted, the run resumed): one error naming the object, nothing
#      written (exit 1; 7 for the deleted one); no matching object:
#      an error naming the bucket and prefix; a declared schema on Parquet objects: refused.
# CSV and JSON Lines objects: tests/e2e/s3_source_text.sh.
. "$(dirname "$0")/lib.sh"
. "$FERRY_SRC/tests/s3/s3.sh"
DUCK="$FERRY_SRC/tests/tools/duckdb_exec.mjs"
s3_have || fail "node and tests/tools/node_modules (s3rver, aws4) are needed: run scripts/install-deps.sh"
export S3_KEY=S3RVER S3_SECRET=S3RVER AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER
s3_start lake
s3_flaky 4

sel() { # FROM TO
  echo "SELECT i::BIGINT AS id, CASE WHEN i % 7 = 0 THEN NULL ELSE 'v' || (i % 91) END AS s,
 (i / 3.0)::DOUBLE AS f, (i * 1.25)::DECIMAL(18,2) AS d, (18446744073709551615 - i)::UBIGINT AS ubi,
 TIMESTAMPTZ '2024-01-01 00:00:00+00' + to_microseconds(i::BIGINT * 777) AS ts,
 md5(i::VARCHAR)::UUID AS u, unhex(printf('%04x', i % 65536)) AS bl FROM range($1, $2) t(i)"
}
mkdir data
nodetool "$DUCK" "COPY ($(sel 0 3000)) TO 'data/p1.parquet' (FORMAT parquet, COMPRESSION snappy, ROW_GROUP_SIZE 1000);
 COPY ($(sel 3000 7000)) TO 'data/p2.parquet' (FORMAT parquet, COMPRESSION zstd, PARQUET_VERSION V2, ROW_GROUP_SIZE 1500)" \
  >/dev/null || fail "DuckDB could not write the files"
s3c "$S3_BUCKET" put in/2024/p1.parquet data/p1.parquet
s3c "$S3_BUCKET" put in/2025/p2.parquet data/p2.parquet
s3c "$S3_BUCKET" put in/2025/notes.txt data/p1.parquet   # excluded by the glob
s3c "$S3_BUCKET" put other/p3.parquet data/p1.parquet    # outside the prefix

s3_pipe() { # FILE NAME ENDPOINT DB RESOURCE_EXTRA [SOURCE_EXTRA]
  cat > "$1" <<EOF
version: 1
name: $2
source:
  type: s3
  bucket: $S3_BUCKET
  endpoint: "$3"
  path_style: true
  access_key_id: env:S3_KEY
  secret_access_key: env:S3_SECRET
  prefix: in/
  glob: "*/*.parquet"
${6:-}
  resources: [{table: t, mode: full$5}]
sink: {type: sqlite, path: $4, write: append}
batch: {rows: 700}
EOF
}

# ---- 1. every object matching, through a failing proxy ----------------------------------------------
s3_pipe s3.yaml s3-src "$FLAKY_ENDPOINT" "$T/s3.db" ""
expect_exit 0 ferry run s3.yaml
cat > files.yaml <<EOF
version: 1
name: files-src
source: {type: files, path: "$T/data/p*.parquet", resources: [{table: t, mode: full}]}
sink: {type: sqlite, path: $T/files.db, write: append}
batch: {rows: 700}
EOF
expect_exit 0 ferry run files.yaml
[ "$(q s3.db 'SELECT count(*) FROM t')" = 7000 ] || fail "s3 source: $(q s3.db 'SELECT count(*) FROM t') rows, want 7000"
same_table s3.db files.db t
s3_flaky_stop
read -r _fwd failed < "$T/flaky.count" || true
[ "${failed:-0}" -gt 0 ] || fail "the proxy failed no request: retries untested ($(cat "$T/flaky.count"))"
# one listing, each object's footer once (discovery's and the plan's kept for the reads),
# each row group once: no request forwarded twice (the retries of failed ones aside)
dups=$(grep '^GET ' "$T/flaky.count.requests" | grep -v ' 503$' | sort | uniq -d)
[ -z "$dups" ] || fail "requests forwarded more than once: $dups"
# p1 (DuckDB rounds its groups to 2048 rows: 2048 + 952) by ranges only: its footer and each of
# its two groups by a GET of its own, none the whole object (503ed requests, retried, not counted)
p1=$(grep '^GET /[^ ]*/in/2024/p1.parquet' "$T/flaky.count.requests" | grep -v ' 503$')
p1_size=$(stat -c %s data/p1.parquet)
[ "$(grep -c ' bytes=' <<<"$p1")" -ge 3 ] && [ "$(grep -vc ' bytes=' <<<"$p1")" = 0 ] \
  || fail "p1.parquet was not read by ranges: $p1"
while read -r _m _u r; do
  r=${r#bytes=}
  [ $(( ${r#*-} - ${r%-*} + 1 )) -lt "$p1_size" ] || fail "p1.parquet fetched whole: $r"
done <<<"$p1"
pass "s3 source: Parquet objects under prefix + glob through a 503ing proxy equal the files source's reading; no range fetched twice"

# ---- 2. selected columns ------------------------------------------------------------------------------
s3_pipe sel.yaml s3-sel "$S3_ENDPOINT" "$T/sel.db" ", columns: [u, id]"
expect_exit 0 ferry run sel.yaml
[ "$(q sel.db "SELECT group_concat(name, ',') FROM pragma_table_info('t')")" = "u,id" ] || fail "columns: u, id"
d=$(q sel.db "ATTACH '$T/files.db' AS f; SELECT count(*) FROM (SELECT u, id FROM t EXCEPT SELECT u, id FROM f.t)")
[ "$d" = 0 ] && [ "$(q sel.db 'SELECT count(*) FROM t')" = 7000 ] || fail "selected columns differ: $d"
pass "s3 source: selected columns only"

# ---- 2b. a shard of several row groups resumed in its middle ------------------------------------------
# p1's two groups (2048 + 952 rows) are one shard; batches of 700 rows: the third crosses the
# groups and the run dies after it (row 2100, in the second group); the next run goes on from there
s3_pipe mid.yaml s3-mid "$S3_ENDPOINT" "$T/mid.db" ""
expect_exit 137 env FERRY_FAILPOINTS="after_sink_apply=crash@3" "$FERRY_BIN" run mid.yaml --quiet
n=$(q mid.db 'SELECT count(*) FROM t')
[ "$n" -gt 0 ] && [ "$n" -lt 7000 ] || fail "the killed run should have written part of the rows: $n"
expect_exit 0 ferry run mid.yaml
[ "$(q mid.db 'SELECT count(*) FROM t')" = 7000 ] || fail "resumed: $(q mid.db 'SELECT count(*) FROM t') rows, want 7000 (none twice)"
same_table mid.db files.db t
pass "s3 source: a shard of several row groups killed in its middle resumes at its row: rows equal, none twice"

# ---- 3. bad input ------------------------------------------------------------------------------------------
head -c 3000 data/p2.parquet > data/cut.parquet
s3c "$S3_BUCKET" put bad/cut.parquet data/cut.parquet
s3_pipe bad.yaml s3-bad "$S3_ENDPOINT" "$T/bad.db" ", prefix: bad/, glob: '*.parquet'"
expect_exit 1 ferry run bad.yaml
printf '%s\n' "$OUT" | grep -q "s3://$S3_BUCKET/bad/cut.parquet" || fail "the error should name the object: $OUT"
[ ! -f bad.db ] || [ -z "$(q bad.db "SELECT name FROM sqlite_master WHERE name = 't'")" ] \
  || [ "$(q bad.db 'SELECT count(*) FROM t')" = 0 ] || fail "rows written from a truncated object"
# a corrupt footer: 64 bytes of the Thrift footer overwritten (length and magic intact)
cp data/p1.parquet data/bent.parquet
flen=$(od -An -t u4 -j $(( $(stat -c %s data/p1.parquet) - 8 )) -N 4 data/p1.parquet | tr -d ' ')
printf '\377%.0s' $(seq 1 64) | dd of=data/bent.parquet bs=1 seek=$(( $(stat -c %s data/p1.parquet) - 8 - flen + 4 )) conv=notrunc status=none
s3c "$S3_BUCKET" put bent/bent.parquet data/bent.parquet
s3_pipe bent.yaml s3-bent "$S3_ENDPOINT" "$T/bent.db" ", prefix: bent/, glob: '*.parquet'"
set +e; OUT=$(ferry run bent.yaml 2>&1); got=$?; set -e
[ "$got" != 0 ] || fail "a corrupt footer should fail the run"
printf '%s\n' "$OUT" | grep -q "s3://$S3_BUCKET/bent/bent.parquet" || fail "the error should name the object with the corrupt footer: $OUT"
[ ! -f bent.db ] || [ -z "$(q bent.db "SELECT name FROM sqlite_master WHERE name = 't'")" ] \
  || [ "$(q bent.db 'SELECT count(*) FROM t')" = 0 ] || fail "rows written from an object with a corrupt footer"
# the footer kept, the data before it cut: every column chunk offset now lies
{ head -c 1000 data/p1.parquet; tail -c $((flen + 8)) data/p1.parquet; } > data/lying.parquet
s3c "$S3_BUCKET" put lying/lying.parquet data/lying.parquet
s3_pipe lying.yaml s3-lying "$S3_ENDPOINT" "$T/lying.db" ", prefix: lying/, glob: '*.parquet'"
expect_exit 1 ferry run lying.yaml
printf '%s\n' "$OUT" | grep -q "s3://$S3_BUCKET/lying/lying.parquet" || fail "the error should name the lying object: $OUT"
printf '%s\n' "$OUT" | grep -q "column chunk lies outside" || fail "the error should say what lies: $OUT"
[ ! -f lying.db ] || [ -z "$(q lying.db "SELECT name FROM sqlite_master WHERE name = 't'")" ] \
  || [ "$(q lying.db 'SELECT count(*) FROM t')" = 0 ] || fail "rows written from an object whose footer lies"
# deleted between the frozen plan (footers read) and the read of its row groups
s3c "$S3_BUCKET" put gone/a.parquet data/p1.parquet
s3c "$S3_BUCKET" put gone/b.parquet data/p2.parquet
s3_pipe gone.yaml s3-gone "$S3_ENDPOINT" "$T/gone.db" ", prefix: gone/, glob: '*.parquet'"
if FERRY_FAILPOINTS=before_sink_apply=error "$FERRY_BIN" run gone.yaml --quiet >/dev/null 2>&1; then
  fail "the failpoint should fail the first attempt"
fi
s3c "$S3_BUCKET" delete gone/b.parquet
expect_exit 7 ferry run gone.yaml
printf '%s\n' "$OUT" | grep -q "s3://$S3_BUCKET/gone/b.parquet is gone" || fail "a deleted Parquet object should be named: $OUT"
[ ! -f gone.db ] || [ -z "$(q gone.db "SELECT name FROM sqlite_master WHERE name = 't'")" ] \
  || [ "$(q gone.db 'SELECT count(*) FROM t WHERE id >= 3000')" = 0 ] || fail "rows of the deleted object written"
s3_pipe none.yaml s3-none "$S3_ENDPOINT" "$T/none.db" ", prefix: nothing/"
expect_exit 7 ferry run none.yaml
printf '%s\n' "$OUT" | grep -q "no object under s3://$S3_BUCKET/nothing/" || fail "no match: $OUT"
s3_pipe decl.yaml s3-decl "$S3_ENDPOINT" "$T/decl.db" ", schema: {id: int64}"
expect_exit 2 ferry run decl.yaml
printf '%s\n' "$OUT" | grep -q "Parquet objects carry their schema" || fail "a declared schema on Parquet should be refused: $OUT"
pass "s3 source: truncated object, corrupt or lying footer, object deleted after the plan, no match, declared schema on Parquet: errors naming them; nothing written"
