#!/usr/bin/env bash
# labels: asan
# The files connector end to end, with readers ferry did not write:
#   1. sample -> files (csv, jsonl); the CSV parts read by `sqlite3 .import`, the JSONL parts by
#      `jq`, only the files the run's manifest lists, compared with the same sample copied into
#      sqlite; the manifest's sizes and CRC32-C checked against the bytes on disk;
#   2. files (csv) -> sqlite: set equality with the sample copied into sqlite;
#   3. crashes before the commit and between the part renames and the manifest: nothing
#      published (no part file without a manifest), the next run resumes and completes;
#   4. kill -9 while reading a big CSV into sqlite (append, exactly-once checkpoints): the
#      resumed run continues inside the file: no missing and no duplicate row.
. "$(dirname "$0")/lib.sh"
ROWS=${ROWS:-3000}
BIG=${BIG:-200000}

# ---- reference: the same sample in sqlite ------------------------------------------------------
sample_pipeline ref.yaml ref "$ROWS" "type: sqlite" "path: ref.db" "write: append"
expect_exit 0 ferry run ref.yaml

# ---- 1. sample -> csv, read by sqlite3 -----------------------------------------------------------
sample_pipeline csv.yaml to-csv "$ROWS" "type: files" "path: out-csv/" "format: csv" "write: append" \
  "part_rows: 1000"
expect_exit 0 ferry run csv.yaml
check_manifest out-csv
[ "$(jq '.rows' out-csv/_runs/*/_manifest.json)" = $((2 * ROWS)) ] || fail "manifest rows"
[ "$(jq '[.files[] | select(.table == "orders")] | length' out-csv/_runs/*/_manifest.json)" -ge 3 ] \
  || fail "part_rows: 1000 should split $ROWS orders into several parts"
