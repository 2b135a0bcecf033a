#!/usr/bin/env bash
# callgrind instruction counts of ferry binaries on postgres -> postgres append (300k rows)
set -euo pipefail
W=$(mktemp -d /tmp/lead/ab/pg.XXXXXX); cd "$W"
trap 'pg_stop >/dev/null 2>&1 || true; cd /; rm -rf "$W"' EXIT
. /work/main/tests/pg/pg.sh
FERRY_PG_TEMPLATE=/tmp/lead/pg-template pg_start >/dev/null
psql -qX -d postgres -c "CREATE DATABASE src" -c "CREATE DATABASE dst" >/dev/null
psql -qX -d src >/dev/null <<SQL
CREATE TABLE public.orders (id bigint PRIMARY KEY, customer_id int NOT NULL, status text NOT NULL,
  amount numeric(12,2) NOT NULL, note text, created_at timestamptz NOT NULL);
INSERT INTO public.orders SELECT g, (g*7)%100000, (ARRAY['new','paid','shipped'])[1+g%3],
  round((g%100000)/100.0, 2), CASE WHEN g%4=0 THEN NULL ELSE 'note '||md5(g::text) END,
  timestamptz '2020-01-01' + g * interval '37 seconds' FROM generate_series(1, ${ROWS:-300000}) g;
VACUUM ANALYZE public.orders;
SQL
psql -qX -d dst -c "CREATE TABLE public.orders (id bigint, customer_id int, status text, amount numeric(12,2), note text, created_at timestamptz)" >/dev/null
for extra in "batch: {bytes: 2MiB}"; do
cat > pg.yaml <<Y
version: 1
name: abpg
source: {type: postgres, url: "postgresql://$PGUSER@127.0.0.1:$PGPORT/src", resources: [{table: public.orders}]}
sink: {type: postgres, url: "postgresql://$PGUSER@127.0.0.1:$PGPORT/dst", write: append}
$extra
Y
for bin in "$@"; do
  psql -qX -d dst -c "TRUNCATE public.orders" -c "DROP SCHEMA IF EXISTS _ferry CASCADE" >/dev/null 2>&1
  rm -f state.db*
  valgrind --tool=callgrind --callgrind-out-file=/tmp/lead/ab/cgpg.$(echo "$bin" | tr / _).${#extra} "$bin" run pg.yaml --quiet --fresh --state state.db > /dev/null 2> vg.err
  [ "$(psql -qXAt -d dst -c 'SELECT count(*) FROM public.orders')" = ${ROWS:-300000} ] || { echo "pg: wrong count" >&2; exit 1; }
  echo "pg [$extra] $bin $(grep -o 'Collected : [0-9]*' vg.err)"
done
done
