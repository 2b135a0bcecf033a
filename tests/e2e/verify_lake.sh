#!/usr/bin/env bash
# shared: pg s3
# `ferry verify` with an iceberg destination (read back through the iceberg source, delete
# files applied) and an s3 destination (the Parquet objects the manifests list), from a
# PostgreSQL source, on one PostgreSQL server and one s3rver:
#   1. right after the copy both verify equal (exit 0);
#   2. rows changed at the source (an update, a delete, an insert) are reported by key
#      (different, extra, missing; exit 8), and the walk is chunked as with two databases:
#      the differing key ranges are narrowed by digests, so PostgreSQL lists only the rows of
#      a few small chunks (bytes counted by the report), never the whole table;
#   3. tampering: an s3 object replaced by another valid Parquet object with one value changed
#      is reported by key (exit 8); an iceberg data file damaged in place fails the check (the
#      damaged values reported by key, or the file named when it no longer decodes), and
#      restored verifies again;
#   4. an iceberg *source* (read through ferry) against its PostgreSQL copy: equal, then one
#      row changed in the copy is reported by key;
#   5. s3 (src/connectors/s3/s3_verify.c: the objects read through the s3 source, where they
#      are): every verify above runs with TMPDIR a fresh empty folder whose mtime is in the
#      past, and nothing is created in it (empty, mtime unchanged: no temporary folder, not
#      even one removed again); through a logging proxy every GET of a Parquet object is
#      ranged and none covers the whole object (objects over the 64 KiB footer read); an
#      object under the prefix that no manifest lists (a crashed attempt's) is not counted;
#      an object a manifest lists but that is gone: one error naming s3://bucket/key (exit 7).
. "$(dirname "$0")/lib.sh"
. "$FERRY_SRC/tests/s3/s3.sh"
. "${FERRY_PG_SH:-$FERRY_SRC/tests/pg/pg.sh}"
s3_have || fail "node and tests/tools/node_modules (s3rver, aws4) are needed: run scripts/install-deps.sh"
export S3_KEY=S3RVER S3_SECRET=S3RVER AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER
s3_start lake
export S3_ENDPOINT
pg_start
export PG_URL="$FERRY_PG_URL"

pgq >/dev/null <<'SQL'
CREATE TABLE v (id bigint PRIMARY KEY, name text, amount numeric(12,2), ts timestamptz, u uuid,
                flag bool, f float8, d date);
INSERT INTO v SELECT g, 'n' || g, g * 0.5, '2024-03-01 00:00+00'::timestamptz + g * interval '1 minute',
  md5(g::text)::uuid, g % 2 = 0, g / 7.0, '2024-01-01'::date + g % 365 FROM generate_series(1, 3000) g;
CREATE TABLE w (LIKE v INCLUDING ALL);
INSERT INTO w SELECT * FROM v;
UPDATE w SET name = 'tampered' WHERE id = 1234;
SQL

cat > ice.yaml <<EOF
version: 1
name: vl_ice
source: {type: postgres, url: env:PG_URL, resources: [{table: v}]}
sink: {type: iceberg, warehouse: $T/wh, namespace: db, write: upsert}
EOF
s3_pipeline() { # FILE NAME TABLE PREFIX
  cat > "$1" <<EOF
version: 1
name: $2
source: {type: postgres, url: env:PG_URL, resources: [{table: $3, target: v, key: [id]}]}
sink:
  type: s3
  bucket: $S3_BUCKET
  prefix: $4
  format: parquet
  endpoint: "$S3_ENDPOINT"
  path_style: true
  access_key_id: env:S3_KEY
  secret_access_key: env:S3_SECRET
EOF
}
s3_pipeline s3.yaml vl_s3 v out
s3_pipeline other.yaml vl_other w other
mkdir -p "$T/vtmp"
touch -d '2000-01-01 00:00' "$T/vtmp"
# vjson FILE: runs verify --json under TMPDIR=$T/vtmp, keeps the JSON in $J and the status in
# $RC; nothing may be created in TMPDIR (the folder's mtime changes even if it is removed again)
vjson() {
  set +e
  J=$(TMPDIR="$T/vtmp" "$FERRY_BIN" verify "$1" --json 2>verify.err)
  RC=$?
  set -e
  [ -z "$(ls -A "$T/vtmp")" ] || fail "$1: verify left files in its TMPDIR: $(ls -AR "$T/vtmp")"
  [ "$(stat -c %Y "$T/vtmp")" = "$(date -d '2000-01-01 00:00' +%s)" ] \
    || fail "$1: verify created something in its TMPDIR (mtime $(stat -c %y "$T/vtmp")): $(cat verify.err)"
  ! grep -q Sanitizer verify.err || fail "$1: $(cat verify.err)" # an asan build's report
}
keys() { printf '%s\n' "$J" | jq -r "[.resources[0].$1.keys[]] | join(\",\")"; }

