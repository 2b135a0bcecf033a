#!/usr/bin/env bash
# shared: pg s3
# labels: verify
# `ferry verify` with s3 destinations in CSV and JSON Lines (src/connectors/s3/s3_verify.c: the
# objects the manifests list, read where they are by the s3 source, streamed in chunks),
# from a PostgreSQL source, on one PostgreSQL server and one s3rver:
#   1. right after the copy, three destinations verify equal (exit 0): CSV with the sink's
#      defaults (no `format:` key: csv), CSV without a header, `;` and a NULL marker, JSON
#      Lines; values with commas, quotes, line breaks, empty strings and NULLs; an empty table
#      (no object) verifies equal too;
#   2. a row changed at the source is reported by key (exit 8) on all three;
#   3. tampering through the test's own S3 client: a CSV object re-uploaded with one value
#      changed (different), a headerless CSV object re-uploaded without one of its lines
#      (missing), a JSON Lines object re-uploaded with one value changed (different); each
#      restored verifies equal again; an object no manifest lists (a crashed attempt's) is not
#      read; a part replaced by its own gzip reads the same rows (equal);
#   4. an object a manifest lists but that is gone: one error naming s3://bucket/key;
#   5. nothing is created in $TMPDIR by any verify, error or not (a fresh empty folder whose
#      mtime is in the past: still empty, mtime unchanged; no temporary folder any more).
. "$(dirname "$0")/lib.sh"
. "$FERRY_SRC/tests/s3/s3.sh"
. "${FERRY_PG_SH:-$FERRY_SRC/tests/pg/pg.sh}"
s3_have || fail "node and tests/tools/node_modules (s3rver, aws4) are needed: run scripts/install-deps.sh"
export S3_KEY=S3RVER S3_SECRET=S3RVER AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER
s3_start text
export S3_ENDPOINT
pg_start
export PG_URL="$FERRY_PG_URL"

pgq >/dev/null <<'SQL'
CREATE TABLE v (id bigint PRIMARY KEY, name text, amount numeric(12,2), ts timestamptz, u uuid,
                flag bool, f float8, d date);
INSERT INTO v SELECT g, CASE WHEN g % 11 = 0 THEN NULL WHEN g % 13 = 0 THEN ''
                             WHEN g % 17 = 0 THEN E'a,"b"\nc;d' ELSE 'n' || g END,
  g * 0.5, '2024-03-01 00:00+00'::timestamptz + g * interval '1 minute',
  md5(g::text)::uuid, g % 2 = 0, g / 7.0, '2024-01-01'::date + g % 365 FROM generate_series(1, 2000) g;
CREATE TABLE e (id bigint PRIMARY KEY, name text);
SQL

s3_pipeline() { # FILE NAME PREFIX SINK-KEYS...
  local file=$1 name=$2 prefix=$3
  shift 3
  {
    cat <<EOF
version: 1
name: $name
source: {type: postgres, url: env:PG_URL, resources: [{table: v}, {table: e}]}
batch: {rows: 200}
sink:
  type: s3
  bucket: $S3_BUCKET
  prefix: $prefix
  endpoint: "$S3_ENDPOINT"
  path_style: true
  access_key_id: env:S3_KEY
  secret_access_key: env:S3_SECRET
  part_rows: 600
EOF
    for k in "$@"; do printf '  %s\n' "$k"; done
  } > "$file"
}
s3_pipeline csv.yaml vt_csv csv                    # the sink's default format: csv
s3_pipeline bare.yaml vt_bare bare 'format: csv' 'header: false' 'delimiter: ";"' 'null: NULL'
s3_pipeline jsonl.yaml vt_jsonl jl 'format: jsonl'

