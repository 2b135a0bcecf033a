#!/usr/bin/env bash
# shared: s3
# The s3 source on CSV and JSON Lines objects against the S3 test server:
#   1. a plain CSV object larger than one 4 MiB ranged GET (records cross the chunk edges), a
#      gzip one and a zstd one, next to an object the glob excludes, read through a proxy
#      failing every 4th request with 503 (retries) with listing pages of 2 keys (max_keys):
#      into SQLite equal to the files source's reading of the same local files, with the
#      count and sums awk computed from the text; several list requests were made;
#   2. JSON Lines (gzip .jsonl and plain .ndjson) with inferred types, likewise;
#   3. bad input: a truncated gzip object, an object deleted between listing and reading
#      (a run failed at its first sink write, the object deleted, the run resumed on its
#      frozen plan), a Parquet object among CSV ones, `compression: gzip` on a zstd object:
#      one error naming the object, nothing written; `compression: zstd` on it reads it;
#   4. `keys:` (an exact list of objects, as s3 verify reads a destination): only the objects
#      named, each once; a missing one is not found (exit 7) naming it; a key outside the
#      prefix, a non-string entry, a glob beside it, an empty list: a config error naming it.
. "$(dirname "$0")/lib.sh"
. "$FERRY_SRC/tests/s3/s3.sh"
s3_have || fail "node and tests/tools/node_modules (s3rver, aws4) are needed: run scripts/install-deps.sh"
export S3_KEY=S3RVER S3_SECRET=S3RVER
s3_start lake
s3_flaky 4

# id,name,amount,day,flag: a null name every 7th row, quotes and commas every 11th.
gen_csv() { # FROM TO
  awk -v a="$1" -v b="$2" 'BEGIN { print "id,name,amount,day,flag";
    for (i = a; i < b; i++) {
      n = (i % 7 == 0) ? "" : (i % 11 == 0 ? "\"n, \"\"" i "\"\"\"" : "name-" i "-ünï");
      printf "%d,%s,%.2f,2024-%02d-%02d,%s\n", i, n, i * 1.25, i % 12 + 1, i % 28 + 1, (i % 2 ? "true" : "false") } }'
}
mkdir data
gen_csv 0 120000 > data/a.csv
gen_csv 120000 123000 | gzip -c > data/b.csv.gz
gen_csv 123000 125000 | zstd -q -c > data/c.csv.zst
[ "$(stat -c %s data/a.csv)" -gt $((4 << 20)) ] || fail "a.csv should be larger than one ranged GET"
s3c "$S3_BUCKET" put in/a.csv data/a.csv
s3c "$S3_BUCKET" put in/sub/b.csv.gz data/b.csv.gz
s3c "$S3_BUCKET" put in/sub/c.csv.zst data/c.csv.zst
s3c "$S3_BUCKET" put in/notes.txt data/a.csv   # excluded without a glob (not a known name)

s3_pipe() { # FILE NAME ENDPOINT DB RESOURCE_EXTRA [SOURCE_EXTRA]
  cat > "$1" <<YAML
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
${6:-}
  resources: [{table: t, mode: full$5}]
sink: {type: sqlite, path: $4, write: append}
batch: {rows: 5000}
YAML
}
files_pipe() { # FILE NAME GLOB DB
  cat > "$1" <<YAML
version: 1
name: $2
source: {type: files, path: "$3", resources: [{table: t, mode: full}]}
sink: {type: sqlite, path: $4, write: append}
batch: {rows: 5000}
YAML
}

# ---- 1. CSV: plain, gzip, zstd through a failing proxy, pages of 2 keys ----------------------------
s3_pipe csv.yaml s3-csv "$FLAKY_ENDPOINT" "$T/csv.db" "" "  max_keys: 2"
expect_exit 0 ferry run csv.yaml
mkdir ref && cp data/a.csv data/b.csv.gz data/c.csv.zst ref/
files_pipe fcsv.yaml files-csv "$T/ref/*" "$T/fcsv.db"
expect_exit 0 ferry run fcsv.yaml
want=$( { cat data/a.csv; gzip -dc data/b.csv.gz; zstd -dcq data/c.csv.zst; } | awk -F, '$1 ~ /^[0-9]+$/ { n++; s += $1 } END { print n "|" s }')
got=$(q csv.db 'SELECT count(*) || "|" || sum(id) FROM t')
[ "$got" = "$want" ] || fail "s3 csv: count|sum(id) $got, want $want"
[ "$(q csv.db "SELECT typeof(id) || typeof(amount) || typeof(flag) FROM t WHERE id = 3")" = integerrealinteger ] \
  || fail "inferred types: $(q csv.db "SELECT typeof(id), typeof(amount), typeof(flag) FROM t WHERE id = 3")"
