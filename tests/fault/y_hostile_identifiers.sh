#!/usr/bin/env bash
# shared: s3
# labels: asan
# tests/fault/y_hostile_identifiers.sh - hostile_identifiers for the publishing sinks (the
# postgres and sqlite connectors are tests/e2e/pg_security.sh). A sqlite source table whose
# table and column names hold quotes, spaces, semicolons, `--`, dots, unicode and 63/64/100
# byte names, with SQL- and CSV-looking values, is copied by ferry:
#   1. into the files sink as JSON Lines, CSV and Parquet: every name and value round-trips
#      exactly, read back by jq, Python's csv module and DuckDB (not ferry) from the files the
#      run manifest lists; a canary file in the destination folder and one beside it untouched;
#   2. table names that would leave the destination folder (`../x`, `..`, `.x`, `a/b`, `_runs`,
#      as the source table's name and as the resource's `target`) are refused with one
#      message naming the table, exit 2, and nothing is written anywhere (no part, no
#      manifest, no file outside the folder; the run fails at the sink's prepare step);
#   3. into the iceberg sink (filesystem catalog) under a hostile namespace: the table's schema
#      names and its rows (the data files icebird lists, read by DuckDB) equal the source; the
#      traversal names refused as table and as `namespace`;
#   4. into the s3 sink (s3rver, SigV4-checked) as JSON Lines, CSV and Parquet: the object
#      keys carry the hostile table name (signed and percent-encoded), fetched by an
#      independent signed client, every name and value exact; traversal targets refused.
# The sqlite source is given the table as written with `target:`, and in its quoted forms
# ("...", main."..."), whose default target is the unquoted name; malformed quoted names are
# "not found"; a 280-byte table name fails the files sink naming the folder.
. "$(dirname "$0")/../e2e/lib.sh"

TBL="Tä\"b'le; DROP TABLE canary; -- .x 表"
C_ID="I\"d; --"
C_TXT="Wé'ird; DROP TABLE canary; -- col.umn 表"
C_SP="with  space,comma"
C63="L$(printf 'ü%.0s' $(seq 1 31))"          # 63 bytes
C64="M$(printf 'ü%.0s' $(seq 1 31))x"         # 64 bytes
C100="N$(printf 'é%.0s' $(seq 1 49))x"        # 100 bytes
[ "$(printf '%s' "$C63" | wc -c)" = 63 ] && [ "$(printf '%s' "$C64" | wc -c)" = 64 ] &&
  [ "$(printf '%s' "$C100" | wc -c)" = 100 ] || fail "test setup: name lengths"
