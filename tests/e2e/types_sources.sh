#!/usr/bin/env bash
# The type matrix of the sources (issue 23): PostgreSQL, SQLite, MariaDB, CSV, JSON Lines and
# Parquet, each into every sink (sqlite, postgres, mysql, files csv / jsonl /
# parquet), from real round trips on one PostgreSQL and one MariaDB server:
#   each case is one table or file (id, v) holding NULL (id 1) and the type's edge values;
#   ONE ferry run per source and sink copies every case (on_resource_error: continue; a case
#   the sink refuses while preparing is noted and the run repeated without it), and each
#   sink's stored values are read back by a reader ferry did not write: sqlite3, psql, the
#   MariaDB client, the raw CSV text, jq, DuckDB (tests/tools/duckdb_exec.mjs).
#   Never silent: every case either arrives with all its rows (the NULL still NULL) or its
#   resource failed with an error naming the column; anything else fails the test.
# The outcomes form docs/types.md's generated sections for these sources (between the
# `types_sources.sh` markers): the test fails when the committed matrix differs;
# FERRY_UPDATE_DOCS=1 rewrites it.
. "$(dirname "$0")/lib.sh"
. "${FERRY_PG_SH:-$FERRY_SRC/tests/pg/pg.sh}"
. "$FERRY_SRC/tests/mysql/mysql.sh"
command -v node > /dev/null || fail "node is required (scripts/install-deps.sh)"
[ -d "$FERRY_SRC/tests/tools/node_modules" ] || fail "tests/tools/node_modules missing: run npm ci --prefix tests/tools"
pg_start
my_start
export PGTZ=UTC
p() { psql "$FERRY_PG_URL" -X -q -v ON_ERROR_STOP=1 -A -t "$@"; }
duck() { nodetool "$FERRY_SRC/tests/tools/duckdb_exec.mjs" "$1"; }

