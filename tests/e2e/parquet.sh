#!/usr/bin/env bash
# labels: asan smoke
# The files sink with `format: parquet`, read back by two readers ferry did not write:
#   1. sample (orders and users: every type) -> parquet with each codec (zstd, snappy, gzip,
#      none; small row groups, several parts, dictionary off in turn); every file the manifest
#      lists read with DuckDB and with hyparquet (tests/tools/read_parquet.mjs), compared with
#      the same sample written to sqlite: set equality of whole rows, every column, and each
#      column's type as the reader sees it (timestamptz adjusted to UTC, decimal(12,2),
#      date, time, uuid, json); the codec and row groups checked in the footer (DuckDB's
#      parquet_metadata); the manifest's sizes and CRC32-C checked against the files;
#   2. a crash and a kill -9 before commit publish nothing; the resumed run completes and
#      its files read back equal to the sample;
#   3. bad parquet keys are refused before any data moves, naming the key.
# Needs node and tests/tools/node_modules (scripts/install-deps.sh: npm ci --prefix tests/tools).
. "$(dirname "$0")/lib.sh"
ROWS=${ROWS:-3000}
READER="$FERRY_SRC/tests/tools/read_parquet.mjs"
command -v node >/dev/null || fail "node is required (scripts/install-deps.sh)"
[ -d "$FERRY_SRC/tests/tools/node_modules" ] || fail "tests/tools/node_modules missing: run npm ci --prefix tests/tools"

# Compares what a reader printed for every part of a table with the sqlite reference.
cat > compare.py <<'EOF'
import collections, datetime, decimal, json, math, sqlite3, struct, sys
ref_db, table, reader = sys.argv[1:4]
outs = sys.argv[4:]
I, F64, F32, TXT, DEC, DTXT, DATE, TIME, TS, TSTZ, UUID, BIN, JSON, BOOL = range(14)
SCHEMA = {
  'orders': [('id', I, 'BIGINT', 'INT64/INTEGER(64,true)'),
             ('customer_id', I, 'INTEGER', 'INT32/INTEGER(32,true)'),
             ('status', TXT, 'VARCHAR', 'BYTE_ARRAY/STRING'),
             ('quantity', I, 'SMALLINT', 'INT32/INTEGER(16,true)'),
             ('amount', (DEC, 2), 'DECIMAL(12,2)', 'INT64/DECIMAL(12,2)'),
             ('discount', F64, 'DOUBLE', 'DOUBLE/'),
             ('express', BOOL, 'BOOLEAN', 'BOOLEAN/'),
             ('note', TXT, 'VARCHAR', 'BYTE_ARRAY/STRING'),
             ('created_at', TSTZ, 'TIMESTAMP WITH TIME ZONE', 'INT64/TIMESTAMP(MICROS,true)'),
             ('updated_at', TSTZ, 'TIMESTAMP WITH TIME ZONE', 'INT64/TIMESTAMP(MICROS,true)')],
  'users': [('id', I, 'BIGINT', 'INT64/INTEGER(64,true)'),
            ('email', TXT, 'VARCHAR', 'BYTE_ARRAY/STRING'),
            ('name', TXT, 'VARCHAR', 'BYTE_ARRAY/STRING'),
            ('age', I, 'TINYINT', 'INT32/INTEGER(8,true)'),
            ('score', F32, 'FLOAT', 'FLOAT/'),
            ('balance', (DEC, 10), 'DECIMAL(38,10)', 'FIXED_LEN_BYTE_ARRAY(16)/DECIMAL(38,10)'),
            ('big_number', DTXT, 'VARCHAR', 'BYTE_ARRAY/STRING'),
            ('birth_date', DATE, 'DATE', 'INT32/DATE'),
            ('wake_time', TIME, 'TIME', 'INT64/TIME(MICROS,false)'),
            ('last_login', TS, 'TIMESTAMP', 'INT64/TIMESTAMP(MICROS,false)'),
            ('uuid', UUID, 'UUID', 'FIXED_LEN_BYTE_ARRAY(16)/UUID'),
            ('avatar', BIN, 'BLOB', 'BYTE_ARRAY/'),
            # DuckDB shows a JSON column as VARCHAR unless its json extension is loaded;
            # hyparquet shows the logical type itself.
            ('profile', JSON, 'VARCHAR', 'BYTE_ARRAY/JSON'),
            ('active', BOOL, 'BOOLEAN', 'BOOLEAN/'),
            ('updated_at', TSTZ, 'TIMESTAMP WITH TIME ZONE', 'INT64/TIMESTAMP(MICROS,true)')],
}[table]
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
def micros(dt):
    if dt.tzinfo is None: dt = dt.replace(tzinfo=datetime.timezone.utc)
    d = dt - EPOCH
    return (d.days * 86400 + d.seconds) * 1000000 + d.microseconds
