#!/usr/bin/env bash
# shared: pg s3
# PostgreSQL change data capture (mode: cdc, wal_level=logical) into Iceberg tables with
# `write: merge` (merge-on-read: equality delete files by the key, position deletes for rows a
# later change of the same commit replaces), into a local warehouse (filesystem catalog) and an
# S3 warehouse on s3rver (SQL catalog). Three runs: the snapshot, then two rounds of inserts,
# updates (one moves a key), deletes, a row inserted and deleted between two runs, and keys
# changed several times within one run. After each run every table, read back by icebird (which
# applies the delete files itself), equals the source table: set equality of whole rows.
. "$(dirname "$0")/lib.sh"
. "$FERRY_SRC/tests/s3/s3.sh"
. "${FERRY_PG_SH:-$FERRY_SRC/tests/pg/pg.sh}"
READ="$FERRY_SRC/tests/tools/read_iceberg.mjs"
[ -d "$FERRY_SRC/tests/tools/node_modules/icebird" ] || fail "tests/tools/node_modules/icebird missing: npm ci --prefix tests/tools"
s3_have || fail "node and tests/tools/node_modules (s3rver, aws4) are needed: run scripts/install-deps.sh"
export S3_KEY=S3RVER S3_SECRET=S3RVER AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER
s3_start lake
export S3_ENDPOINT
pg_start
export SRC_URL="$FERRY_PG_URL"

pgq >/dev/null <<'SQL'
CREATE TABLE t1 (id bigint PRIMARY KEY, name text NOT NULL, amount numeric(12,2), flag bool,
                 ts timestamptz);
CREATE TABLE t2 (k1 int, k2 text, v double precision, note varchar(40), PRIMARY KEY (k1, k2));
INSERT INTO t1 SELECT g, 'n' || g, g * 1.25, g % 3 = 0, '2024-01-01'::timestamptz + g * interval '1 minute'
  FROM generate_series(1, 2000) g;
INSERT INTO t2 SELECT g % 40, 'k' || g, g * 0.5, 'note ' || g FROM generate_series(1, 800) g;
SQL

pipeline() { # FILE NAME SINK_LINES...
  local file=$1 name=$2; shift 2
  {
    echo "version: 1"
    echo "name: $name"
    echo "source:"
    echo "  type: postgres"
    echo "  url: env:SRC_URL"
    echo "  resources:"
    echo "    - {table: t1, mode: cdc}"
    echo "    - {table: t2, mode: cdc}"
    echo "sink:"
    for l in "$@"; do echo "  $l"; done
    echo "batch: {rows: 300, flush_after: 200ms}"
  } > "$file"
}
pipeline local.yaml ice_cdc "type: iceberg" "warehouse: $T/wh" "namespace: db" "write: merge"
pipeline s3.yaml ice_cdc_s3 "type: iceberg" "warehouse: s3://$S3_BUCKET/wh" "namespace: db" "write: merge" \
  "catalog: sql" "catalog_uri: $T/catalog.db" "endpoint: \"$S3_ENDPOINT\"" "path_style: true" \
  "access_key_id: env:S3_KEY" "secret_access_key: env:S3_SECRET"

# The rows as text, one per line, sorted: "id|name|amount|flag|ts_ms" and "k1|k2|v|note".
src_rows() {
  if [ "$1" = t1 ]; then
    pgq -c "SELECT id || '|' || name || '|' || coalesce(to_char(amount, 'FM9999999990.00'), '-') || '|' ||
      coalesce(flag::text, '-') || '|' || coalesce(floor(extract(epoch FROM ts) * 1000)::bigint::text, '-') FROM t1" | sort
  else
    pgq -c "SELECT k1 || '|' || k2 || '|' || coalesce(v::text, '-') || '|' || coalesce(note, '-') FROM t2" | sort
  fi
}
canon() { # TABLE < icebird JSON lines
  python3 -c '
import sys, json, datetime
t = sys.argv[1]
def ms(s):
    d = datetime.datetime.fromisoformat(s.replace("Z", "+00:00"))
    return str(round(d.timestamp() * 1000))
def g(v): return "-" if v is None else v
def num(v):
    if v is None: return "-"
    f = float(v)
    return repr(int(f)) if f == int(f) and abs(f) < 1e15 else repr(f)
out = []
for l in sys.stdin:
    if not l.strip(): continue
    o = json.loads(l)
    if t == "t1":
        out.append("|".join([str(o["id"]), o["name"], "-" if o["amount"] is None else "%.2f" % float(o["amount"]),
                             "-" if o["flag"] is None else ("true" if o["flag"] else "false"),
                             "-" if o["ts"] is None else ms(o["ts"])]))
    else:
        out.append("|".join([str(o["k1"]), o["k2"], num(o["v"]), g(o["note"])]))
print("\n".join(sorted(out)))
' "$1" | sed '/^$/d' | sort
}
ice_rows() { # WHERE TABLE
  if [ "$1" = local ]; then
    nodetool "$READ" "$T/wh" db "$2" | canon "$2"
  else
    local loc
    loc=$(q "$T/catalog.db" "SELECT metadata_location FROM iceberg_tables WHERE table_name = '$2'")
    nodetool "$READ" s3://$S3_BUCKET/wh db "$2" "$(basename "$loc")" | canon "$2"
  fi
}
check() { # LABEL
  local t w
  for t in t1 t2; do
    src_rows $t > "src_$t.txt"
    for w in local s3; do
      ice_rows $w $t > "ice_${w}_$t.txt" || fail "$1: icebird could not read $w $t"
      if ! cmp -s "src_$t.txt" "ice_${w}_$t.txt"; then
        diff "src_$t.txt" "ice_${w}_$t.txt" | head -10
        fail "$1: $w iceberg table $t differs from the source ($(wc -l < "src_$t.txt") rows in the source, $(wc -l < "ice_${w}_$t.txt") read)"
      fi
    done
  done
}
run_both() {
  expect_exit 0 ferry run local.yaml --quiet
  expect_exit 0 ferry run s3.yaml --quiet
}