# source|name|type ("-": inferred)|values, separated by " ; " (SQL literals for sqlite, mysql
# and parquet (DuckDB makes the file); the raw field for csv, the raw JSON value for jsonl)
cat > cases.txt <<'EOF'
postgres|bool|boolean|true ; false
postgres|int2|smallint|-32768 ; 32767
postgres|int8|bigint|-9223372036854775808 ; 9223372036854775807
postgres|float4|real|'NaN' ; 'Infinity' ; '-0' ; '1e-45'
postgres|float8|double precision|'NaN' ; '-Infinity' ; '-0' ; '4.9e-324' ; '1.7976931348623157e+308'
postgres|numeric|numeric|'NaN' ; '-0.000001' ; '123456789012345678901234567890.123456789'
postgres|numeric_p|numeric(20,2)|'123456789012345678.91' ; '-0.01'
postgres|text|text|'' ; 'a''b'
postgres|varchar|varchar(5)|'é😀' ; ''
postgres|char|character(3)|'ab '
postgres|bytea|bytea|'\x' ; '\x00ff'
postgres|date|date|'0001-01-01' ; '9999-12-31' ; '4713-01-01 BC'
postgres|date_inf|date|'infinity' ; '-infinity'
postgres|ts|timestamp without time zone|'0001-01-01 00:00:00' ; '9999-12-31 23:59:59.999999'
postgres|ts_inf|timestamp without time zone|'infinity'
postgres|tstz|timestamp with time zone|'2024-02-29 12:00:00.000001+00'
postgres|time|time without time zone|'00:00:00' ; '24:00:00' ; '23:59:59.999999'
postgres|timetz|time with time zone|'12:00:00+05:30'
postgres|interval|interval|'1 year 2 mons 3 days 04:05:06.789' ; '-00:00:01'
postgres|uuid|uuid|'ffffffff-ffff-ffff-ffff-ffffffffffff'
postgres|json|json|'{"a": [1, 2.50]}' ; '[]'
postgres|jsonb|jsonb|'{"a": [1, 2.50]}'
postgres|inet|inet|'192.168.0.1/24' ; '::1'
postgres|money|money|'-92233720368547758.08'
postgres|int_array|integer[]|'{1,NULL,3}' ; '{}'
postgres|range|int4range|'[1,10)' ; 'empty'
postgres|point|point|'(1.5,-2)'
postgres|varbit|bit varying(8)|'101'
postgres|enum|srcpg.mood|'happy'
postgres|domain|srcpg.posint|1 ; 2147483647
postgres|composite|srcpg.pair|'(1,x)'
postgres|oid|oid|0 ; 4294967295
postgres|xml|xml|'<a>1</a>'
sqlite|int|INTEGER|-9223372036854775808 ; 9223372036854775807 ; 0
sqlite|real|REAL|1.7976931348623157e308 ; 4.9e-324 ; 9e999 ; -9e999 ; -1.5
sqlite|text|TEXT|'' ; 'a''b"c' ; char(1114111) ; 'tab'||char(9)||'nl'||char(10)
sqlite|text_nul|TEXT|'a'||char(0)||'b'
sqlite|blob|BLOB|x'' ; x'00ff'
sqlite|numeric|NUMERIC(20,2)|'123456789012345678.91' ; '-0.01'
sqlite|date|DATE|'0001-01-01' ; '9999-12-31'
sqlite|datetime|DATETIME|'2024-02-29 12:00:00.000001' ; '0001-01-01 00:00:00'
sqlite|bool|BOOLEAN|0 ; 1
mysql|tinyint|TINYINT|-128 ; 127
mysql|bigint_u|BIGINT UNSIGNED|0 ; 18446744073709551615
mysql|decimal|DECIMAL(65,30)|'99999999999999999999999999999999999.999999999999999999999999999999' ; '-0.000000000000000000000000000001'
mysql|double|DOUBLE|1.7976931348623157e308 ; -2.2250738585072014e-308 ; -0e0
mysql|date|DATE|'1000-01-01' ; '9999-12-31'
mysql|datetime|DATETIME(6)|'1000-01-01 00:00:00.000000' ; '9999-12-31 23:59:59.999999'
mysql|time|TIME(6)|'-838:59:59.000000' ; '838:59:59.999999'
mysql|year|YEAR|1901 ; 2155
mysql|bit|BIT(64)|b'1111111111111111111111111111111111111111111111111111111111111111'
mysql|enum|ENUM('a','b c')|'a' ; 'b c'
mysql|set|SET('x','y')|'x,y' ; ''
mysql|json|JSON|'{"a": [1, 2.50]}' ; '[]'
mysql|varchar|VARCHAR(10)|'' ; 'é😀'
mysql|blob|BLOB|X'' ; X'00ff'
csv|int|-|-9223372036854775808 ; 9223372036854775807 ; 0
csv|zip|-|08123 ; 00001
csv|plus|-|+5 ; 7
csv|bigint|-|123456789012345678901234 ; 1
csv|float|float64|NaN ; Infinity ; -Infinity ; -0 ; 4.9e-324
csv|exp|-|1e400 ; 1.5
csv|date|-|0001-01-01 ; 9999-12-31
csv|ts|-|2024-02-29T12:00:00.000001Z ; 0001-01-01T00:00:00Z
csv|text|-|"" ; "a,b""c" ; 􏿿
csv|bool|-|true ; false
jsonl|int|-|-9223372036854775808 ; 9223372036854775807
jsonl|bigint|-|123456789012345678901234 ; 1
jsonl|float|-|1.5 ; -0.0 ; 5e-324
jsonl|huge|-|1e400 ; 1
jsonl|str|-|"" ; "\u0000" ; "\udbff\udfff" ; "tab\t"
jsonl|obj|-|{"a":[1,2.50]} ; []
jsonl|obj_nul|-|{"a":"\u0000"}
jsonl|bool|-|true ; false
parquet|int64|BIGINT|-9223372036854775808 ; 9223372036854775807
parquet|double|DOUBLE|'NaN' ; 'inf' ; '-inf' ; '-0.0' ; 5e-324
parquet|decimal|DECIMAL(38,10)|'9999999999999999999999999999.9999999999' ; '-0.0000000001'
parquet|date|DATE|'0001-01-01' ; '9999-12-31' ; '-4713-01-01'
parquet|ts|TIMESTAMP|'0001-01-01 00:00:00' ; '9999-12-31 23:59:59.999999'
parquet|tstz|TIMESTAMPTZ|'2024-02-29 12:00:00.000001+00'
parquet|text|VARCHAR|'' ; chr(1114111) ; 'a' || chr(0) || 'b'
parquet|blob|BLOB|'\x00\xFF'::BLOB
parquet|uuid|UUID|'ffffffff-ffff-ffff-ffff-ffffffffffff'
parquet|bool|BOOLEAN|true ; false
EOF
# a 1000-digit decimal and its smallest fraction, as CSV text
printf 'csv|digits|-|%s.5 ; -0.%s1\n' "$(printf '9%.0s' $(seq 1000))" "$(printf '0%.0s' $(seq 999))" >> cases.txt
SOURCES="postgres sqlite mysql csv jsonl parquet"
SINKS="sqlite postgres mysql csv jsonl parquet"

