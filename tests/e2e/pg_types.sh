#!/usr/bin/env bash
# PostgreSQL -> PostgreSQL, every built-in type at its edges (issue 23), one server:
#   each case is a table src.t_NAME (id, v TYPE) holding NULL and the type's edge values; it is
#   copied by ferry (write: append) into
#     - schema made: a table ferry creates;
#     - schema pre: the table as `pg_dump --schema-only` of schema src made it (renamed), the
#       usual start of a migration;
#   and the outcome is judged by each type's text form in psql (v::text, EXCEPT ALL both ways):
#     exact    every row arrived with the same text;
#     refused  the run failed with an error naming the column, and nothing was written;
#   anything else (a row missing, a value changed) fails the test: the never-silent rule.
# Cases listed in MUST_CARRY must be exact into existing tables (what this branch promises).
# The outcomes form the type matrix of docs/types.md (between the generated markers); the test
# fails when the committed matrix differs. FERRY_UPDATE_DOCS=1 rewrites it.
. "$(dirname "$0")/lib.sh"
. "${FERRY_PG_SH:-$FERRY_SRC/tests/pg/pg.sh}"
pg_start
export DEST_URL="$FERRY_PG_URL"
p() { psql "$FERRY_PG_URL" -X -q -v ON_ERROR_STOP=1 -A -t "$@"; }

# name|type|edge values (SQL literals, comma separated)
cat > cases.txt <<'EOF'
bool|boolean|true, false
int2|smallint|-32768, 32767, 0
int4|integer|-2147483648, 2147483647
int8|bigint|-9223372036854775808, 9223372036854775807
float4|real|'NaN', 'Infinity', '-Infinity', '-0', '1e-45', '3.4028235e38'
float8|double precision|'NaN', 'Infinity', '-Infinity', '-0', '4.9e-324', '1.7976931348623157e308'
numeric|numeric|'NaN', 'Infinity', '-Infinity', '-0.000001', repeat('9',1000)::numeric, '1e-300'
numeric_20_2|numeric(20,2)|'123456789012345678.91', '-0.01'
numeric_20_2_nan|numeric(20,2)|'NaN'
numeric_38_0|numeric(38,0)|'99999999999999999999999999999999999999'
text|text|'', 'a''b"c\d', U&'\+10FFFF', E'tab\tnl\n'
varchar|varchar|'', 'x'
varchar_5|varchar(5)|'', 'abcde', 'ab   '
char_4|char(4)|'', 'ab', 'abcd'
char1|"char"|'a', ''
name|name|'', 'pg_catalog'
bytea|bytea|'\x', '\x00ff'
date|date|'0001-01-01', '4713-01-01 BC', '5874897-12-31'
date_inf|date|'infinity', '-infinity'
time|time|'00:00', '23:59:59.999999', '24:00:00'
time_0|time(0)|'12:34:56'
timetz|time with time zone|'00:00+1459', '23:59:59.999999-1459'
timestamp|timestamp|'0001-01-01 00:00:00', '4713-01-01 00:00:00 BC', '9999-12-31 23:59:59.999999'
timestamp_inf|timestamp|'infinity', '-infinity'
timestamp_294276|timestamp|'294276-12-31 23:59:59.999999'
timestamptz|timestamptz|'0001-01-01 00:00:00+00', '2024-02-29 12:00:00.000001+00'
timestamptz_inf|timestamptz|'infinity', '-infinity'
interval|interval|'178000000 years', '-1 day +1 hour', '1 mon -0.000001 sec'
uuid|uuid|'00000000-0000-0000-0000-000000000000', 'ffffffff-ffff-ffff-ffff-ffffffffffff'
json|json|'{"a":1,"a":2}', '[ 1,2 ]'
json_nul|json|'{"a":"\u0000"}'
jsonb|jsonb|'{"b":1,"a":[1,2.50]}', '"\u00e9"'
xml|xml|'<a b="1">x</a>', 'text only'
inet|inet|'192.168.0.1/24', '::1'
cidr|cidr|'10.0.0.0/8'
macaddr|macaddr|'08:00:2b:01:02:03'
money|money|'-92233720368547758.08', '92233720368547758.07'
point|point|'(1.5,-2)'
line|line|'{1,-1,0}'
lseg|lseg|'[(0,0),(1,1)]'
box|box|'(1,1),(0,0)'
path|path|'[(0,0),(1,1),(2,0)]'
polygon|polygon|'((0,0),(1,1),(2,0))'
circle|circle|'<(0,0),1>'
bit_3|bit(3)|B'101'
varbit|bit varying|B'', B'1101'
tsvector|tsvector|'a:1 b:2'
tsquery|tsquery|'a & !b'
oid|oid|0, 4294967295
pg_lsn|pg_lsn|'16/B374D848'
int4range|int4range|'[1,10)', 'empty'
numrange|numrange|'(,1.5]'
tstzrange|tstzrange|'[2024-01-01 00:00+00,infinity)'
daterange|daterange|'[2024-01-01,2024-02-01)'
int4multirange|int4multirange|'{[1,3),[5,7)}'
int4_array|integer[]|'{1,NULL,-3}', '{}', '{{1,2},{3,4}}'
text_array|text[]|'{"a,b","c\"d",NULL,"NULL"}'
mood|src.mood|'sad', 'happy'
posint|src.posint|1, 2147483647
short|src.short|'', 'abcde'
pair|src.pair|'(1,"x,y")', '(,)'
EOF

