#!/usr/bin/env bash
# shared: pg mysql
# PostgreSQL -> SQLite, Parquet, CSV and MariaDB under `on_unrepresentable: null | clamp`
# (issue 23, never silent): every value the sink cannot hold (±infinity dates and timestamps,
# dates and timestamps outside years 0001..9999 where the sink writes them as text, numeric
# NaN, float NaN/Infinity/-0 where the sink has none, a decimal beyond MySQL's DECIMAL(65,30))
# becomes NULL or the sink's nearest value, and the run counts it per column: batch.written,
# resource.completed, `ferry run` (text and --json), `ferry show` (text and --json) and the
# API (GET /v1/runs/ID). Every other value arrives exactly (the
# whole table is compared). A per-resource setting wins over the pipeline's; a key column is
# never converted; a bad word is refused naming the key.
. "$(dirname "$0")/lib.sh"
. "${FERRY_PG_SH:-$FERRY_SRC/tests/pg/pg.sh}"
. "$FERRY_SRC/tests/mysql/mysql.sh"
pg_start
my_start
export PGTZ=UTC
p() { psql "$FERRY_PG_URL" -X -q -v ON_ERROR_STOP=1 -A -t "$@"; }

p -c "CREATE TABLE conv (id integer PRIMARY KEY, d date, ts timestamp, tz timestamptz,
    n numeric(20,2), f float8, big numeric);
  INSERT INTO conv VALUES
    (1, '2024-01-01', '2024-01-01 10:00:00', '2024-01-01 10:00:00+00', 1.50, 1.5, 12.5),
    (2, '-infinity', 'infinity', '-infinity', 'NaN', 'NaN', 'NaN'),
    (3, '10000-01-01', '0001-12-31 23:59:59 BC', '20000-06-01 00:00+00', 2.25, 'Infinity', 1e40),
    (4, NULL, NULL, NULL, NULL, '-0', '0.1234567890123456789012345678901234'),
    (5, '0001-01-01', '9999-12-31 23:59:59.999999', '1970-01-01 00:00:00+00', -3.00, -2.5, -7);
  CREATE TABLE keyinf (d date PRIMARY KEY, v date);
  INSERT INTO keyinf VALUES ('2024-01-01', '-infinity'), ('infinity', '2024-01-01');"

pipeline() { # NAME MODE SINK-LINE [RESOURCE-EXTRA] [TABLE]
  cat > "$1.yaml" <<EOF
version: 1
name: $1
on_unrepresentable: $2
source:
  type: postgres
  url: env:FERRY_PG_URL
  resources:
    - table: public.${5:-conv}
      mode: full
      ${4:-}
sink: $3
EOF
}
run_id() { printf '%s\n' "$1" | sed -n 's/^run \([0-9]*\) of pipeline.*/\1/p' | head -n 1; }
# check_counts RUN WANT-JSON : the per-column counts in show --json, in resource.completed and
# summed over batch.written all equal WANT (jq -S normal form).
check_counts() {
  local want got
  want=$(printf '%s' "$2" | jq -S -c .)
  expect_exit 0 ferry show "$1" --json
  got=$(json_field "$OUT" '.resources[0].converted' | jq -S -c .)
  [ "$got" = "$want" ] || fail "run $1: show --json converted $got, want $want"
  expect_exit 0 ferry events "$1" --json
  got=$(printf '%s\n' "$OUT" | jq -c 'select(.type == "resource.completed") | .payload.converted' | jq -S -c .)
  [ "$got" = "$want" ] || fail "run $1: resource.completed converted $got, want $want"
  got=$(printf '%s\n' "$OUT" | jq -s -S -c '[.[] | select(.type == "batch.written") | .payload.converted // {}
        | to_entries[]] | group_by(.key) | map({(.[0].key): {null: (map(.value.null) | add),
        clamp: (map(.value.clamp) | add)}}) | add // {}')
  [ "$got" = "$want" ] || fail "run $1: batch.written converted sums to $got, want $want"
}

# ---- SQLite: dates/timestamps are text of years 0001..9999, no -0; NaN is kept as 'NaN' ----
sq_cols="id, quote(d), quote(ts), quote(tz), quote(n), quote(f), quote(big)"
pipeline s_null null "{type: sqlite, path: $T/null.db, write: append}"
expect_exit 0 ferry run s_null.yaml
run=$(run_id "$OUT")
printf '%s' "$OUT" | grep -q 'public.conv: 8 value(s) the sink cannot hold converted (on_unrepresentable: null' \
  || fail "sqlite null: the run's output does not say what it converted: $OUT"
