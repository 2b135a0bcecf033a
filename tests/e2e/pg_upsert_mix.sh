#!/usr/bin/env bash
# postgres -> postgres write: upsert through the plain-batch paths (a COPY straight into the
# table under a savepoint while no key is there yet; else every staged row, one INSERT … ON
# CONFLICT from a temporary table of the fields alone, with no savepoint when the batch's keys
# strictly increase, as here) for three key mixes of the destination: all keys new (copied
# straight, no unique violation), all existing (with other values), half and half (one
# violation, then staged); tables with a trigger or forced row-level security always stage;
# the destination must equal the source as a set. A source whose declared key repeats takes
# the ordered statement (one row per key). write: merge of a full run equals the source too. kill -9 mid-run, then resume:
# no row lost, none written twice, the stale rows all replaced.
. "$(dirname "$0")/lib.sh"
. "${FERRY_PG_SH:-$FERRY_SRC/tests/pg/pg.sh}"
pg_start
[ -n "${FERRY_PG_URL:-}" ] || fail "pg_start exported no FERRY_PG_URL"
p() { pgq -d "$FERRY_PG_URL" "$@"; }

N=20000
p >/dev/null <<SQL
CREATE TABLE public.src (id bigint PRIMARY KEY, name text, amount numeric(12,2), at timestamptz,
                         flag bool, note text);
INSERT INTO public.src
SELECT g, 'name ' || g, round((g * 1.37)::numeric, 2), timestamptz '2024-01-01' + g * interval '1 min',
       g % 3 = 0, CASE WHEN g % 5 = 0 THEN NULL ELSE md5(g::text) END
FROM generate_series(1, $N) g;
SQL

# pipeline FILE NAME SCHEMA WRITE [TABLE] [KEY_YAML]
pipeline() {
  cat > "$1" <<EOF
version: 1
name: $2
source:
  type: postgres
  url: env:FERRY_PG_URL
  resources:
    - {table: ${5:-public.src}, mode: full${6:-}}
sink:
  type: postgres
  url: env:FERRY_PG_URL
  schema: "$3"
  write: $4
batch: {rows: 1000}
EOF
}

# prepare SCHEMA WHERE: the destination table with the source's keys matching WHERE, every
# other column different (name 'stale', amount -1, note NULL, flag flipped).
prepare() {
  p -c "DROP SCHEMA IF EXISTS \"$1\" CASCADE" -c "CREATE SCHEMA \"$1\"" \
    -c "CREATE TABLE \"$1\".src (LIKE public.src INCLUDING ALL)" \
    -c "INSERT INTO \"$1\".src SELECT id, 'stale', -1, at - interval '1 day', NOT flag, NULL
        FROM public.src WHERE $2" >/dev/null
}

# same_set SCHEMA: the destination equals the source as a set, and holds each key once.
same_set() {
  local diff
  diff=$(p -c "SELECT (SELECT count(*) FROM (SELECT * FROM public.src EXCEPT SELECT * FROM \"$1\".src) a)
                   || ' ' || (SELECT count(*) FROM (SELECT * FROM \"$1\".src EXCEPT SELECT * FROM public.src) b)
                   || ' ' || (SELECT count(*) - count(DISTINCT id) FROM \"$1\".src)")
  [ "$diff" = "0 0 0" ] || fail "$1: source minus destination, destination minus source, duplicates: $diff"
}

# Batches of inserts only are first COPYed straight into the table; a key already there ends
# that COPY with a unique violation, the batch is staged and so is the rest of the run: all
# 20 batches copied straight and none staged where all keys are new; one copied straight and
# refused, then all 20 staged where keys exist. This database logs every statement for it
# (log_statement, reset after the loop); a refused one is logged again as the STATEMENT of
# its error (the shared server's log holds other tests' lines too: only this test's table
# names count).
logged() { grep -c "$1" "$PG_DIR/server.log" || true; }
log_statements() { p -c "DO \$\$ BEGIN EXECUTE format('ALTER DATABASE %I $1', current_database()); END \$\$" >/dev/null; }
log_statements "SET log_statement = ''all''"
for mix in new existing half; do
  case $mix in new) where=false ;; existing) where=true ;; half) where="id % 2 = 0" ;; esac
  prepare "mix_$mix" "$where"
  before=$(p -c "SELECT count(*) FROM \"mix_$mix\".src")
  pipeline "$mix.yaml" "up_$mix" "mix_$mix" upsert
  straight="statement: COPY \"mix_$mix\".\"src\" ("
  dupkey="STATEMENT:  COPY \"mix_$mix\".\"src\" ("
  d0=$(logged "$dupkey") c0=$(logged "$straight") s0=$(logged 'statement: COPY pg_temp.')
  sp0=$(logged 'statement: SAVEPOINT ferry_upsert')
  lean="statement: INSERT INTO \"mix_$mix\".\"src\" (.* FROM pg_temp.\"ferry_stage_[0-9]*_lean\" AS l ON CONFLICT"
  lean0=$(logged "$lean")
  expect_exit 0 ferry run "$mix.yaml" --json
  [ "$(json_field "$OUT" .rows)" = "$N" ] || fail "$mix: rows reported: $OUT"
  same_set "mix_$mix"
  got="$(( $(logged "$dupkey") - d0 )) $(( $(logged "$straight") - c0 )) $(( $(logged 'statement: COPY pg_temp.') - s0 ))"
  got="$got $(( $(logged 'statement: SAVEPOINT ferry_upsert') - sp0 ))"
  got="$got $(( $(logged "$lean") - lean0 ))"
  # (the staged batches' keys strictly increase: their upsert needs no savepoint, and they are
  # staged in the lean table of the fields alone, which the upsert reads)
  want="1 1 $((N / 1000)) 0 $((N / 1000))"
  [ $mix = new ] && want="0 $((N / 1000)) 0 0 0"
  [ "$got" = "$want" ] || fail "$mix: unique violations, batches copied straight, batches staged, upsert savepoints, upserts from the lean table: $got, want $want"
  pass "upsert, keys $mix ($before of $N present before): the destination equals the source (violations, straight, staged, savepoints, lean upserts: $got)"
