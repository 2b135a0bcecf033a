#!/usr/bin/env bash
# Interleaved A/B of two Release ferry binaries (A = main 27d5fd3, B = h4/arch) under the
# same load: sample -> null, sample -> sqlite, postgres -> postgres append. Wall seconds of
# every run; the best and the median of each are compared.
set -euo pipefail
A=/tmp/lead/base16/build/bench/ferry
B=/tmp/lead/head16/build/bench/ferry
ROUNDS=${ROUNDS:-5}
W=$(mktemp -d /tmp/lead/ab/w.XXXXXX)
cd "$W"
trap 'pg_stop >/dev/null 2>&1 || true; cd /; rm -rf "$W"' EXIT
cat > null.yaml <<Y
version: 1
name: abnull
source: {type: sample, rows: 20000000, seed: 42, resources: [{table: orders}]}
sink: {type: null}
Y
cat > sqlite.yaml <<Y
version: 1
name: absqlite
source: {type: sample, rows: 3000000, seed: 42, resources: [{table: orders}]}
sink: {type: sqlite, path: $W/out.db}
Y
. /tmp/lead/head16/tests/pg/pg.sh
FERRY_PG_TEMPLATE=/tmp/lead/pg-template pg_start >/dev/null
psql -qX -d postgres -c "CREATE DATABASE src" -c "CREATE DATABASE dst" >/dev/null
psql -qX -d src >/dev/null <<SQL
CREATE TABLE public.orders (id bigint PRIMARY KEY, customer_id int NOT NULL, status text NOT NULL,
  amount numeric(12,2) NOT NULL, note text, created_at timestamptz NOT NULL);
INSERT INTO public.orders SELECT g, (g*7)%100000, (ARRAY['new','paid','shipped'])[1+g%3],
  round((g%100000)/100.0, 2), CASE WHEN g%4=0 THEN NULL ELSE 'note '||md5(g::text) END,
  timestamptz '2020-01-01' + g * interval '37 seconds' FROM generate_series(1, 3000000) g;
VACUUM ANALYZE public.orders;
SQL
psql -qX -d dst -c "CREATE TABLE public.orders (id bigint, customer_id int, status text, amount numeric(12,2), note text, created_at timestamptz)" >/dev/null
cat > pg.yaml <<Y
version: 1
name: abpg
source: {type: postgres, url: "postgresql://$PGUSER@127.0.0.1:$PGPORT/src", resources: [{table: public.orders}]}
sink: {type: postgres, url: "postgresql://$PGUSER@127.0.0.1:$PGPORT/dst", write: append}
Y
one() { # one BIN FILE -> wall seconds
  rm -f "$W"/out.db* "$W"/state.db*
  [ "$2" = pg.yaml ] && psql -qX -d dst -c "TRUNCATE public.orders" -c "DROP SCHEMA IF EXISTS _ferry CASCADE" >/dev/null 2>&1
  local s e
  s=$(date +%s.%N)
  "$1" run "$2" --quiet --fresh --state "$W/state.db" > /dev/null
  e=$(date +%s.%N)
  if [ "$2" = pg.yaml ]; then
    [ "$(psql -qXAt -d dst -c 'SELECT count(*) FROM public.orders')" = 3000000 ] || { echo "pg: wrong count" >&2; exit 1; }
  fi
  awk -v s="$s" -v e="$e" 'BEGIN{printf "%.3f", e-s}'
}
echo "load before: $(uptime)"
for f in ${FILES:-null.yaml sqlite.yaml pg.yaml}; do
  ta=() tb=()
  for r in $(seq 1 "$ROUNDS"); do
    if [ "${ORDER:-AB}" = BA ]; then
      tb+=("$(one "$B" "$f")")
      ta+=("$(one "$A" "$f")")
    else
      ta+=("$(one "$A" "$f")")
      tb+=("$(one "$B" "$f")")
    fi
  done
  echo "$f A(main): ${ta[*]}"
  echo "$f B(branch): ${tb[*]}"
done
echo "load after: $(uptime)"