MUST_CARRY="bool int2 int4 int8 float4 float8 numeric numeric_20_2 numeric_38_0 text varchar
varchar_5 char_4 name bytea date time timestamp timestamptz uuid json json_nul jsonb xml oid mood posint
short"

p -c "CREATE SCHEMA src; CREATE SCHEMA made;
  CREATE TYPE src.mood AS ENUM ('sad', 'ok', 'happy');
  CREATE DOMAIN src.posint AS integer CHECK (VALUE > 0);
  CREATE DOMAIN src.short AS varchar(5);
  CREATE TYPE src.pair AS (a integer, b text);"
while IFS='|' read -r name type vals; do
  rows=$(printf '%s' "$vals" | awk -v RS=', ' '{ printf "%s(%d, %s)", (NR > 1 ? ", " : ""), NR + 1, $0 }')
  # (split on ", " outside literals is enough for these values; checked by the row count)
  p -c "CREATE TABLE src.\"t_$name\" (id integer PRIMARY KEY, v $type);
        INSERT INTO src.\"t_$name\" VALUES (1, NULL), $rows" \
    || fail "case $name: could not create the source table"
done < cases.txt
# The existing tables: schema src as pg_dump writes it, renamed to pre.
pg_dump "$FERRY_PG_URL" --schema-only --schema=src --no-owner > dump.sql
sed -e 's/\bsrc\./pre./g' -e 's/SCHEMA src/SCHEMA pre/' dump.sql | p -f - > /dev/null \
  || fail "the pg_dump --schema-only of src did not load as pre"

run_case() { # NAME SCHEMA [TABLE] -> exit code; log in NAME.SCHEMA.log
  cat > "$1.$2.yaml" <<EOF
version: 1
name: types-$1-$2
source:
  type: postgres
  url: env:FERRY_PG_URL
  resources:
    - table: src.${3:-t_$1}
      mode: full
sink:
  type: postgres
  url: env:DEST_URL
  schema: $2
  write: append
EOF
  "$FERRY_BIN" run "$1.$2.yaml" --quiet > "$1.$2.log" 2>&1
}