done
# A table with a trigger (a foreign key's checks are triggers too) or a rule is never copied
# straight: every batch is staged, and the trigger sees each row inserted once.
p -c "DROP SCHEMA IF EXISTS mix_trig CASCADE" -c "CREATE SCHEMA mix_trig" \
  -c "CREATE TABLE mix_trig.src (LIKE public.src INCLUDING ALL)" \
  -c "CREATE TABLE mix_trig.seen (id bigint)" \
  -c "CREATE FUNCTION mix_trig.note() RETURNS trigger LANGUAGE plpgsql AS
      \$\$ BEGIN INSERT INTO mix_trig.seen VALUES (NEW.id); RETURN NEW; END \$\$" \
  -c "CREATE TRIGGER note AFTER INSERT ON mix_trig.src FOR EACH ROW EXECUTE FUNCTION mix_trig.note()" >/dev/null
pipeline trig.yaml up_trig mix_trig upsert
c0=$(logged 'statement: COPY "mix_trig"."src" (') s0=$(logged 'statement: COPY pg_temp.')
expect_exit 0 ferry run trig.yaml
same_set mix_trig
got="$(( $(logged 'statement: COPY "mix_trig"."src" (') - c0 )) $(( $(logged 'statement: COPY pg_temp.') - s0 ))"
[ "$got" = "0 $((N / 1000))" ] || fail "a table with a trigger: batches copied straight, staged: $got, want 0 $((N / 1000))"
[ "$(p -c "SELECT count(*), count(DISTINCT id) FROM mix_trig.seen")" = "$N|$N" ] || fail "the trigger saw $(p -c "SELECT count(*) FROM mix_trig.seen") inserts"
pass "upsert into a table with a trigger: every batch staged, each row inserted once"
# Row-level security that applies to the writer (forced, for a table's owner who is not a
# superuser): COPY FROM refuses such a table, so it is never copied straight: staged, and
# the run succeeds.
p -c "DROP SCHEMA IF EXISTS mix_rls CASCADE" -c "DROP ROLE IF EXISTS rls_w" \
  -c "CREATE ROLE rls_w LOGIN PASSWORD 'rls-w-pw'" -c "CREATE SCHEMA mix_rls AUTHORIZATION rls_w" \
  -c "CREATE TABLE mix_rls.src (LIKE public.src INCLUDING ALL)" -c "ALTER TABLE mix_rls.src OWNER TO rls_w" \
  -c "ALTER TABLE mix_rls.src ENABLE ROW LEVEL SECURITY" -c "ALTER TABLE mix_rls.src FORCE ROW LEVEL SECURITY" \
  -c "CREATE POLICY everyone ON mix_rls.src USING (true) WITH CHECK (true)" \
  -c "GRANT USAGE, CREATE ON SCHEMA _ferry TO rls_w" -c "GRANT ALL ON ALL TABLES IN SCHEMA _ferry TO rls_w" \
  -c "DO \$\$ BEGIN EXECUTE format('GRANT CONNECT, TEMPORARY ON DATABASE %I TO rls_w', current_database()); END \$\$" >/dev/null