[ "$(q csv.db "SELECT name FROM t WHERE id = 22")" = 'n, "22"' ] || fail "quoted field: $(q csv.db "SELECT name FROM t WHERE id = 22")"
[ "$(q csv.db "SELECT count(*) FROM t WHERE name IS NULL")" = "$(q fcsv.db "SELECT count(*) FROM t WHERE name IS NULL")" ] || fail "nulls differ"
same_table csv.db fcsv.db t
s3_flaky_stop
read -r _fwd failed < "$T/flaky.count" || true
[ "${failed:-0}" -gt 0 ] || fail "the proxy failed no request: retries untested"
lists=$(grep -c 'list-type=2' "$T/flaky.count.requests" || true)
# one listing (discovery's, which the plan reuses) of 4 keys in pages of 2: at least 2 pages
[ "$lists" -ge 2 ] || fail "4 keys in pages of 2 should take >= 2 list requests (retries aside), saw $lists"
grep -q 'notes.txt' "$T/flaky.count.requests" && fail "notes.txt was read"
pass "s3 source: CSV objects (plain > 4 MiB, gzip, zstd) through a 503ing proxy, paged listing, equal the files source"

# ---- 2. JSON Lines ----------------------------------------------------------------------------------
awk 'BEGIN { for (i = 0; i < 3000; i++) printf "{\"id\":%d,\"s\":%s,\"x\":%s,\"o\":{\"k\":[%d]},\"ok\":%s}\n", i, (i % 5 ? "\"v" i "\"" : "null"), i / 4, i, (i % 3 ? "true" : "false") }' > data/j1.jsonl
awk 'BEGIN { for (i = 3000; i < 4000; i++) printf "{\"ok\":false,\"id\":%d,\"x\":%s,\"s\":\"w\\u00e9%d\"}\n", i, i / 4, i }' > data/j2.ndjson
gzip -c data/j1.jsonl > data/j1.jsonl.gz
s3c "$S3_BUCKET" put js/2024/j1.jsonl.gz data/j1.jsonl.gz
s3c "$S3_BUCKET" put js/2025/j2.ndjson data/j2.ndjson
s3_pipe js.yaml s3-js "$S3_ENDPOINT" "$T/js.db" ", prefix: js/, glob: '*/j*'"
expect_exit 0 ferry run js.yaml
mkdir jref && cp data/j1.jsonl.gz data/j2.ndjson jref/
files_pipe fjs.yaml files-js "$T/jref/*" "$T/fjs.db"
expect_exit 0 ferry run fjs.yaml
[ "$(q js.db 'SELECT count(*) || "|" || sum(id) FROM t')" = "4000|7998000" ] || fail "s3 jsonl: $(q js.db 'SELECT count(*), sum(id) FROM t')"
[ "$(q js.db "SELECT o FROM t WHERE id = 7")" = '{"k":[7]}' ] || fail "nested object: $(q js.db "SELECT o FROM t WHERE id = 7")"
same_table js.db fjs.db t
pass "s3 source: JSON Lines objects (gzip, plain) equal the files source"

# ---- 3. bad input ---------------------------------------------------------------------------------
head -c 20000 data/b.csv.gz > data/cut.csv.gz
s3c "$S3_BUCKET" put bad/cut.csv.gz data/cut.csv.gz
s3_pipe cut.yaml s3-cut "$S3_ENDPOINT" "$T/cut.db" ", prefix: bad/"
expect_exit 1 ferry run cut.yaml
printf '%s\n' "$OUT" | grep -q "s3://$S3_BUCKET/bad/cut.csv.gz: truncated gzip" || fail "the error should name the object: $OUT"
[ ! -f cut.db ] || [ -z "$(q cut.db "SELECT name FROM sqlite_master WHERE name = 't'")" ] \
  || [ "$(q cut.db 'SELECT count(*) FROM t')" = 0 ] || fail "rows written from a truncated object"

s3c "$S3_BUCKET" put gone/a.csv data/a.csv
gen_csv 200000 201000 > data/z.csv
s3c "$S3_BUCKET" put gone/z.csv data/z.csv
s3_pipe gone.yaml s3-gone "$S3_ENDPOINT" "$T/gone.db" ", prefix: gone/"
# the first attempt fails at its first sink write: its plan (both objects listed) is frozen
if FERRY_FAILPOINTS=before_sink_apply=error "$FERRY_BIN" run gone.yaml --quiet >/dev/null 2>&1; then
  fail "the failpoint should fail the first attempt"
fi
s3c "$S3_BUCKET" delete gone/z.csv
expect_exit 7 ferry run gone.yaml
printf '%s\n' "$OUT" | grep -q "s3://$S3_BUCKET/gone/z.csv is gone" || fail "a deleted object should be named: $OUT"
[ ! -f gone.db ] || [ -z "$(q gone.db "SELECT name FROM sqlite_master WHERE name = 't'")" ] \
  || [ "$(q gone.db 'SELECT count(*) FROM t WHERE id >= 200000')" = 0 ] || fail "rows of the deleted object written"