printf '%s' "$OUT" | grep -q "^run $run: 8 value(s) converted (on_unrepresentable" \
  || fail "sqlite null: the run's result does not count the conversions: $OUT"
got=$(q null.db "SELECT $sq_cols FROM conv ORDER BY id")
want="1|'2024-01-01'|'2024-01-01 10:00:00.000000'|'2024-01-01 10:00:00.000000+00:00'|'1.50'|1.5|'12.5'
2|NULL|NULL|NULL|NULL|'NaN'|'NaN'
3|NULL|NULL|NULL|'2.25'|Inf|'10000000000000000000000000000000000000000'
4|NULL|NULL|NULL|NULL|NULL|'0.1234567890123456789012345678901234'
5|'0001-01-01'|'9999-12-31 23:59:59.999999'|'1970-01-01 00:00:00.000000+00:00'|'-3.00'|-2.5|'-7'"
[ "$got" = "$want" ] || fail "sqlite null:
$got
want:
$want"
check_counts "$run" '{"d":{"null":2,"clamp":0},"ts":{"null":2,"clamp":0},"tz":{"null":2,"clamp":0},
  "n":{"null":1,"clamp":0},"f":{"null":1,"clamp":0}}'
run_null=$run
expect_exit 0 ferry show "$run"
printf '%s' "$OUT" | grep -q 'converted column d: 2 to NULL, 0 clamped (on_unrepresentable)' \
  || fail "ferry show does not list the conversions: $OUT"

pipeline s_clamp clamp "{type: sqlite, path: $T/clamp.db, write: append}"
expect_exit 0 ferry run s_clamp.yaml --json
run=$(json_field "$OUT" .run_id)
[ "$(json_field "$OUT" .converted)" = 8 ] || fail "sqlite clamp: ferry run --json converted: $OUT"
got=$(q clamp.db "SELECT $sq_cols FROM conv ORDER BY id")
want="1|'2024-01-01'|'2024-01-01 10:00:00.000000'|'2024-01-01 10:00:00.000000+00:00'|'1.50'|1.5|'12.5'
2|'0001-01-01'|'9999-12-31 23:59:59.999999'|'0001-01-01 00:00:00.000000+00:00'|NULL|'NaN'|'NaN'
3|'9999-12-31'|'0001-01-01 00:00:00.000000'|'9999-12-31 23:59:59.999999+00:00'|'2.25'|Inf|'10000000000000000000000000000000000000000'
4|NULL|NULL|NULL|NULL|0.0|'0.1234567890123456789012345678901234'
5|'0001-01-01'|'9999-12-31 23:59:59.999999'|'1970-01-01 00:00:00.000000+00:00'|'-3.00'|-2.5|'-7'"
[ "$got" = "$want" ] || fail "sqlite clamp:
$got
want:
$want"
check_counts "$run" '{"d":{"null":0,"clamp":2},"ts":{"null":0,"clamp":2},"tz":{"null":0,"clamp":2},
  "n":{"null":1,"clamp":0},"f":{"null":0,"clamp":1}}'
pass "sqlite: null and clamp convert ±infinity, years outside 0001..9999, numeric NaN and -0, counted per column in show, resource.completed and batch.written; every other value exact"

# ---- cast and hash see the special values under null (PostgreSQL's text), else the source
# refuses them naming resource, column and row ----
tr_lines='transforms:
  - {cast: d, to: timestamp}
  - {cast: n, to: utf8}
  - {column: tz, hash: sha256}'
pipeline s_tr null "{type: sqlite, path: $T/tr.db, write: append}"
printf '%s\n' "$tr_lines" >> s_tr.yaml
expect_exit 0 ferry run s_tr.yaml
run=$(run_id "$OUT")
h() { printf '%s' "$1" | sha256sum | cut -c1-64; }
got=$(q tr.db "SELECT id, quote(d), quote(n), tz FROM conv ORDER BY id")
want="1|'2024-01-01 00:00:00.000000'|'1.50'|$(h '2024-01-01T10:00:00+00')
2|NULL|'NaN'|$(h -infinity)
3|NULL|'2.25'|$(h 568984953600000000)
4|NULL|NULL|
5|'0001-01-01 00:00:00.000000'|'-3.00'|$(h '1970-01-01T00:00:00+00')"
[ "$got" = "$want" ] || fail "cast/hash under null:
$got
want:
$want"
check_counts "$run" '{"d":{"null":2,"clamp":0},"ts":{"null":2,"clamp":0},"f":{"null":1,"clamp":0}}'
pipeline s_trf fail "{type: sqlite, path: $T/trf.db, write: append}"
printf '%s\n' "$tr_lines" >> s_trf.yaml
expect_exit 1 ferry run s_trf.yaml
for want in 'public.conv' 'column "d"' 'row' 'infinity'; do
  printf '%s' "$OUT" | grep -q -F -- "$want" || fail "cast without on_unrepresentable: the error does not name $want: $OUT"
