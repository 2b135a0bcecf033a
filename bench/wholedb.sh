#!/usr/bin/env bash
# Whole-database copy benchmark (issue 17): one throw-away PostgreSQL server (tests/pg/pg.sh,
# fsync and synchronous_commit ON unless FSYNC=off) with a database `src` of TABLES small
# tables (0-50 rows each) and BIG larger ones (BIG_ROWS rows each, mixed types, disjoint ids),
# then on the same data in one run, one tool after the other:
#   p. the anchor: ONE binary COPY pipe (psql COPY … TO STDOUT (FORMAT binary) | psql COPY …
#      FROM STDIN (FORMAT binary)) moving the big tables' rows as a single table
#      (`single.all_rows` in src, made from the big tables; the small tables' rows, 0-50 per
#      table, are not in it) into a table without keys
#   a. ferry: one pipeline `tables: [public.*]`, `concurrency: JOBS`, postgres -> postgres,
#      append (integrity digests on), into tables ferry creates itself
#   a1. ferry on `single.all_rows` alone (the same rows as p, one table): per-table overhead
#   b. pgcopydb copy table-data --table-jobs JOBS (into tables created beforehand from
#      `pg_dump --schema-only`: table-data copies rows only)
#   c. pgcopydb clone --table-jobs JOBS --index-jobs JOBS into an empty database (schema,
#      data, then indexes and constraints)
#   d. pg_dump -Fd -j JOBS, then pg_restore -j JOBS into an empty database (schema, data,
#      indexes and constraints: more work than a and b; shown for context)
# with wall time, rows/s, the ratios to pgcopydb table-data and to the pipe, the clients'
# peak RSS and CPU (/usr/bin/time %M %U %S; server backends not counted). Every destination
# is checked table by table: row count and an order-independent digest of the rows (sum of
# the first 64 bits of md5(row::text)) equal the source's, else the row says WRONG. Each
# destination database is dropped once checked (disk). Load average recorded at the start
# and end of every step.
# Prints a markdown table and writes bench/results/wholedb-<date>-<tables>t[-<MiB>MiB].md.
# Never gates CI.
#   TABLES=200 BIG=8 BIG_ROWS=2000000 JOBS=4 bash bench/wholedb.sh
#   FERRY_BIN=path uses that binary instead of building a Release one in build/bench.
#   NOTE="..." adds a line to the results (e.g. the machine was shared). OUT=name.md.
set -euo pipefail
cd "$(dirname "$0")/.."
FERRY_SRC=$PWD
TABLES=${TABLES:-200}
BIG=${BIG:-4}
BIG_ROWS=${BIG_ROWS:-100000}
JOBS=${JOBS:-4}
NOTE=${NOTE:-}
FSYNC=${FSYNC:-on}

need=()
for p in postgresql pgcopydb time jq bc; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ "${#need[@]}" -gt 0 ]; then
  echo "installing: ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

if [ -z "${FERRY_BIN:-}" ]; then
  cmake -S . -B build/bench -DCMAKE_BUILD_TYPE=Release -DFERRY_WERROR=ON >/dev/null
  cmake --build build/bench -j"$(nproc 2>/dev/null || echo 2)" --target ferry >/dev/null
  FERRY_BIN=$FERRY_SRC/build/bench/ferry
fi

W=$(mktemp -d "${TMPDIR:-/tmp}/ferry-wholedb.XXXXXX")
chmod 755 "$W"
trap 'rm -rf "$W"' EXIT
# shellcheck source=../tests/pg/pg.sh
. "$FERRY_SRC/tests/pg/pg.sh"
if [ "$FSYNC" = on ]; then
  PG_CONF_EXTRA="fsync = on
synchronous_commit = on
max_wal_size = 4GB" pg_start
else
  PG_CONF_EXTRA="max_wal_size = 4GB" pg_start
fi
cd "$W"
for d in src d_ferry d_ferry1 d_pgcopydb d_clone d_dump d_pipe; do
  psql -v ON_ERROR_STOP=1 -qX -d postgres -c "CREATE DATABASE $d" >/dev/null
done
url() { echo "postgresql://$PGUSER:$PGPASSWORD@127.0.0.1:$PGPORT/$1"; }
export SRC_URL DST_URL
SRC_URL=$(url src)
qs() { psql -v ON_ERROR_STOP=1 -qXAt -d src "$@"; }
load() { cut -d' ' -f1-3 /proc/loadavg; }
load_start=$(load)

