#!/usr/bin/env bash
# shared: pg
# tests/e2e/wholedb.sh - a whole PostgreSQL database (200+ tables of mixed sizes) cloned by one
# pipeline `tables: [public.*]` with `exclude:` and `concurrency: 4` (issue 17); first, into
# SQLite: 40 tables at concurrency 4, the progress line on a terminal, and a key-less table
# whose one-transaction copy the other lanes wait for (sqlite_sink.c busy_wait);
#   1. taken while a writer inserts a parent and its children in one statement: every
#      table equal to the source (count and md5 of its rows, table by table), the two written
#      tables each exactly the source as of one moment, and the foreign key holds in the
#      destination (every table read from the run's one snapshot, on every lane);
#   2. a table that fails (a destination CHECK rejects its rows) does not stop the others:
#      the run ends failed naming it, `ferry show` lists it failed and every other table
#      completed; the same command again (after the fix) copies only what was missing;
#   3. the table list is frozen with the run: an attempt killed mid-copy (failpoint crash:
#      _exit at once, as kill -9), a table created and a planned one dropped since: the
#      resumed attempt copies the first attempt's list (not the new table), fails the dropped
#      table naming it, and every other table is equal; the table back, the same command
#      again converges: every table equal, none doubled.
. "$FERRY_SRC/tests/e2e/lib.sh"
. "$FERRY_SRC/tests/pg/pg.sh"

# ---- sqlite: 40 tables at concurrency 4 into one sqlite file -------------------------------
{
  for i in $(seq 1 40); do
    echo "CREATE TABLE s$i (id INTEGER PRIMARY KEY, v TEXT, n REAL);"
    echo "WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g WHERE x < $((i * i * 10)))
          INSERT INTO s$i SELECT x, 'v' || x, x * 0.5 FROM g;"
  done
  echo "CREATE TABLE skip_me (id INTEGER PRIMARY KEY);"
} | q lite.db
cat > lite.yaml <<'EOF'
version: 1
name: lite
concurrency: 4
batch: {rows: 1000}
source: {type: sqlite, path: lite.db, resources: [{tables: ["*"], exclude: ["skip_*"]}]}
sink: {type: sqlite, path: lite_out.db, write: append}
EOF
expect_exit 0 ferry run lite.yaml
printf '%s\n' "$OUT" | grep -q "40 resources, 4 at once" || fail "sqlite: not 4 at once: $(printf '%s\n' "$OUT" | head -3)"
for i in $(seq 1 40); do same_table lite.db lite_out.db "s$i" || fail "sqlite: s$i differs"; done
[ "$(q lite_out.db "SELECT count(*) FROM sqlite_master WHERE name = 'skip_me'")" = 0 ] || fail "sqlite: skip_me copied"
pass "sqlite: 40 tables at concurrency 4 into one sqlite file, each equal"
# on a terminal: the run's line, tables done of all, rows, rate (and ETA while it runs)
sed -i 's/lite_out.db/lite_tty.db/; s/name: lite/name: lite_tty/' lite.yaml
FERRY_FAILPOINTS='before_sink_apply=sleep(20)' script -qec "$FERRY_BIN run lite.yaml" /dev/null > tty.txt 2>&1 \
  || fail "the run on a terminal failed: $(tail -5 tty.txt)"
total=$(q lite.db "SELECT sum(c) FROM (SELECT count(*) AS c FROM s1 $(for i in $(seq 2 40); do printf 'UNION ALL SELECT count(*) FROM s%s ' "$i"; done))")
tr '\r' '\n' < tty.txt | grep -Eq "^.*tables 40/40 +$total rows +[0-9.]+[kM]? rows/s" \
  || fail "no final line with tables 40/40 and $total rows: $(tr '\r' '\n' < tty.txt | grep tables | tail -3)"
pass "sqlite on a terminal: the run's line shows tables done of 40, rows and rate; the last one all $total rows"

