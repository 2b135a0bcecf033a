#!/usr/bin/env bash
# shared: pg
# `schema_changes:` of cdc resources, columns changed at the source while a run streams:
#  - evolve (the default), into PostgreSQL and SQLite: ADD COLUMN; widening smallint ->
#    integer, integer -> bigint, varchar(10) -> text, numeric(8,2) -> numeric(12,4),
#    real -> double precision; DROP COLUMN of a NOT NULL column (kept, NULL from then on).
#    Each change stops the stream before the change that carries it, the next run (started
#    at once by the same `ferry run`) takes it in; the destination's columns and types are
#    checked, its rows equal the source's, and each change is a schema.changed event with
#    before and after;
#  - a narrowing retype (integer -> text) is an error naming table, column and both types;
#  - fail: an added column stops the run with an error naming table and column;
#  - freeze: the stream goes on past an added column and the destination never gets it;
#  - TRUNCATE, applied in stream order (rows before it in the same transaction go, rows
#    after it stay) into SQLite and PostgreSQL (merge); under fail an error.
# Deterministic: failpoint cdc_before_end holds each run after its discover, the test
# changes the source then, so the change lands inside the range the run streams.
. "$(dirname "$0")/lib.sh"
. "${FERRY_PG_SH:-$FERRY_SRC/tests/pg/pg.sh}"
pg_start

dest=$(pg_db dest)
export SRC_URL="$FERRY_PG_URL"
export DEST_URL="postgresql://ferry_admin:$PGPASSWORD@127.0.0.1:$PGPORT/$dest"
pgq >/dev/null <<'SQL'
CREATE TABLE ev (id int PRIMARY KEY, small smallint, n int, v varchar(10), gone text NOT NULL,
                 amount numeric(8,2), f real);
INSERT INTO ev SELECT g, g, g * 10, 'v' || g, 'g' || g, g + 0.25, g + 0.5 FROM generate_series(1, 50) g;
CREATE TABLE rt (id int PRIMARY KEY, code int);
INSERT INTO rt SELECT g, g FROM generate_series(1, 5) g;
CREATE TABLE fl (id int PRIMARY KEY, note text);
INSERT INTO fl SELECT g, 'n' || g FROM generate_series(1, 5) g;
CREATE TABLE fz (id int PRIMARY KEY, note text);
INSERT INTO fz SELECT g, 'n' || g FROM generate_series(1, 5) g;
CREATE TABLE tr (id int PRIMARY KEY, note text);
INSERT INTO tr SELECT g, 'n' || g FROM generate_series(1, 5) g;
CREATE TABLE tf (id int PRIMARY KEY, note text);
INSERT INTO tf SELECT g, 'n' || g FROM generate_series(1, 5) g;
SQL
# pipeline FILE NAME TABLE SINK [TOP-LEVEL LINE]
pipeline() {
  printf 'version: 1\nname: %s\n%bsource:\n  type: postgres\n  url: env:SRC_URL\n  resources:\n    - {table: %s, mode: cdc}\nsink: %s\nbatch: {rows: 500, flush_after: 100ms}\n' \
    "$2" "${5:-}" "$3" "$4" > "$1"
}
pipeline pg.yaml sc_pg ev "{type: postgres, url: env:DEST_URL, schema: public, write: merge}"
pipeline lite.yaml sc_lite ev "{type: sqlite, path: $T/lite.db, write: merge}"
pipeline rt.yaml sc_rt rt "{type: postgres, url: env:DEST_URL, schema: public, write: merge}"
pipeline fl.yaml sc_fl fl "{type: postgres, url: env:DEST_URL, schema: public, write: merge}" "schema_changes: fail\n"
pipeline fz.yaml sc_fz fz "{type: postgres, url: env:DEST_URL, schema: public, write: merge}" "schema_changes: freeze\n"
pipeline tr.yaml sc_tr tr "{type: sqlite, path: $T/lite.db, write: merge}"
pipeline fzl.yaml sc_fzl fz "{type: sqlite, path: $T/lite.db, write: merge}" "schema_changes: freeze\n"
pipeline trp.yaml sc_trp tr "{type: postgres, url: env:DEST_URL, schema: public, write: merge}"
pipeline tf.yaml sc_tf tf "{type: sqlite, path: $T/lite.db, write: merge}" "schema_changes: fail\n"
# SQLite destination made by its user beforehand: a NOT NULL column and an index of its own
q lite.db 'CREATE TABLE "ev" ("id" INT4 NOT NULL, "small" SMALLINT, "n" INT4, "v" TEXT, "gone" TEXT NOT NULL, "amount" DECIMAL_TEXT(8,2), "f" FLOAT4, PRIMARY KEY ("id")); CREATE INDEX ev_v ON ev (v)'
# the first runs: snapshot copies, slots created
for y in pg lite rt fl fz fzl tr trp tf; do expect_exit 0 ferry run $y.yaml; done
# and the PostgreSQL destination's user makes a column NOT NULL
pgq -d "$dest" -c "ALTER TABLE ev ALTER COLUMN gone SET NOT NULL" >/dev/null