echo "generating $TABLES small tables and $BIG of $BIG_ROWS rows in src... (load $(load))" >&2
qs >/dev/null <<SQL
DO \$\$
BEGIN
  FOR i IN 1..$TABLES LOOP
    EXECUTE format('CREATE TABLE public.s%s (id int PRIMARY KEY, v text, n numeric(12,2), at timestamptz)', i);
    EXECUTE format('INSERT INTO public.s%s SELECT g, md5(g::text), g * 1.5, timestamptz ''2026-01-01 00:00+00'' + g * interval ''1 min''
                    FROM generate_series(1, %s) g', i, i % 51);
  END LOOP;
END \$\$;
SQL
for i in $(seq 1 "$BIG"); do
  qs >/dev/null <<SQL
CREATE TABLE public.big$i (id bigint PRIMARY KEY, customer int NOT NULL, status text NOT NULL,
  amount numeric(12,2), paid bool, note text, created_at timestamptz NOT NULL);
INSERT INTO public.big$i SELECT g, (hashint8(g) & 1048575)::int, (ARRAY['new','paid','shipped'])[1 + g % 3],
  round(((hashint8(g + 1) & 16777215) / 100.0)::numeric, 2), g % 3 = 0,
  CASE WHEN g % 4 = 0 THEN NULL ELSE 'note ' || substr(md5(g::text), 1, 8 + (g % 24)::int) END,
  timestamptz '2020-01-01 00:00:00+00' + g * interval '37 seconds'
  FROM generate_series($(( (i - 1) * BIG_ROWS + 1 )), $(( i * BIG_ROWS ))) g;
SQL
done
qs -c "VACUUM ANALYZE" >/dev/null
total_rows=$(qs -c "SELECT sum(n_live_tup) FROM pg_stat_user_tables WHERE schemaname = 'public'")
src_bytes=$(qs -c "SELECT pg_database_size('src')")
heap_bytes=$(qs -c "SELECT sum(pg_table_size(c.oid)) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND c.relkind = 'r'")
# The single-table anchor: the big tables' rows in one table (not in public: not selected by
# the pattern; not counted in src_bytes, measured before).
qs >/dev/null <<SQL
CREATE SCHEMA single;
CREATE TABLE single.all_rows (LIKE public.big1 INCLUDING ALL);
$(for i in $(seq 1 "$BIG"); do echo "INSERT INTO single.all_rows SELECT * FROM public.big$i;"; done)
VACUUM ANALYZE single.all_rows;
SQL
single_rows=$(qs -c "SELECT count(*) FROM single.all_rows")
pg_dump --schema-only -N single -d src | psql -qX -v ON_ERROR_STOP=1 -d d_pgcopydb >/dev/null
psql -v ON_ERROR_STOP=1 -qX -d d_pipe -c "CREATE TABLE public.all_rows (id bigint NOT NULL, customer int NOT NULL,
  status text NOT NULL, amount numeric(12,2), paid bool, note text, created_at timestamptz NOT NULL)" >/dev/null

# digests DB SCHEMA -> "table|count:sum" per table (order-independent, no huge strings)
digests() {
  psql -qXAt -d "$1" -c "SELECT c.relname || '|' || (xpath('/row/x/text()', query_to_xml(format(
      'SELECT count(*) || '':'' || coalesce(sum((''x'' || substr(md5(t::text), 1, 16))::bit(64)::bigint::numeric), 0) AS x FROM %I.%I t',
      n.nspname, c.relname), false, true, '')))[1]::text
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = '$2' AND c.relkind = 'r' ORDER BY 1"
}
echo "digesting the source... (load $(load))" >&2
digests src public > src.dig
digests src single > single.dig
check() { # check DB SCHEMA EXPECTED -> ok | WRONG ...
  digests "$1" "$2" > got.dig
  if diff -q "$3" got.dig >/dev/null; then echo ok; else echo "WRONG ($(diff "$3" got.dig | grep -c '^>') tables differ)"; fi
  psql -qX -d postgres -c "DROP DATABASE $1" >/dev/null
}
now() { date +%s.%N; }
since() { printf '%.2f' "$(echo "$(now) - $1" | bc)"; }
# tm FILE -> "MiB cpu_s" from /usr/bin/time -f '%M %U %S'
tm() { tail -n1 "$1" | awk '{printf "%d %.1f\n", $1 / 1024, $2 + $3}'; }
declare -A T R C OK L