first=1
for p in $(jq -r '.files[] | select(.table == "orders") | .path' out-csv/_runs/*/_manifest.json); do
  if [ $first = 1 ]; then q imp.db ".import --csv out-csv/$p c_orders"; first=0
  else q imp.db ".import --csv --skip 1 out-csv/$p c_orders"; fi
done
[ "$(q imp.db 'SELECT count(*) FROM c_orders')" = "$ROWS" ] || fail "sqlite3 .import: row count"
# sqlite3 reads an empty field as '', so NULL and '' compare equal on this side only (jq below
# tells them apart). Timestamps are compared as instants.
CSV_SIDE="SELECT CAST(id AS INTEGER), CAST(customer_id AS INTEGER), status, CAST(quantity AS INTEGER),
  amount, CAST(NULLIF(discount, '') AS REAL), CASE express WHEN 'true' THEN 1 WHEN 'false' THEN 0 END,
  note, strftime('%Y-%m-%d %H:%M:%f', substr(created_at, 1, length(created_at) - 3)),
  strftime('%Y-%m-%d %H:%M:%f', substr(updated_at, 1, length(updated_at) - 3)) FROM main.c_orders"
REF_SIDE="SELECT id, customer_id, status, quantity, amount, discount, express, coalesce(note, ''),
  strftime('%Y-%m-%d %H:%M:%f', created_at), strftime('%Y-%m-%d %H:%M:%f', updated_at) FROM r.orders"
d1=$(q imp.db "ATTACH 'ref.db' AS r; SELECT count(*) FROM ($CSV_SIDE EXCEPT $REF_SIDE)")
d2=$(q imp.db "ATTACH 'ref.db' AS r; SELECT count(*) FROM ($REF_SIDE EXCEPT $CSV_SIDE)")
[ "$d1" = 0 ] && [ "$d2" = 0 ] || fail "CSV read by sqlite3 differs from the sample: $d1 / $d2 rows"
pass "sample -> csv: sqlite3 .import reads the listed parts equal to the sample, manifest CRCs hold"

# ---- 1b. sample -> jsonl, read by jq -------------------------------------------------------------
sample_pipeline jsonl.yaml to-jsonl "$ROWS" "type: files" "path: out-jsonl/" "format: jsonl" \
  "write: append"
expect_exit 0 ferry run jsonl.yaml
check_manifest out-jsonl
files=$(jq -r '.files[] | select(.table == "orders") | .path' out-jsonl/_runs/*/_manifest.json | sed 's|^|out-jsonl/|')
# shellcheck disable=SC2086
jq -r '[.id, .customer_id, .status, .quantity, .amount, (.discount | tostring),
        (if .express then 1 else 0 end), (.note // "<NULL>"), .created_at[0:19]] | @tsv' $files \
  | sort > jq_orders.tsv
# Build the reference TSV from JSON so that escaping is jq's own on both sides.
q ref.db "SELECT json_object('id', id, 'customer_id', customer_id, 'status', status,
  'quantity', quantity, 'amount', amount, 'discount', discount, 'express', express, 'note', note,
  'created_at', replace(substr(created_at, 1, 23), ' ', 'T')) FROM orders" \
  | jq -r '[.id, .customer_id, .status, .quantity, .amount, (.discount | tostring), .express,
           (.note // "<NULL>"), .created_at[0:19]] | @tsv' | sort > ref_orders.tsv
diff -q jq_orders.tsv ref_orders.tsv >/dev/null \
  || { diff jq_orders.tsv ref_orders.tsv | head -5 >&2; fail "JSONL read by jq differs from the sample"; }
[ "$(wc -l < jq_orders.tsv)" = "$ROWS" ] || fail "jq: row count"
# Types survive: numbers are numbers, decimals strings, NULL is null and "" is "".
ufiles=$(jq -r '.files[] | select(.table == "users") | .path' out-jsonl/_runs/*/_manifest.json | sed 's|^|out-jsonl/|')
# shellcheck disable=SC2086
jq -e -s 'all(.[]; (.id | type) == "number" and (.balance | type) == "string"
          and (.score | type) == "number" and ((.avatar == null) or (.avatar | type) == "string"))' \
  $ufiles >/dev/null || fail "JSONL types"
[ "$(jq -r 'select(.note == "") | .id' $files | wc -l)" = "$(q ref.db "SELECT count(*) FROM orders WHERE note = ''")" ] \
  || fail "JSONL: empty strings"
[ "$(jq -r 'select(.note == null) | .id' $files | wc -l)" = "$(q ref.db "SELECT count(*) FROM orders WHERE note IS NULL")" ] \
  || fail "JSONL: NULLs"
# shellcheck disable=SC2086
jq -r '[.id, .uuid, .balance, .big_number, .profile, (.avatar // "" | @base64d | length)] | @tsv' $ufiles | sort > jq_users.tsv
q ref.db "SELECT json_object('id', id, 'uuid', uuid, 'balance', balance, 'big_number', big_number,
  'profile', profile) FROM users" | jq -r '[.id, .uuid, .balance, .big_number, .profile] | @tsv' \
  | sort > ref_users.tsv
cut -f1-5 jq_users.tsv | diff -q - ref_users.tsv >/dev/null || fail "JSONL users differ from the sample"
pass "sample -> jsonl: jq reads the listed parts equal to the sample (types, NULL vs empty)"

# ---- 2. files (csv) -> sqlite --------------------------------------------------------------------
cat > back.yaml <<EOF
version: 1
name: back
source:
  type: files
  format: csv
  resources:
    - table: orders
      path: "out-csv/orders/part-*.csv"
      schema: {id: int64, customer_id: int32, status: utf8, quantity: int16,
               amount: "decimal128(12,2)", discount: float64, express: bool, note: utf8,
               created_at: timestamptz, updated_at: timestamptz}
sink: {type: sqlite, path: back.db, write: append}
EOF
expect_exit 0 ferry run back.yaml
same_table ref.db back.db orders || fail "files(csv) -> sqlite differs from the sample"
pass "files(csv) -> sqlite: set equal to the sample, NULL and empty strings included"

# ---- 3. crashes before publishing ---------------------------------------------------------------
sample_pipeline crash.yaml crash 20000 "type: files" "path: out-crash/" "format: csv" "write: append" \
  "part_rows: 3000"
expect_exit 137 env FERRY_FAILPOINTS=before_sink_commit=crash "$FERRY_BIN" run crash.yaml --quiet
[ -z "$(find out-crash -name 'part-*')" ] || fail "a crash before commit published parts"
[ -z "$(find out-crash -name '_manifest.json')" ] || fail "a crash before commit wrote a manifest"
[ -n "$(find out-crash -name '.tmp-*')" ] || fail "the crashed run should have left temporary files"
# Renamed parts but no manifest yet: a reader still sees nothing; the next attempt cleans up.
expect_exit 137 env FERRY_FAILPOINTS=files_before_manifest=crash "$FERRY_BIN" run crash.yaml --quiet
[ -n "$(find out-crash -name 'part-*')" ] || fail "the failpoint should sit after the renames"
[ -z "$(find out-crash -name '_manifest.json')" ] || fail "no manifest before the failpoint"
expect_exit 0 ferry run crash.yaml --json
json_field "$OUT" '.state' | grep -qx completed || fail "resume after the crashes: $OUT"
check_manifest out-crash
[ "$(jq '.rows' out-crash/_runs/*/_manifest.json)" = 40000 ] || fail "resumed run: manifest rows"
# A real SIGKILL at a random moment of a long write, then a resume.
sample_pipeline kill.yaml kill 300000 "type: files" "path: out-kill/" "format: jsonl" "write: append" \
  "part_rows: 50000"
"$FERRY_BIN" run kill.yaml --quiet > kill.log 2>&1 &
pid=$!
sleep "0.$((3 + RANDOM % 6))"
kill -9 "$pid" 2>/dev/null || true
wait "$pid" 2>/dev/null || true
if [ -z "$(find out-kill -name '_manifest.json' 2>/dev/null)" ]; then
  [ -z "$(find out-kill -name 'part-*' 2>/dev/null)" ] || fail "killed before its manifest, yet parts are published"
fi
expect_exit 0 ferry run kill.yaml --quiet
check_manifest out-kill
total=$(cat out-kill/_runs/*/_manifest.json | jq -s 'map(.rows) | add')
[ "$total" = 600000 ] || fail "after kill -9 and resume: $total rows listed, want 600000"
lines=$(cat $(cat out-kill/_runs/*/_manifest.json | jq -r '.files[].path' | sed 's|^|out-kill/|') | wc -l)
[ "$lines" = 600000 ] || fail "after kill -9 and resume: $lines JSONL lines"
pass "crash before commit / before the manifest / kill -9: nothing published early, resume completes"