cases_of() { awk -F'|' -v s="$1" '$1 == s' cases.txt; }
vals_of() { printf '%s' "$1" | awk -v RS=' ; ' '{ sub(/\n$/, ""); print }'; }

# ---- the sources ----
mkdir -p src_csv src_jsonl src_parquet
p -c "CREATE SCHEMA srcpg; CREATE TYPE srcpg.mood AS ENUM ('sad', 'happy');
      CREATE DOMAIN srcpg.posint AS integer CHECK (VALUE > 0); CREATE TYPE srcpg.pair AS (a int, b text)" \
  || fail "postgres source types"
while IFS='|' read -r src name type vals; do
  i=1 rows="(1, NULL)"
  [ "$src" = parquet ] && rows="(1, NULL::$type)" # DuckDB: every value typed
  while IFS= read -r v; do
    i=$((i + 1))
    [ "$src" = parquet ] && v="($v)::$type"
    rows="$rows, ($i, $v)"
  done < <(vals_of "$vals")
  case $src in
  postgres) p -c "CREATE TABLE srcpg.c_$name (id int PRIMARY KEY, v $type);
            INSERT INTO srcpg.c_$name VALUES $rows;" || fail "postgres case $name" ;;
  sqlite) sqlite3 src.db "CREATE TABLE c_$name (id INTEGER PRIMARY KEY, v $type);
            INSERT INTO c_$name VALUES $rows;" || fail "sqlite case $name" ;;
  mysql) myq -e "SET sql_mode = 'STRICT_ALL_TABLES'; CREATE TABLE c_$name (id int PRIMARY KEY, v $type);
            INSERT INTO c_$name VALUES $rows;" || fail "mysql case $name" ;;
  parquet) printf "COPY (SELECT id::INTEGER AS id, v::%s AS v FROM (VALUES %s) t(id, v)) TO '%s' (FORMAT parquet);\n" \
             "$type" "$rows" "$T/src_parquet/c_$name.parquet" >> parquet.sql ;;
  csv) { printf 'id,v\r\n1,\r\n'; i=1
         while IFS= read -r v; do i=$((i + 1)); printf '%d,%s\r\n' $i "$v"; done < <(vals_of "$vals")
       } > "src_csv/c_$name.csv" ;;
  jsonl) { printf '{"id":1,"v":null}\n'; i=1
           while IFS= read -r v; do i=$((i + 1)); printf '{"id":%d,"v":%s}\n' $i "$v"; done < <(vals_of "$vals")
         } > "src_jsonl/c_$name.jsonl" ;;
  esac