# The failpoint announces itself on stderr when it fires: discover is done by then.
held() { # LOG
  for i in $(seq 1 400); do
    grep -q 'failpoint cdc_before_end fired' "$1" 2>/dev/null && return 0
    sleep 0.05
  done
  fail "the run never reached cdc_before_end: $(cat "$1")"
}
# hold_run LOG YAML... : starts one held `ferry run` per pipeline (each its own state db,
# so they run side by side), waits until all are held; then the caller changes the source.
PIDS=()
hold_run() {
  local log=$1; shift
  PIDS=()
  for y in "$@"; do
    FERRY_STATE="$T/$y.state" FERRY_FAILPOINTS="cdc_before_end=sleep(3000)@1" FERRY_LOG=info \
      "$FERRY_BIN" run "$y" > "$log.$y" 2>&1 &
    PIDS+=($!)
  done
  for y in "$@"; do held "$log.$y"; done
}
# wait_runs WANT_RC LOG YAML... : the exit status of each held run.
wait_runs() {
  local want=$1 log=$2 i=0 rc; shift 2
  for y in "$@"; do
    set +e; wait "${PIDS[$i]}"; rc=$?; set -e
    [ "$rc" = "$want" ] || fail "$y: ferry run exited $rc, expected $want: $(cat "$log.$y")"
    i=$((i + 1))
  done
}
# the state of the first runs above is in $FERRY_STATE: copy it to each pipeline's own
for y in pg.yaml lite.yaml rt.yaml fl.yaml fz.yaml fzl.yaml tr.yaml trp.yaml tf.yaml; do cp "$FERRY_STATE" "$T/$y.state"; done

# events NAME YAML: every schema.changed payload of the pipeline's runs, one JSON per line
events() {
  local run
  for run in $(FERRY_STATE="$T/$2.state" ferry runs --pipeline "$1" --json | jq '.[].id'); do
    FERRY_STATE="$T/$2.state" ferry events "$run" --json
  done | jq -c 'select(.type == "schema.changed") | .payload | if type == "string" then fromjson else . end'
}
pgcols() { pgq -d "$dest" -c "SELECT string_agg(attname || ' ' || format_type(atttypid, atttypmod) || CASE WHEN attnotnull THEN ' nn' ELSE '' END, ', ' ORDER BY attnum) FROM pg_attribute WHERE attrelid = 'public.$1'::regclass AND attnum > 0 AND NOT attisdropped"; }

# ---- evolve: ADD COLUMN -----------------------------------------------------------------
hold_run add pg.yaml lite.yaml
pgq >/dev/null <<'SQL'
INSERT INTO ev VALUES (1000, 1, 1, 'before', 'g', 1.25, 1.5);
ALTER TABLE ev ADD COLUMN extra int;
INSERT INTO ev VALUES (1001, 2, 2, 'after', 'g2', 2.25, 2.5, 42);
UPDATE ev SET extra = 7, v = 'upd' WHERE id = 1;
SQL
wait_runs 0 add pg.yaml lite.yaml
grep -q 'new column "extra"' add.pg.yaml || fail "pg: no stop at the new column: $(cat add.pg.yaml)"
[ "$(pgq -d "$dest" -c "SELECT extra FROM ev WHERE id = 1001")" = 42 ] || fail "pg: extra of 1001"
[ "$(q lite.db "SELECT extra FROM ev WHERE id = 1001")" = 42 ] || fail "sqlite: extra of 1001"
pass "evolve: a column added mid-stream reaches PostgreSQL and SQLite"