mkdir -p "$T/tmp"
touch -d '2000-01-01 00:00' "$T/tmp"
# vjson FILE: runs verify --json under a TMPDIR of ours, keeps the JSON in $J, the status in $RC;
# nothing may be created there (the folder's mtime changes even if it is removed again)
vjson() {
  set +e
  J=$(TMPDIR="$T/tmp" "$FERRY_BIN" verify "$1" --json 2>verify.err)
  RC=$?
  set -e
  [ -z "$(ls -A "$T/tmp")" ] || fail "$1: verify left files in its TMPDIR: $(ls -AR "$T/tmp")"
  [ "$(stat -c %Y "$T/tmp")" = "$(date -d '2000-01-01 00:00' +%s)" ] \
    || fail "$1: verify created something in its TMPDIR (mtime $(stat -c %y "$T/tmp")): $(cat verify.err)"
  ! grep -q Sanitizer verify.err || fail "$1: $(cat verify.err)" # an asan build's report
}
res() { jq -r ".resources[] | select(.resource == \"$1\") | $2" <<< "$J"; }
keys() { jq -r "[.resources[] | select(.resource == \"v\") | .$1.keys[]] | join(\",\")" <<< "$J"; }
objects() { s3c "$S3_BUCKET" list "$1/v/" | grep "/part-"; }

for f in csv bare jsonl; do
  expect_exit 0 ferry run $f.yaml --quiet
done
[ "$(objects csv | wc -l)" -ge 3 ] || fail "csv: several parts expected: $(objects csv)"
[ "$(objects csv | head -1)" = "$(objects csv | grep '\.csv$' | head -1)" ] \
  || fail "csv: the default format should be csv: $(objects csv)"
for f in csv bare jsonl; do
  vjson $f.yaml
  [ "$RC" = 0 ] || fail "$f: a fresh copy should verify equal: exit $RC: $J $(cat verify.err)"
  [ "$(jq -r .equal <<< "$J")" = true ] && [ "$(res v .dest_rows)" = 2000 ] \
    && [ "$(res e .dest_rows)" = 0 ] && [ "$(res e .source_rows)" = 0 ] || fail "$f: $J"
  res v .destination | grep -q "^s3://$S3_BUCKET/.*/v ([0-9]* objects)$" || fail "$f: destination: $J"
done
pass "fresh copies: s3 destinations in CSV (defaults; no header, ';', NULL) and JSON Lines verify equal"

# ---- 2. a source change ------------------------------------------------------------------------
pgq -c "UPDATE v SET amount = amount + 1 WHERE id = 77"
for f in csv bare jsonl; do
  vjson $f.yaml
  [ "$RC" = 8 ] && [ "$(keys different)" = 77 ] && [ -z "$(keys missing)$(keys extra)" ] \
    || fail "$f: a row changed at the source: exit $RC, different '$(keys different)': $J $(cat verify.err)"
done
pgq -c "UPDATE v SET amount = amount - 1 WHERE id = 77"
pass "a row changed at the source is reported by key on every text destination (exit 8)"

# ---- 3. tampering with the objects -------------------------------------------------------------
# tamper PIPELINE KEY FILE: uploads FILE under KEY, runs verify, puts the original back
tamper() {
  s3c "$S3_BUCKET" put "$2" "$3"
  vjson "$1"
  s3c "$S3_BUCKET" put "$2" orig
}
# a CSV object with one value changed: row 2 of its data (id on the line's start)
key=$(objects csv | head -1)
s3c "$S3_BUCKET" get "$key" > orig
id=$(sed -n 3p orig | cut -d, -f1)
[ -n "$id" ] && [ "$(sed -n 3p orig | cut -d, -f2)" = "n$id" ] || fail "csv: unexpected line 3 of $key: $(sed -n 3p orig)"
sed "3s/^$id,n$id,/$id,tampered,/" orig > changed
cmp -s orig changed && fail "csv: sed changed nothing"
tamper csv.yaml "$key" changed
[ "$RC" = 8 ] && [ "$(keys different)" = "$id" ] && [ -z "$(keys missing)$(keys extra)" ] \
  || fail "csv: an object with one value changed: exit $RC, different '$(keys different)': $J $(cat verify.err)"
# the same object gzip-compressed: the files source recognises gzip by its bytes; same rows
gzip -c orig > orig.gz
tamper csv.yaml "$key" orig.gz
[ "$RC" = 0 ] || fail "csv: a part replaced by its own gzip should read the same rows: exit $RC: $J $(cat verify.err)"
vjson csv.yaml
[ "$RC" = 0 ] || fail "csv: restored: exit $RC: $J $(cat verify.err)"
pass "csv: an object re-uploaded with one value changed is reported by key; its gzip reads the same"