# ---- 4. kill -9 mid-read of a big CSV: resume inside the file -------------------------------------
sample_pipeline big.yaml big "$BIG" "type: files" "path: big/" "format: csv" "write: append"
sed -i '/table: users/d' big.yaml
expect_exit 0 ferry run big.yaml --quiet
bigfile=$(ls big/orders/part-*.csv)
gzip -k "$bigfile"
for variant in csv gz; do
  src="$bigfile"; [ $variant = gz ] && src="$bigfile.gz"
  cat > read-$variant.yaml <<EOF
version: 1
name: read-$variant
source:
  type: files
  format: csv
  resources:
    - table: orders
      path: "$src"
      schema: {id: int64, customer_id: int32, status: utf8, quantity: int16,
               amount: "decimal128(12,2)", discount: float64, express: bool, note: utf8,
               created_at: timestamptz, updated_at: timestamptz}
sink: {type: sqlite, path: read-$variant.db, write: append}
batch: {rows: 2000}
EOF
  # A deterministic crash after some batches are durable, then a random SIGKILL.
  expect_exit 137 env FERRY_FAILPOINTS=after_sink_apply=crash@20 "$FERRY_BIN" run read-$variant.yaml --quiet
  partial=$(q read-$variant.db 'SELECT count(*) FROM orders')
  [ "$partial" -gt 0 ] && [ "$partial" -lt "$BIG" ] || fail "$variant: the crash should leave a partial copy ($partial rows)"
  "$FERRY_BIN" run read-$variant.yaml > read.log 2>&1 &
  pid=$!
  # The SIGKILL lands at a random moment after the run has said it resumes (a sanitizer build
  # can take longer than the random delay to get there).
  resumed=0; wait_for_log read.log resuming "$pid" 1200 && resumed=1
  sleep "0.$((1 + RANDOM % 4))"
  kill -9 "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  [ $resumed = 1 ] || grep -q 'resuming' read.log \
    || fail "$variant: the run after the crash should resume: $(cat read.log)"
  # Unless the SIGKILL came too late, finish the run (a new run would append everything again).
  state=$(ferry runs --pipeline "read-$variant" --json | jq -r '.[0].state')
  if [ "$state" != completed ]; then
    expect_exit 0 ferry run read-$variant.yaml
    printf '%s' "$OUT" | grep -q 'resuming' || fail "$variant: the last run should resume: $OUT"
  fi
  sample_pipeline ref-big.yaml ref-big "$BIG" "type: sqlite" "path: ref-big.db" "write: append"
  sed -i '/table: users/d' ref-big.yaml
  [ -f ref-big.db ] || expect_exit 0 ferry run ref-big.yaml --quiet
  same_table ref-big.db read-$variant.db orders \
    || fail "$variant: after the crashes the copy differs from the source (missing or duplicate rows)"
  pass "kill -9 mid-read ($variant): resumed inside the file, no missing and no duplicate row"
done

# ---- on_error: skip, and a clear error otherwise --------------------------------------------------
printf 'id,v\n1,a\n2,"b\nx,c\n3,d\n' > bad.csv
printf 'id,v\n1,a\nnope,b\n3,c\n' > bad2.csv
cat > bad.yaml <<EOF
version: 1
name: bad
source:
  type: files
  resources:
    - {table: t, path: bad2.csv, schema: {id: int64, v: utf8}}
sink: {type: sqlite, path: bad.db, write: append}
EOF
expect_exit 1 ferry run bad.yaml
printf '%s' "$OUT" | grep -q 'bad2.csv:3:1: column "id": "nope" is not a int64 value' \
  || fail "a bad value should name file:line:column: $OUT"
sed -i 's/type: files/type: files\n  on_error: skip/' bad.yaml
sed -i 's/name: bad/name: bad-skip/' bad.yaml
expect_exit 0 ferry run bad.yaml
printf '%s' "$OUT" | grep -q 'skipped 1 bad record' || fail "on_error: skip should report a count: $OUT"
[ "$(q bad.db 'SELECT group_concat(id) FROM t')" = "1,3" ] || fail "on_error: skip kept the wrong rows"
pass "bad values: file:line:column, or skipped and counted"

# ---- a full disk while writing: a clear error naming the file, nothing published -----------------
files_enospc csv
pass "ENOSPC while writing: the error names the file, the aborted run leaves nothing"