pipeline() { # pipeline NAME DB RESOURCE-LINES
  cat > "$1.yaml" <<YAML
version: 1
name: $1
concurrency: $JOBS
source:
  type: postgres
  url: env:SRC_URL
  resources:
$3
sink: {type: postgres, url: env:DST_URL, schema: public, write: append}
YAML
}

step_pipe() {
  echo "p. COPY pipe... (load $(load))" >&2
  local t0; t0=$(now)
  /usr/bin/time -f '%M %U %S' -o rss_out psql -qX -d src -c "COPY single.all_rows TO STDOUT (FORMAT binary)" |
    /usr/bin/time -f '%M %U %S' -o rss_in psql -qX -v ON_ERROR_STOP=1 -d d_pipe -c "COPY public.all_rows FROM STDIN (FORMAT binary)" >/dev/null
  T[pipe]=$(since "$t0")
  read -r r1 c1 < <(tm rss_out); read -r r2 c2 < <(tm rss_in)
  R[pipe]="$r1 + $r2"; C[pipe]="$c1 + $c2"; L[pipe]=$(load)
  OK[pipe]=$(check d_pipe public single.dig)
}
step_ferry() {
  echo "a. ferry... (load $(load))" >&2
  pipeline whole d_ferry '    - tables: ["public.*"]'
  DST_URL=$(url d_ferry)
  local t0; t0=$(now)
  /usr/bin/time -f '%M %U %S' -o rss_ferry "$FERRY_BIN" run whole.yaml --quiet --json --state "$W/state.db" > ferry.json 2> ferry.err \
    || { echo "ferry failed: $(cat ferry.err)" >&2; exit 1; }
  T[ferry]=$(since "$t0")
  read -r R[ferry] C[ferry] < <(tm rss_ferry); L[ferry]=$(load)
  OK[ferry]=$(check d_ferry public src.dig)
}
step_ferry1() {
  echo "a1. ferry, one table... (load $(load))" >&2
  pipeline one d_ferry1 '    - {table: single.all_rows}'
  DST_URL=$(url d_ferry1)
  local t0; t0=$(now)
  /usr/bin/time -f '%M %U %S' -o rss_ferry1 "$FERRY_BIN" run one.yaml --quiet --json --state "$W/state1.db" > ferry1.json 2> ferry1.err \
    || { echo "ferry (one table) failed: $(cat ferry1.err)" >&2; exit 1; }
  T[ferry1]=$(since "$t0")
  read -r R[ferry1] C[ferry1] < <(tm rss_ferry1); L[ferry1]=$(load)
  OK[ferry1]=$(check d_ferry1 public single.dig)
}
step_pgcopydb() {
  echo "b. pgcopydb copy table-data... (load $(load))" >&2
  local t0; t0=$(now)
  /usr/bin/time -f '%M %U %S' -o rss_pgcopydb pgcopydb copy table-data --source "$SRC_URL" --target "$(url d_pgcopydb)" \
    --dir "$W/pgcopydb" --table-jobs "$JOBS" --filters "$W/filters.ini" > pgcopydb.log 2>&1 || { echo "pgcopydb failed: $(tail -3 pgcopydb.log)" >&2; exit 1; }
  T[pgcopydb]=$(since "$t0")
  read -r R[pgcopydb] C[pgcopydb] < <(tm rss_pgcopydb); L[pgcopydb]=$(load)
  OK[pgcopydb]=$(check d_pgcopydb public src.dig)
}
step_clone() {
  echo "c. pgcopydb clone... (load $(load))" >&2
  local t0; t0=$(now)
  /usr/bin/time -f '%M %U %S' -o rss_clone pgcopydb clone --source "$SRC_URL" --target "$(url d_clone)" \
    --dir "$W/clone" --table-jobs "$JOBS" --index-jobs "$JOBS" --filters "$W/filters.ini" --no-owner --no-acl \
    > clone.log 2>&1 || { echo "pgcopydb clone failed: $(grep -E 'ERROR|FATAL' clone.log | head -3)" >&2; exit 1; }
  T[clone]=$(since "$t0")
  read -r R[clone] C[clone] < <(tm rss_clone); L[clone]=$(load)
  OK[clone]=$(check d_clone public src.dig)
}
step_dump() {
  echo "d. pg_dump | pg_restore... (load $(load))" >&2
  local t0; t0=$(now)
  /usr/bin/time -f '%M %U %S' -o rss_dump pg_dump -Fd -j "$JOBS" -N single -f "$W/dump" -d src
  /usr/bin/time -f '%M %U %S' -o rss_restore pg_restore -j "$JOBS" -d d_dump "$W/dump"
  T[dump]=$(since "$t0")
  rm -rf "$W/dump"
  read -r r1 c1 < <(tm rss_dump); read -r r2 c2 < <(tm rss_restore)
  R[dump]="$r1 / $r2"; C[dump]="$c1 + $c2"; L[dump]=$(load)
  OK[dump]=$(check d_dump public src.dig)
}
# pgcopydb: leave the anchor's schema out (it is not part of the database being compared).
printf '[exclude-schema]\nsingle\n' > "$W/filters.ini"

