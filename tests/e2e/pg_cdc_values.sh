#!/usr/bin/env bash
# shared: pg
# PostgreSQL's special values arriving by change data capture (pgoutput's text form) and
# timestamps past ferry's range (issue 23, never silent), against a real server:
#   - into SQLite (default on_unrepresentable: fail) a change holding 'infinity' or numeric
#     NaN stops the run with an error naming the table, the column, the row's key and the
#     value class; nothing of it is written;
#   - with on_unrepresentable: null the same changes arrive with those values NULL, counted
#     per column; every other value exact;
#   - PostgreSQL -> PostgreSQL carries them exactly (streamed, compared by text);
#   - a timestamp past year 294247 (PostgreSQL allows up to 294276) is refused naming the row,
#     streamed (by its key) and copied (by its position); 294247-01-10 04:00:54.775806, the
#     last microsecond ferry holds, is carried exactly, and so are BC and year-10000 values
#     streamed (pgoutput's text past years 0001..9999: connectors/postgres/pg_values.c).
. "$(dirname "$0")/lib.sh"
. "${FERRY_PG_SH:-$FERRY_SRC/tests/pg/pg.sh}"
pg_start
export PGTZ=UTC
p() { psql "$FERRY_PG_URL" -X -q -v ON_ERROR_STOP=1 -A -t "$@"; }
dest=$(pg_db dest)
export DEST_URL="postgresql://ferry_admin:$PGPASSWORD@127.0.0.1:$PGPORT/$dest"
pd() { psql "$DEST_URL" -X -q -v ON_ERROR_STOP=1 -A -t "$@"; }

p -c "CREATE TABLE cv (id integer PRIMARY KEY, d date, ts timestamptz, n numeric(10,2), v text);
  INSERT INTO cv VALUES (1, '2024-01-01', '2024-01-01 10:00+00', 1.25, 'one');
  CREATE TABLE cfar (id integer PRIMARY KEY, ts timestamp);
  INSERT INTO cfar VALUES (1, '2024-01-01');"

pipeline() { # NAME TABLE SINK [TOP-LEVEL-LINE]
  cat > "$1.yaml" <<EOF
version: 1
name: $1
${4:-}
source:
  type: postgres
  url: env:FERRY_PG_URL
  resources:
    - {table: public.$2, mode: cdc}
sink: $3
EOF
}
pipeline lite cv "{type: sqlite, path: $T/lite.db, write: merge}"
pipeline conv cv "{type: sqlite, path: $T/conv.db, write: merge}" "on_unrepresentable: null"
pipeline pgpg cv "{type: postgres, url: env:DEST_URL, schema: public, write: merge}"
pipeline far cfar "{type: postgres, url: env:DEST_URL, schema: public, write: merge}"
for f in lite conv pgpg far; do expect_exit 0 ferry run "$f.yaml"; done

# The changes, streamed by the next run of each pipeline.
p -c "INSERT INTO cv VALUES (2, 'infinity', '-infinity', 'NaN', 'two'), (3, '2024-03-03', 'infinity', 3.5, 'three');
  UPDATE cv SET d = '-infinity', v = 'one+' WHERE id = 1;
  INSERT INTO cv VALUES (4, '2024-04-04', '2024-04-04 04:04+00', 4.25, 'four');"

expect_exit 1 ferry run lite.yaml
for want in '"public"."cv"' 'column "d"' 'the row with key id=2' 'date infinity'; do
  printf '%s' "$OUT" | grep -q -F "$want" || fail "cdc into sqlite: the error does not name $want: $OUT"
done
[ "$(q lite.db "SELECT group_concat(id) FROM cv")" = 1 ] || fail "cdc into sqlite: rows were written: $(q lite.db 'SELECT * FROM cv')"
pass "cdc into sqlite: a streamed 'infinity' stops the run naming table, column, the row's key and the value class; nothing written"

