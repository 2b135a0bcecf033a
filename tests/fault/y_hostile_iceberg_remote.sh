#!/usr/bin/env bash
# shared: s3
# hostile_identifiers for the iceberg sink on remote catalogs and warehouses: a sqlite source
# table whose table and column names hold quotes, spaces, `;`, `--`, percent signs (`%`,
# `%2F`, `%00`), `?`, `#`, unicode and 63/64-byte names, with hostile values, is copied
#   1. into an S3 warehouse (s3rver, SigV4 checked on every request; SQL catalog in SQLite)
#      under a hostile namespace: the schema names (metadata object fetched by the independent
#      signed client) and the rows (the data files icebird lists over S3, fetched by the signed
#      client and read by DuckDB) equal the source; every object ferry wrote lies under
#      wh/<namespace>/<table>/ of the bucket, keys exactly as the names say;
#   2. through the REST catalog (tests/tools/rest_catalog.mjs, loopback) under a hostile
#      namespace: the catalog received the names exactly (its state keyed by namespace and
#      table), the schema names and the rows (icebird's file list, DuckDB) equal the source;
#   3. traversal names (`../x`, `..`, `a/b`, an absolute path) as the table (`target`) and as
#      the namespace, on both: refused with exit 2 and one message, nothing written (no new
#      object, no catalog change, no file).
# Canaries: objects beside the warehouse and inside it (keys and ETags), a canary iceberg table written
# first on each catalog (its metadata location and rows unchanged at the end), the canary
# table of the source database.
. "$(dirname "$0")/../e2e/lib.sh"
. "$FERRY_SRC/tests/s3/s3.sh"
s3_have || fail "node and tests/tools/node_modules (s3rver, aws4) are needed: run scripts/install-deps.sh"
[ -d "$FERRY_SRC/tests/tools/node_modules/icebird" ] || fail "tests/tools/node_modules/icebird missing: npm ci --prefix tests/tools"
READ="$FERRY_SRC/tests/tools/read_iceberg.mjs"
export S3_KEY=S3RVER S3_SECRET=S3RVER AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER
export REST_TOKEN="rest-token-$RANDOM$RANDOM"
node "$FERRY_SRC/tests/tools/rest_catalog.mjs" "$T/rest" "$T/rest.port" > "$T/rest.log" 2>&1 &
REST_PID=$!
s3_start lake
export S3_ENDPOINT
trap 'rc=$?; kill "$REST_PID" 2>/dev/null; wait "$REST_PID" 2>/dev/null; s3_stop; if [ $rc -ne 0 ]; then echo "FAILED (workdir kept: $T)"; else rm -rf "$T"; fi; exit $rc' EXIT
for _ in $(seq 1 100); do [ -s "$T/rest.port" ] && break; sleep 0.1; done
[ -s "$T/rest.port" ] || { cat "$T/rest.log" >&2; fail "the REST catalog did not start"; }
URI="http://127.0.0.1:$(cat "$T/rest.port")"