STEPS=${STEPS:-pipe ferry ferry1 pgcopydb clone dump}
for s in $STEPS; do "step_$s"; done

rate() { echo "scale=0; $1 / $2" | bc; }
ratio() { [ -n "${T[$2]:-}" ] && printf '%.2f' "$(echo "scale=4; $1 / ${T[$2]}" | bc)" || echo -; }
row() { # row KEY LABEL ROWS
  [ -n "${T[$1]:-}" ] || return 0
  echo "| $2 | ${T[$1]} | $(rate "$3" "${T[$1]}") | $(ratio "${T[$1]}" pgcopydb) | $(ratio "${T[$1]}" pipe) | ${R[$1]} | ${C[$1]} | ${L[$1]} | ${OK[$1]} |"
}
mib=$((src_bytes / 1048576))
out=$FERRY_SRC/bench/results/${OUT:-wholedb-$(date -u +%Y%m%d)-${TABLES}t-${mib}MiB.md}
{
  echo "# Whole-database copy: $((TABLES + BIG)) tables, $total_rows rows ($mib MiB database, $((heap_bytes / 1048576)) MiB of table data), $JOBS jobs"
  echo
  echo "ferry $(git -C "$FERRY_SRC" rev-parse --short HEAD 2>/dev/null || echo '?'), PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}') (fsync $FSYNC), $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores shared with other work."
  echo "Load average (1/5/15 min) at the start: $load_start; at the end: $(load); per step below (at the step's end)."
  [ -n "$NOTE" ] && { echo; echo "$NOTE"; }
  echo
  echo "| tool | seconds | rows/s | × pgcopydb table-data | × COPY pipe | client peak RSS (MiB) | client CPU (s) | load at end | destination |"
  echo "|---|---|---|---|---|---|---|---|---|"
  row pipe "one binary COPY pipe, the big tables' rows as one table ($single_rows rows)" "$single_rows"
  row ferry "ferry \`tables: [public.*]\`, concurrency $JOBS" "$total_rows"
  row ferry1 "ferry, the pipe's single table ($single_rows rows)" "$single_rows"
  row pgcopydb "pgcopydb copy table-data --table-jobs $JOBS" "$total_rows"
  row clone "pgcopydb clone --table-jobs $JOBS --index-jobs $JOBS" "$total_rows"
  row dump "pg_dump -Fd -j $JOBS + pg_restore -j $JOBS" "$total_rows"
  echo
  echo "Sizes: $TABLES tables of 0-50 rows, $BIG of $BIG_ROWS rows (bigint key, int, text, numeric(12,2),"
  echo "bool, text with 25% NULL, timestamptz). ferry creates its tables (no keys) and computes and"
  echo "checks a digest of every batch, default durability (per batch) and \`memory:\` (256 MiB)."
  echo "pgcopydb table-data copies rows only into tables made beforehand (schema-only dump, untimed);"
  echo "pgcopydb clone and pg_restore also create the schema and build the primary keys afterwards."
  echo "The pipe's row count leaves out the small tables' rows ($((total_rows - single_rows)))."
  echo "Peak RSS and CPU are the client processes' (/usr/bin/time; for the pipe and pg_dump/restore,"
  echo "both processes); server backends are not counted. Every destination was checked table by"
  echo "table against the source (count and a digest of every row's text)."
} | tee "$out"