qi() { local s=${1//\"/\"\"}; printf '"%s"' "$s"; }
yq() { local s=${1//\'/\'\'}; printf "'%s'" "$s"; }

mkdir -p w
q w/src.db "CREATE TABLE $(qi "$TBL") ($(qi "$C_ID") INTEGER PRIMARY KEY, $(qi "$C_TXT") TEXT NOT NULL,
  $(qi "$C_SP") TEXT NOT NULL, $(qi "$C63") INTEGER NOT NULL, $(qi "$C64") TEXT NOT NULL, $(qi "$C100") TEXT NOT NULL);
CREATE TABLE canary (v TEXT); INSERT INTO canary VALUES ('alive');
CREATE TABLE \"../x\" (id INTEGER PRIMARY KEY, v TEXT); INSERT INTO \"../x\" VALUES (1, 'escape');
CREATE TABLE \"..\" (id INTEGER PRIMARY KEY); INSERT INTO \"..\" VALUES (1);
CREATE TABLE \".x\" (id INTEGER PRIMARY KEY); INSERT INTO \".x\" VALUES (1);
CREATE TABLE \"a/b\" (id INTEGER PRIMARY KEY); INSERT INTO \"a/b\" VALUES (1);
CREATE TABLE \"_runs\" (id INTEGER PRIMARY KEY); INSERT INTO \"_runs\" VALUES (1);
CREATE TABLE plain (id INTEGER PRIMARY KEY); INSERT INTO plain VALUES (1);"
python3 - w/src.db "$TBL" <<'EOF'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
vals = ["'; DROP TABLE canary; --", 'a "quoted", value', 'line\nbreak\r\nand cr', 'tab\there',
        '表 ü é 🙂', '\\N', 'NULL', '', ' ', '--', '$$ $1 %s', '../../etc/passwd', ',,,', '"']
rows = []
for i in range(1, 1201):
    v = vals[i % len(vals)]
    rows.append((i, v, vals[(i * 7) % len(vals)] + str(i), i * 1000003, v[::-1], 'x' * (i % 50)))
q = '"' + sys.argv[2].replace('"', '""') + '"'
db.executemany('INSERT INTO %s VALUES (?,?,?,?,?,?)' % q, rows)
db.commit()
EOF
CANARY_SUM=$(q w/src.db "SELECT group_concat(v) FROM canary")
echo keep > w/canary.txt
mkdir -p w/out && echo keep > w/out/canary.txt

pipeline() { # FILE NAME TABLE_YAML SINK_LINES...
  local file=$1 name=$2 res=$3; shift 3
  {
    echo "version: 1"
    echo "name: $name"
    echo "source:"
    echo "  type: sqlite"
    echo "  path: $T/w/src.db"
    echo "  resources:"
    echo "    - $res"
    echo "sink:"
    for l in "$@"; do echo "  $l"; done
    echo "batch: {rows: 250}"
  } > "$file"
}

# compare.py SRC_DB TABLE FORMAT FILE...: the files' column names (in order) and rows (as
# text, a multiset) equal the source table's.
cat > compare.py <<'EOF'
import collections, csv, io, json, sqlite3, sys
src, table, fmt, files = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
db = sqlite3.connect(src)
cur = db.execute('SELECT * FROM "%s"' % table.replace('"', '""'))
want_cols = [d[0] for d in cur.description]
want = collections.Counter(tuple(str(v) for v in r) for r in cur)
got = collections.Counter()
for f in files:
    if fmt == 'jsonl':
        for line in open(f, encoding='utf-8'):
            o = json.loads(line)
            if list(o.keys()) != want_cols:
                sys.exit('%s: keys %r, want %r' % (f, list(o.keys()), want_cols))
            got[tuple(str(v) for v in o.values())] += 1
    elif fmt == 'csv':
        with open(f, encoding='utf-8', newline='') as fh:
            r = csv.reader(fh)
            head = next(r)
            if head != want_cols:
                sys.exit('%s: header %r, want %r' % (f, head, want_cols))
            for row in r:
                got[tuple(row)] += 1
    else:  # read_parquet.mjs output: a header line, then JSON arrays of text
        with open(f, encoding='utf-8') as fh:
            head = json.loads(fh.readline())
            names = [c['name'] for c in head['columns']]
            if names != want_cols:
                sys.exit('%s: columns %r, want %r' % (f, names, want_cols))
            for line in fh:
                got[tuple(str(v) for v in json.loads(line))] += 1
if got != want:
    print('%s/%s: %d missing, %d extra' % (table, fmt, sum((want - got).values()),
          sum((got - want).values())), file=sys.stderr)
    for r in list((want - got).elements())[:3]: print('  missing', r, file=sys.stderr)
    for r in list((got - want).elements())[:3]: print('  extra  ', r, file=sys.stderr)
    sys.exit(1)
print('%s/%s: %d rows equal' % (table, fmt, sum(got.values())))
EOF

untouched() { # the canaries, and nothing in w/ but what the test made
  [ "$(q w/src.db "SELECT group_concat(v) FROM canary")" = "$CANARY_SUM" ] || fail "canary table changed"
  [ "$(cat w/canary.txt)" = keep ] && [ "$(cat w/out/canary.txt)" = keep ] || fail "canary file changed"
  local extra
  extra=$(cd w && find . -mindepth 1 -maxdepth 1 ! -name out ! -name 'src.db*' ! -name canary.txt \
    ! -name 'wh*' -printf '%f\n')
  [ -z "$extra" ] || fail "files written outside the destination folder: $extra"
  [ ! -e "$T/x" ] && [ ! -e "$T/w/x" ] || fail "a table name escaped the destination folder"
}

# ---- 1. files: jsonl, csv, parquet ----------------------------------------------------------
# The default target is the name after its last dot outside quotes (docs/pipeline-file.md):
# the resource names the table quoted ("...", main."..."; the default target is then the
# unquoted name), or as it is with `target:` set.
RES="{table: $(yq "$TBL"), target: $(yq "$TBL"), mode: full}"
declare -A FRES=([jsonl]="{table: $(yq "$(qi "$TBL")"), mode: full}"
  [csv]="{table: $(yq "main.$(qi "$TBL")"), mode: full}" [parquet]="$RES")
for fmt in jsonl csv parquet; do
  rm -rf "w/out/_runs" w/out/T*
  pipeline f.yaml "hostile-$fmt" "${FRES[$fmt]}" "type: files" "path: $T/w/out" "format: $fmt" "part_rows: 500"
  expect_exit 0 ferry run f.yaml --quiet
  files=()
  for p in $(jq -r '.files[].path | @base64' w/out/_runs/*/_manifest.json); do
    p=$(printf '%s' "$p" | base64 -d)
    [ "$(jq -r --arg p "$p" '.files[] | select(.path == $p) | .table' w/out/_runs/*/_manifest.json)" = "$TBL" ] \
      || fail "$fmt: the manifest's table name differs from the source's"
    [ "${p%%/*}" = "$TBL" ] || fail "$fmt: part $p is not in the table's folder"
    f="w/out/$p"
    [ -f "$f" ] || fail "$fmt: listed part missing: $p"
    if [ "$fmt" = parquet ]; then
      nodetool "$FERRY_SRC/tests/tools/read_parquet.mjs" --reader=duckdb "$f" > "pq.${#files[@]}.jsonl" \
        || fail "DuckDB could not read $f"
      files+=("pq.${#files[@]}.jsonl")
    else
      files+=("$f")
    fi
  done
  [ "${#files[@]}" -ge 2 ] || fail "$fmt: part_rows 500 should give 3 parts"
  python3 compare.py w/src.db "$TBL" "$fmt" "${files[@]}" || fail "$fmt: round trip differs"
  untouched
  pass "files/$fmt: hostile table and column names (63, 64, 100 bytes) and values round-trip exactly"
done

# ---- 2. names that would leave the folder -------------------------------------------------------
refused() { # LABEL YAML: exit 2, one message naming the table, nothing written
  local label=$1
  expect_exit 2 ferry run "$2"
  [ "$(printf '%s\n' "$OUT" | grep -c -i 'error')" -le 1 ] || fail "$label: one message, got: $OUT"
  printf '%s' "$OUT" | grep -q -- "$3" || fail "$label: the message should name $3: $OUT"
  untouched
  echo "ok - $label: $(printf "%s\n" "$OUT" | grep -i error)"
}
rm -rf w/out/_runs w/out/T*
for t in '../x' 'a/b'; do # as the source table (default target "/x" and "a/b")
  pipeline t.yaml trav "{table: $(yq "$t"), mode: full}" "type: files" "path: $T/w/out" "format: jsonl"
  refused "files table $t" t.yaml "cannot name a folder"
done
for t in '../x' '..' '.x' 'a/b' '_runs' "$T/x"; do
  pipeline t.yaml trav "{table: plain, target: $(yq "$t"), mode: full}" "type: files" "path: $T/w/out" "format: jsonl"
  refused "files target $t" t.yaml "\"$t\" cannot name a folder"
done
[ -z "$(ls -A w/out | grep -v canary.txt)" ] || fail "a refused run wrote into the folder: $(ls -A w/out)"
pass "files: traversal names refused, nothing written"
# Malformed quoted names are "not found", named as written; nothing is read or written.
for t in '"unterminated' '"a"b' 'main."' '""'; do
  pipeline t.yaml quoted "{table: $(yq "$t"), target: ok, mode: full}" "type: files" "path: $T/w/out" "format: jsonl"
  expect_exit 7 ferry run t.yaml
  printf '%s' "$OUT" | grep -q -F "table \"$t\" not found" || fail "malformed quoted name $t: $OUT"
done
[ -z "$(ls -A w/out | grep -v canary.txt)" ] || fail "a refused run wrote into the folder: $(ls -A w/out)"
pass "sqlite source: malformed quoted names are not found, named as written"
# A name longer than the file system allows (280 bytes; 255 per folder name) fails the run
# naming the folder and the reason, before any part is written.
LONG=$(printf 'é%.0s' $(seq 1 140))
pipeline t.yaml long "{table: plain, target: $LONG, mode: full}" "type: files" "path: $T/w/out" "format: jsonl"
expect_exit 1 ferry run t.yaml
printf '%s' "$OUT" | grep -q "cannot create folder $T/w/out/$LONG: File name too long" \
  || fail "a too long table name: $OUT"
[ -z "$(ls -A w/out | grep -v canary.txt)" ] || fail "a refused run wrote into the folder: $(ls -A w/out)"
untouched
pass "files: a 280-byte table name fails naming the folder (File name too long), nothing written"

# ---- 3. iceberg (filesystem catalog) -----------------------------------------------------------
NS="ns; -- \"q' ü"
pipeline i.yaml hostile-ice "$RES" "type: iceberg" "warehouse: $T/w/wh" "namespace: $(yq "$NS")"
expect_exit 0 ferry run i.yaml --quiet
[ -d "w/wh/$NS/$TBL/metadata" ] || fail "iceberg: table folder not where the names say: $(find w/wh -maxdepth 2)"
M=$(ls "w/wh/$NS/$TBL"/metadata/v*.metadata.json | sort -V | tail -n 1)
python3 - "$M" w/src.db "$TBL" <<'PY' || fail "iceberg: schema names differ from the source"
import json, sqlite3, sys
m = json.load(open(sys.argv[1], encoding='utf-8'))
got = [f['name'] for f in m['schemas'][-1]['fields']]
cur = sqlite3.connect(sys.argv[2]).execute('SELECT * FROM "%s" LIMIT 0' % sys.argv[3].replace('"', '""'))
want = [d[0] for d in cur.description]
if got != want: sys.exit('schema %r, want %r' % (got, want))
PY
# icebird lists the live data files; DuckDB reads them (by name: ferry writes the Iceberg
# names into the Parquet schema with their field ids). icebird's own row reader looks columns
# up by Avro-sanitized names (`_xHH`) and cannot read
# these columns: see tests/fault/README.md.
nodetool "$FERRY_SRC/tests/tools/read_iceberg.mjs" "$T/w/wh" "$NS" --files "$TBL" > ice-files.jsonl \
  || fail "icebird could not list the table's files"
files=()
while read -r f; do
  f=$(printf '%s' "$f" | python3 -c 'import sys, urllib.parse; print(urllib.parse.unquote(sys.stdin.read().removeprefix("file://")))')
  nodetool "$FERRY_SRC/tests/tools/read_parquet.mjs" --reader=duckdb "$f" > "ice.${#files[@]}.jsonl" || fail "DuckDB could not read $f"
  files+=("ice.${#files[@]}.jsonl")
done < <(jq -r '.data_file.file_path' ice-files.jsonl)
[ "${#files[@]}" -ge 1 ] || fail "iceberg: no data file listed"
python3 compare.py w/src.db "$TBL" parquet "${files[@]}" || fail "iceberg: round trip differs"
untouched
pass "iceberg: hostile namespace, table and column names and values round-trip exactly (icebird's file list, DuckDB)"
for t in '../x' '..' '.x' 'a/b' "$T/x"; do
  pipeline t.yaml trav-ice "{table: plain, target: $(yq "$t"), mode: full}" "type: iceberg" "warehouse: $T/w/wh2"
  refused "iceberg target $t" t.yaml "\"$t\" cannot name a table"
  pipeline t.yaml trav-ice "{table: plain, mode: full}" "type: iceberg" "warehouse: $T/w/wh2" "namespace: $(yq "$t")"
  refused "iceberg namespace $t" t.yaml "namespace"
done
[ -z "$(find w/wh2 -type f 2>/dev/null)" ] || fail "a refused iceberg run wrote files: $(find w/wh2 -type f)"
pass "iceberg: traversal names refused as table and namespace, nothing written"

# ---- 4. s3 -------------------------------------------------------------------------------------
. "$FERRY_SRC/tests/s3/s3.sh"
s3_have || fail "node and tests/tools/node_modules (s3rver, aws4) are needed: run scripts/install-deps.sh"
export S3_KEY=S3RVER S3_SECRET=S3RVER AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER
s3_start lake
S3SINK=("type: s3" "bucket: $S3_BUCKET" "endpoint: \"$S3_ENDPOINT\"" "path_style: true"
  "access_key_id: env:S3_KEY" "secret_access_key: env:S3_SECRET")
run=0
for fmt in jsonl csv parquet; do
  pipeline s.yaml "hostile-s3-$fmt" "$RES" "${S3SINK[@]}" "prefix: $fmt" "format: $fmt" "part_rows: 500"
  expect_exit 0 ferry run s.yaml --json
  run=$(json_field "$OUT" '.run_id // .id // empty')
  [ -n "$run" ] || run=$(ferry runs --json | jq -r '.[0].id')
  rm -rf "s3-$fmt" && mkdir -p "s3-$fmt"
  s3c "$S3_BUCKET" get "$fmt/_runs/run=$run/_manifest.json" > "s3-$fmt/_manifest.json" || fail "s3/$fmt: no manifest for run $run"
  files=()
  while IFS= read -r b64; do
    key=$(printf '%s' "$b64" | base64 -d)
    [ "$(jq -r --arg k "$key" '.objects[] | select(.key == $k) | .table' "s3-$fmt/_manifest.json")" = "$TBL" ] \
      || fail "s3/$fmt: the manifest's table name differs from the source's"
    [[ $key == "$fmt/$TBL/run=$run/"* ]] || fail "s3/$fmt: object $key is not under the table's prefix"
    f="s3-$fmt/obj.${#files[@]}"
    s3c "$S3_BUCKET" get "$key" > "$f" || fail "s3/$fmt: listed object $key cannot be read"
    if [ "$fmt" = parquet ]; then
      nodetool "$FERRY_SRC/tests/tools/read_parquet.mjs" --reader=duckdb "$f" > "$f.jsonl" || fail "DuckDB could not read $key"
      f="$f.jsonl"
    fi
    files+=("$f")
  done < <(jq -r '.objects[].key | @base64' "s3-$fmt/_manifest.json")
  [ "${#files[@]}" -ge 2 ] || fail "s3/$fmt: part_rows 500 should give 3 objects"
  python3 compare.py w/src.db "$TBL" "$fmt" "${files[@]}" || fail "s3/$fmt: round trip differs"
  untouched
  pass "s3/$fmt: hostile table and column names and values round-trip exactly (signed keys)"
done
for t in '../x' '..' '.x' 'a/b' '_runs'; do
  pipeline t.yaml trav-s3 "{table: plain, target: $(yq "$t"), mode: full}" "${S3SINK[@]}" "prefix: trav" "format: jsonl"
  refused "s3 target $t" t.yaml "\"$t\" cannot name a folder"
done
[ -z "$(s3c "$S3_BUCKET" list "trav/")" ] || fail "a refused s3 run uploaded: $(s3c "$S3_BUCKET" list "trav/")"
pass "s3: traversal names refused, nothing uploaded"