# a headerless CSV object without one of its lines: that key is missing
key=$(objects bare | sed -n 2p)
s3c "$S3_BUCKET" get "$key" > orig
id=$(sed -n 5p orig | cut -d';' -f1)
[[ $id =~ ^[0-9]+$ ]] || fail "bare: unexpected line 5 of $key: $(sed -n 5p orig)"
sed 5d orig > changed
tamper bare.yaml "$key" changed
[ "$RC" = 8 ] && [ "$(keys missing)" = "$id" ] && [ -z "$(keys different)$(keys extra)" ] \
  || fail "bare: an object without one line: exit $RC, missing '$(keys missing)': $J $(cat verify.err)"
pass "csv without a header: an object re-uploaded without one row is reported missing by key"

# a JSON Lines object with one value changed
key=$(objects jl | tail -1)
s3c "$S3_BUCKET" get "$key" > orig
line=$(grep -n '"name":"n[0-9]*"' orig | sed -n 2p)
id=$(sed 's/.*"id":\([0-9]*\).*/\1/' <<< "$line")
[[ $id =~ ^[0-9]+$ ]] || fail "jsonl: no id in $line"
sed "${line%%:*}s/\"name\":\"n$id\"/\"name\":\"n${id}x\"/" orig > changed
cmp -s orig changed && fail "jsonl: sed changed nothing"
tamper jsonl.yaml "$key" changed
[ "$RC" = 8 ] && [ "$(keys different)" = "$id" ] && [ -z "$(keys missing)$(keys extra)" ] \
  || fail "jsonl: an object with one value changed: exit $RC, different '$(keys different)': $J $(cat verify.err)"
vjson jsonl.yaml
[ "$RC" = 0 ] || fail "jsonl: restored: exit $RC: $J $(cat verify.err)"
pass "jsonl: an object re-uploaded with one value changed is reported by key"

# objects no manifest lists (as a crashed attempt leaves) are never read: one in a run folder of
# their own, one beside the listed objects (under the folder the source lists)
printf '{"id":999999,"name":"stray","amount":1,"ts":null,"u":null,"flag":null,"f":null,"d":null}\n' > stray
n=$(objects jl | wc -l)
beside=$(dirname "$(objects jl | head -1)")/part-999.jsonl
s3c "$S3_BUCKET" put jl/v/run=999/attempt=1/part-0.jsonl stray
s3c "$S3_BUCKET" put "$beside" stray
vjson jsonl.yaml
s3c "$S3_BUCKET" delete jl/v/run=999/attempt=1/part-0.jsonl
s3c "$S3_BUCKET" delete "$beside"
[ "$RC" = 0 ] && [ "$(res v .dest_rows)" = 2000 ] \
  || fail "jsonl: an unlisted object was read: exit $RC: $J $(cat verify.err)"
res v .destination | grep -q "^s3://$S3_BUCKET/jl/v ($n objects)$" \
  || fail "jsonl: the destination should count the $n listed objects: $J"
pass "an object no manifest lists is not part of the destination"

# ---- 4. a listed object that is gone ------------------------------------------------------------
for f in csv jsonl; do
  p=$([ $f = csv ] && echo csv || echo jl)
  key=$(objects $p | sed -n 2p)
  s3c "$S3_BUCKET" get "$key" > orig
  s3c "$S3_BUCKET" delete "$key"
  vjson $f.yaml
  s3c "$S3_BUCKET" put "$key" orig
  [ "$RC" = 7 ] || fail "$f: a listed object deleted should fail as not found (7): exit $RC: $J $(cat verify.err)"
  [ "$(grep -c "s3://$S3_BUCKET/$key is listed by a manifest but missing" verify.err)" = 1 ] \
    || fail "$f: the error should name s3://$S3_BUCKET/$key once: $(cat verify.err)"
  vjson $f.yaml
  [ "$RC" = 0 ] || fail "$f: restored: exit $RC: $J $(cat verify.err)"
done
pass "a listed object that is gone: one error naming s3://bucket/key; nothing created in TMPDIR"
