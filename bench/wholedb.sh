#!/usr/bin/env bash
# Whole-database copy benchmark (issue 17): one throw-away PostgreSQL server (tests/pg/pg.sh)
# with a database `src` of TABLES small tables (0-50 rows each) and BIG larger ones (BIG_ROWS
# rows each, mixed types), then on the same data in one run:
#   a. ferry: one pipeline `tables: [public.*]`, `concurrency: JOBS`, postgres -> postgres,
#      append (integrity digests on), into tables ferry creates itself
#   b. pgcopydb copy table-data --table-jobs JOBS (into tables created beforehand from
#      `pg_dump --schema-only`: table-data copies rows only)
#   c. pg_dump -Fd -j JOBS, then pg_restore -j JOBS into an empty database (schema, data,
#      indexes and constraints: more work than a and b; shown for context)
# with wall time, rows/s, the ratio to pgcopydb and the clients' peak RSS (/usr/bin/time %M;
# server backends not counted). Every destination is checked table by table (count and md5
# of the rows in text order equal the source's, else the row says WRONG).
# Prints a markdown table and writes bench/results/wholedb-<date>-<tables>t.md. Never gates CI.
#   TABLES=200 BIG=4 BIG_ROWS=100000 JOBS=4 bash bench/wholedb.sh
#   FERRY_BIN=path uses that binary instead of building a Release one in build/bench.
#   NOTE="..." adds a line to the results (e.g. the machine was shared).
set -euo pipefail
cd "$(dirname "$0")/.."
FERRY_SRC=$PWD
TABLES=${TABLES:-200}
BIG=${BIG:-4}
BIG_ROWS=${BIG_ROWS:-100000}
JOBS=${JOBS:-4}
NOTE=${NOTE:-}

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
pg_start
cd "$W"
for d in src d_ferry d_pgcopydb d_dump; do
  psql -v ON_ERROR_STOP=1 -qX -d postgres -c "CREATE DATABASE $d" >/dev/null
done
url() { echo "postgresql://$PGUSER:$PGPASSWORD@127.0.0.1:$PGPORT/$1"; }
export SRC_URL DST_URL
SRC_URL=$(url src)
DST_URL=$(url d_ferry)
qs() { psql -v ON_ERROR_STOP=1 -qXAt -d src "$@"; }