done
[ "$(q trf.db "SELECT count(*) FROM sqlite_master WHERE name = 'conv'")" != 1 ] ||
  [ "$(q trf.db "SELECT count(*) FROM conv")" = 0 ] || fail "cast without on_unrepresentable: rows were written"
pass "cast and hash under null: -infinity dates cast to timestamps then converted and counted, numeric NaN cast to the text NaN, -infinity hashed as its text; without the option the source refuses naming resource, column and row"

# ---- Parquet: holds every date and timestamp and -0; only the special values convert ----
pipeline pq clamp "{type: files, path: $T/pq, format: parquet, write: append}"
expect_exit 0 ferry run pq.yaml
run=$(run_id "$OUT")
check_counts "$run" '{"d":{"null":0,"clamp":1},"ts":{"null":0,"clamp":1},"tz":{"null":0,"clamp":1},
  "n":{"null":1,"clamp":0}}'
# read back by ferry's files source into PostgreSQL (which holds year 10000 and BC)
cat > back.yaml <<EOF
version: 1
name: back
source: {type: files, path: "$T/pq/conv/*.parquet", resources: [{table: conv, mode: full, target: conv_back}]}
sink: {type: postgres, url: env:FERRY_PG_URL, write: append}
EOF
expect_exit 0 ferry run back.yaml
cols="id, d::text, ts::text, tz::text, n::text, f::text, big::text"
got=$(p -F '|' -c "SELECT $cols FROM conv_back ORDER BY id")
want=$(p -F '|' -c "SELECT $cols FROM (SELECT id,
    CASE WHEN isfinite(d) OR d IS NULL THEN d WHEN d < '2000-01-01' THEN '0001-01-01' ELSE '9999-12-31' END AS d,
    CASE WHEN isfinite(ts) OR ts IS NULL THEN ts WHEN ts < '2000-01-01' THEN '0001-01-01'
         ELSE '9999-12-31 23:59:59.999999' END AS ts,
    CASE WHEN isfinite(tz) OR tz IS NULL THEN tz WHEN tz < '2000-01-01' THEN '0001-01-01+00'
         ELSE '9999-12-31 23:59:59.999999+00' END AS tz,
    CASE WHEN n = 'NaN' THEN NULL ELSE n END AS n, f, big FROM conv) c ORDER BY id")
[ "$got" = "$want" ] || fail "parquet clamp (read back):
$got
want:
$want"
pass "parquet: ±infinity clamped to 0001-01-01 / 9999-12-31 23:59:59.999999, numeric NaN to NULL, counted; year 10000, BC, -0, NaN/Infinity floats exact"

# ---- CSV: the text calendar, with null ----
pipeline csv null "{type: files, path: $T/csv, format: csv, write: append}"
expect_exit 0 ferry run csv.yaml
run=$(run_id "$OUT")
check_counts "$run" '{"d":{"null":2,"clamp":0},"ts":{"null":2,"clamp":0},"tz":{"null":2,"clamp":0},
  "n":{"null":1,"clamp":0}}'
[ "$(cat csv/conv/*.csv | grep -c '^1,2024-01-01,')" = 1 ] || fail "csv: row 1 changed: $(cat csv/conv/*.csv)"
pass "csv: null converts ±infinity and years outside 0001..9999, counted"

# ---- MariaDB: DATE/DATETIME years 1..9999, DOUBLE without NaN/Infinity/-0, DECIMAL(65,30) ----
# (the pipeline says null, the resource clamp: the resource's setting wins)
my_cols="id, quote(d), quote(ts), quote(tz), quote(n), quote(f), quote(big)"
for mode in null clamp; do
  pipeline "my_$mode" "$([ $mode = clamp ] && echo null || echo clamp)" \
    "{type: mysql, url: env:FERRY_MY_URL, write: append}" "on_unrepresentable: $mode
      target: conv_$mode"
  expect_exit 0 ferry run "my_$mode.yaml"
  run=$(run_id "$OUT")
  got=$(myq -e "SELECT id, quote(d), quote(ts), quote(tz), n, f, big FROM conv_$mode ORDER BY id" | tr '\t' '|')
  if [ $mode = null ]; then
    want="1|'2024-01-01'|'2024-01-01 10:00:00.000000'|'2024-01-01 10:00:00.000000'|1.50|1.5|12.500000000000000000000000000000