same_text() { # NAME SCHEMA: rows differing by their text form (the type's output), both ways
  local f="id, format('%s', v) IS NULL, format('%s', v)"
  p -c "SELECT count(*) FROM ((SELECT $f FROM src.\"t_$1\" EXCEPT ALL SELECT $f FROM $2.\"t_$1\")
        UNION ALL (SELECT $f FROM $2.\"t_$1\" EXCEPT ALL SELECT $f FROM src.\"t_$1\")) d"
}

# One cell: exact / refused (with the reason, errors trimmed to their last clause).
judge() { # NAME SCHEMA
  local name=$1 schema=$2 rc=0 n why
  run_case "$name" "$schema" || rc=$?
  if [ $rc = 0 ]; then
    n=$(same_text "$name" "$schema")
    [ "$n" = 0 ] || { echo "CHANGED ($n rows)"; return; }
    if [ "$schema" = made ]; then
      echo "exact, as $(p -c "SELECT format_type(atttypid, atttypmod) FROM pg_attribute
        WHERE attrelid = 'made.\"t_$name\"'::regclass AND attname = 'v'")"
    else
      echo "exact"
    fi
    return
  fi
  n=$(p -c "SELECT count(*) FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace
            WHERE s.nspname = '$schema' AND c.relname = 't_$name'")
  [ "$n" = 0 ] || n=$(p -c "SELECT count(*) FROM $schema.\"t_$name\"")
  [ "$n" = 0 ] || { echo "PARTLY WRITTEN ($n rows)"; return; }
  grep -q -e '"v"' -e 'column v' "$name.$schema.log" \
    || { echo "ERROR WITHOUT COLUMN: $(head -c 300 "$name.$schema.log")"; return; }
  why=$(grep -m1 -i 'error' "$name.$schema.log" | sed \
    -e 's/.*column "v" is \(.*\) but the data is \([^,]*\), which.*/before any row: the column is \1, the data \2/' \
    -e 's/.*column "v"[^:]*: //' -e 's/ \[SQLSTATE.*//' -e 's/|/\\|/g' | cut -c1-110)
  echo "refused: $why"
}

BAD=""
{
  echo "| source type | edge values | into a table ferry creates | into an existing table of the same type |"
  echo "|---|---|---|---|"
  while IFS='|' read -r name type vals; do
    made=$(judge "$name" made)
    pre=$(judge "$name" pre)
    case "$made$pre" in
      *CHANGED* | *PARTLY* | *"WITHOUT COLUMN"*) BAD="$BAD $name(made: $made; pre: $pre)" ;;
    esac
    case " $(echo $MUST_CARRY) " in
      *" $name "*) [ "$pre" = exact ] || BAD="$BAD $name->pre(must-carry:$pre)" ;;
    esac
    printf '| `%s` | `%s` | %s | %s |\n' "$type" "$(printf '%s' "$vals" | sed 's/|/\\|/g' | cut -c1-60)" \
      "$made" "$pre"
  done < cases.txt
} > matrix.md
cat matrix.md
[ -z "$BAD" ] || fail "values changed silently or refused badly:$BAD"
pass "every type: exact or refused naming the column, nothing half-written; MUST_CARRY exact"

# Text that a varchar(n)/char(n) would cut or pad, a domain's check, an integer outside oid:
# refused naming the column and the row, nothing written.
p -c "CREATE TABLE src.narrow (id integer PRIMARY KEY, v text);
      INSERT INTO src.narrow VALUES (1, 'ab'), (2, 'abc  ');
      CREATE TABLE src.negative (id integer PRIMARY KEY, v bigint);
      INSERT INTO src.negative VALUES (1, 5), (2, -1);
      CREATE SCHEMA vc; CREATE TABLE vc.narrow (id integer, v varchar(2));
      CREATE TABLE vc.negative (id integer, v oid);
      CREATE SCHEMA ch; CREATE TABLE ch.narrow (id integer, v char(4));
      CREATE SCHEMA dm; CREATE TABLE dm.negative (id integer, v src.posint);"
for c in "narrow vc at most 2" "narrow ch exactly 4" "negative vc outside oid" "negative dm posint_check"; do
  set -- $c
  if run_case "$1" "$2" "$1"; then fail "$1 into $2: accepted"; fi
  grep -q 'column "v"' "$1.$2.log" || grep -q 'column v' "$1.$2.log" || fail "$1 into $2: no column named: $(cat "$1.$2.log")"
  [ "$(p -c "SELECT count(*) FROM $2.$1")" = 0 ] || fail "$1 into $2: rows written"
done
grep -q 'row 1' narrow.vc.log || fail "varchar(2): the row is not named: $(cat narrow.vc.log)"
pass "too long for varchar(n), not char(n)'s length, a domain check, outside oid: refused naming column and row"

# The matrix in docs/types.md is this output.
DOC="$FERRY_SRC/docs/types.md"
begin='<!-- pg_types.sh: begin -->' end='<!-- pg_types.sh: end -->'
if [ "${FERRY_UPDATE_DOCS:-0}" = 1 ]; then
  awk -v b="$begin" -v e="$end" -v m="$PWD/matrix.md" '
    $0 == b { print; while ((getline l < m) > 0) print l; skip = 1; next }
    $0 == e { skip = 0 } !skip' "$DOC" > types.new && cp types.new "$DOC"
fi
awk -v b="$begin" -v e="$end" '$0 == e { on = 0 } on { print } $0 == b { on = 1 }' "$DOC" > doc_matrix.md
diff -u doc_matrix.md matrix.md || fail "docs/types.md's matrix differs from this run (FERRY_UPDATE_DOCS=1 rewrites it)"
pass "docs/types.md's PostgreSQL matrix is this run's output"