# ---- evolve: widenings --------------------------------------------------------------------
hold_run widen pg.yaml lite.yaml
pgq >/dev/null <<'SQL'
INSERT INTO ev VALUES (1002, 3, 3, 'pre', 'g3', 3.25, 3.5, 3);
ALTER TABLE ev ALTER COLUMN small TYPE integer, ALTER COLUMN n TYPE bigint,
  ALTER COLUMN v TYPE text, ALTER COLUMN amount TYPE numeric(12,4), ALTER COLUMN f TYPE double precision;
INSERT INTO ev VALUES (1003, 100000, 5000000000, 'a text much longer than ten', 'g4', 12345678.1234, 0.1, 4);
UPDATE ev SET n = 7000000000, amount = 0.0001 WHERE id = 2;
SQL
wait_runs 0 widen pg.yaml lite.yaml
for c in small n amount f; do
  grep -q "column \"$c\" was widened" widen.pg.yaml || fail "pg: no widening stop for $c: $(cat widen.pg.yaml)"
done
got=$(pgcols ev)
want='id integer nn, small integer, n bigint, v text, gone text nn, amount numeric(12,4), f double precision, extra integer'
[ "$got" = "$want" ] || fail "pg destination columns: $got (want $want)"
[ "$(pgq -d "$dest" -c "SELECT n || ' ' || amount || ' ' || small || ' ' || f FROM ev WHERE id = 1003")" = "5000000000 12345678.1234 100000 0.1" ] ||
  fail "pg: widened values of 1003: $(pgq -d "$dest" -c 'SELECT * FROM ev WHERE id = 1003')"
[ "$(q lite.db "SELECT n || ' ' || amount || ' ' || small FROM ev WHERE id = 1003")" = "5000000000 12345678.1234 100000" ] ||
  fail "sqlite: widened values of 1003: $(q lite.db 'SELECT * FROM ev WHERE id = 1003')"
[ "$(q lite.db "SELECT v FROM ev WHERE id = 1003")" = "a text much longer than ten" ] || fail "sqlite: v of 1003"
pass "evolve: smallint->integer, integer->bigint, varchar(10)->text, numeric(8,2)->(12,4), real->double: $got"

# ---- evolve: DROP COLUMN (NOT NULL) ------------------------------------------------------
hold_run drop pg.yaml lite.yaml
pgq >/dev/null <<'SQL'
ALTER TABLE ev DROP COLUMN gone;
INSERT INTO ev (id, small, n, v, amount, f, extra) VALUES (1004, 5, 6000000000, 'd', 1.0001, 2.5, 8);
UPDATE ev SET extra = 9 WHERE id = 3;
DELETE FROM ev WHERE id = 4;
SQL
wait_runs 0 drop pg.yaml lite.yaml
grep -q 'column "gone" was dropped' drop.pg.yaml || fail "pg: no stop at the dropped column: $(cat drop.pg.yaml)"
got=$(pgcols ev)
want='id integer nn, small integer, n bigint, v text, gone text, amount numeric(12,4), f double precision, extra integer'
[ "$got" = "$want" ] || fail "pg destination columns after the drop: $got"
[ "$(pgq -d "$dest" -c "SELECT coalesce(gone, 'NULL') FROM ev WHERE id IN (5, 1004) ORDER BY id" | tr '\n' ' ')" = "g5 NULL " ] ||
  fail "pg: gone kept for old rows, NULL for new ones"
[ "$(q lite.db "SELECT coalesce(gone, 'NULL') FROM ev WHERE id IN (5, 1004) ORDER BY id" | tr '\n' ' ')" = "g5 NULL " ] ||
  fail "sqlite: gone kept for old rows, NULL for new ones"
q lite.db "SELECT sql FROM sqlite_schema WHERE name = 'ev'" | grep -q '"gone" TEXT NOT NULL' && fail "sqlite: gone still NOT NULL"
q lite.db "SELECT sql FROM sqlite_schema WHERE name = 'ev'" | grep -qF '"n" INTEGER' || fail "sqlite: n not declared INTEGER: $(q lite.db .schema)"
[ "$(q lite.db "SELECT count(*) FROM sqlite_schema WHERE type = 'index' AND name = 'ev_v'")" = 1 ] || fail "sqlite: the rebuild lost index ev_v"
cols='id, small, n, v, amount, f, extra'
a=$(pgq -c "COPY (SELECT $cols FROM ev ORDER BY id) TO STDOUT" | md5sum)
b=$(pgq -d "$dest" -c "COPY (SELECT $cols FROM ev ORDER BY id) TO STDOUT" | md5sum)
[ "$a" = "$b" ] || fail "pg destination rows differ from the source"
# SQLite keeps the decimal text of rows written before the widening at their old scale
# (1.25, the same value as 1.2500): compared as numbers with 4 decimals
a=$(pgq -c "SELECT id || '|' || small || '|' || n || '|' || v || '|' || to_char(amount, 'FM99999990.0000') || '|' || coalesce(extra::text, '') FROM ev ORDER BY id" | md5sum)
b=$(q lite.db "SELECT id || '|' || small || '|' || n || '|' || v || '|' || printf('%.4f', amount) || '|' || coalesce(extra, '') FROM ev ORDER BY id" | md5sum)
[ "$a" = "$b" ] || fail "sqlite destination rows differ from the source"
pass "evolve: a dropped NOT NULL column is kept, NULL from then on; rows equal the source"