RLS_URL=$(printf '%s' "$FERRY_PG_URL" | sed 's|//[^@]*@|//rls_w:rls-w-pw@|')
export RLS_URL
pipeline rls.yaml up_rls mix_rls upsert
sed -i '/^sink:/,$ s|url: env:FERRY_PG_URL|url: env:RLS_URL|' rls.yaml
c0=$(logged 'statement: COPY "mix_rls"."src" (') s0=$(logged 'statement: COPY pg_temp.')
expect_exit 0 ferry run rls.yaml
same_set mix_rls
got="$(( $(logged 'statement: COPY "mix_rls"."src" (') - c0 )) $(( $(logged 'statement: COPY pg_temp.') - s0 ))"
[ "$got" = "0 $((N / 1000))" ] || fail "a table under row-level security: batches copied straight, staged: $got, want 0 $((N / 1000))"
pass "upsert into a table under forced row-level security: every batch staged, equal to the source"
log_statements "RESET log_statement"

# merge of a full run (no deletes in its batches): the same statement, the same result.
prepare mix_merge "id % 3 = 0"
pipeline merge.yaml merge_half mix_merge merge
expect_exit 0 ferry run merge.yaml
same_set mix_merge
pass "merge of a full run into a third of the keys: the destination equals the source"

# The plain statement took every batch so far: the server refused none.
twice() { grep -c "cannot affect row a second time" "$PG_DIR/server.log" || true; }
[ "$(twice)" = 0 ] || fail "a batch without repeated keys fell back to the ordered upsert"

# A declared key that repeats in the source: a batch stages a key twice (its keys do not
# strictly increase, so the plain statement runs under a savepoint), the plain statement is
# refused by the server (21000) and the batch is applied by the ordered one.
p -c "CREATE TABLE public.dup AS SELECT * FROM public.src WHERE id <= 3000" \
  -c "INSERT INTO public.dup SELECT * FROM public.src WHERE id % 10 = 0 AND id <= 3000" >/dev/null
p -c "DROP SCHEMA IF EXISTS mix_dup CASCADE" -c "CREATE SCHEMA mix_dup" \
  -c "CREATE TABLE mix_dup.dup (LIKE public.src INCLUDING ALL)" >/dev/null
pipeline dup.yaml dup mix_dup upsert public.dup ", key: [id]"
expect_exit 0 ferry run dup.yaml
got=$(p -c "SELECT count(*), count(DISTINCT id) FROM mix_dup.dup")
[ "$got" = "3000|3000" ] || fail "duplicate keys: $got rows|keys, want 3000|3000 ($OUT)"
[ "$(p -c "SELECT count(*) FROM (SELECT DISTINCT * FROM public.dup EXCEPT SELECT * FROM mix_dup.dup) a")" = 0 ] ||
  fail "duplicate keys: rows missing"
[ "$(twice)" -gt 0 ] || fail "repeated keys: the plain statement was not refused, so not tried"
pass "keys staged twice in a batch: refused by the plain statement, applied by the ordered one, equal to the source"

# kill -9 mid-run into half-present keys, then resume: every row, once, nothing stale.
prepare mix_k9 "id % 2 = 0"
pipeline k9.yaml k9 mix_k9 upsert
FERRY_FAILPOINTS="after_sink_apply=sleep(50)" "$FERRY_BIN" run k9.yaml > k9.out 2>&1 &
pid=$!
# A committed batch shows as new keys: more rows than the half prepared.
mid_new=0
for _ in $(seq 1 600); do
  mid_new=$(p -c "SELECT count(*) FROM mix_k9.src" 2>/dev/null || echo 0)
  [ "${mid_new:-0}" -gt $((N / 2)) ] && break
  sleep 0.05
done
kill -9 $pid 2>/dev/null || fail "kill -9: the run had ended already ($(tail -n2 k9.out))"
wait $pid 2>/dev/null || true
mid_new=$(p -c "SELECT count(*) FROM mix_k9.src")
stale=$(p -c "SELECT count(*) FROM mix_k9.src WHERE name = 'stale'")
[ "$mid_new" -gt $((N / 2)) ] && [ "$stale" -gt 0 ] || fail "kill -9 did not land mid-run ($mid_new rows, $stale stale)"
expect_exit 0 ferry run k9.yaml
printf '%s' "$OUT" | grep -q "resum" || fail "no resume: $OUT"
moved=$(printf '%s' "$OUT" | sed -n 's/^run [0-9]* completed: \([0-9]*\) rows.*/\1/p')
[ -n "$moved" ] && [ "$moved" -lt "$N" ] || fail "the resumed run moved ${moved:-?} rows (of $N): it started over? $OUT"
same_set mix_k9
pass "kill -9 mid-upsert ($mid_new rows, $stale still stale), resume moved $moved: equal to the source, each key once"