done < cases.txt
duck "$(cat parquet.sql)" > /dev/null || fail "DuckDB could not write the Parquet cases"
pass "sources made: PostgreSQL tables, SQLite tables, MariaDB tables, CSV and JSON Lines files, Parquet files written by DuckDB"

source_yaml() { # SOURCE NAMES-FILE
  local src=$1 name type
  case $src in
  postgres) printf 'source:\n  type: postgres\n  url: env:FERRY_PG_URL\n  resources:\n' ;;
  sqlite) printf 'source:\n  type: sqlite\n  path: %s/src.db\n  resources:\n' "$T" ;;
  mysql) printf 'source:\n  type: mysql\n  url: env:FERRY_MY_READER_URL\n  resources:\n' ;;
  *) printf 'source:\n  type: files\n  resources:\n' ;;
  esac
  while read -r name; do
    type=$(awk -F'|' -v s="$src" -v n="$name" '$1 == s && $2 == n { print $3 }' cases.txt)
    case $src in
    postgres) printf '    - {table: srcpg.c_%s, target: t_%s_%s}\n' "$name" "$src" "$name" ;;
    sqlite | mysql) printf '    - {table: c_%s, target: t_%s_%s}\n' "$name" "$src" "$name" ;;
    parquet) printf '    - {table: c_%s, target: t_%s_%s, path: %s/src_parquet/c_%s.parquet}\n' \
               "$name" "$src" "$name" "$T" "$name" ;;
    csv | jsonl)
      printf '    - {table: c_%s, target: t_%s_%s, path: %s/src_%s/c_%s.%s' "$name" "$src" "$name" \
        "$T" "$src" "$name" "$src"
      [ "$type" = - ] || printf ', schema: {id: int64, v: %s}' "$type"
      printf '}\n' ;;
    esac
  done < "$2"
}

sink_yaml() { # SOURCE SINK
  case $2 in
  sqlite) printf 'sink: {type: sqlite, path: %s/out_%s.db, write: append}\n' "$T" "$1" ;;
  postgres) printf 'sink: {type: postgres, url: env:FERRY_PG_URL, write: append}\n' ;;
  mysql) printf 'sink: {type: mysql, url: env:FERRY_MY_URL, write: append}\n' ;;
  *) printf 'sink: {type: files, path: %s/out_%s_%s, format: %s, write: append}\n' "$T" "$1" "$2" "$2" ;;
  esac
}

# Messages without this run's folder, ports or table-pipe characters, on one line.
clean() { sed -e "s#$T/##g" -e 's/127\.0\.0\.1:[0-9]*/HOST/g' -e 's/|/\\|/g' | tr '\n' ' ' | sed 's/ *$//'; }

# One run of every case of SOURCE into SINK; a case the sink refuses while preparing is noted
# and the run repeated without it. Fills SRC.SINK.refused (NAME|message).
run_all() { # SOURCE SINK
  local src=$1 sink=$2 try=0 res run tag=$1.$2
  cases_of "$src" | cut -d'|' -f2 > "$tag.left"
  : > "$tag.refused"
  while [ $try -lt 20 ]; do
    try=$((try + 1))
    { printf 'version: 1\nname: tm-%s-%s-%d\non_resource_error: continue\n' "$src" "$sink" $try
      source_yaml "$src" "$tag.left"
      sink_yaml "$src" "$sink"
    } > "$tag.$try.yaml"
    "$FERRY_BIN" run "$tag.$try.yaml" --quiet > "$tag.$try.log" 2>&1 && return 0
    res=$(sed -n "s/.*: prepare [^ ]*t_${src}_\\([a-z0-9_]*\\): \\(.*\\)/\\1|\\2/p" "$tag.$try.log" | head -1)
    if [ -n "$res" ]; then
      echo "$res" >> "$tag.refused"
      grep -v -x -e "${res%%|*}" "$tag.left" > left.new || true
      mv left.new "$tag.left"
      [ -s "$tag.left" ] || return 0
      continue
    fi
    run=$(sed -n 's/^ferry: run \([0-9]*\) partial:.*/\1/p' "$tag.$try.log")
    [ -n "$run" ] || fail "$src into $sink failed as a whole: $(head -c 600 "$tag.$try.log")"
    "$FERRY_BIN" events "$run" --json | jq -r 'select(.type == "resource.failed")
      | "\(.resource | sub("^.*c_"; ""))|\(.payload.message)"' >> "$tag.refused"
    return 0
  done
  fail "$src into $sink: more than 20 tries"
}

