#!/usr/bin/env bash
# shared: pg
# tests/fault/y_hostile_cdc.sh - hostile_identifiers for the PostgreSQL cdc source (the plain
# postgres source and sink are tests/e2e/pg_security.sh). A captured table whose schema, table
# and column names hold quotes, semicolons, `--`, spaces, dots, unicode and a 63-byte name,
# with SQL-looking values, is copied with mode: cdc into a SQLite merge and a PostgreSQL merge:
# the snapshot, then a workload of inserts, updates (one moving a key) and deletes with more
# hostile values; after each run both destinations equal the source (whole rows as JSON with
# their column names, read by psql and Python's sqlite3), the canary tables are untouched and
# the slot and publication ferry made are the ones it documents (folded names).
. "$(dirname "$0")/../e2e/lib.sh"
. "${FERRY_PG_SH:-$FERRY_SRC/tests/pg/pg.sh}"
pg_start

qi() { local s=${1//\"/\"\"}; printf '"%s"' "$s"; }
yq() { local s=${1//\'/\'\'}; printf "'%s'" "$s"; }
SCH="Sch\"e'ma; DROP TABLE public.canary; -- .ü表"
TBL="Tä\"b'le; -- .x 表"
C_ID="I\"d; --"
C_TXT="Wé'ird; DROP TABLE canary; -- col.umn 表"
C_SP="with  space"
C63="L$(printf 'ü%.0s' $(seq 1 31))" # 63 bytes, PostgreSQL's longest
[ "$(printf '%s' "$C63" | wc -c)" = 63 ] || fail "test setup: the long column is not 63 bytes"
QS=$(qi "$SCH") QT=$(qi "$TBL")

dest=$(pg_db dest)
export SRC_URL="$FERRY_PG_URL"
export DEST_URL="postgresql://ferry_admin:$PGPASSWORD@127.0.0.1:$PGPORT/$dest"
pgq <<SQL
CREATE TABLE public.canary (v text); INSERT INTO public.canary VALUES ('alive');
CREATE SCHEMA $QS;
CREATE TABLE $QS.canary (v text); INSERT INTO $QS.canary VALUES ('alive');
CREATE TABLE $QS.$QT ($(qi "$C_ID") bigint PRIMARY KEY, $(qi "$C_TXT") text,
  $(qi "$C_SP") text NOT NULL, $(qi "$C63") integer);
INSERT INTO $QS.$QT SELECT g,
  CASE g % 6 WHEN 0 THEN \$v\$'); DROP TABLE canary; --\$v\$ WHEN 1 THEN E'"; --\\n\\t\\\\'
             WHEN 2 THEN 'ü表 ' || g WHEN 3 THEN '' WHEN 4 THEN NULL ELSE repeat('''', g % 5) END,
  'sp ' || g, CASE WHEN g % 4 <> 0 THEN g * 7 END
FROM generate_series(1, 2000) g;
SQL
pgq "$dest" -c "CREATE TABLE public.canary (v text); INSERT INTO public.canary VALUES ('alive')"

pipeline() { # FILE NAME SINK_YAML
  {
    echo "version: 1"
    echo "name: $2"
    echo "source:"
    echo "  type: postgres"
    echo "  url: env:SRC_URL"
    echo "  resources:"
    echo "    - {table: $(yq "$QS.$QT"), mode: cdc}"
    echo "sink: $3"
    echo "batch: {rows: 300, flush_after: 200ms}"
  } > "$1"
}
pipeline lite.yaml hostile_cdc_lite "{type: sqlite, path: $T/lite.db, write: merge}"
pipeline pg.yaml hostile_cdc_pg "{type: postgres, url: env:DEST_URL, schema: $(yq "$SCH"), write: merge}"

# The source's rows, one JSON object per row (keys: the column names), in key order.
src_json() { pgq -c "SELECT row_to_json(t)::text FROM $QS.$QT t ORDER BY 1"; }
compare() { # LABEL
  src_json > src.jsonl
  pgq "$dest" -c "SELECT row_to_json(t)::text FROM (SELECT $(qi "$C_ID"), $(qi "$C_TXT"), $(qi "$C_SP"), $(qi "$C63") FROM $QS.$QT) t ORDER BY 1" > pg.jsonl \
    || fail "$1: the postgres destination table $QS.$QT cannot be read"
  python3 - src.jsonl pg.jsonl "$T/lite.db" "$TBL" <<'PY' || fail "$1: a destination differs from the source"
import json, sqlite3, sys
src = [json.loads(l) for l in open(sys.argv[1], encoding='utf-8')]
cols = list(src[0].keys())
pg = [json.loads(l) for l in open(sys.argv[2], encoding='utf-8')]
db = sqlite3.connect(sys.argv[3])
q = ', '.join('"%s"' % c.replace('"', '""') for c in cols)
lite = [dict(zip(cols, r)) for r in db.execute('SELECT %s FROM "%s" ORDER BY 1' % (q, sys.argv[4].replace('"', '""')))]
key = lambda r: json.dumps(r, sort_keys=True)
src.sort(key=key)
for name, got in (('postgres', pg), ('sqlite', lite)):
    got.sort(key=key)
    if got != src:
        a = {json.dumps(r, sort_keys=True) for r in src}; b = {json.dumps(r, sort_keys=True) for r in got}
        print('%s: %d rows vs %d; missing %s; extra %s' % (name, len(got), len(src), list(a - b)[:2], list(b - a)[:2]), file=sys.stderr)
        sys.exit(1)
print('%d rows equal in postgres and sqlite' % len(src))
PY
  [ "$(pgq -c "SELECT string_agg(v, ',') FROM public.canary")|$(pgq -c "SELECT string_agg(v, ',') FROM $QS.canary")|$(pgq "$dest" -c "SELECT string_agg(v, ',') FROM public.canary")" = "alive|alive|alive" ] \
    || fail "$1: a canary table changed"
}

expect_exit 0 ferry run lite.yaml --quiet
expect_exit 0 ferry run pg.yaml --quiet
compare snapshot
pass "cdc snapshot: hostile schema, table, column names and values round-trip (sqlite and postgres merge)"

pgq <<SQL
INSERT INTO $QS.$QT SELECT g, \$v\$x'; DROP TABLE $QS.canary; --\$v\$ || g, E'new\\r\\n' || g, -g FROM generate_series(5001, 5300) g;
UPDATE $QS.$QT SET $(qi "$C_TXT") = 'upd "' || $(qi "$C_ID") || '" ;--', $(qi "$C63") = NULL WHERE $(qi "$C_ID") % 5 = 0;
UPDATE $QS.$QT SET $(qi "$C_ID") = $(qi "$C_ID") + 100000 WHERE $(qi "$C_ID") BETWEEN 10 AND 20;
DELETE FROM $QS.$QT WHERE $(qi "$C_ID") % 7 = 3;
SQL
expect_exit 0 ferry run lite.yaml --quiet
expect_exit 0 ferry run pg.yaml --quiet
compare stream
pass "cdc stream: inserts, updates (a key moved) and deletes with hostile names and values applied exactly"

# The slots and publications ferry made carry the documented folded names (a-z0-9_, <= 63
# bytes), never the raw hostile text.
pgq -c "SELECT slot_name FROM pg_replication_slots WHERE database = current_database() UNION ALL SELECT pubname FROM pg_publication" > names.txt
[ "$(grep -c . names.txt)" -ge 4 ] || fail "want two slots and two publications: $(cat names.txt)"
if grep -v -E '^[a-z0-9_]{1,63}$' names.txt; then fail "a slot or publication name is not folded"; fi
pass "cdc: slots and publications named with folded names: $(tr '\n' ' ' < names.txt)"