# A key-less table (no resume point: its whole copy is one destination transaction, so a
# crash leaves none of it) holds the SQLite file's write lock while it is copied; the other
# lanes wait for it instead of failing "database is locked" after the busy timeout (here
# shortened to 200 ms; every apply slowed by 40 ms, so the copy holds it for over a second).
{
  echo "CREATE TABLE nokey_t (a INTEGER, b TEXT);" # a view: no rowid, no key
  echo "WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g WHERE x < 30000)
        INSERT INTO nokey_t SELECT x % 997, 'r' || x FROM g;"
  echo "CREATE VIEW nokey AS SELECT a, b FROM nokey_t;"
  for i in 1 2 3; do
    echo "CREATE TABLE k$i (id INTEGER PRIMARY KEY, v TEXT);"
    echo "WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g WHERE x < 4000)
          INSERT INTO k$i SELECT x, 'v' || x FROM g;"
  done
} | q held.db
cat > held.yaml <<'EOF'
version: 1
name: held
concurrency: 4
batch: {rows: 1000}
source: {type: sqlite, path: held.db, resources: [{tables: ["k*"]}, {table: nokey}]}
sink: {type: sqlite, path: held_out.db, write: append}
EOF
expect_exit 0 ferry check held.yaml
printf '%s\n' "$OUT" | grep -q '"keyset":"none"' || fail "held: nokey is not read without a key: $OUT"
FERRY_SQLITE_BUSY_MS=200 FERRY_FAILPOINTS='before_sink_apply=sleep(40)' expect_exit 0 ferry run held.yaml
printf '%s\n' "$OUT" | grep -q "4 resources, 4 at once" || fail "held: not 4 at once: $(printf '%s\n' "$OUT" | head -3)"
for t in k1 k2 k3; do same_table held.db held_out.db "$t" || fail "held: $t differs"; done
sums="SELECT count(*) || ':' || count(DISTINCT b) || ':' || sum(a) FROM nokey"
[ "$(q held_out.db "$sums")" = "$(q held.db "$sums")" ] ||
  fail "held: nokey $(q held_out.db "$sums") (count:distinct:sum), source $(q held.db "$sums")"
pass "sqlite: a key-less table's copy holds the file's write lock in one transaction; the other lanes wait for it, not for the busy timeout"

pg_start
pgq >/dev/null <<'SQL'
DO $$
BEGIN
  FOR i IN 1..200 LOOP
    EXECUTE format('CREATE TABLE public.t%s (id int PRIMARY KEY, v text, n numeric(12,2))', lpad(i::text, 3, '0'));
    EXECUTE format('INSERT INTO public.t%s SELECT g, ''v'' || g || repeat(''x'', %s), g * 1.25 FROM generate_series(1, %s) g',
                   lpad(i::text, 3, '0'), i % 7, i % 6);
  END LOOP;
  FOR i IN 1..3 LOOP
    EXECUTE format('CREATE TABLE public.tmp_%s (id int PRIMARY KEY)', i);
    EXECUTE format('INSERT INTO public.tmp_%s VALUES (1)', i);
  END LOOP;
END $$;
CREATE TABLE public.big1 (id bigint PRIMARY KEY, at timestamptz, ok boolean, amount numeric(14,2), note text);
INSERT INTO public.big1 SELECT g, TIMESTAMPTZ '2026-01-01 00:00:00+00' + g * INTERVAL '1 second', g % 3 = 0,
  g * 0.37, CASE WHEN g % 11 = 0 THEN NULL ELSE md5(g::text) END FROM generate_series(1, 100000) g;
CREATE TABLE public.big2 (id int PRIMARY KEY, payload text);
INSERT INTO public.big2 SELECT g, repeat(chr(97 + g % 26), 20 + g % 40) FROM generate_series(1, 60000) g;
CREATE TABLE public.parents (id bigint PRIMARY KEY, name text);
CREATE TABLE public.children (id bigint PRIMARY KEY, parent_id bigint NOT NULL REFERENCES public.parents, v int);
CREATE SEQUENCE public.ids START 1000001;
INSERT INTO public.parents SELECT g, 'p' || g FROM generate_series(1, 30000) g;
INSERT INTO public.children SELECT g, (g + 1) / 2, g FROM generate_series(1, 60000) g;
ANALYZE;
SQL
dest=$(pg_db dest)
dest2=$(pg_db dest2)
dest3=$(pg_db dest3)
export SRC_URL="$FERRY_PG_URL"
for d in dest dest2 dest3; do
  export "${d^^}_URL=postgresql://ferry_admin:$PGPASSWORD@127.0.0.1:$PGPORT/${!d}"
done

# pipeline NAME DEST_ENV : the whole-database pipeline into DEST_ENV's schema copy
pipeline() {
  cat > "$1.yaml" <<EOF
version: 1
name: $1
concurrency: 4
memory: 64MiB
batch: {rows: 5000}
source:
  type: postgres
  url: env:SRC_URL
  resources:
    - tables: ["public.*"]
      exclude: ["public.tmp_*"]
sink: {type: postgres, url: env:$2, schema: copy, write: append}
EOF
}

