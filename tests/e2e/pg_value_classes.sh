#!/usr/bin/env bash
# shared: pg
# PostgreSQL -> SQLite, CSV and Parquet (issue 23, never silent): the value classes ferry has
# no value for (±infinity dates and timestamps, a timestamp past year 294247, NaN in a
# numeric(p,s)) stop the run with an error naming the resource, the column, the row and the
# value class, and nothing of that table is written; types ferry carries as their text
# (arrays with NULL elements, ranges with infinity bounds, interval, inet, geometric types,
# composites, numeric NaN/Infinity, 1000-digit numerics) arrive with exactly PostgreSQL's text.
. "$(dirname "$0")/lib.sh"
. "${FERRY_PG_SH:-$FERRY_SRC/tests/pg/pg.sh}"
pg_start
p() { psql "$FERRY_PG_URL" -X -q -v ON_ERROR_STOP=1 -A -t "$@"; }

p -c "CREATE TYPE pair AS (a integer, b text);
  CREATE TABLE texty (id integer PRIMARY KEY, a integer[], r tstzrange, i interval, n inet,
    g polygon, c pair, d numeric, e text);
  INSERT INTO texty VALUES
    (1, '{1,NULL,-3}', '[2024-01-01 00:00+00,infinity)', '-178000000 years 1 mon -0.000001 sec',
        '::ffff:1.2.3.4/128', '((0,0),(1,1e-300),(2,0))', '(1,\"x,y\")', 'NaN', ''),
    (2, '{{1,2},{3,4}}', 'empty', '0', '10.0.0.0/8', NULL, '(,)', '-Infinity', NULL),
    (3, NULL, NULL, NULL, NULL, NULL, NULL, repeat('9', 1000)::numeric, U&'\+10FFFF');
  CREATE TABLE d_inf (id integer PRIMARY KEY, v date);
  INSERT INTO d_inf VALUES (1, '2024-01-01'), (2, '2024-01-02'), (3, '-infinity');
  CREATE TABLE ts_inf (id integer PRIMARY KEY, v timestamptz);
  INSERT INTO ts_inf VALUES (1, 'infinity');
  CREATE TABLE ts_far (id integer PRIMARY KEY, v timestamp);
  INSERT INTO ts_far VALUES (1, '2024-01-01'), (2, '294276-12-31 23:59:59');
  CREATE TABLE n_nan (id integer PRIMARY KEY, v numeric(20,2));
  INSERT INTO n_nan VALUES (1, 1.5), (2, 'NaN');"

pipeline() { # NAME TABLE SINK-LINE
  cat > "$1.yaml" <<EOF
version: 1
name: $1
source:
  type: postgres
  url: env:FERRY_PG_URL
  resources:
    - table: public.$2
      mode: full
sink: $3
EOF
}

# The refusals: one per value class and sink, each naming resource, column, row and class.
check_refused() { # TABLE ROW CLASS
  local sink
  for sink in "{type: sqlite, path: $T/r_$1.db, write: append}" \
              "{type: files, path: $T/csv_$1, format: csv, write: append}" \
              "{type: files, path: $T/pq_$1, format: parquet, write: append}"; do
    pipeline "r_$1" "$1" "$sink"
    if "$FERRY_BIN" run "r_$1.yaml" --fresh --quiet > "r_$1.log" 2>&1; then
      fail "$1 into $sink: accepted"
    fi
    for want in "public.$1" 'column "v"' "row $2" "$3"; do
      grep -q -F "$want" "r_$1.log" || fail "$1 into $sink: the error does not name $want: $(cat "r_$1.log")"
    done
  done
  [ ! -f "r_$1.db" ] || [ "$(sqlite3 "r_$1.db" "SELECT count(*) FROM sqlite_master WHERE name = '$1'")" = 0 ] \
    || [ "$(sqlite3 "r_$1.db" "SELECT count(*) FROM \"$1\"")" = 0 ] || fail "$1: rows written into sqlite"
  [ -z "$(find "csv_$1" "pq_$1" -type f \( -name '*.csv' -o -name '*.parquet' \) 2>/dev/null)" ] \
    || fail "$1: files written: $(find "csv_$1" "pq_$1" -type f)"
}
check_refused d_inf 3 "date -infinity"
check_refused ts_inf 1 "timestamp infinity"
check_refused ts_far 2 "out of range"
check_refused n_nan 2 "numeric NaN"
pass "±infinity, past year 294247, numeric(p,s) NaN: refused into sqlite, csv and parquet naming resource, column, row and value class; nothing written"