TBL="Tä\"b'le; -- 100% %2F%00 ?#表"
NS="ns %41%2F \"q'; -- ü"
C_ID="I\"d; --"
C_PCT="p%20ct %s %% %2F"
C_SP="with  space,comma"
C63="L$(printf 'ü%.0s' $(seq 1 31))"  # 63 bytes
C64="M$(printf 'ü%.0s' $(seq 1 31))x" # 64 bytes
[ "$(printf '%s' "$C63" | wc -c)" = 63 ] && [ "$(printf '%s' "$C64" | wc -c)" = 64 ] || fail "test setup: name lengths"
qi() { local s=${1//\"/\"\"}; printf '"%s"' "$s"; }
yq() { local s=${1//\'/\'\'}; printf "'%s'" "$s"; }

q src.db "CREATE TABLE $(qi "$TBL") ($(qi "$C_ID") INTEGER PRIMARY KEY, $(qi "$C_PCT") TEXT NOT NULL,
  $(qi "$C_SP") TEXT NOT NULL, $(qi "$C63") INTEGER NOT NULL, $(qi "$C64") TEXT NOT NULL);
CREATE TABLE canary (v TEXT); INSERT INTO canary VALUES ('alive');
CREATE TABLE plain (id INTEGER PRIMARY KEY, v TEXT); INSERT INTO plain VALUES (1, 'one'), (2, 'two');"
python3 - src.db "$TBL" <<'EOF'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
vals = ["'; DROP TABLE canary; --", 'a "quoted", value', 'line\nbreak', '100% %2F %00 %s',
        '表 ü é 🙂', '../../etc/passwd', 'NULL', '', ' ', '"']
q = '"' + sys.argv[2].replace('"', '""') + '"'
db.executemany('INSERT INTO %s VALUES (?,?,?,?,?)' % q,
               [(i, vals[i % len(vals)], vals[(i * 3) % len(vals)] + str(i), i * 1000003,
                 vals[i % len(vals)][::-1]) for i in range(1, 801)])
db.commit()
EOF

pipeline() { # FILE NAME RESOURCE_YAML SINK_LINES...
  local file=$1 name=$2 res=$3; shift 3
  {
    echo "version: 1"
    echo "name: $name"
    echo "source: {type: sqlite, path: $T/src.db, resources: [$res]}"
    echo "sink:"
    for l in "$@"; do echo "  $l"; done
    echo "batch: {rows: 300}"
  } > "$file"
}
RES="{table: $(yq "$TBL"), mode: full}"
TBL0=$TBL
S3SINK=("type: iceberg" "warehouse: s3://$S3_BUCKET/wh" "catalog: sql" "catalog_uri: $T/catalog.db"
        "endpoint: \"$S3_ENDPOINT\"" "path_style: true" "access_key_id: env:S3_KEY" "secret_access_key: env:S3_SECRET")
RESTSINK=("type: iceberg" "warehouse: $T/wh" "catalog: rest" "catalog_uri: \"$URI\"" "catalog_token: env:REST_TOKEN")

# compare.py SRC_DB TABLE SCHEMA_NAMES_JSON FILE...: the schema's names and the rows (read by
# DuckDB: read_parquet.mjs output, a header line then JSON arrays) equal the source table's.
cat > compare.py <<'EOF'
import collections, json, sqlite3, sys
src, table, names, files = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4:]
cur = sqlite3.connect(src).execute('SELECT * FROM "%s"' % table.replace('"', '""'))
want_cols = [d[0] for d in cur.description]
if names != want_cols: sys.exit('schema %r, want %r' % (names, want_cols))
want = collections.Counter(tuple(str(v) for v in r) for r in cur)
got = collections.Counter()
for f in files:
    with open(f, encoding='utf-8') as fh:
        head = json.loads(fh.readline())
        cols = [c['name'] for c in head['columns']]
        if cols != want_cols: sys.exit('%s: columns %r, want %r' % (f, cols, want_cols))
        for line in fh: got[tuple(str(v) for v in json.loads(line))] += 1
if got != want:
    sys.exit('%d missing, %d extra; e.g. missing %r' % (sum((want - got).values()), sum((got - want).values()),
             list((want - got).elements())[:2]))
print('%d rows equal' % sum(got.values()))
EOF

# canaries: objects beside and inside the warehouse (written by the s3 sink: the test server
# wants a checksum on every PUT), their keys and ETags recorded
S3OBJ=("type: s3" "bucket: $S3_BUCKET" "endpoint: \"$S3_ENDPOINT\"" "path_style: true" "access_key_id: env:S3_KEY"
       "secret_access_key: env:S3_SECRET" "format: jsonl")
for pre in canary-out wh/canary-in; do
  pipeline co.yaml "canary-${pre//\//-}" "{table: canary, mode: full}" "${S3OBJ[@]}" "prefix: $pre"
  expect_exit 0 ferry run co.yaml --quiet
done
canary_objects() { local k; for k in $(s3c "$S3_BUCKET" list canary-out/) $(s3c "$S3_BUCKET" list wh/canary-in/); do echo "$k $(s3c "$S3_BUCKET" etag "$k")"; done; }
canary_objects > canary-objects.txt
[ "$(grep -c . canary-objects.txt)" -ge 4 ] || fail "canary objects not written: $(cat canary-objects.txt)"
pipeline c3.yaml canary-s3 "{table: plain, target: canary, mode: full}" "${S3SINK[@]}" "namespace: db"
expect_exit 0 ferry run c3.yaml --quiet
pipeline cr.yaml canary-rest "{table: plain, target: canary, mode: full}" "${RESTSINK[@]}" "namespace: db"
expect_exit 0 ferry run cr.yaml --quiet
s3_canary_meta=$(q catalog.db "SELECT metadata_location FROM iceberg_tables WHERE table_namespace = 'db' AND table_name = 'canary'")
rest_canary_meta=$(jq -r --arg k "db"$'\x1f'"canary" '.tables[$k]' rest/catalog.json)
[ -n "$s3_canary_meta" ] && [ "$rest_canary_meta" != null ] || fail "canary tables not committed"
canaries() {
  [ "$(canary_objects)" = "$(cat canary-objects.txt)" ] || fail "a canary object changed: $(canary_objects)"
  [ "$(q src.db "SELECT group_concat(v) FROM canary")" = alive ] || fail "the canary source table changed"
  [ "$(q catalog.db "SELECT metadata_location FROM iceberg_tables WHERE table_namespace = 'db' AND table_name = 'canary'")" = "$s3_canary_meta" ] \
    || fail "the S3 canary table was committed to"
  [ "$(jq -r --arg k "db"$'\x1f'"canary" '.tables[$k]' rest/catalog.json)" = "$rest_canary_meta" ] || fail "the REST canary table was committed to"
  [ "$(nodetool "$READ" s3://$S3_BUCKET/wh db canary "$(basename "$s3_canary_meta")" | jq -s -c 'map(.v) | sort')" = '["one","two"]' ] || fail "the S3 canary table reads differently"
  [ "$(nodetool "$READ" "$T/wh" db canary "$(basename "$rest_canary_meta")" | jq -s -c 'map(.v) | sort')" = '["one","two"]' ] \
    || fail "the REST canary table reads differently"
}
canaries

# read_files LABEL KIND: the data files the icebird file list ($T/files.jsonl) names, as
# DuckDB reads them; sets FILES
read_files() {
  local f k i=0
  FILES=()
  while read -r f; do
    if [ "$2" = s3 ]; then
      case "$f" in "s3://$S3_BUCKET/wh/$NS/$TBL/data/"*) ;; *) fail "$1: data file outside the table: $f" ;; esac
      k=${f#s3://$S3_BUCKET/}
      s3c "$S3_BUCKET" get "$k" > "dl.$i.parquet" || fail "$1: the signed client cannot fetch $k"
    else
      f=${f#file://} # a path verbatim, as Java's HadoopFileIO and pyiceberg read locations
      case "$f" in "$T/wh/"*) ;; *) fail "$1: data file outside the warehouse: $f" ;; esac
      cp "$f" "dl.$i.parquet"
    fi
    nodetool "$FERRY_SRC/tests/tools/read_parquet.mjs" --reader=duckdb "dl.$i.parquet" > "rows.$i.jsonl" || fail "$1: DuckDB cannot read $f"
    FILES+=("rows.$i.jsonl")
    i=$((i + 1))
  done < <(jq -r '.data_file.file_path' files.jsonl)
  [ $i -ge 1 ] || fail "$1: no data file listed"
}