def fkey(x, single):
    x = float(x)
    if single: x = struct.unpack('f', struct.pack('f', x))[0]
    return repr(x)
def kind(t): return t[0] if isinstance(t, tuple) else t

def from_ref(v, t):  # a sqlite value of the reference copy -> canonical
    if v is None: return None
    k = kind(t)
    if k == I: return int(v)
    if k in (F64, F32): return fkey(v, k == F32)
    if k == DEC:
        d = decimal.Decimal(v)
        return int(d.scaleb(t[1])) if reader == 'duckdb' else float(d)
    if k == DATE: return (datetime.date.fromisoformat(v) - datetime.date(1970, 1, 1)).days
    if k == TIME:
        tm = datetime.time.fromisoformat(v)
        return ((tm.hour * 60 + tm.minute) * 60 + tm.second) * 1000000 + tm.microsecond
    if k in (TS, TSTZ): return micros(datetime.datetime.fromisoformat(v))
    if k == BIN: return bytes(v).hex()
    if k == BOOL: return 'true' if v else 'false'
    if k == UUID: return v.lower()
    return v

def from_reader(v, t):  # read_parquet.mjs's canonical text -> canonical
    if v is None: return None
    k = kind(t)
    if k in (I, DATE, TIME, TS, TSTZ): return int(v)
    if k in (F64, F32): return fkey(v, k == F32)
    if k == DEC: return int(v) if reader == 'duckdb' else float(v)
    return v

want = collections.Counter()
con = sqlite3.connect(ref_db)
cols = ', '.join('"%s"' % c[0] for c in SCHEMA)
for row in con.execute('SELECT %s FROM "%s"' % (cols, table)):
    want[tuple(from_ref(v, c[1]) for v, c in zip(row, SCHEMA))] += 1
got = collections.Counter()
for path in outs:
    with open(path) as f:
        head = json.loads(f.readline())
        names = [c['name'] for c in head['columns']]
        types = [c['type'] for c in head['columns']]
        exp_names = [c[0] for c in SCHEMA]
        exp_types = [c[2] if reader == 'duckdb' else c[3] for c in SCHEMA]
        if names != exp_names: sys.exit('%s: columns %s, want %s' % (path, names, exp_names))
        if types != exp_types:
            bad = [(n, a, b) for n, a, b in zip(names, types, exp_types) if a != b]
            sys.exit('%s (%s): column types differ (column, got, want): %s' % (path, reader, bad))
        n = 0
        for line in f:
            row = json.loads(line)
            got[tuple(from_reader(v, c[1]) for v, c in zip(row, SCHEMA))] += 1
            n += 1
        if n != head['rows']: sys.exit('%s: %d rows, header says %d' % (path, n, head['rows']))

# hyparquet turns decimals into doubles by its own arithmetic: allow it one ulp.
def close(a, b):
    if a == b: return True
    if len(a) != len(b): return False
    for x, y, c in zip(a, b, SCHEMA):
        if x == y: continue
        if reader != 'duckdb' and kind(c[1]) == DEC and x is not None and y is not None \
           and math.isclose(x, y, rel_tol=4e-16, abs_tol=0): continue
        return False
    return True
missing = want - got
extra = got - want
if reader != 'duckdb' and missing and extra:
    # pair the near-equal rows (only decimal columns may differ)
    byid = {}
    for r, c in extra.items(): byid.setdefault(r[0], []).append([r, c])
    for r in list(missing):
        for e in byid.get(r[0], []):
            if e[1] > 0 and close(r, e[0]):
                m = min(missing[r], e[1]); missing[r] -= m; e[1] -= m; extra[e[0]] -= m
    missing = +missing; extra = +extra
if missing or extra or sum(got.values()) != sum(want.values()):
    print('%s/%s: %d rows read, %d in the sample; %d missing, %d extra'
          % (table, reader, sum(got.values()), sum(want.values()),
             sum(missing.values()), sum(extra.values())), file=sys.stderr)
    for r in list(missing)[:3]: print('  missing', r, file=sys.stderr)
    for r in list(extra)[:3]: print('  extra  ', r, file=sys.stderr)
    sys.exit(1)
print('%s/%s: %d rows equal' % (table, reader, sum(got.values())))
EOF