# ---- the events ----------------------------------------------------------------------------
events sc_pg pg.yaml > ev.pg
for want in '"column":"extra","change":"added"' '"column":"n","change":"widened","old_type":"int32","new_type":"int64"' \
            '"column":"small","change":"widened","old_type":"int16","new_type":"int32"' \
            '"column":"amount","change":"widened","old_type":"decimal128(8,2)","new_type":"decimal128(12,4)"' \
            '"column":"f","change":"widened","old_type":"float32","new_type":"float64"' \
            '"column":"gone","change":"dropped"' \
            '"column":"n","change":"widened","old_type":"integer","new_type":"bigint","policy":"evolve","action":"apply"' \
            '"column":"gone","change":"dropped","old_type":"text","new_type":null,"policy":"evolve","action":"apply"'; do
  grep -qF "$want" ev.pg || fail "pg: no schema.changed with $want: $(cat ev.pg)"
done
events sc_lite lite.yaml > ev.lite
grep -qF '"column":"extra","change":"added"' ev.lite || fail "sqlite: no added event: $(cat ev.lite)"
grep -qF '"column":"gone","change":"dropped","old_type":"NOT NULL"' ev.lite || fail "sqlite: no NOT NULL event: $(cat ev.lite)"
grep -qF '"column":"n","change":"widened","old_type":"INT4","new_type":"INTEGER","policy":"evolve","action":"apply"' ev.lite ||
  fail "sqlite: no widening event: $(cat ev.lite)"
# each change is said once by the source (stop) and once by the sink (apply), never again
[ "$(grep -c '"column":"n","change":"widened"' ev.lite)" = 2 ] || fail "sqlite: widening said more than twice: $(cat ev.lite)"
[ "$(grep -c '"column":"n","change":"widened"' ev.pg)" = 2 ] || fail "pg: widening said more than twice: $(cat ev.pg)"
pass "schema.changed events with before and after: $(wc -l < ev.pg) (pg), $(wc -l < ev.lite) (sqlite)"

# ---- narrowing / incompatible, fail, freeze, truncate --------------------------------------
hold_run bad rt.yaml fl.yaml fz.yaml tr.yaml trp.yaml tf.yaml fzl.yaml
pgq >/dev/null <<'SQL'
ALTER TABLE rt ALTER COLUMN code TYPE text;
INSERT INTO rt VALUES (100, 'abc');
ALTER TABLE fl ADD COLUMN x int;
INSERT INTO fl VALUES (100, 'n', 1);
INSERT INTO fz VALUES (99, 'before');
ALTER TABLE fz ADD COLUMN x int;
INSERT INTO fz VALUES (100, 'after', 1);
UPDATE fz SET note = 'upd', x = 2 WHERE id = 1;
INSERT INTO tr VALUES (50, 'before');
UPDATE tr SET note = 'upd' WHERE id = 1;
TRUNCATE tr;
INSERT INTO tr VALUES (100, 'after');
BEGIN;
INSERT INTO tr VALUES (101, 'same txn, before');
UPDATE tr SET note = 'after2' WHERE id = 100;
TRUNCATE tr;
INSERT INTO tr VALUES (102, 'same txn, after'), (1, 'again');
COMMIT;
UPDATE tr SET note = 'last' WHERE id = 102;
TRUNCATE tf;
SQL
set +e
for i in 0 1 2 3 4 5 6; do wait "${PIDS[$i]}"; eval "rc$i=\$?"; done
set -e
[ "$rc0" != 0 ] || fail "a narrowing retype did not fail the run"
grep -qF 'table "public"."rt": column "code" changed type at the source from int32 to utf8' bad.rt.yaml ||
  fail "retype error does not name table, column and both types: $(cat bad.rt.yaml)"