# The files sinks' tables, read by python: csv as RFC 4180 records remembering which fields
# were quoted (an empty unquoted field is NULL), jsonl as each value's own JSON text.
# Prints [case, id, text, type] per row.
cat > files_read.py <<'PY'
import glob, json, sys
fmt, root, cases = sys.argv[1], sys.argv[2], sys.argv[3:]
def csv_records(text):
    i, rec, field, quoted, recs = 0, [], '', False, []
    while i < len(text):
        c = text[i]
        if c == '"' and field == '' and not quoted:
            j = i + 1
            while True:
                k = text.index('"', j)
                if k + 1 < len(text) and text[k + 1] == '"':
                    field += text[j:k] + '"'; j = k + 2
                else:
                    field += text[j:k]; i = k + 1; break
            quoted = True
            continue
        if c in ',\r\n':
            if c == ',' or rec or field or quoted: rec.append((field, quoted))
            field, quoted = '', False
            if c != ',':
                if rec: recs.append(rec)
                rec = []
                if c == '\r' and text[i + 1:i + 2] == '\n': i += 1
            i += 1
            continue
        field += c; i += 1
    if rec or field: rec.append((field, quoted)); recs.append(rec)
    return recs[1:]
def show(s):
    return json.dumps(s, ensure_ascii=False)
for case, table in (c.split('=') for c in cases):
    for path in sorted(glob.glob(f'{root}/{table}/part-*.{fmt}')):
        text = open(path, encoding='utf-8', newline='').read()
        if fmt == 'csv':
            for r in csv_records(text):
                f, q = r[1]
                t = show(f) if q else (show(f)[1:-1] if f != '' else 'NULL')
                print(json.dumps([case, int(r[0][0]), t, 'CSV text']))
        else:
            for l in text.splitlines():
                r = json.loads(l)
                # the value's own text ("-0" stays -0): the line is {"id":N,"v":VALUE}
                raw = l[l.index('"v":') + 4:l.rstrip().rindex('}')].strip()
                if json.loads(raw) != r['v'] and r['v'] == r['v']: raise SystemExit(l)
                t = 'NULL' if r['v'] is None else raw
                print(json.dumps([case, r['id'], t, 'JSON']))
PY