# compare_dir DIR: every listed file of each table, with both readers, equal to ref.db
compare_dir() {
  local dir=$1 table reader p n
  for table in orders users; do
    for reader in duckdb hyparquet; do
      n=0
      local outs=()
      for p in $(cat "$dir"/_runs/*/_manifest.json | jq -r ".files[] | select(.table == \"$table\") | .path"); do
        n=$((n + 1))
        nodetool "$READER" --reader=$reader "$dir/$p" > "$dir.$table.$reader.$n.jsonl" \
          || fail "$reader could not read $dir/$p"
        outs+=("$dir.$table.$reader.$n.jsonl")
      done
      [ "$n" -gt 0 ] || fail "$dir: no $table file listed"
      python3 compare.py ref.db "$table" "$reader" "${outs[@]}" >/dev/null \
        || fail "$dir: $table read by $reader differs from the sample"
    done
  done
}

duck_sql() { # FILE SQL(with $1 = the file): the first value of the first row
  nodetool "$READER" --sql="$2" "$1" | sed -n 2p | jq -r '.[0]'
}

# ---- reference: the same sample in sqlite ------------------------------------------------------
sample_pipeline ref.yaml ref "$ROWS" "type: sqlite" "path: ref.db" "write: append"
expect_exit 0 ferry run ref.yaml

# ---- 1. every codec -----------------------------------------------------------------------------
for codec in zstd snappy gzip none; do
  extra=()
  case $codec in
    zstd) extra=() ;;                                       # the defaults: no compression key
    snappy) extra=("compression: snappy" "part_rows: 1000") ;;  # several parts per table
    gzip) extra=("compression: gzip" "row_group_bytes: 64KiB") ;; # several row groups
    none) extra=("compression: none" "dictionary: false") ;;
  esac
  sample_pipeline $codec.yaml to-$codec "$ROWS" "type: files" "path: out-$codec/" \
    "format: parquet" "write: append" "${extra[@]}"
  expect_exit 0 ferry run $codec.yaml
  check_manifest out-$codec parquet
  [ "$(jq '.rows' out-$codec/_runs/*/_manifest.json)" = $((2 * ROWS)) ] || fail "$codec: manifest rows"
  compare_dir out-$codec
  first=$(jq -r '.files[0].path' out-$codec/_runs/*/_manifest.json)
  want=$(echo $codec | tr '[:lower:]' '[:upper:]'); [ $codec = none ] && want=UNCOMPRESSED
  got=$(duck_sql "out-$codec/$first" 'SELECT string_agg(DISTINCT compression, $$,$$) FROM parquet_metadata($1)')
  [ "$got" = "$want" ] || fail "$codec: column chunks are compressed with $got, want $want"
  pass "sample -> parquet ($codec): DuckDB and hyparquet read every listed file equal to the sample, types included; manifest CRCs hold"
done
[ "$(jq '[.files[] | select(.table == "orders")] | length' out-snappy/_runs/*/_manifest.json)" -ge 3 ] \
  || fail "part_rows: 1000 should split $ROWS orders into several parquet files"
u=$(jq -r '.files[] | select(.table == "users") | .path' out-gzip/_runs/*/_manifest.json)
groups=$(duck_sql "out-gzip/$u" 'SELECT count(DISTINCT row_group_id) FROM parquet_metadata($1)')
[ "$groups" -ge 2 ] || fail "row_group_bytes: 64KiB should give several row groups, got $groups"
u=$(jq -r '.files[] | select(.table == "users") | .path' out-zstd/_runs/*/_manifest.json)
[ "$(duck_sql "out-zstd/$u" 'SELECT count(DISTINCT row_group_id) FROM parquet_metadata($1)')" = 1 ] \
  || fail "the default row group size should hold $ROWS users in one group"
# Dictionary where it pays: repeated names and small ints; not for unique emails (the first
# page of a chunk decides), never with dictionary: false.
dict_on=$(duck_sql "out-zstd/$u" "SELECT count(*) FROM parquet_metadata(\$1) WHERE path_in_schema IN ('name', 'age') AND encodings LIKE '%RLE_DICTIONARY%'")
dict_unique=$(duck_sql "out-zstd/$u" "SELECT count(*) FROM parquet_metadata(\$1) WHERE path_in_schema IN ('email', 'id') AND encodings LIKE '%DICTIONARY%'")
u=$(jq -r '.files[] | select(.table == "users") | .path' out-none/_runs/*/_manifest.json)
dict_off=$(duck_sql "out-none/$u" "SELECT count(*) FROM parquet_metadata(\$1) WHERE encodings LIKE '%DICTIONARY%'")
[ "$dict_on" = 2 ] && [ "$dict_unique" = 0 ] && [ "$dict_off" = 0 ] \
  || fail "dictionary: default should dictionary-encode name and age ($dict_on chunks) but not the unique email and id ($dict_unique), false nothing ($dict_off)"
pass "part_rows, row_group_bytes and dictionary reach the parquet files"

# ---- 2. crash / kill -9 before commit -------------------------------------------------------------
sample_pipeline crash.yaml crash "$ROWS" "type: files" "path: out-crash/" "format: parquet" \
  "write: append" "part_rows: 1000"
expect_exit 137 env FERRY_FAILPOINTS=before_sink_commit=crash "$FERRY_BIN" run crash.yaml --quiet
[ -z "$(find out-crash -name 'part-*')" ] || fail "a crash before commit published parquet parts"
[ -z "$(find out-crash -name '_manifest.json')" ] || fail "a crash before commit wrote a manifest"
[ -n "$(find out-crash -name '.tmp-*.parquet')" ] || fail "the crashed run should have left temporary files"
expect_exit 137 env FERRY_FAILPOINTS=files_before_manifest=crash "$FERRY_BIN" run crash.yaml --quiet
[ -z "$(find out-crash -name '_manifest.json')" ] || fail "no manifest before the failpoint"
expect_exit 0 ferry run crash.yaml --json
json_field "$OUT" '.state' | grep -qx completed || fail "resume after the crashes: $OUT"
check_manifest out-crash parquet
compare_dir out-crash
sample_pipeline kill.yaml kill 300000 "type: files" "path: out-kill/" "format: parquet" \
  "write: append" "part_rows: 50000"
"$FERRY_BIN" run kill.yaml --quiet > kill.log 2>&1 &
pid=$!
sleep "0.$((3 + RANDOM % 6))"
kill -9 "$pid" 2>/dev/null || true
wait "$pid" 2>/dev/null || true
if [ -z "$(find out-kill -name '_manifest.json' 2>/dev/null)" ]; then
  [ -z "$(find out-kill -name 'part-*' 2>/dev/null)" ] || fail "killed before its manifest, yet parquet parts are published"
fi
expect_exit 0 ferry run kill.yaml --quiet
check_manifest out-kill parquet
total=$(cat out-kill/_runs/*/_manifest.json | jq -s 'map(.rows) | add')
[ "$total" = 600000 ] || fail "after kill -9 and resume: $total rows listed, want 600000"
sum=0
for p in $(cat out-kill/_runs/*/_manifest.json | jq -r '.files[].path'); do
  n=$(duck_sql "out-kill/$p" 'SELECT count(*) FROM read_parquet($1)')
  [ "$n" = "$(cat out-kill/_runs/*/_manifest.json | jq -r ".files[] | select(.path == \"$p\") | .rows")" ] \
    || fail "$p: DuckDB reads $n rows, the manifest says otherwise"
  sum=$((sum + n))
done
[ "$sum" = 600000 ] || fail "after kill -9 and resume: DuckDB reads $sum rows"
pass "crash / kill -9 before commit: nothing published; the resumed run's parquet files read back complete"

# ---- 3. bad keys ----------------------------------------------------------------------------------
sample_pipeline bad.yaml bad 10 "type: files" "path: out-bad/" "format: parquet" "write: append" \
  "compression: lz4"
expect_exit 2 ferry run bad.yaml
printf '%s' "$OUT" | grep -q 'compression' || fail "an unknown codec should name the key: $OUT"
sample_pipeline bad2.yaml bad2 10 "type: files" "path: out-bad2/" "format: csv" "write: append" \
  "compression: zstd"
expect_exit 2 ferry run bad2.yaml
printf '%s' "$OUT" | grep -q 'compression' || fail "a parquet key on a csv sink should be refused: $OUT"
sample_pipeline bad3.yaml bad3 10 "type: files" "path: out-bad3/" "format: parquet" "write: append" \
  "row_group_bytes: 1k"
expect_exit 2 ferry run bad3.yaml
printf '%s' "$OUT" | grep -q 'row_group_bytes' || fail "a tiny row group should be refused: $OUT"
[ -z "$(find . -path './out-bad*' -type f)" ] || fail "a refused config wrote files"
pass "bad parquet keys: refused before any data moves, naming the key"

# ---- 4. a full disk: the sink's own error (path, errno) comes through the parquet writer ----------
files_enospc parquet
pass "ENOSPC while writing parquet: the error names the file, the aborted run leaves nothing"