# ---- 1. S3 warehouse ---------------------------------------------------------------------------
hostile_s3() { # uses NS, TBL, RES
s3c "$S3_BUCKET" list "" | sort > objects.before
pipeline h3.yaml "hostile-s3-$((++HN))" "$RES" "${S3SINK[@]}" "namespace: $(yq "$NS")"
expect_exit 0 ferry run h3.yaml --quiet
loc=$(q catalog.db "SELECT metadata_location FROM iceberg_tables WHERE table_namespace = '${NS//\'/\'\'}' AND table_name = '${TBL//\'/\'\'}'")
[ -n "$loc" ] || fail "s3: no catalog row for the hostile namespace and table: $(q catalog.db 'SELECT table_namespace, table_name FROM iceberg_tables')"
case "$loc" in "s3://$S3_BUCKET/wh/$NS/$TBL/metadata/"*) ;; *) fail "s3: metadata location not where the names say: $loc" ;; esac
s3c "$S3_BUCKET" list "" | sort > objects.after
new=$(comm -13 objects.before objects.after)
bad=$(printf '%s\n' "$new" | grep -v -F "wh/$NS/$TBL/" || true)
[ -z "$bad" ] || fail "s3: objects outside wh/<namespace>/<table>/: $bad"
names=$(s3c "$S3_BUCKET" get "${loc#s3://$S3_BUCKET/}" | jq -c '[.schemas[-1].fields[].name]')
nodetool "$READ" s3://$S3_BUCKET/wh "$NS" --files "$TBL" "$(basename "$loc")" > files.jsonl || fail "s3: icebird cannot list the table's files"
read_files s3 s3
python3 compare.py src.db "$TBL" "$names" "${FILES[@]}" || fail "s3: the round trip differs"
canaries
pass "s3 warehouse: namespace ($(printf '%s' "$NS" | wc -c) bytes), table ($(printf '%s' "$TBL" | wc -c) bytes) and column names and values exact ($(printf '%s\n' "$new" | grep -c .) objects under wh/<namespace>/<table>/; icebird's file list, signed client, DuckDB)"
}

