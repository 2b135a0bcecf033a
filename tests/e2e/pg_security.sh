#!/usr/bin/env bash
# tests/e2e/pg_security.sh - the postgres connectors against hostile input, with the real
# `ferry` binary and a throw-away PostgreSQL (tests/pg/pg.sh):
#  1. hostile identifiers (quotes, semicolons, `--`, spaces, dots, unicode, mixed case, a
#     63-byte name) and SQL-looking values round-trip PG -> PG (md5 of the row texts in SQL
#     on both sides) and PG -> sqlite (value by value); canary tables stay untouched;
#  2. 64-byte names and names that PostgreSQL would truncate onto each other are refused with
#     a message naming them, before anything is written;
#  3. least privilege: the source reads with LOGIN + CONNECT + USAGE + SELECT only, the sink
#     writes with the grants docs/connectors.md lists (owned schemas, or CREATE on the db);
#  4. search_path trojans: both databases default to `public, <schema>, pg_catalog` and carry
#     functions, aggregates and operators shadowing builtins that record every call; full,
#     sharded, incremental, upsert and merge runs never call one;
#  5. secrets: a canary password in env: urls, failures forced at every step; the canary is
#     in no output, event, run row, state database byte, nor a running ferry's cmdline.
. "$(dirname "$0")/lib.sh"
# shellcheck source=tests/pg/pg.sh
. "${FERRY_PG_SH:-$FERRY_SRC/tests/pg/pg.sh}"
pg_start