expect_exit 0 ferry run conv.yaml
run=$(printf '%s\n' "$OUT" | sed -n 's/^run \([0-9]*\) of pipeline.*/\1/p' | head -n 1)
got=$(q conv.db "SELECT id, quote(d), quote(ts), quote(n), v FROM cv ORDER BY id")
want="1|NULL|'2024-01-01 10:00:00.000000+00:00'|'1.25'|one+
2|NULL|NULL|NULL|two
3|'2024-03-03'|NULL|'3.50'|three
4|'2024-04-04'|'2024-04-04 04:04:00.000000+00:00'|'4.25'|four"
[ "$got" = "$want" ] || fail "cdc with on_unrepresentable: null:
$got
want:
$want"
expect_exit 0 ferry show "$run" --json
got=$(json_field "$OUT" '.resources[0].converted' | jq -S -c .)
[ "$got" = '{"d":{"clamp":0,"null":2},"n":{"clamp":0,"null":1},"ts":{"clamp":0,"null":2}}' ] \
  || fail "cdc with on_unrepresentable: null: counts $got"
pass "cdc with on_unrepresentable: null: the special values arrive as NULL, counted per column; the rest exact"

expect_exit 0 ferry run pgpg.yaml
cols="id, d::text, ts::text, n::text, v"
[ "$(pd -c "SELECT $cols FROM cv ORDER BY id")" = "$(p -c "SELECT $cols FROM cv ORDER BY id")" ] \
  || fail "cdc postgres -> postgres: $(pd -c "SELECT $cols FROM cv ORDER BY id")"
pass "cdc postgres -> postgres: ±infinity and numeric NaN streamed exactly"

# Past year 294247: refused streamed (naming the key) and copied (naming the row).
p -c "INSERT INTO cfar VALUES (2, '294247-01-10 04:00:54.775806'), (5, '4713-01-01 00:00:00.000001 BC'),
  (6, '10000-02-29 23:59:59.5');"
expect_exit 0 ferry run far.yaml
p -c "INSERT INTO cfar VALUES (3, '294276-12-31 23:59:59');"
expect_exit 1 ferry run far.yaml
for want in '"public"."cfar"' 'column "ts"' 'the row with key id=3'; do
  printf '%s' "$OUT" | grep -q -F "$want" || fail "cdc year 294276: the error does not name $want: $OUT"
done
[ "$(pd -c "SELECT id, ts FROM cfar ORDER BY id")" = "1|2024-01-01 00:00:00
2|294247-01-10 04:00:54.775806
5|4713-01-01 00:00:00.000001 BC
6|10000-02-29 23:59:59.5" ] || fail "cdc: the last microsecond ferry holds, BC, year 10000: $(pd -c 'SELECT * FROM cfar')"
cat > copy.yaml <<EOF
version: 1
name: copy
source: {type: postgres, url: env:FERRY_PG_URL, resources: [{table: public.cfar, mode: full, target: cfar_copy}]}
sink: {type: postgres, url: env:DEST_URL, schema: public, write: append}
EOF
expect_exit 1 ferry run copy.yaml
for want in '"public"."cfar"' 'column "ts", row ' 'year 294247'; do
  printf '%s' "$OUT" | grep -q -F "$want" || fail "copy year 294276: the error does not name $want: $OUT"
done
p -c "DELETE FROM cfar WHERE id = 3; INSERT INTO cfar VALUES (4, '294247-01-10 04:00:54.775807');"
expect_exit 1 ferry run copy.yaml
printf '%s' "$OUT" | grep -q -F 'column "ts", row ' || fail "copy of INT64_MAX us: $OUT"
p -c "DELETE FROM cfar WHERE id = 4"
expect_exit 0 ferry run copy.yaml
[ "$(pd -c "SELECT id, ts FROM cfar_copy ORDER BY id")" = "1|2024-01-01 00:00:00
2|294247-01-10 04:00:54.775806
5|4713-01-01 00:00:00.000001 BC
6|10000-02-29 23:59:59.5" ] || fail "copy: the last microsecond ferry holds: $(pd -c 'SELECT * FROM cfar_copy')"
pass "past year 294247: refused streamed (naming the key) and copied (naming the row); 294247-01-10 04:00:54.775806, 4713 BC and year 10000 exact both ways"