# The text-carried types: the exact text of each value, into SQLite and CSV.
# (each type's output function, as ferry reads it: format('%s'), not a cast (inet's ::text
# adds the netmask); e as hex, psql's terminal output is no judge of U+10FFFF)
cols="id, format('%s', a), format('%s', r), format('%s', i), format('%s', n), format('%s', g),
      format('%s', c)"
want=$(p -F '|' -c "SELECT $cols, d::text, encode(convert_to(e, 'UTF8'), 'hex') FROM texty ORDER BY id")
pipeline t_sqlite texty "{type: sqlite, path: $T/texty.db, write: append}"
"$FERRY_BIN" run t_sqlite.yaml --quiet || fail "texty into sqlite failed"
got=$(sqlite3 -batch -noheader texty.db "SELECT id, a, r, i, n, g, c, d, lower(hex(e)) FROM texty ORDER BY id")
[ "$got" = "$want" ] || fail "sqlite: text changed:
$got
want:
$want"
[ "$(sqlite3 texty.db "SELECT e IS NULL, quote(e) FROM texty WHERE id IN (1, 2) ORDER BY id")" = "0|''
1|NULL" ] || fail "sqlite: empty string and NULL are not kept apart"
pipeline t_csv texty "{type: files, path: $T/csv, format: jsonl, write: append}"
"$FERRY_BIN" run t_csv.yaml --quiet || fail "texty into jsonl failed"
# (numerics checked on the file's text: jq would read 1000 digits as a double)
want=$(p -F '|' -c "SELECT $cols, encode(convert_to(e, 'UTF8'), 'hex') FROM texty ORDER BY id")
files=$(find csv -name '*.jsonl')
got=$(cat $files | jq -r '[.id, .a, .r, .i, .n, .g, .c, (.e | if . == null then null else
       explode | map(if . < 128 then [.] elif . < 2048 then [192 + (./64|floor), 128 + .%64]
       elif . < 65536 then [224 + (./4096|floor), 128 + ((./64|floor)%64), 128 + .%64]
       else [240 + (./262144|floor), 128 + ((./4096|floor)%64), 128 + ((./64|floor)%64), 128 + .%64]
       end) | add // [] | map(. as $b | "0123456789abcdef" | .[($b/16|floor):($b/16|floor)+1]
       + .[($b%16):($b%16)+1]) | join("") end)]
       | map(if . == null then "" else tostring end) | join("|")' | sort -n)
[ "$got" = "$want" ] || fail "jsonl: text changed:
$got
want:
$want"
[ "$(cat $files | jq -c 'select(.id <= 2) | [.id, .e]' | sort)" = '[1,""]
[2,null]' ] || fail "jsonl: empty string and NULL are not kept apart"
for d in '"NaN"' '"-Infinity"' "$(printf '9%.0s' $(seq 1000))"; do
  grep -q -F -- "$d" $files || fail "jsonl: the numeric ${d:0:12}... is not there as written"
done
# Parquet: written by ferry, read back by ferry's files source into SQLite, the same text.
pipeline t_pq texty "{type: files, path: $T/pq, format: parquet, write: append}"
"$FERRY_BIN" run t_pq.yaml --quiet || fail "texty into parquet failed"
cat > back.yaml <<EOF
version: 1
name: back
source: {type: files, path: "$T/pq/texty/*.parquet", resources: [{table: texty, mode: full}]}
sink: {type: sqlite, path: $T/back.db, write: append}
EOF
"$FERRY_BIN" run back.yaml --quiet || fail "parquet back into sqlite failed"
want=$(p -F '|' -c "SELECT $cols, d::text, encode(convert_to(e, 'UTF8'), 'hex') FROM texty ORDER BY id")
got=$(sqlite3 -batch -noheader back.db "SELECT id, a, r, i, n, g, c, d, lower(hex(e)) FROM texty ORDER BY id")
[ "$got" = "$want" ] || fail "parquet: text changed:
$got
want:
$want"
[ "$(sqlite3 back.db "SELECT quote(e) FROM texty WHERE id IN (1, 2) ORDER BY id")" = "''
NULL" ] || fail "parquet: empty string and NULL are not kept apart"
pass "arrays, ranges with infinity, interval, inet, polygon, composite, numeric NaN/-Infinity/1000 digits, U+10FFFF: exact text into sqlite, jsonl and parquet; '' and NULL apart"
