# tests/tools/iceberg_lib.sh - helpers of the iceberg e2e tests (sourced after
# tests/e2e/lib.sh, never run on its own): the sample pipeline writer, the sqlite
# reference copy of the sample, and check_orders, which compares the orders table as
# icebird (over HTTP) and DuckDB (the data files the manifests list) read it with the
# reference: set equality of whole rows, COPIES times.
ROWS=${ROWS:-3000}
READ="$FERRY_SRC/tests/tools/read_iceberg.mjs"
DUCK="$FERRY_SRC/tests/tools/duckdb_exec.mjs"
command -v node >/dev/null || fail "node is required (scripts/install-deps.sh)"
[ -d "$FERRY_SRC/tests/tools/node_modules/icebird" ] || fail "tests/tools/node_modules/icebird missing: npm ci --prefix tests/tools"
WH="$T/wh"

# rest_start DIR : the REST catalog fixture (tests/tools/rest_catalog.mjs) on loopback, its state
# in DIR (port in DIR.port, log in DIR.log), stopped on exit (chained in front of the EXIT trap so
# far); sets REST_URI. The environment reaches it (REST_TOKEN, REST_S3_ENDPOINT for s3://).
rest_start() {
  local dir=$1 pid _
  node "$FERRY_SRC/tests/tools/rest_catalog.mjs" "$dir" "$dir.port" > "$dir.log" 2>&1 &
  pid=$!
  # shellcheck disable=SC2064 # the pid and the trap so far are expanded now, on purpose
  trap "__rest_rc=\$?; set +e; kill $pid 2>/dev/null; wait $pid 2>/dev/null; (exit \$__rest_rc); $(trap -p EXIT | sed "s/^trap -- '//; s/' EXIT\$//")" EXIT
  for _ in $(seq 1 100); do [ -s "$dir.port" ] && break; sleep 0.1; done
  [ -s "$dir.port" ] || { cat "$dir.log" >&2; fail "the REST catalog ($dir) did not start"; }
  REST_URI="http://127.0.0.1:$(cat "$dir.port")"
}

# copies_after_kill PIPELINE EXIT: how many copies a plain re-run leaves after a kill -9 of
# PIPELINE's run that ended with EXIT: 2 when that run had finished (exit 0, or killed on its
# way out after the state recorded it completed: the re-run is a new run), else 1.
copies_after_kill() {
  local done_runs
  done_runs=$(q "$FERRY_STATE" "SELECT count(*) FROM runs WHERE pipeline = '$1' AND state = 'completed'")
  if [ "$2" = 0 ] || [ "$done_runs" -ge 1 ]; then echo 2; else echo 1; fi
}

pipeline() { sample_pipeline "$@"; } # FILE NAME ROWS SINK_LINES... (tests/e2e/lib.sh)

latest_meta() { ls "$1"/metadata/v*.metadata.json | sort -V | tail -n 1; }

# The reference: the same sample in sqlite.
pipeline ref.yaml ref "$ROWS" "type: sqlite" "path: $T/ref.db"
expect_exit 0 ferry run ref.yaml --quiet --state "$T/ref-state.db"

# compare.py REF_DB TABLE READER FILE: rows printed by a reader equal the reference, as a
# multiset repeated COPIES times (several appends of the same sample).
cat > compare.py <<'EOF'
import collections, datetime, decimal, json, sqlite3, sys
ref, reader, path, copies = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
def us(s):
    d = datetime.datetime.fromisoformat(s.replace('Z', '+00:00')) - EPOCH
    return (d.days * 86400 + d.seconds) * 1000000 + d.microseconds
def canon_ref(r):
    i, c, st, q, amt, disc, ex, note, ca, ua = r
    a = decimal.Decimal(amt)
    if reader == 'icebird':  # hyparquet: decimals as floats, timestamps as JS Dates (ms)
        return (int(i), c, st, q, str(a), None if disc is None else repr(float(disc)), bool(ex),
                note, us(ca) // 1000, us(ua) // 1000)
    return (int(i), c, st, q, str(a), None if disc is None else repr(float(disc)), bool(ex),
            note, us(ca), us(ua))
def canon_read(o):
    if reader == 'icebird':
        return (int(o['id']), o['customer_id'], o['status'], o['quantity'],
                str(decimal.Decimal(repr(o['amount'])).quantize(decimal.Decimal('0.01'))),
                None if o['discount'] is None else repr(float(o['discount'])), o['express'],
                o['note'], us(o['created_at']) // 1000, us(o['updated_at']) // 1000)
    i, c, st, q, amt, disc, ex, note, ca, ua = o
    return (int(i), c, st, q, amt, None if disc is None else repr(float(disc)), ex, note,
            int(ca), int(ua))
db = sqlite3.connect(ref)
want = collections.Counter()
for r in db.execute('SELECT id, customer_id, status, quantity, amount, discount, express, note, '
                    'created_at, updated_at FROM orders'):
    want[canon_ref(r)] += copies
got = collections.Counter(canon_read(json.loads(l)) for l in open(path) if l.strip())
if got != want:
    miss = list((want - got).elements())[:3]
    extra = list((got - want).elements())[:3]
    print(f'{reader}: {sum(got.values())} rows, want {sum(want.values())}; missing {miss} extra {extra}')
    sys.exit(1)
EOF

# read_orders READER FILE [METADATA_FILE]: the orders table as READER sees it.
icebird_orders() { nodetool "$READ" "$WH" db orders ${2:-} > "$1" || fail "icebird could not read db.orders"; }
duck_orders() { # the files the current snapshot's manifests list, read by DuckDB
  local files
  files=$(nodetool "$READ" "$WH" db --files "${2:-orders}" | jq -r '.data_file.file_path' | sed 's|^file://||' \
    | awk '{printf "%s\x27%s\x27", (NR>1?",":""), $0}')
  [ -n "$files" ] || fail "no data file listed for ${2:-orders}"
  nodetool "$DUCK" "SELECT id, customer_id, status, quantity, amount::VARCHAR, discount, express, note, \
    epoch_us(created_at), epoch_us(updated_at) FROM read_parquet([$files])" > "$1" \
    || fail "DuckDB could not read the data files"
}
check_orders() { # COPIES [METADATA_FILE]
  icebird_orders ib.jsonl "${2:-}"
  python3 compare.py "$T/ref.db" icebird ib.jsonl "$1" || fail "icebird rows differ from the source"
  if [ -z "${2:-}" ]; then
    duck_orders dk.jsonl
    python3 compare.py "$T/ref.db" duckdb dk.jsonl "$1" || fail "DuckDB rows differ from the source"
  fi
}
