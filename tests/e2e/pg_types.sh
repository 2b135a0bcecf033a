#!/usr/bin/env bash
# shared: pg
# PostgreSQL -> PostgreSQL, every built-in type at its edges (issue 23), one server:
#   each case is a table src.t_NAME (id, v TYPE) holding NULL and the type's edge values; all
#   cases are copied by ONE ferry run per destination (write: append, on_resource_error:
#   continue; a case the sink refuses while preparing is taken out and the run repeated) into
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
timestamptz_bc|timestamptz|'4713-01-01 00:00:00+00 BC', '294246-12-31 23:59:59.999999+00'
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
text_array|text[]|'{"a,b","c\"d",NULL,"NULL",""}', '{{"x y",NULL},{"{}","\\"}}'
numeric_array|numeric[]|'{1.50,NaN,-0.001,NULL}', '[0:1]={1,2}'
date_array|date[]|'{infinity,-infinity,4713-01-01 BC}'
interval_array|interval[]|'{"1 day",NULL}'
mood_array|src.mood[]|'{sad,NULL,happy}'
pair_array|src.pair[]|'{"(1,x)",NULL}'
int8range|int8range|'[-9223372036854775808,9223372036854775807)', '(,)'
tsrange|tsrange|'[-infinity,infinity]', '[4713-01-01 BC,294276-01-01)'
daterange_empty|daterange|'empty', '(,2024-01-01)'
nummultirange|nummultirange|'{}', '{(,1.5],[2,NaN)}'
datemultirange|datemultirange|'{[2024-01-01,2024-02-01),[2025-01-01,)}'
interval_edges|interval|'-178000000 years', '1 year 2 mons 3 days 04:05:06.000007', '0 seconds'
interval_2|interval day to second(2)|'1 day 00:00:01.25'
inet_edges|inet|'0.0.0.0/0', 'ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128', '::ffff:1.2.3.4'
cidr6|cidr|'2001:db8::/32'
macaddr8|macaddr8|'08:00:2b:01:02:03:04:05'
money_0|money|'0', '-0.01'
point_edges|point|'(NaN,Infinity)', '(-0,1e-300)'
line_v|line|'{1,0,-5}'
box_big|box|'(1e300,1e300),(-1e300,-1e300)'
path_open|path|'[(0,0),(1,1)]', '((0,0),(1,1),(1,0))'
circle_f|circle|'<(1.5,-2.25),0.125>'
bit_0|bit varying(8)|B'', B'10101010'
bit_64|bit(64)|repeat('1',64)::bit(64)
tsvector_w|tsvector|'''a b'':1A,2B c:3C', ''
tsquery_p|tsquery|'(a | b) <-> !c:*'
oid_edges|oid|1, 2147483648
regtype|regtype|'integer', 'text[]'
uuid_nil|uuid|'00000000-0000-0000-0000-000000000001'
pair_nested|src.pair|'(2,"a""b")', '(,"")'
mood|src.mood|'sad', 'happy'
posint|src.posint|1, 2147483647
short|src.short|'', 'abcde'
pair|src.pair|'(1,"x,y")', '(,)'
EOF

MUST_CARRY="bool int2 int4 int8 float4 float8 numeric numeric_20_2 numeric_20_2_nan numeric_38_0 text varchar
date_inf timestamp_inf timestamptz_inf timestamptz_bc
varchar_5 char_4 char1 name bytea date time time_0 timetz timestamp timestamptz interval uuid json json_nul
jsonb xml inet cidr macaddr money point line lseg box path polygon circle bit_3 varbit tsvector tsquery
oid pg_lsn int4range numrange tstzrange daterange int4multirange int4_array text_array mood posint short
pair numeric_array interval_array mood_array pair_array int8range daterange_empty nummultirange
datemultirange interval_edges interval_2 inet_edges cidr6 macaddr8 money_0 point_edges line_v box_big
path_open circle_f bit_0 bit_64 tsvector_w tsquery_p oid_edges regtype uuid_nil pair_nested"

p -c "CREATE SCHEMA src; CREATE SCHEMA made;
  CREATE TYPE src.mood AS ENUM ('sad', 'ok', 'happy');
  CREATE DOMAIN src.posint AS integer CHECK (VALUE > 0);
  CREATE DOMAIN src.short AS varchar(5);
  CREATE TYPE src.pair AS (a integer, b text);"
while IFS='|' read -r name type vals; do
  rows=$(printf '%s' "$vals" | awk -v RS=', ' '{ printf "%s(%d, %s)", (NR > 1 ? ", " : ""), NR + 1, $0 }')
  # (split on ", " outside literals is enough for these values)
  printf 'CREATE TABLE src."t_%s" (id integer PRIMARY KEY, v %s);\n' "$name" "$type"
  printf 'INSERT INTO src."t_%s" VALUES (1, NULL), %s;\n' "$name" "$rows"
done < cases.txt > cases.sql
p -f cases.sql > /dev/null || fail "the source tables could not be created"
# The existing tables: schema src as pg_dump writes it, renamed to pre.
pg_dump "$FERRY_PG_URL" --schema-only --schema=src --no-owner > dump.sql
sed -e 's/\bsrc\./pre./g' -e 's/SCHEMA src/SCHEMA pre/' dump.sql | p -f - > /dev/null \
  || fail "the pg_dump --schema-only of src did not load as pre"

run_case() { # NAME SCHEMA [TABLE] -> exit code; log in NAME.SCHEMA.log
  cat > "$1.$2.yaml" <<EOF
version: 1
name: types-$1-$2
batch: {flush_after: 1h}
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

# One run copies every case into SCHEMA (on_resource_error: continue: a case failing while
# it is read fails alone). A case the sink refuses while preparing stops the run before any
# row moves: it is noted and the run repeated without it. Fills SCHEMA.refused (NAME|error).
run_all() { # SCHEMA
  local schema=$1 try=0 res run
  cut -d'|' -f1 cases.txt > "$schema.left"
  : > "$schema.refused"
  while [ $try -lt 40 ]; do
    try=$((try + 1))
    # a case's rows (a few) travel in one batch: without the flush timer's cut (1s after the
    # first row), a refused row never leaves the rows before it written on a loaded machine
    { printf 'version: 1\nname: types-%s-%d\non_resource_error: continue\n' "$schema" $try
      printf 'batch:\n  flush_after: 1h\n'
      printf 'source:\n  type: postgres\n  url: env:FERRY_PG_URL\n  resources:\n'
      sed 's/.*/    - table: src.t_&\n      mode: full/' "$schema.left"
      printf 'sink:\n  type: postgres\n  url: env:DEST_URL\n  schema: %s\n  write: append\n' "$schema"
    } > "$schema.$try.yaml"
    "$FERRY_BIN" run "$schema.$try.yaml" --quiet > "$schema.$try.log" 2>&1 && return 0
    res=$(sed -n 's/.*: prepare src\.t_\([a-z0-9_]*\): \(.*\)/\1|\2/p' "$schema.$try.log" | head -1)
    if [ -n "$res" ]; then
      echo "$res" >> "$schema.refused"
      grep -v -x -e "${res%%|*}" "$schema.left" > left.new || true
      mv left.new "$schema.left"
      continue
    fi
    run=$(sed -n 's/^ferry: run \([0-9]*\) partial:.*/\1/p' "$schema.$try.log")
    [ -n "$run" ] || fail "run into $schema failed as a whole: $(head -c 600 "$schema.$try.log")"
    "$FERRY_BIN" events "$run" --json | jq -r 'select(.type == "resource.failed")
      | "\(.resource | sub("^src\\.t_"; ""))|\(.payload.message)"' >> "$schema.refused"
    return 0
  done
  fail "run into $schema: more than 40 tries"
}

# Every case's facts, read in one psql session (a psql per question cost most of this test's
# time): for each case and each of the schemas made, pre and src, whether its table exists,
# its rows, the rows differing from the source's by their text form (the type's output) both
# ways, and its column's type. FACT[NAME.SCHEMA] = "exists|rows|differing|type"; a missing
# table differs by "missing".
declare -A FACT
read_facts() {
  local names n s e r d t
  names=$(cut -d'|' -f1 cases.txt | sed "s/.*/'&'/" | paste -sd, -)
  p > facts.txt <<SQL
CREATE FUNCTION pg_temp.facts(s text, n text) RETURNS text LANGUAGE plpgsql AS \$f\$
DECLARE
  t regclass;
  f text := 'id, format(''%s'', v) IS NULL, format(''%s'', v)';
  nrows bigint;
  ndiff bigint;
  ty text;
BEGIN
  SELECT c.oid INTO t FROM pg_class c JOIN pg_namespace ns ON ns.oid = c.relnamespace
   WHERE ns.nspname = s AND c.relname = 't_' || n;
  IF t IS NULL THEN RETURN '0|0|missing|'; END IF;
  EXECUTE format('SELECT count(*) FROM %s', t) INTO nrows;
  EXECUTE format('SELECT count(*) FROM ((SELECT %1\$s FROM src.%2\$I EXCEPT ALL SELECT %1\$s FROM %3\$s)
                  UNION ALL (SELECT %1\$s FROM %3\$s EXCEPT ALL SELECT %1\$s FROM src.%2\$I)) d',
                 f, 't_' || n, t) INTO ndiff;
  SELECT format_type(atttypid, atttypmod) INTO ty FROM pg_attribute WHERE attrelid = t AND attname = 'v';
  RETURN '1|' || nrows || '|' || ndiff || '|' || coalesce(ty, '');
EXCEPTION WHEN OTHERS THEN
  RETURN '1|?|error: ' || replace(SQLERRM, '|', '/') || '|';
END \$f\$;
SELECT n || '|' || s || '|' || pg_temp.facts(s, n)
  FROM unnest(ARRAY[$names]) n, unnest(ARRAY['made', 'pre', 'src']) s;
SQL
  while IFS='|' read -r n s e r d t; do FACT[$n.$s]="$e|$r|$d|$t"; done < facts.txt
  [ "${#FACT[@]}" = $(( $(wc -l < cases.txt) * 3 )) ] || fail "facts: ${#FACT[@]} read for $(wc -l < cases.txt) cases"
}
fact() { # NAME SCHEMA FIELD(1 exists, 2 rows, 3 differing, 4 type)
  local f=()
  IFS='|' read -r -a f <<< "${FACT[$1.$2]}"
  printf '%s\n' "${f[$(($3 - 1))]:-}"
}

# One cell: exact / refused (with the reason, errors trimmed to their last clause).
judge() { # NAME SCHEMA
  local name=$1 schema=$2 n why
  why=$(awk -v n="$name" 'index($0, n "|") == 1 { print substr($0, length(n) + 2); exit }' \
    "$schema.refused")
  if [ -z "$why" ]; then
    n=$(fact "$name" "$schema" 3)
    [ "$n" = 0 ] || { echo "CHANGED ($n rows)"; return; }
    if [ "$schema" = made ]; then echo "exact, as $(fact "$name" made 4)"; else echo "exact"; fi
    return
  fi
  n=$(fact "$name" "$schema" 2)
  [ "$n" = 0 ] || { echo "PARTLY WRITTEN ($n rows)"; return; }
  case "$why" in
    *'"v"'* | *'column v'*) ;;
    *) echo "ERROR WITHOUT COLUMN: $(printf '%s' "$why" | head -c 300)"; return ;;
  esac
  why=$(printf '%s\n' "$why" | sed \
    -e 's/.*column "v" is \(.*\) but the data is \([^,]*\) from a source column of type \([^,]*\), which.*/before any row: the column is \1, the source \3 (data \2)/' \
    -e 's/.*column "v" is \(.*\) but the data is \([^,]*\), which.*/before any row: the column is \1, the data \2/' \
    -e 's/.*column "v"[^:]*: //' -e 's/ \[SQLSTATE.*//' -e 's/|/\\|/g' | cut -c1-110)
  echo "refused: $why"
}

run_all made
run_all pre
read_facts
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
      *" $name "*)
        [ "$pre" = exact ] || BAD="$BAD $name->pre(must-carry:$pre)"
        # (a length or precision is created as ferry's type: varchar(n) as text, time(0) as time)
        case "$(fact "$name" src 4)" in
          character*\(* | time\(* | timestamp\(*) ;;
          *) [ "$made" = "exact, as $(fact "$name" src 4)" ] || BAD="$BAD $name->made(must-carry:$made)" ;;
        esac ;;
    esac
    printf '| `%s` | `%s` | %s | %s |\n' "$type" "$(printf '%s' "$vals" | sed 's/|/\\|/g' | cut -c1-60)" \
      "$made" "$pre"
  done < cases.txt
} > matrix.md
cat matrix.md
[ -z "$BAD" ] || fail "values changed silently or refused badly:$BAD"
pass "every type: exact or refused naming the column, nothing half-written; MUST_CARRY exact, as the source's type"

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

# A real type mismatch: text into interval, an int4range column for an int8range source, an
# integer[] for a text[] one: refused before any row, naming column, its type and the source's.
p -c "CREATE SCHEMA mm; CREATE TABLE mm.narrow (id integer, v interval);
      CREATE TABLE mm.t_int8range (id integer, v int4range);
      CREATE TABLE mm.t_text_array (id integer, v integer[]);"
for c in "narrow interval text" "t_int8range int4range int8range" "t_text_array integer[] text[]"; do
  set -- $c
  if run_case "$1" mm "$1"; then fail "$1 into mm: accepted"; fi
  grep -q -F "column \"v\" is $2 but the data is utf8 from a source column of type $3," "$1.mm.log" \
    || fail "$1 into mm: the refusal does not name column, types: $(cat "$1.mm.log")"
  [ "$(p -c "SELECT count(*) FROM mm.$1")" = 0 ] || fail "$1 into mm: rows written"
done
pass "a column of another type than the source's: refused before any row, naming column, its type and the source's"

# The other write modes go through the same staging casts and special values: replace
# (staging table), upsert and merge (the temporary staging table, DISTINCT ON the key),
# into a created table, twice (the second run replaces or updates every row).
p -c "CREATE TABLE src.mix (id integer PRIMARY KEY, a integer[], i interval, r tstzrange,
        d date, t timestamptz, n numeric(10,2), m src.mood);
      INSERT INTO src.mix VALUES
        (1, '{1,NULL}', '1 day -1 sec', '[2024-01-01 00:00+00,infinity)', 'infinity',
            '-infinity', 'NaN', 'ok'),
        (2, '{}', NULL, 'empty', '-infinity', 'infinity', 1.25, NULL),
        (3, NULL, '-178000000 years', NULL, '0001-01-01 BC', '2024-02-29 12:00+00', -0.01, 'sad')"
for mode in replace upsert merge; do
  for round in 1 2; do
    [ $round = 2 ] && p -c "UPDATE src.mix SET i = i + interval '1 day', n = n + 1 WHERE id <> 2"
    cat > "mix_$mode.yaml" <<EOF
version: 1
name: types-mix-$mode
source:
  type: postgres
  url: env:FERRY_PG_URL
  resources:
    - table: src.mix
      mode: full
sink:
  type: postgres
  url: env:DEST_URL
  schema: w_$mode
  write: $mode
EOF
    "$FERRY_BIN" run "mix_$mode.yaml" --fresh --quiet || fail "mix, write $mode, run $round failed"
    diff <(p -c "SELECT m::text FROM src.mix m ORDER BY id") \
         <(p -c "SELECT m::text FROM w_$mode.mix m ORDER BY id") \
      || fail "mix, write $mode, run $round: rows differ"
  done
done
[ "$(p -c "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = 'w_merge.mix'::regclass
           AND attnum > 0 ORDER BY attnum" | tr '\n' ' ')" = \
  "integer integer[] interval tstzrange date timestamp with time zone numeric(10,2) src.mood " ] \
  || fail "mix: created with other types than the source's"
"$FERRY_BIN" verify mix_merge.yaml > verify.log 2>&1 || fail "verify of mix: $(cat verify.log)"
grep -q 'src.mix: equal' verify.log || fail "verify of mix: $(cat verify.log)"
p -c "UPDATE w_merge.mix SET d = '-infinity' WHERE id = 1"
if "$FERRY_BIN" verify mix_merge.yaml > verify.log 2>&1; then fail "verify: +infinity vs -infinity equal"; fi
grep -q 'src.mix: DIFFERENT' verify.log || fail "verify of a changed mix: $(cat verify.log)"
pass "replace, upsert, merge: arrays, interval, ranges, enums, ±infinity and NaN exact, created as the source's types; verify tells infinities apart"

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
