#!/usr/bin/env bash
# shared: pg
# The iceberg source matches a data file's columns by Iceberg field id, not by name:
#   1. a column renamed after its data files were written (a new schema in a new metadata
#      version: same field id, new name) reads its values under the new name, in full and
#      incremental reads;
#   2. a column dropped and a new column added under the old name (a new field id, another
#      type): the old files' values of the dropped column are not read into the new one
#      (null), the files written after it read theirs.
# The schema changes are written into the table's metadata with python (the sink evolves
# schemas by adding columns only; jq would round the 63-bit snapshot ids).
. "$(dirname "$0")/lib.sh"
. "${FERRY_PG_SH:-$FERRY_SRC/tests/pg/pg.sh}"
pg_start
export PG_URL="$FERRY_PG_URL"
pgq >/dev/null <<'SQL'
CREATE TABLE t (id bigint PRIMARY KEY, name text NOT NULL, amount numeric(12,2));
INSERT INTO t SELECT g, 'n' || g, g * 1.25 FROM generate_series(1, 200) g;
CREATE SCHEMA back; CREATE SCHEMA inc;
SQL
cat > in.yaml <<EOF2
version: 1
name: ice_in
source: {type: postgres, url: env:PG_URL, resources: [{table: t, key: [id]}]}
sink: {type: iceberg, write: append, warehouse: $T/wh, namespace: db}
EOF2
reader() { # FILE NAME SCHEMA MODE WRITE
  cat > "$1" <<EOF2
version: 1
name: $2
source: {type: iceberg, warehouse: $T/wh, namespace: db, resources: [{table: t, mode: $4}]}
sink: {type: postgres, url: env:PG_URL, schema: $3, write: $5}
batch: {rows: 70}
EOF2
}
meta() { ls -v "$T"/wh/db/t/metadata/v*.metadata.json | tail -1; }
# evolve OP: a new metadata version whose current schema has `name` renamed to `label`
# (rename), or `amount` dropped and a string `amount` added under a new id (reuse).
evolve() {
  python3 - "$(meta)" "$1" <<'PY' || fail "could not write the new metadata"
import json, os, re, sys, time
path, op = sys.argv[1], sys.argv[2]
m = json.load(open(path))
cur = [s for s in m["schemas"] if s["schema-id"] == m["current-schema-id"]][0]
new = json.loads(json.dumps(cur))
new["schema-id"] = max(s["schema-id"] for s in m["schemas"]) + 1
if op == "rename":
    for f in new["fields"]:
        if f["name"] == "name": f["name"] = "label"
else:
    new["fields"] = [f for f in new["fields"] if f["name"] != "amount"]
    m["last-column-id"] += 1
    new["fields"].append({"id": m["last-column-id"], "name": "amount", "required": False, "type": "string"})
m["schemas"].append(new)
m["current-schema-id"] = new["schema-id"]
m["last-updated-ms"] = int(time.time() * 1000)
d = os.path.dirname(path)
n = int(re.search(r"v(\d+)\.metadata\.json$", path).group(1)) + 1
m.setdefault("metadata-log", []).append({"timestamp-ms": m["last-updated-ms"], "metadata-file": "file://" + os.path.abspath(path)})
json.dump(m, open(os.path.join(d, "v%d.metadata.json" % n), "w"))
open(os.path.join(d, "version-hint.text"), "w").write("%d\n" % n)
PY
}

# ---- 1. a renamed column --------------------------------------------------------------------
expect_exit 0 ferry run in.yaml --quiet
reader inc.yaml ice_inc inc incremental append
expect_exit 0 ferry run inc.yaml --quiet
evolve rename
reader full.yaml ice_full back full replace
expect_exit 0 ferry run full.yaml --quiet
[ "$(pgq -c "SELECT string_agg(column_name, ',' ORDER BY ordinal_position) FROM information_schema.columns WHERE table_schema = 'back' AND table_name = 't'")" = id,label,amount ] \
  || fail "the renamed column should arrive as label"
[ "$(pgq -c "SELECT count(*) FROM back.t b JOIN t USING (id) WHERE b.label = t.name AND b.amount = t.amount")" = 200 ] \
  || fail "label should hold the values written as name: $(pgq -c 'SELECT * FROM back.t ORDER BY id LIMIT 3')"
# an append written after the rename (by a writer that knows the new name) read incrementally
pgq -c "INSERT INTO t SELECT g, 'm' || g, g FROM generate_series(201, 260) g"
pgq -c "CREATE VIEW t2 AS SELECT id, name AS label, amount FROM t WHERE id > 200"
sed -e 's/table: t, key/table: t2, target: t, key/' in.yaml > in2.yaml
expect_exit 0 ferry run in2.yaml --quiet
pgq -c "ALTER TABLE inc.t RENAME COLUMN name TO label"
expect_exit 0 ferry run inc.yaml --quiet
[ "$(pgq -c "SELECT count(*) FROM inc.t i JOIN t USING (id) WHERE i.label = t.name")" = 260 ] \
  || fail "incremental after the rename: $(pgq -c 'SELECT count(*) FROM inc.t') rows, $(pgq -c 'SELECT * FROM inc.t WHERE id > 198 ORDER BY id LIMIT 4')"
pass "a renamed column reads from its field id: full and incremental"

# ---- 2. a dropped column's name reused by a new field ----------------------------------------
evolve reuse
pgq -c "DROP TABLE back.t"
expect_exit 0 ferry run full.yaml --quiet
[ "$(pgq -c "SELECT data_type FROM information_schema.columns WHERE table_schema = 'back' AND table_name = 't' AND column_name = 'amount'")" = text ] \
  || fail "the new amount is a string"
[ "$(pgq -c "SELECT count(*), count(amount) FROM back.t")" = "260|0" ] \
  || fail "the dropped column's old values must not be read into the new one: $(pgq -c 'SELECT count(*), count(amount) FROM back.t')"
pass "a dropped column's name reused by a new field id: old files read null"