# ---- 2. REST catalog ---------------------------------------------------------------------------
hostile_rest() { # uses NS, TBL, RES
pipeline hr.yaml "hostile-rest-$((++HN))" "$RES" "${RESTSINK[@]}" "namespace: $(yq "$NS")"
expect_exit 0 ferry run hr.yaml --quiet
loc=$(jq -r --arg k "$NS"$'\x1f'"$TBL" '.tables[$k]' rest/catalog.json)
[ "$loc" != null ] || fail "rest: the catalog has no table keyed by the exact names: $(jq -c '.tables | keys' rest/catalog.json)"
jq -e --arg n "$NS" '.namespaces | has($n)' rest/catalog.json > /dev/null || fail "rest: namespace not created with its exact name: $(jq -c '.namespaces | keys' rest/catalog.json)"
mf=${loc#file://}
names=$(jq -c '[.schemas[-1].fields[].name]' "$mf")
tdir=$(dirname "$(dirname "$mf")")
[ "$tdir" = "$T/wh/$NS/$TBL" ] || fail "rest: the table is not at <warehouse>/<namespace>/<table>: $tdir"
nodetool "$READ" "$T/wh" "$NS" --files "$TBL" "$(basename "$mf")" > files.jsonl || fail "rest: icebird cannot list the table's files"
read_files rest rest
python3 compare.py src.db "$TBL" "$names" "${FILES[@]}" || fail "rest: the round trip differs"
canaries
pass "rest catalog: namespace ($(printf '%s' "$NS" | wc -c) bytes) and table ($(printf '%s' "$TBL" | wc -c) bytes) reached the catalog exactly (percent-encoded paths), names and values exact (icebird's file list, DuckDB)"
}

HN=0
hostile_s3
hostile_rest
# 63/64-byte namespace and table names (and the 63/64-byte columns again)
NS="N$(printf 'ü%.0s' $(seq 1 29))% #x"                   # 63 bytes
TBL="T$(printf 'é%.0s' $(seq 1 29))?%2F\"" # 64 bytes
[ "$(printf '%s' "$NS" | wc -c)" = 63 ] && [ "$(printf '%s' "$TBL" | wc -c)" = 64 ] || fail "test setup: long names $(printf '%s' "$NS" | wc -c) $(printf '%s' "$TBL" | wc -c)"
q src.db "CREATE TABLE $(qi "$TBL") ($(qi "$C_ID") INTEGER PRIMARY KEY, $(qi "$C_PCT") TEXT NOT NULL,
  $(qi "$C_SP") TEXT NOT NULL, $(qi "$C63") INTEGER NOT NULL, $(qi "$C64") TEXT NOT NULL);
  INSERT INTO $(qi "$TBL") SELECT * FROM $(qi "$TBL0")"
RES="{table: $(yq "$TBL"), mode: full}"
hostile_s3
hostile_rest


# ---- 3. traversal names ------------------------------------------------------------------------
refused() { # LABEL YAML NAME: exit 2, one error line naming NAME
  expect_exit 2 ferry run "$2"
  [ "$(printf '%s\n' "$OUT" | grep -c -i 'error')" = 1 ] || fail "$1: one message, got: $OUT"
  printf '%s\n' "$OUT" | grep -i error | grep -q -F -- "$3" || fail "$1: the message does not name $3: $OUT"
  echo "ok - $1: $(printf '%s\n' "$OUT" | grep -i error)"
}
s3c "$S3_BUCKET" list "" | sort > objects.before
cp rest/catalog.json catalog.before
find wh -type f | sort > files.before
for t in '../x' '..' 'a/b' "$T/x"; do
  pipeline t.yaml trav-s3 "{table: plain, target: $(yq "$t"), mode: full}" "${S3SINK[@]}" "namespace: db"
  refused "s3 target $t" t.yaml "$t"
  pipeline t.yaml trav-s3 "{table: plain, mode: full}" "${S3SINK[@]}" "namespace: $(yq "$t")"
  refused "s3 namespace $t" t.yaml sink.namespace
  pipeline t.yaml trav-rest "{table: plain, target: $(yq "$t"), mode: full}" "${RESTSINK[@]}" "namespace: db"
  refused "rest target $t" t.yaml "$t"
  pipeline t.yaml trav-rest "{table: plain, mode: full}" "${RESTSINK[@]}" "namespace: $(yq "$t")"
  refused "rest namespace $t" t.yaml sink.namespace
done
s3c "$S3_BUCKET" list "" | sort > objects.after
[ -z "$(comm -13 objects.before objects.after)" ] || fail "a refused run wrote objects: $(comm -13 objects.before objects.after)"
cmp -s rest/catalog.json catalog.before || fail "a refused run changed the REST catalog"
[ -z "$(find wh -type f | sort | comm -13 files.before -)" ] || fail "a refused run wrote files"
[ ! -e "$T/x" ] && [ ! -e "$T/wh/../x" ] || fail "a traversal name escaped"
canaries
pass "traversal names refused as table and namespace on the S3 warehouse and the REST catalog, nothing written, canaries untouched"