expect_exit 0 ferry run ice.yaml --quiet
expect_exit 0 ferry run s3.yaml --quiet
expect_exit 0 ferry run other.yaml --quiet
for f in ice.yaml s3.yaml; do
  vjson "$f"
  [ "$RC" = 0 ] || fail "$f: a fresh copy should verify equal: exit $RC: $J $(cat verify.err)"
  [ "$(jq -r .equal <<< "$J")" = true ] && [ "$(jq -r '.resources[0].dest_rows' <<< "$J")" = 3000 ] \
    || fail "$f: $J"
done
pass "fresh copies: an iceberg and an s3 destination verify equal"

# ---- 2. source changes --------------------------------------------------------------------------
# A full listing of v costs PostgreSQL about 3000 rows x (key, hash) = over 60 KB in the
# report's byte count; the chunked walk lists three chunks of about 3000/16 rows.
whole=$("$FERRY_BIN" verify s3.yaml --json | jq '.resources[0].source_bytes')
pgq -c "UPDATE v SET amount = amount + 1 WHERE id = 77; DELETE FROM v WHERE id = 2500;
        INSERT INTO v SELECT 3001, 'late', 1, ts, u, flag, f, d FROM v WHERE id = 1"
for f in ice.yaml s3.yaml; do
  vjson "$f"
  [ "$RC" = 8 ] || fail "$f: changed source rows should fail the check with 8: exit $RC: $J $(cat verify.err)"
  [ "$(keys different)" = 77 ] || fail "$f: the changed row: $(keys different) in $J"
  [ "$(keys extra)" = 2500 ] || fail "$f: the row deleted at the source: $(keys extra) in $J"
  [ "$(keys missing)" = 3001 ] || fail "$f: the row inserted at the source: $(keys missing) in $J"
  jq -e '.resources[0] | .chunks > 3 and .chunks_mismatched >= 4 and .chunks_mismatched < .chunks' \
    <<< "$J" >/dev/null || fail "$f: the walk should narrow three differences to chunks: $J"
  sb=$(jq '.resources[0].source_bytes' <<< "$J")
  [ "$sb" -lt 30000 ] || fail "$f: PostgreSQL sent $sb bytes (equal: $whole): the whole table listed? $J"
done
pgq -c "UPDATE v SET amount = amount - 1 WHERE id = 77; INSERT INTO v SELECT * FROM w WHERE id = 2500;
        DELETE FROM v WHERE id = 3001"
pass "rows changed at the source are reported by key for both destinations, chunk by chunk (exit 8)"

# ---- 3. tampering -------------------------------------------------------------------------------
mine=$(s3c "$S3_BUCKET" list out/v/ | grep '\.parquet$' | head -1)
theirs=$(s3c "$S3_BUCKET" list other/v/ | grep '\.parquet$' | head -1)
[ -n "$mine" ] && [ -n "$theirs" ] || fail "objects: '$mine' '$theirs'"
s3c "$S3_BUCKET" get "$theirs" > theirs.parquet
s3c "$S3_BUCKET" get "$mine" > mine.parquet
s3c "$S3_BUCKET" put "$mine" theirs.parquet
vjson s3.yaml
[ "$RC" = 8 ] && [ "$(keys different)" = 1234 ] || fail "a replaced s3 object: exit $RC, different $(keys different): $J $(cat verify.err)"
s3c "$S3_BUCKET" put "$mine" mine.parquet
vjson s3.yaml
[ "$RC" = 0 ] || fail "the restored s3 object: exit $RC: $J"
pass "s3: an object replaced by another with one value changed is reported by key"