cp data/a.csv data/m.csv
s3c "$S3_BUCKET" put mix/a.csv data/m.csv
printf 'PAR1xxxxPAR1' > data/m.parquet
s3c "$S3_BUCKET" put mix/b.parquet data/m.parquet
s3_pipe mix.yaml s3-mix "$S3_ENDPOINT" "$T/mix.db" ", prefix: mix/"
expect_exit 1 ferry run mix.yaml
printf '%s\n' "$OUT" | grep -q "s3://$S3_BUCKET/mix/b.parquet" || fail "the Parquet object among CSV ones should be named: $OUT"
[ ! -f mix.db ] || [ -z "$(q mix.db "SELECT name FROM sqlite_master WHERE name = 't'")" ] || fail "rows written"
s3_pipe cz.yaml s3-cz "$S3_ENDPOINT" "$T/cz.db" ", prefix: in/sub/, glob: 'c*'" "  compression: gzip"
expect_exit 1 ferry run cz.yaml
printf '%s\n' "$OUT" | grep -q "s3://$S3_BUCKET/in/sub/c.csv.zst: compression: gzip, but its bytes are zstd" || fail "compression: gzip on a zstd object: $OUT"
s3_pipe zz.yaml s3-zz "$S3_ENDPOINT" "$T/zz.db" ", prefix: in/sub/, glob: 'c*'" "  compression: zstd"
expect_exit 0 ferry run zz.yaml
[ "$(q zz.db 'SELECT count(*) FROM t')" = 2000 ] || fail "compression: zstd: $(q zz.db 'SELECT count(*) FROM t') rows"
pass "s3 source: truncated gzip, deleted object, mixed formats, compression mismatch: errors naming the object, nothing written"

# ---- 4. `keys:` an exact list of objects ------------------------------------------------------------
# the objects named (one twice, one not a known name), none other under the prefix
s3_pipe keys.yaml s3-keys "$S3_ENDPOINT" "$T/keys.db" \
  ", keys: [in/sub/c.csv.zst, in/notes.txt, in/sub/c.csv.zst]"
expect_exit 0 ferry run keys.yaml --quiet
want=$( { cat data/a.csv; zstd -dcq data/c.csv.zst; } | awk -F, '$1 ~ /^[0-9]+$/ { n++; s += $1 } END { print n "|" s }')
[ "$(q keys.db 'SELECT count(*) || "|" || sum(id) FROM t')" = "$want" ] \
  || fail "keys: count|sum(id) $(q keys.db 'SELECT count(*) || "|" || sum(id) FROM t'), want $want (notes.txt and c.csv.zst once)"
# a key the bucket does not hold: not found (7), named
s3_pipe kgone.yaml s3-kgone "$S3_ENDPOINT" "$T/kgone.db" ", keys: [in/a.csv, in/nope.csv]"
expect_exit 7 ferry run kgone.yaml
[ "$(grep -c "s3://$S3_BUCKET/in/nope.csv is named by \`keys\` but is not in the bucket" <<< "$OUT")" = 1 ] \
  || fail "a missing key should be named once: $OUT"
[ ! -f kgone.db ] || [ -z "$(q kgone.db "SELECT name FROM sqlite_master WHERE name = 't'")" ] \
  || fail "rows written although a key is missing"
# configuration errors (exit 2), each naming the offending key
s3_pipe kout.yaml s3-kout "$S3_ENDPOINT" "$T/kout.db" ", keys: [in/a.csv, js/2025/j2.ndjson]"
expect_exit 2 ferry run kout.yaml
grep -q "s3://$S3_BUCKET/js/2025/j2.ndjson is not under the prefix \"in/\"" <<< "$OUT" \
  || fail "a key outside the prefix should be named: $OUT"
s3_pipe kobj.yaml s3-kobj "$S3_ENDPOINT" "$T/kobj.db" ", keys: [in/a.csv, {k: in/b.csv}]"
expect_exit 2 ferry run kobj.yaml
grep -q "keys\[1\].*expected a string, got a map" <<< "$OUT" || fail "a non-string entry should be named: $OUT"
s3_pipe kglob.yaml s3-kglob "$S3_ENDPOINT" "$T/kglob.db" ", keys: [in/a.csv], glob: '*.csv'"
expect_exit 2 ferry run kglob.yaml
grep -q "\`keys\` and \`glob\` exclude each other" <<< "$OUT" || fail "keys with a glob: $OUT"
s3_pipe kempty.yaml s3-kempty "$S3_ENDPOINT" "$T/kempty.db" ", keys: []"
expect_exit 2 ferry run kempty.yaml
grep -q "keys.*an empty list reads no object" <<< "$OUT" || fail "keys: []: $OUT"
pass "s3 source: keys: reads exactly the objects named; a missing one (7), one outside the prefix, a non-string entry, a glob beside it, an empty list (2): errors naming it"