echo "generating $TABLES small tables and $BIG of $BIG_ROWS rows in src..." >&2
qs >/dev/null <<SQL
DO \$\$
BEGIN
  FOR i IN 1..$TABLES LOOP
    EXECUTE format('CREATE TABLE public.s%s (id int PRIMARY KEY, v text, n numeric(12,2), at timestamptz)', i);
    EXECUTE format('INSERT INTO public.s%s SELECT g, md5(g::text), g * 1.5, timestamptz ''2026-01-01 00:00+00'' + g * interval ''1 min''
                    FROM generate_series(1, %s) g', i, i % 51);
  END LOOP;
  FOR i IN 1..$BIG LOOP
    EXECUTE format('CREATE TABLE public.big%s (id bigint PRIMARY KEY, customer int NOT NULL, status text NOT NULL,
                    amount numeric(12,2), paid bool, note text, created_at timestamptz NOT NULL)', i);
    EXECUTE format('INSERT INTO public.big%s SELECT g, (hashint8(g) & 1048575)::int, (ARRAY[''new'',''paid'',''shipped''])[1 + g %% 3],
                    round(((hashint8(g + 1) & 16777215) / 100.0)::numeric, 2), g %% 3 = 0,
                    CASE WHEN g %% 4 = 0 THEN NULL ELSE ''note '' || substr(md5(g::text), 1, 8 + (g %% 24)::int) END,
                    timestamptz ''2020-01-01 00:00:00+00'' + g * interval ''37 seconds''
                    FROM generate_series(1, %s) g', i, $BIG_ROWS);
  END LOOP;
END \$\$;
VACUUM ANALYZE;
SQL
total_rows=$(qs -c "SELECT sum(n_live_tup) FROM pg_stat_user_tables WHERE schemaname = 'public'")
src_bytes=$(qs -c "SELECT pg_database_size('src')")
pg_dump --schema-only -d src | psql -qX -v ON_ERROR_STOP=1 -d d_pgcopydb >/dev/null

# digests DB SCHEMA -> "table|count:md5" per table
digests() {
  psql -qXAt -d "$1" -c "SELECT c.relname || '|' || (xpath('/row/x/text()', query_to_xml(format(
      'SELECT count(*) || '':'' || md5(coalesce(string_agg(t::text, '','' ORDER BY t::text), '''')) AS x FROM %I.%I t',
      n.nspname, c.relname), false, true, '')))[1]::text
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = '$2' AND c.relkind = 'r' ORDER BY 1"
}
digests src public > src.dig
check() { # check DB SCHEMA -> ok | WRONG
  digests "$1" "$2" > got.dig
  if diff -q src.dig got.dig >/dev/null; then echo ok; else echo "WRONG ($(diff src.dig got.dig | grep -c '^>') tables differ)"; fi
}
now() { date +%s.%N; }
rss() { tail -n1 "$1" | awk '{print $1}'; }

cat > whole.yaml <<YAML
version: 1
name: whole
concurrency: $JOBS
source:
  type: postgres
  url: env:SRC_URL
  resources:
    - tables: ["public.*"]
sink: {type: postgres, url: env:DST_URL, schema: public, write: append}
YAML
echo "a. ferry..." >&2
t0=$(now)
/usr/bin/time -f '%M' -o rss_ferry "$FERRY_BIN" run whole.yaml --quiet --json --state "$W/state.db" > ferry.json 2> ferry.err \
  || { echo "ferry failed: $(cat ferry.err)" >&2; exit 1; }
t_ferry=$(printf '%.2f' "$(echo "$(now) - $t0" | bc)")
ok_ferry=$(check d_ferry public)

echo "b. pgcopydb..." >&2
t0=$(now)
/usr/bin/time -f '%M' -o rss_pgcopydb pgcopydb copy table-data --source "$SRC_URL" --target "$(url d_pgcopydb)" \
  --dir "$W/pgcopydb" --table-jobs "$JOBS" > pgcopydb.log 2>&1 || { echo "pgcopydb failed: $(tail -3 pgcopydb.log)" >&2; exit 1; }
t_pgcopydb=$(printf '%.2f' "$(echo "$(now) - $t0" | bc)")
ok_pgcopydb=$(check d_pgcopydb public)

echo "c. pg_dump | pg_restore..." >&2
t0=$(now)
/usr/bin/time -f '%M' -o rss_dump pg_dump -Fd -j "$JOBS" -f "$W/dump" -d src
/usr/bin/time -f '%M' -o rss_restore pg_restore -j "$JOBS" -d d_dump "$W/dump"
t_dump=$(printf '%.2f' "$(echo "$(now) - $t0" | bc)")
ok_dump=$(check d_dump public)

rate() { echo "scale=0; $total_rows / $1" | bc; }
ratio() { printf '%.2f' "$(echo "scale=4; $1 / $t_pgcopydb" | bc)"; }
out=$FERRY_SRC/bench/results/wholedb-$(date -u +%Y%m%d)-${TABLES}t.md
{
  echo "# Whole-database copy: $((TABLES + BIG)) tables, $total_rows rows ($((src_bytes / 1048576)) MiB database), $JOBS jobs"
  echo
  echo "ferry $(git -C "$FERRY_SRC" rev-parse --short HEAD 2>/dev/null || echo '?'), $(date -u +%Y-%m-%d), $(nproc) cores, load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)."
  [ -n "$NOTE" ] && { echo; echo "$NOTE"; }
  echo
  echo "| tool | seconds | rows/s | × pgcopydb | peak RSS (MiB) | destination |"
  echo "|---|---|---|---|---|---|"
  echo "| ferry, concurrency $JOBS | $t_ferry | $(rate "$t_ferry") | $(ratio "$t_ferry") | $(( $(rss rss_ferry) / 1024 )) | $ok_ferry |"
  echo "| pgcopydb copy table-data --table-jobs $JOBS | $t_pgcopydb | $(rate "$t_pgcopydb") | 1.00 | $(( $(rss rss_pgcopydb) / 1024 )) | $ok_pgcopydb |"
  echo "| pg_dump -Fd -j $JOBS + pg_restore -j $JOBS | $t_dump | $(rate "$t_dump") | $(ratio "$t_dump") | $(( $(rss rss_dump) / 1024 )) / $(( $(rss rss_restore) / 1024 )) | $ok_dump |"
  echo
  echo "Sizes: $TABLES tables of 0-50 rows, $BIG of $BIG_ROWS rows. pgcopydb copies rows only into"
  echo "tables made beforehand (schema-only dump, untimed); pg_restore also builds indexes and"
  echo "constraints. ferry creates its tables (no keys) and computes and checks a digest of every batch."
} | tee "$out"