[ "$rc1" != 0 ] || fail "schema_changes: fail did not fail the run"
grep -q 'table "public"."fl": column "x" was added at the source .*schema_changes: fail' bad.fl.yaml ||
  fail "fail policy error does not name table and column: $(cat bad.fl.yaml)"
[ "$rc2" = 0 ] || fail "freeze: run exited $rc2: $(cat bad.fz.yaml)"
[ "$(pgq -d "$dest" -c "SELECT count(*) FROM information_schema.columns WHERE table_name = 'fz' AND column_name = 'x'")" = 0 ] ||
  fail "freeze: the destination got the new column"
[ "$(pgq -d "$dest" -c "SELECT note FROM fz WHERE id = 1")" = upd ] || fail "freeze: the update after the new column"
[ "$(pgq -d "$dest" -c "SELECT note FROM fz WHERE id = 100")" = after ] || fail "freeze: the insert after the new column"
pass "narrowing retype and fail policy name table and column; freeze ignores the new column"
[ "$rc3" = 0 ] || fail "truncate into sqlite: run exited $rc3: $(cat bad.tr.yaml)"
[ "$rc4" = 0 ] || fail "truncate into postgres: run exited $rc4: $(cat bad.trp.yaml)"
want=$(pgq -c "SELECT string_agg(id || ':' || note, ' ' ORDER BY id) FROM tr")
[ "$want" = "1:again 102:last" ] || fail "source after the truncates: $want"
[ "$(q lite.db "SELECT group_concat(id || ':' || note, ' ') FROM (SELECT * FROM tr ORDER BY id)")" = "$want" ] ||
  fail "sqlite after the truncates: $(q lite.db 'SELECT * FROM tr')"
[ "$(pgq -d "$dest" -c "SELECT string_agg(id || ':' || note, ' ' ORDER BY id) FROM tr")" = "$want" ] ||
  fail "postgres after the truncates: $(pgq -d "$dest" -c 'SELECT * FROM tr')"
events sc_tr tr.yaml | grep -qF '"column":null,"change":"truncated","old_type":null,"new_type":null,"policy":"evolve","action":"apply"' ||
  fail "no schema.changed event for the truncate: $(events sc_tr tr.yaml)"
[ "$rc5" != 0 ] || fail "a truncate under schema_changes: fail did not fail the run"
grep -qF 'table "public"."tf" was truncated at the source; schema_changes: fail stops here' bad.tf.yaml ||
  fail "truncate error: $(cat bad.tf.yaml)"
pass "TRUNCATE applied in stream order into SQLite and PostgreSQL (merge): $want; fail stops"

[ "$rc6" = 0 ] || fail "freeze into sqlite: run exited $rc6: $(cat bad.fzl.yaml)"
# freeze again: a later run (whose discover sees the column) still leaves the destination as it is
pgq -c "INSERT INTO fz VALUES (101, 'later', 3)" >/dev/null
FERRY_STATE="$T/fz.yaml.state" expect_exit 0 ferry run fz.yaml
FERRY_STATE="$T/fzl.yaml.state" expect_exit 0 ferry run fzl.yaml
q lite.db "SELECT name FROM pragma_table_info('fz')" | grep -qx x && fail "freeze: sqlite got the new column"
a=$(pgq -c "SELECT id || '|' || note FROM fz ORDER BY id" | md5sum)
b=$(q lite.db "SELECT id || '|' || note FROM fz ORDER BY id" | md5sum)
[ "$a" = "$b" ] || fail "freeze: sqlite rows differ from the source: $(q lite.db 'SELECT * FROM fz')"
[ "$(pgq -d "$dest" -c "SELECT count(*) FROM information_schema.columns WHERE table_name = 'fz' AND column_name = 'x'")" = 0 ] ||
  fail "freeze: a later run added the new column"
[ "$(pgq -d "$dest" -c "SELECT note FROM fz WHERE id = 101")" = later ] || fail "freeze: the row of the later run"
events sc_fz fz.yaml | grep -qF '"column":"x","change":"added","old_type":null,"new_type":"int32","policy":"freeze","action":"continue"' ||
  fail "freeze: no schema.changed event: $(events sc_fz fz.yaml)"
pass "freeze: later runs leave the destination's columns as they are (postgres and sqlite)"