# digests DB SCHEMA : "table|count:md5 of the rows in text order" for every table of SCHEMA
digests() {
  pgq -d "$1" -c "SELECT c.relname || '|' || (xpath('/row/x/text()', query_to_xml(format(
      'SELECT count(*) || '':'' || md5(coalesce(string_agg(t::text, '','' ORDER BY t::text), '''')) AS x FROM %I.%I t',
      n.nspname, c.relname), false, true, '')))[1]::text
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = '$2' AND c.relkind IN ('r', 'p') AND c.relname NOT LIKE '\_ferry%' ORDER BY 1"
}

# same_as_source DB [SKIP_REGEX] : every source table (tmp_* excluded) equal in DB's copy schema
same_as_source() {
  local skip=${2:-^$}
  digests "$PGDATABASE" public | grep -v '^tmp_' | grep -Ev "$skip" > src.dig || true
  digests "$1" copy | grep -Ev "$skip" > dst.dig || true
  [ "$(wc -l < src.dig)" -ge 200 ] || fail "the source lists only $(wc -l < src.dig) tables"
  diff src.dig dst.dig > dig.diff || fail "$1 differs from the source: $(head -20 dig.diff)"
}

# ---- 1. a clone under a concurrent writer ---------------------------------------------------
pipeline whole DEST_URL
expect_exit 0 ferry check whole.yaml
[ "$(printf '%s\n' "$OUT" | grep -cE '^  [a-z0-9_]+: mode full')" = 204 ] \
  || fail "check does not plan 204 tables: $(printf '%s\n' "$OUT" | grep -c ': mode full')"
printf '%s\n' "$OUT" | grep -q "tmp_" && fail "check plans an excluded table"
touch writing
( while [ -e writing ] && kill -0 $$ 2>/dev/null; do
    echo "WITH p AS (INSERT INTO public.parents VALUES (nextval('public.ids'), 'w') RETURNING id)
          INSERT INTO public.children SELECT nextval('public.ids'), p.id, k FROM p, generate_series(1, 2) k;
          SELECT pg_sleep(0.001);"
  done | pgq >/dev/null ) &
writer=$!
for _ in $(seq 1 200); do
  [ "$(pgq -c 'SELECT count(*) FROM public.parents')" -gt 30000 ] && break
  sleep 0.05
done
[ "$(pgq -c 'SELECT count(*) FROM public.parents')" -gt 30000 ] || fail "the writer never wrote"
expect_exit 0 ferry run whole.yaml
rm -f writing
wait $writer || true
printf '%s\n' "$OUT" | grep -q "204 resources, 4 at once" || fail "the run does not copy 4 tables at once: $(printf '%s\n' "$OUT" | head -3)"
same_as_source "$dest" '^(parents|children)\|'
moved=$(pgq -d "$dest" -c "SELECT count(*) FROM copy.parents WHERE id > 30000")
[ "$(pgq -c "SELECT count(*) FROM public.parents")" -gt "$(pgq -d "$dest" -c "SELECT count(*) FROM copy.parents")" ] \
  || fail "the writer wrote nothing while the run copied: the test shows nothing"
orphans=$(pgq -d "$dest" -c "SELECT count(*) FROM copy.children c LEFT JOIN copy.parents p ON p.id = c.parent_id WHERE p.id IS NULL")
[ "$orphans" = 0 ] || fail "$orphans children in the destination have no parent: the tables were read at different moments"
# each written table is exactly the source up to the moment read (ids grow with commits)
for t in parents children; do
  max=$(pgq -d "$dest" -c "SELECT max(id) FROM copy.$t")
  a=$(pgq -c "SELECT count(*), md5(string_agg(t::text, ',' ORDER BY t::text)) FROM public.$t t WHERE id <= $max")
  b=$(pgq -d "$dest" -c "SELECT count(*), md5(string_agg(t::text, ',' ORDER BY t::text)) FROM copy.$t t")
  [ "$a" = "$b" ] || fail "$t: the destination [$b] is not the source as of one moment [$a]"
done
lastp=$(pgq -d "$dest" -c "SELECT max(id) FROM copy.parents")
[ "$(pgq -c "SELECT count(*) FROM public.children WHERE parent_id <= $lastp")" = \
  "$(pgq -d "$dest" -c "SELECT count(*) FROM copy.children")" ] \
  || fail "children of the copied parents (up to $lastp) are missing or children of later parents were copied: source $(pgq -c "SELECT count(*), max(id) FROM public.children WHERE parent_id <= $lastp"), destination $(pgq -d "$dest" -c "SELECT count(*), max(id), max(parent_id) FROM copy.children")"
pass "204 tables (tmp_* excluded) at concurrency 4 under a writer: each equal, parents and children from one moment, no orphan ($moved parents written during the copy)"

# ---- 2. one table failing does not stop the others ----------------------------------------
pgq -d "$dest2" >/dev/null <<'SQL'
CREATE SCHEMA copy;
CREATE TABLE copy.big2 (id int, payload text, CHECK (id <= 5000));
SQL
pipeline iso DEST2_URL
set +e # on a terminal: the run's live line (tables done of all, rows, percent, ETA)
script -qec "$FERRY_BIN run iso.yaml" /dev/null > iso.tty 2>&1
rc=$?
set -e
tr '\r' '\n' < iso.tty > iso.err
[ $rc != 0 ] || fail "a run with a failed table exits 0"
grep -q "1 of 204 resource(s) failed: big2: " iso.err || fail "the error does not name big2: $(tail -5 iso.err)"
grep -Eq "tables [0-9]+/204 +[0-9]+ rows +[0-9]{1,2}%  ETA [0-9hms]+ .*rows/s" iso.err \
  || fail "no live line with tables done, percent and ETA: $(grep tables iso.err | head -3)"
run=$(ferry runs --pipeline iso --json | jq -r '.[0].id')
"$FERRY_BIN" show "$run" --json > show.json
jq -e '.state == "failed" and ([.resources[] | select(.state == "completed")] | length) == 203
       and ([.resources[] | select(.resource == "big2")][0] | .state == "failed" and (.error | test("big2")))' \
  show.json > /dev/null || fail "ferry show: $(jq -c '{state, resources: [.resources[] | select(.state != "completed") | {resource, state, error}]}' show.json)"
same_as_source "$dest2" '^big2\|'
pass "big2 rejected by the destination: the run failed naming it, the 203 other tables completed and equal"
pgq -d "$dest2" -c "ALTER TABLE copy.big2 DROP CONSTRAINT big2_id_check"
expect_exit 0 ferry run iso.yaml
printf '%s\n' "$OUT" | grep -q "resuming run $run" || fail "the failed run was not resumed: $(printf '%s\n' "$OUT" | head -3)"
copied=$(printf '%s\n' "$OUT" | grep -E '^[a-z0-9_]+: [0-9]+ rows' | grep -vE '^[a-z0-9_]+: 0 rows' | cut -d: -f1 | sort | tr '\n' ' ')
[ "$copied" = "big2 " ] || fail "the resumed run copied rows of other tables than big2: $copied"
same_as_source "$dest2"
pass "resumed after the fix: only big2 moved rows; every table equal, big2 without duplicates"

# ---- 3. the table list is frozen with the run; a planned table dropped since fails alone -----
pipeline frozen DEST3_URL
expect_exit 137 env FERRY_FAILPOINTS='after_sink_apply=crash@8' "$FERRY_BIN" run frozen.yaml
pgq -c "CREATE TABLE public.newcomer (id int PRIMARY KEY); INSERT INTO public.newcomer VALUES (1)"
pgq -c "CREATE TABLE public.gone_soon AS SELECT * FROM public.big1" # keep big1's rows to compare
pgq -c "DROP TABLE public.big1"
set +e
"$FERRY_BIN" run frozen.yaml --json > frozen.json 2> frozen.err
rc=$?
set -e
[ $rc != 0 ] || fail "the resumed run completed although a planned table is gone: $(cat frozen.json)"
[ "$(jq -r .resumed frozen.json)" = true ] || fail "not resumed: $(cat frozen.json)"
grep -q "table big1 was dropped after run [0-9]* planned it" frozen.err || fail "the error does not name big1: $(cat frozen.err)"
[ "$(pgq -d "$dest3" -c "SELECT count(*) FROM pg_tables WHERE schemaname = 'copy' AND tablename IN ('newcomer', 'gone_soon')")" = 0 ] \
  || fail "the resumed attempt copied a table created after the run was planned"
same_as_source "$dest3" '^(big1|newcomer|gone_soon)\|'
pass "killed mid-copy (crash at the 8th batch), resumed: the first attempt's table list (not the new table), the dropped one fails naming it, the others equal"
pgq -c "ALTER TABLE public.gone_soon RENAME TO big1; ALTER TABLE public.big1 ADD PRIMARY KEY (id); DROP TABLE public.newcomer"
expect_exit 0 ferry run frozen.yaml
printf '%s\n' "$OUT" | grep -q "resuming run" || fail "the failed run was not resumed: $(printf '%s\n' "$OUT" | head -3)"
same_as_source "$dest3"
pass "big1 back, the same command again: the run converges, every table equal, none doubled"