# ---- run 1: the snapshot -------------------------------------------------------------------------
run_both
check "snapshot"
[ "$(wc -l < src_t1.txt)" = 2000 ] || fail "snapshot row count"
pass "run 1: the snapshot lands in both warehouses, equal to the source"

# ---- run 2: inserts, updates, deletes, a key moved, keys changed several times ----------------------
pgq >/dev/null <<'SQL'
INSERT INTO t1 (id, name, amount, flag, ts) SELECT g, 'new' || g, g / 4.0, NULL, now() FROM generate_series(5001, 5300) g;
UPDATE t1 SET name = name || '+', amount = amount + 1 WHERE id % 7 = 0;
UPDATE t1 SET name = name || '+' WHERE id % 14 = 0;       -- twice in the same run
DELETE FROM t1 WHERE id % 11 = 0;
UPDATE t1 SET id = id + 100000 WHERE id BETWEEN 1 AND 5;  -- the key moves
INSERT INTO t1 (id, name) VALUES (7000, 'short-lived');
DELETE FROM t1 WHERE id = 7000;                           -- inserted and deleted in one run
UPDATE t2 SET v = v + 1, note = 'upd' WHERE k1 = 3;
DELETE FROM t2 WHERE k1 = 4;
INSERT INTO t2 VALUES (4, 'back', 1, NULL);
SQL
run_both
check "run 2"
grep -q '+' src_t1.txt && ! grep -q '^7000|' src_t1.txt && grep -q '^100001|' src_t1.txt || fail "the workload did not run"
M=$(ls "$T/wh/db/t1/metadata/"v*.metadata.json | sort -V | tail -n 1)
jq -e '.snapshots[-1].summary | .operation == "overwrite" and (."added-equality-deletes" | tonumber) > 0' "$M" >/dev/null \
  || fail "run 2: an overwrite snapshot with equality deletes: $(jq -c '.snapshots[-1].summary' "$M")"
pass "run 2: inserts, updates, deletes and a moved key merged (equality + position deletes), equal to the source"

# ---- run 3: more of the same, on rows the earlier runs wrote ----------------------------------------
pgq >/dev/null <<'SQL'
DELETE FROM t1 WHERE id BETWEEN 5001 AND 5050;
UPDATE t1 SET flag = NOT coalesce(flag, false), ts = ts + interval '1 day' WHERE id % 5 = 0;
UPDATE t1 SET id = 200003 WHERE id = 100003;             -- a moved key moves again
INSERT INTO t1 (id, name) VALUES (7000, 'back again');
UPDATE t2 SET note = NULL WHERE k2 LIKE 'k1%';
DELETE FROM t2 WHERE k1 = 3 AND k2 LIKE 'k%';
SQL
run_both
check "run 3"
grep -q '^7000|back again|' src_t1.txt || fail "run 3: the workload did not run"
for w in "$T/wh/db/t1" "$T/wh/db/t2"; do
  M=$(ls "$w/metadata/"v*.metadata.json | sort -V | tail -n 1)
  jq -e '[.snapshots[].summary."ferry.run-id"] | group_by(.) | map(length) | max == 1' "$M" >/dev/null \
    || fail "a run committed two snapshots into $w"
done
pass "run 3: deletes and updates of rows earlier runs wrote, equal to the source (icebird applies the deletes)"