# ---- 5. s3: read where the objects are ------------------------------------------------------------
# every GET through a proxy that only logs: Parquet objects by ranged GETs, never whole
s3_flaky 0
sed "s|endpoint: \"$S3_ENDPOINT\"|endpoint: \"$FLAKY_ENDPOINT\"|" s3.yaml > s3p.yaml
grep -q "$FLAKY_ENDPOINT" s3p.yaml || fail "s3p.yaml: no proxy endpoint"
vjson s3p.yaml
s3_flaky_stop
[ "$RC" = 0 ] || fail "through the proxy: exit $RC: $J $(cat verify.err)"
n=0
for key in $(s3c "$S3_BUCKET" list out/v/ | grep '\.parquet$'); do
  size=$(s3c "$S3_BUCKET" get "$key" | wc -c)
  [ "$size" -gt 65536 ] || fail "$key: $size bytes, within one footer read (64 KiB): make it larger"
  gets=$(grep "^GET /$S3_BUCKET/${key//=/%3D}[ ?]" "$T/flaky.count.requests" | grep -v ' 503$' || true)
  [ -n "$gets" ] || fail "$key was not read: $(cat "$T/flaky.count.requests")"
  ! grep -qv ' bytes=[0-9]*-[0-9]*$' <<< "$gets" || fail "$key: a GET without a range: $gets"
  ! grep -q " bytes=0-$((size - 1))$" <<< "$gets" || fail "$key: a GET of the whole object: $gets"
  n=$((n + 1))
done
[ "$n" -gt 0 ] || fail "no Parquet object under out/v/"
pass "s3: the $n Parquet objects are read by ranged GETs only, none of a whole object"

# an object that no manifest lists (as a crashed attempt leaves) beside a listed one: not counted
stray=$(dirname "$mine")/part-999.parquet
s3c "$S3_BUCKET" put "$stray" theirs.parquet
vjson s3.yaml
s3c "$S3_BUCKET" delete "$stray"
[ "$RC" = 0 ] && [ "$(jq -r '.resources[0].dest_rows' <<< "$J")" = 3000 ] \
  || fail "an object no manifest lists was read: exit $RC: $J $(cat verify.err)"
jq -r '.resources[0].destination' <<< "$J" | grep -q "^s3://$S3_BUCKET/out/v ($n objects\?)$" \
  || fail "the destination should count the $n listed objects: $J"
pass "s3: an object no manifest lists is not part of the destination"

# an object a manifest lists that is gone
s3c "$S3_BUCKET" delete "$mine"
vjson s3.yaml
s3c "$S3_BUCKET" put "$mine" mine.parquet
[ "$RC" = 7 ] || fail "a listed object deleted should fail as not found (7): exit $RC: $J $(cat verify.err)"
[ "$(grep -c "s3://$S3_BUCKET/$mine is listed by a manifest but missing" verify.err)" = 1 ] \
  || fail "the error should name s3://$S3_BUCKET/$mine once: $(cat verify.err)"
vjson s3.yaml
[ "$RC" = 0 ] || fail "restored: exit $RC: $J $(cat verify.err)"
pass "s3: a listed object that is gone: one error naming s3://bucket/key (exit 7)"

# the largest file: a data file (the upsert's equality delete file holds only keys)
victim=$(ls -S $(find "$T/wh/db/v/data" -name '*.parquet') | head -1)
cp "$victim" saved.parquet
size=$(stat -c %s "$victim")
printf '\377\377\377\377\377\377\377\377' | dd of="$victim" bs=1 seek=$((size / 2)) conv=notrunc status=none
vjson ice.yaml
[ "$RC" != 0 ] || fail "a damaged iceberg data file verified equal: $J"
# damaged values decode to other values (reported by key, exit 8), or the file no longer
# decodes (the message names it)
if [ "$RC" = 8 ]; then
  [ "$(jq -r '.resources[0].different.count' <<< "$J")" -gt 0 ] || fail "exit 8 without a different key: $J"
else
  grep -q "$victim" verify.err || grep -q "$victim" <<< "$J" || fail "the message should name $victim: $J $(cat verify.err)"
fi
cp saved.parquet "$victim"
vjson ice.yaml
[ "$RC" = 0 ] || fail "the restored iceberg file: exit $RC: $J $(cat verify.err)"
pass "iceberg: a data file damaged in place fails the check (exit $RC); restored, equal again"

# ---- 4. an iceberg *source*: read through ferry (the stream side) ------------------------------------
pgq -c "CREATE SCHEMA back"
cat > back.yaml <<EOF
version: 1
name: vl_back
source: {type: iceberg, warehouse: $T/wh, namespace: db, resources: [{table: v}]}
sink: {type: postgres, url: env:PG_URL, schema: back, write: upsert}
EOF
expect_exit 0 ferry run back.yaml --quiet
vjson back.yaml
[ "$RC" = 0 ] || fail "iceberg -> postgres: exit $RC: $J $(cat verify.err)"
pgq -c "UPDATE back.v SET flag = NOT flag WHERE id = 42"
vjson back.yaml
[ "$RC" = 8 ] && [ "$(keys different)" = 42 ] || fail "iceberg -> postgres, one row changed: exit $RC: $J"
pass "an iceberg source verifies against its PostgreSQL copy; a changed row is reported by key"