# ferry never sees the admin's libpq environment: every url carries its own credentials,
# and a PGOPTIONS search_path would hide what the trojans are there to catch.
ferry() { env -u PGPASSWORD -u PGOPTIONS -u PGUSER -u PGDATABASE -u PGHOST -u PGPORT "$FERRY_BIN" "$@"; }
# Admin psql with search_path pinned for the test's own queries (the databases' default
# search_path puts the trojans first).
pq() { local db=$1; shift; PGOPTIONS='-c search_path=pg_catalog -c client_min_messages=warning' psql -v ON_ERROR_STOP=1 -qXAt -d "$db" "$@"; }
qi() { local s=${1//\"/\"\"}; printf '"%s"' "$s"; }       # SQL identifier
ql() { local s=${1//\'/\'\'}; printf "'%s'" "$s"; }       # SQL literal
yq() { local s=${1//\'/\'\'}; printf "'%s'" "$s"; }       # YAML single-quoted scalar
url() { printf 'postgresql://%s:%s@127.0.0.1:%s/%s' "$1" "$2" "$PGPORT" "$3"; }

# ---- names and data ------------------------------------------------------------------------
SCH="Sch\"e'ma; DROP TABLE public.canary; -- .ü表 Mixed"
TBL="Tä\"b'le; -- .x 表"
C_ID="I\"d; --"
C_TXT="Wé'ird; DROP TABLE canary; -- col.umn 表"
C_MIX="MixedCase"
C_LONG="L$(printf 'ü%.0s' $(seq 1 31))" # 63 bytes
C_UPD="Up\"dated at"
C_N="n.um"
[ "$(printf '%s' "$C_LONG" | wc -c)" = 63 ] || fail "test setup: the long column is not 63 bytes"
PIPE=ferry_sec # also the name of a trojan schema
QS=$(qi "$SCH") QT=$(qi "$TBL") QID=$(qi "$C_ID") QTXT=$(qi "$C_TXT") QMIX=$(qi "$C_MIX")
QLONG=$(qi "$C_LONG") QUPD=$(qi "$C_UPD") QN=$(qi "$C_N")

for db in src dst dst2; do pq ferry -c "CREATE DATABASE $db"; done

# Trojans: in public, in the hostile schema and in a schema named like the pipeline, of each
# database: functions, aggregates and operators with builtin names and signatures. Each
# records its call in public.trojan_log, or (in a read-only transaction) in the server log.
trojans() { # trojans DB SCHEMA...
  local db=$1; shift
  pq "$db" <<SQL
CREATE TABLE IF NOT EXISTS public.trojan_log (fn text, at timestamptz DEFAULT pg_catalog.now());
GRANT INSERT ON public.trojan_log TO PUBLIC;
CREATE OR REPLACE FUNCTION public.ferry_trojan_hit(fn text) RETURNS void LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog AS \$f\$
BEGIN
  RAISE LOG 'FERRY_TROJAN %', fn;
  BEGIN INSERT INTO public.trojan_log (fn) VALUES (fn); EXCEPTION WHEN OTHERS THEN NULL; END;
END \$f\$;
SQL
  local s
  for s in "$@"; do
    pq "$db" -v s="$s" <<'SQL'
SELECT set_config('trojan.s', :'s', false) AS ignored \gset
DO $do$
DECLARE
  s text := pg_catalog.quote_ident(pg_catalog.current_setting('trojan.s'));
  t text; o text; n int := 0;
  ops text[] := ARRAY['=', '<>', '<', '>', '<=', '>='];
  typs text[] := ARRAY['bigint', 'integer', 'text', 'timestamptz', 'name', 'oid'];
BEGIN
  EXECUTE pg_catalog.format('CREATE SCHEMA IF NOT EXISTS %s', s);
  EXECUTE pg_catalog.format('GRANT USAGE ON SCHEMA %s TO PUBLIC', s);
  -- functions with builtin names and signatures
  EXECUTE pg_catalog.format($q$
    CREATE FUNCTION %1$s.lower(text) RETURNS text LANGUAGE plpgsql AS $b$
      BEGIN PERFORM public.ferry_trojan_hit('lower'); RETURN pg_catalog.lower($1); END $b$;
    CREATE FUNCTION %1$s.upper(text) RETURNS text LANGUAGE plpgsql AS $b$
      BEGIN PERFORM public.ferry_trojan_hit('upper'); RETURN pg_catalog.upper($1); END $b$;
    CREATE FUNCTION %1$s.md5(text) RETURNS text LANGUAGE plpgsql AS $b$
      BEGIN PERFORM public.ferry_trojan_hit('md5'); RETURN pg_catalog.md5($1); END $b$;
    CREATE FUNCTION %1$s.now() RETURNS timestamptz LANGUAGE plpgsql AS $b$
      BEGIN PERFORM public.ferry_trojan_hit('now'); RETURN pg_catalog.now(); END $b$;
    CREATE FUNCTION %1$s.pg_export_snapshot() RETURNS text LANGUAGE plpgsql AS $b$
      BEGIN PERFORM public.ferry_trojan_hit('pg_export_snapshot');
            RETURN pg_catalog.pg_export_snapshot(); END $b$;
    CREATE FUNCTION %1$s.to_regclass(text) RETURNS regclass LANGUAGE plpgsql AS $b$
      BEGIN PERFORM public.ferry_trojan_hit('to_regclass'); RETURN pg_catalog.to_regclass($1); END $b$;
    CREATE FUNCTION %1$s.format_type(oid, integer) RETURNS text LANGUAGE plpgsql AS $b$
      BEGIN PERFORM public.ferry_trojan_hit('format_type');
            RETURN pg_catalog.format_type($1, $2); END $b$;
    CREATE FUNCTION %1$s.quote_ident(text) RETURNS text LANGUAGE plpgsql AS $b$
      BEGIN PERFORM public.ferry_trojan_hit('quote_ident'); RETURN pg_catalog.quote_ident($1); END $b$;
    CREATE FUNCTION %1$s.trojan_cnt(bigint) RETURNS bigint LANGUAGE plpgsql AS $b$
      BEGIN PERFORM public.ferry_trojan_hit('count'); RETURN $1 + 1; END $b$;
    CREATE AGGREGATE %1$s.count(*) (SFUNC = %1$s.trojan_cnt, STYPE = bigint, INITCOND = '0');
    CREATE FUNCTION %1$s.trojan_min(bigint, bigint) RETURNS bigint LANGUAGE plpgsql AS $b$
      BEGIN PERFORM public.ferry_trojan_hit('min/max'); RETURN pg_catalog.int8smaller($1, $2); END $b$;
    CREATE AGGREGATE %1$s.min(bigint) (SFUNC = %1$s.trojan_min, STYPE = bigint);
    CREATE AGGREGATE %1$s.max(bigint) (SFUNC = %1$s.trojan_min, STYPE = bigint);
  $q$, s);
  -- comparison operators for the key, cursor and checkpoint column types
  FOREACH t IN ARRAY typs LOOP
    FOREACH o IN ARRAY ops LOOP
      n := n + 1;
      EXECUTE pg_catalog.format($q$
        CREATE FUNCTION %1$s.trojan_op_%2$s(%3$s, %3$s) RETURNS boolean LANGUAGE plpgsql AS $b$
          BEGIN PERFORM public.ferry_trojan_hit(%4$L); RETURN $1 OPERATOR(pg_catalog.%5$s) $2; END $b$;
        CREATE OPERATOR %1$s.%5$s (LEFTARG = %3$s, RIGHTARG = %3$s, FUNCTION = %1$s.trojan_op_%2$s);
      $q$, s, n, t, 'operator ' || o || ' ' || t, o);
    END LOOP;
  END LOOP;
END $do$;
SQL
  done
}

# ---- source database: hostile schema, table, columns and values; canaries; trojans ------------
pq src <<SQL
CREATE TABLE public.canary (v text);
INSERT INTO public.canary VALUES ('alive');
CREATE SCHEMA $QS;
CREATE TABLE $QS.canary (v text);
INSERT INTO $QS.canary VALUES ('alive');
CREATE TABLE $QS.$QT ($QID bigint PRIMARY KEY, $QTXT text, $QMIX text, $QLONG text,
                      $QUPD timestamptz NOT NULL, $QN integer);
INSERT INTO $QS.$QT
SELECT g,
  CASE g % 7 WHEN 0 THEN \$v\$'); DROP TABLE canary; --\$v\$
             WHEN 1 THEN E'"; DROP TABLE public.canary; --\\n\\t\\\\'
             WHEN 2 THEN 'ü表 ' || g
             WHEN 3 THEN ''
             WHEN 4 THEN NULL
             WHEN 5 THEN \$v\$\\'; SELECT pg_sleep(10); --\$v\$
             ELSE pg_catalog.repeat('''', g % 5) END,
  CASE WHEN g % 3 = 0 THEN 'MiXeD ' || g END,
  pg_catalog.repeat('ü', g % 40),
  TIMESTAMPTZ '2024-01-01 00:00:00+00' + (g / 10) * INTERVAL '1 minute',
  CASE WHEN g % 4 <> 0 THEN g * 7 END
FROM pg_catalog.generate_series(1, 300) g;
SQL
for db in src dst dst2; do
  pq "$db" -c "CREATE TABLE IF NOT EXISTS public.canary (v text); DELETE FROM public.canary; INSERT INTO public.canary VALUES ('alive')"
done

# ---- least-privilege roles -------------------------------------------------------------------
RO_PW="ro-$RANDOM$RANDOM" W_PW="w-$RANDOM$RANDOM" C_PW="c-$RANDOM$RANDOM"
pq src <<SQL
CREATE ROLE ferry_src_ro LOGIN PASSWORD $(ql "$RO_PW");
REVOKE ALL ON DATABASE src FROM PUBLIC;
GRANT CONNECT ON DATABASE src TO ferry_src_ro;
GRANT USAGE ON SCHEMA $QS TO ferry_src_ro;
GRANT SELECT ON $QS.$QT TO ferry_src_ro;
SQL
# dst: the writer owns its destination schema and _ferry (made beforehand), no CREATE on the db.
pq dst <<SQL
CREATE ROLE ferry_dst_w LOGIN PASSWORD $(ql "$W_PW");
REVOKE ALL ON DATABASE dst FROM PUBLIC;
GRANT CONNECT, TEMPORARY ON DATABASE dst TO ferry_dst_w;
CREATE SCHEMA $QS AUTHORIZATION ferry_dst_w;
CREATE SCHEMA _ferry AUTHORIZATION ferry_dst_w;
SQL
# dst2: the writer has CREATE on the database and owns nothing beforehand.
pq dst2 <<SQL
CREATE ROLE ferry_dst_c LOGIN PASSWORD $(ql "$C_PW");
REVOKE ALL ON DATABASE dst2 FROM PUBLIC;
GRANT CONNECT, TEMPORARY, CREATE ON DATABASE dst2 TO ferry_dst_c;
SQL
[ "$(pq src -c "SELECT has_database_privilege('ferry_src_ro', 'src', 'TEMPORARY'), has_database_privilege('ferry_src_ro', 'src', 'CREATE'), rolsuper, rolreplication FROM pg_roles WHERE rolname = 'ferry_src_ro'")" = "f|f|f|f" ] \
  || fail "the source role has more than it should"
[ "$(pq dst -c "SELECT has_database_privilege('ferry_dst_w', 'dst', 'CREATE')")" = f ] || fail "dst writer has CREATE"

trojans src public "$SCH" "$PIPE"
trojans dst public "$SCH" "$PIPE" _ferry
trojans dst2 public "$PIPE"
for db in src dst dst2; do
  pq "$db" -c "ALTER DATABASE $db SET search_path = public, $QS, $PIPE, pg_catalog"
done
# The trojans are live: a session on the databases' defaults calls them.
LOG="$PG_DIR/server.log"
for db in src dst; do
  PGOPTIONS='' psql -qXAt -d "$db" -c "SELECT lower('X'), count(*), 1::bigint = 1::bigint FROM (VALUES (1)) v" >/dev/null
  hits=$(pq "$db" -c "SELECT string_agg(DISTINCT fn, ',' ORDER BY fn) FROM public.trojan_log")
  [ "$hits" = "count,lower,operator = bigint" ] || fail "$db: trojans not live with the default search_path: '$hits'"
  pq "$db" -c "TRUNCATE public.trojan_log"
done
PGOPTIONS='' psql -qXAt -d src -c "BEGIN READ ONLY; SELECT lower('X'); COMMIT" >/dev/null
sleep 0.2
grep -q 'FERRY_TROJAN lower' "$LOG" || fail "a trojan in a read-only transaction leaves no trace in the server log"
trojan_lines=$(grep -c FERRY_TROJAN "$LOG")
pass "trojans planted in public, the hostile schema, $PIPE and _ferry; live under the databases' default search_path"

export SRC_URL DST_URL DST2_URL
SRC_URL=$(url ferry_src_ro "$RO_PW" src)
DST_URL=$(url ferry_dst_w "$W_PW" dst)
DST2_URL=$(url ferry_dst_c "$C_PW" dst2)

# pg_pipeline FILE NAME MODE SINK-URL-VAR WRITE [EXTRA-SINK-YAML]
pg_pipeline() {
  local file=$1 name=$2 mode=$3 sinkurl=$4 write=$5 extra=${6:-}
  {
    echo "version: 1"
    echo "name: $name"
    echo "source:"
    echo "  type: postgres"
    echo "  url: env:SRC_URL"
    echo "  shard_rows: 100"
    echo "  resources:"
    echo "    - table: $(yq "$QS.$QT")"
    echo "      target: $(yq "$TBL")"
    echo "      mode: $mode"
    [ "$mode" = incremental ] && echo "      cursor: [$(yq "$C_UPD")]"
    echo "sink:"
    echo "  type: postgres"
    echo "  url: env:$sinkurl"
    echo "  schema: $(yq "$SCH")"
    echo "  write: $write"
    [ -n "$extra" ] && echo "$extra"
    echo "batch: {rows: 64}"
  } > "$file"
}

# digest DB: md5 of the table's row texts in key order, and its column names and types.
digest() {
  pq "$1" -c "SELECT md5(string_agg(r::text, E'\n' ORDER BY r.$QID)), count(*) FROM $QS.$QT r"
}
columns() {
  pq "$1" -c "SELECT string_agg(attname || ':' || format_type(atttypid, atttypmod), ' | ' ORDER BY attnum)
              FROM pg_attribute WHERE attrelid = $(ql "$QS.$QT")::regclass AND attnum > 0 AND NOT attisdropped" \
    2>/dev/null
}
same_pg() { # same_pg DB WHAT
  local a b
  a=$(digest src) b=$(digest "$1")
  [ "$a" = "$b" ] || fail "$2: digest of $1 $b != source $a"
  [ "$(columns src)" = "$(columns "$1")" ] || fail "$2: columns differ: $(columns src) vs $(columns "$1")"
}
canaries_ok() {
  local db
  for db in src dst dst2; do
    [ "$(pq "$db" -c "SELECT count(*), string_agg(v, ',') FROM public.canary")" = "1|alive" ] || fail "$db: canary touched"
    [ "$(pq "$db" -c "SELECT count(*) FROM public.trojan_log")" = 0 ] \
      || fail "$db: trojans called: $(pq "$db" -c "SELECT string_agg(DISTINCT fn, ', ') FROM public.trojan_log")"
  done
  [ "$(pq src -c "SELECT count(*), string_agg(v, ',') FROM $QS.canary")" = "1|alive" ] || fail "src: hostile schema canary touched"
  [ "$(grep -c FERRY_TROJAN "$LOG")" = "$trojan_lines" ] \
    || fail "a trojan ran in a read-only transaction: $(grep FERRY_TROJAN "$LOG" | tail -n 3)"
}

# ---- 1+3+4: full (3 shards) merge, rerun after changes; incremental upsert; append into dst2 --
pg_pipeline merge.yaml "${PIPE}_merge" full DST_URL merge
expect_exit 0 ferry run merge.yaml
same_pg dst "full merge"
canaries_ok
pq src -c "UPDATE $QS.$QT SET $QTXT = \$v\$x'); DROP TABLE canary; --\$v\$, $QUPD = $QUPD + INTERVAL '1 day' WHERE $QID % 10 = 0;
           INSERT INTO $QS.$QT VALUES (1000, 'new ü', NULL, 'ü', '2024-06-01 00:00+00', NULL)"
expect_exit 0 ferry run merge.yaml --fresh
same_pg dst "full merge, second run"
canaries_ok
pass "PG -> PG full merge (3 keyset shards) of hostile schema/table/columns/values: md5 equal, twice"

# Incremental upsert into the same (keyed) table, then changed rows.
pq dst -c "DELETE FROM $QS.$QT WHERE $QID % 2 = 0"
pg_pipeline inc.yaml "${PIPE}_inc" incremental DST_URL upsert
expect_exit 0 ferry run inc.yaml
same_pg dst "incremental upsert"
pq src -c "UPDATE $QS.$QT SET $QMIX = 'changed '';--', $QUPD = '2025-01-01 00:00+00' WHERE $QID IN (5, 6, 7);
           INSERT INTO $QS.$QT VALUES (1001, \$v\$'); DROP TABLE canary; --\$v\$, 'Ab', '', '2025-01-02 00:00+00', 1)"
expect_exit 0 ferry run inc.yaml
[ "$(pq dst -c "SELECT count(*) FROM $QS.$QT WHERE $QMIX = 'changed '';--'")" = 3 ] || fail "incremental: changed rows"
same_pg dst "incremental upsert, second run"
canaries_ok
pass "PG -> PG incremental upsert on a hostile cursor column: md5 equal after a second run with changes"

# Append with a role that has CREATE on the database (creates the schema and _ferry itself).
pg_pipeline app.yaml "${PIPE}_app" full DST2_URL append
expect_exit 0 ferry run app.yaml
same_pg dst2 "full append"
[ "$(pq dst2 -c "SELECT nspowner::regrole FROM pg_namespace WHERE nspname = $(ql "$SCH")")" = ferry_dst_c ] || fail "dst2 schema owner"
canaries_ok
pass "PG -> PG append by a role with only CONNECT, TEMPORARY, CREATE on the database"
pass "least privilege: source LOGIN+CONNECT+USAGE+SELECT; sink owned schemas (merge/upsert) or CREATE on db (append)"

# ---- PG -> sqlite, value by value ------------------------------------------------------------
cat > lite.yaml <<EOF
version: 1
name: ${PIPE}_lite
source:
  type: postgres
  url: env:SRC_URL
  resources:
    - table: $(yq "$QS.$QT")
      target: $(yq "$TBL")
      mode: full
sink:
  type: sqlite
  path: $T/lite.db
  write: append
EOF
expect_exit 0 ferry run lite.yaml
sq_tbl=$(qi "$TBL")
[ "$(q lite.db "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = $(ql "$TBL")")" = 1 ] || fail "sqlite table name"
[ "$(q lite.db "SELECT group_concat(name, ' | ') FROM (SELECT name FROM pragma_table_info($(ql "$TBL")) ORDER BY cid)")" = \
  "$(pq src -c "SELECT string_agg(attname, ' | ' ORDER BY attnum) FROM pg_attribute WHERE attrelid = $(ql "$QS.$QT")::regclass AND attnum > 0")" ] \
  || fail "sqlite column names differ"
# Every value as hex of its text (NULL as N), the timestamp in the sqlite sink's documented form.
PGTZ=UTC pq src -c "SELECT $QID || '|' || coalesce(upper(encode(convert_to($QTXT, 'UTF8'), 'hex')), 'N') || '|' ||
  coalesce(upper(encode(convert_to($QMIX, 'UTF8'), 'hex')), 'N') || '|' || coalesce(upper(encode(convert_to($QLONG, 'UTF8'), 'hex')), 'N') || '|' ||
  to_char($QUPD, 'YYYY-MM-DD HH24:MI:SS.US') || '+00:00|' || coalesce($QN::text, 'N') FROM $QS.$QT ORDER BY 1" | sort > src.txt
sx() { printf "CASE WHEN %s IS NULL THEN 'N' ELSE hex(CAST(%s AS BLOB)) END" "$1" "$1"; } # sqlite's hex(NULL) is ''
q lite.db "SELECT $QID || '|' || $(sx "$QTXT") || '|' || $(sx "$QMIX") || '|' || $(sx "$QLONG") || '|' ||
  $QUPD || '|' || coalesce($QN, 'N') FROM $sq_tbl ORDER BY 1" | sort > lite.txt
[ "$(wc -l < src.txt)" -ge 300 ] || fail "sqlite comparison read too few rows"
cmp -s src.txt lite.txt || fail "PG -> sqlite values differ: $(diff src.txt lite.txt | head -5)"
canaries_ok
pass "PG -> sqlite: names exact, $(wc -l < src.txt) rows equal value by value"

# ---- 2: 64-byte names and truncation collisions are refused before any write ----------------
L64=$(printf 'ü%.0s' $(seq 1 32)) # 64 bytes, 32 characters
sed "s/^  schema: .*/  schema: $L64/" merge.yaml > long_schema.yaml
expect_exit 2 ferry run long_schema.yaml
printf '%s' "$OUT" | grep -q "${L64:0:20}" || fail "64-byte schema: message does not name it: $OUT"
printf '%s' "$OUT" | grep -q 63 || fail "64-byte schema: message does not say the limit: $OUT"
echo "  refused: $(printf '%s' "$OUT" | grep -m1 error | cut -c1-240)"
# Source side: a 64-byte table name in the resource.
sed "s/^    - table: .*/    - table: $(yq "$QS.$L64")/; s/^      target: .*/      target: shortname/" merge.yaml > long_src.yaml
set +e; OUT=$(ferry run long_src.yaml 2>&1); got=$?; set -e
[ "$got" = 1 ] || [ "$got" = 2 ] || [ "$got" = 7 ] || fail "64-byte source table: exit $got: $OUT"
printf '%s' "$OUT" | grep -q "${L64:0:20}" || fail "64-byte source table: message does not name it: $OUT"
echo "  refused: $(printf '%s' "$OUT" | grep -m1 error | cut -c1-240)"
# Column and table names from a sqlite source: 64 bytes, and two 70-byte names equal in their
# first 63 bytes (PostgreSQL would truncate both to one name).
A63=$(printf 'a%.0s' $(seq 1 63))
q long.db "CREATE TABLE t64 (id integer PRIMARY KEY, \"${A63}b\" text); INSERT INTO t64 VALUES (1, 'x');
           CREATE TABLE tcol (id integer PRIMARY KEY, \"${A63}_one_more\" text, \"${A63}_two_more\" text); INSERT INTO tcol VALUES (1, 'x', 'y');
           CREATE TABLE \"${A63}_first\" (id integer PRIMARY KEY); INSERT INTO \"${A63}_first\" VALUES (1);
           CREATE TABLE \"${A63}_second\" (id integer PRIMARY KEY); INSERT INTO \"${A63}_second\" VALUES (2);"
lite_to_pg() { # lite_to_pg FILE SCHEMA TABLE...
  local file=$1 schema=$2 t; shift 2
  {
    echo "version: 1"
    echo "name: ${PIPE}_long"
    echo "source:"
    echo "  type: sqlite"
    echo "  path: $T/long.db"
    echo "  resources:"
    for t in "$@"; do echo "    - {table: '$t', mode: full}"; done
    echo "sink: {type: postgres, url: env:DST2_URL, schema: $schema, write: upsert}"
  } > "$file"
}
nothing_in_dst2() { # nothing_in_dst2 SCHEMA
  [ "$(pq dst2 -c "SELECT count(*) FROM pg_namespace WHERE nspname = '$1'")" = 0 ] || fail "$1: schema created before the refusal"
  [ "$(pq dst2 -c "SELECT count(*) FROM pg_class WHERE relname LIKE '${A63:0:60}%'")" = 0 ] || fail "$1: a long-named table was created"
}
lite_to_pg c64.yaml long_c64 t64
set +e; OUT=$(ferry run c64.yaml 2>&1); got=$?; set -e
{ [ "$got" = 1 ] || [ "$got" = 2 ]; } || fail "64-byte column: exit $got: $OUT"
printf '%s' "$OUT" | grep -q "${A63:0:40}" || fail "64-byte column: message does not name it: $OUT"
echo "  refused: $(printf '%s' "$OUT" | grep -m1 error | cut -c1-240)"
nothing_in_dst2 long_c64
lite_to_pg col2.yaml long_col2 tcol
set +e; OUT=$(ferry run col2.yaml 2>&1); got=$?; set -e
{ [ "$got" = 1 ] || [ "$got" = 2 ]; } || fail "colliding columns: exit $got: $OUT"
printf '%s' "$OUT" | grep -q "${A63:0:40}" || fail "colliding columns: message does not name them: $OUT"
echo "  refused: $(printf '%s' "$OUT" | grep -m1 error | cut -c1-240)"
nothing_in_dst2 long_col2
lite_to_pg tab2.yaml long_tab2 "${A63}_first" "${A63}_second"
set +e; OUT=$(ferry run tab2.yaml 2>&1); got=$?; set -e
{ [ "$got" = 1 ] || [ "$got" = 2 ]; } || fail "colliding tables: exit $got: $OUT"
printf '%s' "$OUT" | grep -q "${A63:0:40}" || fail "colliding tables: message does not name them: $OUT"
echo "  refused: $(printf '%s' "$OUT" | grep -m1 error | cut -c1-240)"
nothing_in_dst2 long_tab2
canaries_ok
pass "64-byte schema/table/column names and 63-byte-prefix collisions refused, naming them, nothing written"

# ---- 5: secrets ------------------------------------------------------------------------------
CANARY="Zq7Canary$RANDOM$RANDOM"
pq src <<SQL
CREATE ROLE ferry_canary LOGIN PASSWORD $(ql "$CANARY");
GRANT CONNECT ON DATABASE src TO ferry_canary;
GRANT USAGE ON SCHEMA $QS TO ferry_canary;
GRANT SELECT ON $QS.$QT TO ferry_canary;
SQL
pq dst <<SQL
GRANT CONNECT, TEMPORARY, CREATE ON DATABASE dst TO ferry_canary;
GRANT ferry_dst_w TO ferry_canary; -- for _ferry, owned by the writer
CREATE SCHEMA sec_bad AUTHORIZATION ferry_canary;
CREATE TABLE sec_bad.t ($QID bigint PRIMARY KEY, $QTXT text, $QMIX text, $QLONG text, $QUPD timestamptz, $QN integer CHECK ($QN < 0));
ALTER TABLE sec_bad.t OWNER TO ferry_canary;
SQL
export PGPASS_CANARY PGPASS_CANARY_DST
PGPASS_CANARY=$(url ferry_canary "$CANARY" src)
PGPASS_CANARY_DST=$(url ferry_canary "$CANARY" dst)
sec_pipeline() { # sec_pipeline FILE SOURCE-TABLE SINK-SCHEMA [BATCH]
  {
    echo "version: 1"
    echo "name: ${PIPE}_secret"
    echo "source: {type: postgres, url: env:PGPASS_CANARY, connect_timeout: 2s, resources: [{table: $(yq "$2"), target: t, mode: full}]}"
    echo "sink: {type: postgres, url: env:PGPASS_CANARY_DST, connect_timeout: 2s, schema: $3, write: append}"
    echo "batch: {rows: ${4:-64}}"
  } > "$1"
}
: > outputs.txt
run_sec() { # run_sec EXIT ARGS... : output kept for the canary search
  local want=$1; shift
  set +e; OUT=$(ferry "$@" 2>&1); local got=$?; set -e
  printf '%s\n' "$OUT" >> outputs.txt
  [ "$got" = "$want" ] || fail "expected exit $want, got $got from ferry $*: $OUT"
}
# a run that works, slowed down so its /proc cmdline can be read while it runs
sec_pipeline ok.yaml "$QS.$QT" sec_ok 16
FERRY_FAILPOINTS="after_sink_apply=sleep(100)" "$FERRY_BIN" run ok.yaml --json > ok.out 2> ok.err &
pid=$!
sleep 0.5
[ -r "/proc/$pid/cmdline" ] || fail "ferry ended before its cmdline could be read"
tr '\0' ' ' < "/proc/$pid/cmdline" > cmdline.txt
grep -aqF "$CANARY" cmdline.txt && fail "canary in /proc/$pid/cmdline"
grep -aq ok.yaml cmdline.txt || fail "read the wrong process's cmdline: $(cat cmdline.txt)"
ps -o args= -p "$pid" | grep -qF "$CANARY" && fail "canary in ps output"
wait "$pid" || fail "the canary run failed: $(cat ok.err)"
cat ok.out ok.err >> outputs.txt
[ "$(pq dst -c "SELECT count(*) FROM sec_ok.t")" = "$(pq src -c "SELECT count(*) FROM $QS.$QT")" ] || fail "canary run rows"
# wrong password (the url's password: the canary with a suffix)
export PGPASS_CANARY_GOOD=$PGPASS_CANARY
PGPASS_CANARY=$(url ferry_canary "${CANARY}x" src) run_sec 1 run ok.yaml --fresh
printf '%s' "$OUT" | grep -q 'password authentication failed' || fail "wrong password: unclear message: $OUT"
printf '%s' "$OUT" | grep -q "127.0.0.1:$PGPORT/src" || fail "wrong password: message does not name the server: $OUT"
PGPASS_CANARY_DST=$(url ferry_canary "${CANARY}x" dst) run_sec 1 run ok.yaml --fresh --json
# unreachable host: closed ports on two loopback addresses (tests never leave the machine)
PGPASS_CANARY="postgresql://ferry_canary:$CANARY@127.0.0.1:1/src" run_sec 1 run ok.yaml --fresh
printf '%s' "$OUT" | grep -q '127.0.0.1:1/src' || fail "closed port: message does not name the host: $OUT"
PGPASS_CANARY_DST="postgresql://ferry_canary:$CANARY@127.0.0.2:1/dst" run_sec 1 run ok.yaml --fresh
# missing table
sec_pipeline missing.yaml "public.no_such_table" sec_missing
set +e; OUT=$(ferry run missing.yaml 2>&1); got=$?; set -e
printf '%s\n' "$OUT" >> outputs.txt
[ "$got" = 7 ] || [ "$got" = 1 ] || fail "missing table: exit $got: $OUT"
printf '%s' "$OUT" | grep -q 'no_such_table' || fail "missing table: message does not name it: $OUT"
# sink error: a CHECK constraint refuses the rows (the server's detail quotes the row)
sec_pipeline bad.yaml "$QS.$QT" sec_bad
run_sec 1 run bad.yaml
printf '%s' "$OUT" | grep -q 'check constraint' || fail "sink error: unclear message: $OUT"
[ "$(pq dst -c "SELECT count(*) FROM sec_bad.t")" = 0 ] || fail "sink error: rows written"
# a plain url holding the password is refused at load, without echoing it
sed "s#url: env:PGPASS_CANARY_DST#url: '$PGPASS_CANARY_DST'#" ok.yaml > plain.yaml
run_sec 2 run plain.yaml
printf '%s' "$OUT" | grep -q 'must not hold a password' || fail "plain url: $OUT"
run_sec 2 check plain.yaml
rm -f plain.yaml
# everything the state database and the CLI can show
run_sec 0 runs --json
runs=$(printf '%s' "$OUT" | jq -r '.[].id')
[ -n "$runs" ] || fail "no runs recorded"
for r in $runs; do
  run_sec 0 events "$r" --json
  run_sec 0 show "$r" --json
done
run_sec 0 checkpoints --json
n_out=$(wc -c < outputs.txt)
grep -aqF "$CANARY" outputs.txt && fail "canary in ferry output: $(grep -aF "$CANARY" outputs.txt | head -3)"
pq dst -c "SELECT * FROM _ferry.checkpoints" | grep -qF "$CANARY" && fail "canary in the destination's checkpoints"
canaries_ok
for f in "$FERRY_STATE"*; do
  if grep -aqF "$CANARY" "$f"; then
    where=$(for t in $(q "$FERRY_STATE" "SELECT name FROM sqlite_master WHERE type = 'table'"); do
              q "$FERRY_STATE" "SELECT * FROM \"$t\"" | grep -qF "$CANARY" && printf '%s ' "$t"; done; true)
    fail "canary in the state database file $f (tables: ${where:-none, in free pages or the WAL})"
  fi
done
pass "secrets: canary in no output ($n_out bytes), event, run, state file or cmdline across 8 forced failures"