# Every case of SOURCE that SINK kept, read back by one reader call: rb_SOURCE_SINK.json,
# rows [case, id, text ("NULL" for a NULL), type]. sqlite shows a text holding a NUL as its
# bytes (quote() stops at the NUL), MariaDB binary columns as hex.
collect() { # SOURCE SINK
  local src=$1 sink=$2 sel="" t ty ex arg=() name
  while IFS='|' read -r _ name _ _; do
    grep -q "^$name|" "$src.$sink.refused" && continue
    t=t_${src}_$name
    case $sink in
    sqlite) sel="$sel${sel:+ UNION ALL }SELECT json_array('$name', id, coalesce(CASE WHEN typeof(v) = 'text'
        AND instr(v, char(0)) > 0 THEN 'text ' || quote(CAST(v AS BLOB)) ELSE replace(replace(quote(v),
        char(10), '\\n'), char(9), '\\t') END, 'NULL'), (SELECT type FROM pragma_table_info('$t')
        WHERE name = 'v')) FROM \"$t\"" ;;
    postgres) sel="$sel${sel:+ UNION ALL }SELECT json_build_array('$name', id, coalesce(replace(replace(
        quote_literal(v::text), E'\\n', '\\n'), E'\\t', '\\t'), 'NULL'), (SELECT format_type(atttypid,
        atttypmod) FROM pg_attribute WHERE attrelid = '\"$t\"'::regclass AND attname = 'v'))::text
        FROM \"$t\"" ;;
    mysql)
      ty=$(awk -F'\t' -v t="$t" '$1 == t { print $2 }' "my_types.txt")
      case $ty in *blob* | *binary*) ex="CONCAT('0x', HEX(v))" ;; *) ex="QUOTE(v)" ;; esac
      ty=${ty//\'/\'\'} # enum('a','b c')
      sel="$sel${sel:+ UNION ALL }SELECT CONVERT(JSON_ARRAY('$name', id, IFNULL($ex, 'NULL'), '$ty')
        USING utf8mb4) COLLATE utf8mb4_bin FROM \`$t\`" ;;
    csv | jsonl) arg+=("$name=$t") ;;
    parquet) sel="$sel${sel:+ UNION ALL }SELECT '$name' AS c, id, coalesce(v::VARCHAR, 'NULL') AS t,
        typeof(v) AS ty FROM read_parquet('$T/out_${src}_parquet/$t/*.parquet')" ;;
    esac
  done < <(cases_of "$src")
  local out="rb_${src}_$sink.json"
  : > "$out"
  case $sink in
  sqlite) [ -z "$sel" ] || q "out_$src.db" "$sel" > "$out" ;;
  postgres) # (COPY: psql's own output drops U+10FFFF)
    [ -z "$sel" ] || p -c "COPY ($sel) TO STDOUT WITH (FORMAT csv, DELIMITER E'\\x02', QUOTE E'\\x01')" > "$out" ;;
  mysql) [ -z "$sel" ] || myq -r -e "$sel" > "$out" ;;
  csv | jsonl) [ ${#arg[@]} = 0 ] || python3 files_read.py "$sink" "out_${src}_$sink" "${arg[@]}" > "$out" ;;
  parquet) [ -z "$sel" ] || duck "$sel" > "$out" ;;
  esac 2> collect.err || fail "$src into $sink: the destination could not be read back: $(cat collect.err)"
}

for src in $SOURCES; do
  for sink in $SINKS; do
    run_all "$src" "$sink"
  done
done
myq -e "SELECT TABLE_NAME, COLUMN_TYPE FROM information_schema.COLUMNS
        WHERE TABLE_SCHEMA = 'ferry' AND TABLE_NAME LIKE 't\\_%' AND COLUMN_NAME = 'v'" > my_types.txt
for src in $SOURCES; do
  for sink in $SINKS; do
    collect "$src" "$sink"
  done
done
pass "every source into every sink: one run each (refusals noted)"

# The matrix: one python pass over cases.txt, SOURCE.SINK.refused and rb_SOURCE_SINK.json.
# Fails (exit 1, naming source, sink and case) when a case that was not refused lacks a row
# or lost its NULL, or when a refusal does not name the column.
cat > render.py <<'PY'
import json, re, sys
T, sources, sinks = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
titles = {'postgres': 'PostgreSQL (into PostgreSQL: see also the matrix above)',
          'sqlite': 'SQLite (declared column types)', 'mysql': 'MariaDB / MySQL',
          'csv': 'CSV files (inferred, or `schema:` as shown)',
          'jsonl': 'JSON Lines files (inferred)', 'parquet': 'Parquet files (written by DuckDB)'}
def clean(t):  # no run folder, port or table pipe; one line
    t = t.replace(T + '/', '')
    t = re.sub(r'127\.0\.0\.1:[0-9]*', 'HOST', t).replace('|', '\\|')
    t = re.sub(r'\.tmp-[0-9]+-[0-9]+-[0-9]+', '.tmp-RUN-ATTEMPT-N', t)
    return ' '.join(t.split('\n')).rstrip()
def shown(t):
    return ''.join('\\n' if c == '\n' else '\\t' if c == '\t' else
                   '\\x%02x' % ord(c) if ord(c) < 32 else c for c in t)
def norm(t):  # without its SQL or JSON quotes
    if len(t) >= 2 and t[0] == t[-1] == "'": return t[1:-1].replace("''", "'")
    if len(t) >= 2 and t[0] == t[-1] == '"': return t[1:-1]
    return t
cases = [l.rstrip('\n').split('|', 3) for l in open('cases.txt', encoding='utf-8')]
out = []
for src in sources:
    out += ['', '### ' + titles[src], '',
            '| source type | values (after a NULL) | sqlite | postgres | mysql | csv | jsonl | parquet |',
            '|---|---|---|---|---|---|---|---|']
    rb, refused = {}, {}
    for sink in sinks:
        refused[sink] = dict(l.rstrip('\n').split('|', 1)
                             for l in open(f'{src}.{sink}.refused', encoding='utf-8') if '|' in l)
        rows = {}
        for l in open(f'rb_{src}_{sink}.json', encoding='utf-8'):
            if l.strip():
                r = json.loads(l)
                rows.setdefault(r[0], []).append((int(r[1]), r[2], r[3]))
        rb[sink] = rows
    for _, name, typ, vals in (c for c in cases if c[0] == src):
        want = [shown(norm(v)) for v in vals.split(' ; ')]
        line = '| `%s` (%s) | `%s` |' % ('inferred' if typ == '-' else typ, name,
                                         clean(vals.replace(' ; ', ', '))[:70])
        for sink in sinks:
            if name in refused[sink]:
                msg = refused[sink][name]
                if not re.search(r'column "?v\b', msg):
                    sys.exit(f'{src} into {sink}: case {name} refused without naming column v: {msg}')
                line += ' refused: %s |' % clean(msg)[:160]
                continue
            rows = sorted(rb[sink].get(name, []))
            where = f'{src} into {sink}: case {name}'
            if len(rows) != len(want) + 1: sys.exit(f'{where} has {len(rows)} rows: {rows}')
            if rows[0][1] != 'NULL': sys.exit(f'{where} lost its NULL (row 1 holds {rows[0][1]})')
            got = [shown(norm(r[1])) for r in rows[1:]]
            line += (' exact, as %s |' % rows[0][2] if got == want else
                     ' %s: %s |' % (rows[0][2], clean(', '.join(got))[:120]))
        out.append(line)
print('\n'.join(out))
PY
python3 render.py "$T" "$SOURCES" "$SINKS" > matrix.md || fail "the matrix (above: a case lost a row or its NULL, or a refusal names no column)"
pass "every case read back: all rows present, the NULL kept, or refused naming the column"

DOC="$FERRY_SRC/docs/types.md"
begin='<!-- types_sources.sh: begin -->' end='<!-- types_sources.sh: end -->'
if [ "${FERRY_UPDATE_DOCS:-0}" = 1 ]; then
  awk -v b="$begin" -v e="$end" -v m="$PWD/matrix.md" '
    $0 == b { print; while ((getline l < m) > 0) print l; skip = 1; next }
    $0 == e { skip = 0 } !skip { print }' "$DOC" > doc.new && cp doc.new "$DOC"
fi
awk -v b="$begin" -v e="$end" '$0 == e { on = 0 } on { print } $0 == b { on = 1 }' "$DOC" > doc_matrix.md
diff -u doc_matrix.md matrix.md || fail "docs/types.md's source matrix differs from this run (FERRY_UPDATE_DOCS=1 rewrites it)"
pass "docs/types.md's matrix of the postgres, sqlite, mysql, csv, jsonl and parquet sources is this run's output"