2|NULL|NULL|NULL|NULL|NULL|NULL
3|NULL|NULL|NULL|2.25|NULL|NULL
4|NULL|NULL|NULL|NULL|NULL|NULL
5|'0001-01-01'|'9999-12-31 23:59:59.999999'|'1970-01-01 00:00:00.000000'|-3.00|-2.5|-7.000000000000000000000000000000"
    counts='{"d":{"null":2,"clamp":0},"ts":{"null":2,"clamp":0},"tz":{"null":2,"clamp":0},
      "n":{"null":1,"clamp":0},"f":{"null":3,"clamp":0},"big":{"null":3,"clamp":0}}'
  else
    want="1|'2024-01-01'|'2024-01-01 10:00:00.000000'|'2024-01-01 10:00:00.000000'|1.50|1.5|12.500000000000000000000000000000
2|'0001-01-01'|'9999-12-31 23:59:59.999999'|'0001-01-01 00:00:00.000000'|NULL|NULL|NULL
3|'9999-12-31'|'0001-01-01 00:00:00.000000'|'9999-12-31 23:59:59.999999'|2.25|1.7976931348623157e308|99999999999999999999999999999999999.999999999999999999999999999999
4|NULL|NULL|NULL|NULL|0|NULL
5|'0001-01-01'|'9999-12-31 23:59:59.999999'|'1970-01-01 00:00:00.000000'|-3.00|-2.5|-7.000000000000000000000000000000"
    counts='{"d":{"null":0,"clamp":2},"ts":{"null":0,"clamp":2},"tz":{"null":0,"clamp":2},
      "n":{"null":1,"clamp":0},"f":{"null":1,"clamp":2},"big":{"null":2,"clamp":1}}'
  fi
  [ "$got" = "$want" ] || fail "mariadb $mode:
$got
want:
$want"
  check_counts "$run" "$counts"
done
pass "mariadb: null and clamp (the resource's setting over the pipeline's) convert ±infinity, years outside 1..9999, NaN, Infinity and decimals beyond DECIMAL(65,30), counted per column; the rest exact"

# ---- the API: GET /v1/runs/ID has the same counts per resource ----
# (a subshell whose EXIT trap stops the server, pass or fail)
api_converted() ( # RUN : prints the resource's converted object
  export FERRY_API_TOKEN="token-$RANDOM$RANDOM"
  "$FERRY_BIN" serve --listen 127.0.0.1:0 --state "$FERRY_STATE" --policy allow-all \
    > serve.out 2> serve.err &
  sp=$!
  trap 'kill -TERM $sp 2>/dev/null; wait $sp 2>/dev/null' EXIT
  for _ in $(seq 1 200); do
    command grep -q 'listening on' serve.out 2>/dev/null && break
    kill -0 $sp 2>/dev/null || { cat serve.err >&2; exit 1; }
    sleep 0.05
  done
  base=$(command grep -o 'http://127.0.0.1:[0-9]*' serve.out)
  curl -sS -f -H "Authorization: Bearer $FERRY_API_TOKEN" "$base/v1/runs/$1" | jq -S -c '.resources[0].converted'
)
got=$(api_converted "$run_null") || fail "API: GET /v1/runs/$run_null failed: $got"
[ "$got" = '{"d":{"clamp":0,"null":2},"f":{"clamp":0,"null":1},"n":{"clamp":0,"null":1},"ts":{"clamp":0,"null":2},"tz":{"clamp":0,"null":2}}' ] \
  || fail "API: GET /v1/runs/$run_null converted: $got"
pass "the API's run resource carries the per-column counts"

# ---- a key column is never converted; a bad word is refused naming the key ----
pipeline k null "{type: sqlite, path: $T/k.db, write: append}" "" keyinf
expect_exit 1 ferry run k.yaml
for want in 'public.keyinf' 'column "d"' 'infinity'; do
  printf '%s' "$OUT" | grep -q -F "$want" || fail "key column: the error does not name $want: $OUT"
done
pipeline bad maybe "{type: sqlite, path: $T/bad.db, write: append}"
expect_exit 2 ferry run bad.yaml
printf '%s' "$OUT" | grep -q 'on_unrepresentable.*one of fail, null, clamp' || fail "bad word: $OUT"
pass "a ±infinity in a key column stops the run even under null; on_unrepresentable: maybe is refused naming the key"
