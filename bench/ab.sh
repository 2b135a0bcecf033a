#!/usr/bin/env bash
# bench/ab.sh A_BIN B_BIN - interleaved A/B of two ferry binaries under the same load, on
# three pipelines: sample -> null, sample -> sqlite, postgres -> postgres append (a throw-away
# server from bench/lib.sh, the orders table of issue 16's A/B: 6 columns, 25 % NULL notes).
#   MEASURE=wall       wall seconds of every run (default)
#   MEASURE=cpu        wall/CPU seconds (/usr/bin/time: user + system) of every run
#   MEASURE=callgrind  instructions of every thread (valgrind --tool=callgrind, deterministic:
#                      the VM has no hardware counters); one run per binary, no rounds
#   NULL_ROWS SQLITE_ROWS PG_ROWS   rows of each pipeline (default 2000000 300000 300000)
#   FILES="null sqlite pg"          which pipelines; ROUNDS (default 5); ORDER=AB|BA (who goes
#                                   first in a round); EXTRA: a line added to every pipeline
#                                   file (for example "batch: {bytes: 2MiB}")
# Prints the runs of each binary per pipeline, then the load. Never a test, never gates CI.
# The issue-16 figures (bench/results/arch-20261202*.md) came from this script's three
# earlier copies: ab-arch-20261202 (MEASURE=wall, 2M/300k/300k), ab-arch-20261202-quiet
# (wall with 20M/3M/3M, cpu, and callgrind on pg with EXTRA="batch: {bytes: 2MiB}").
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: bench/ab.sh A_BIN B_BIN" >&2; exit 2; }
A=$(readlink -f "$1")
B=$(readlink -f "$2")
FERRY_SRC=$(cd "$(dirname "$0")/.." && pwd)
MEASURE=${MEASURE:-wall}
ROUNDS=${ROUNDS:-5}
NULL_ROWS=${NULL_ROWS:-2000000}
SQLITE_ROWS=${SQLITE_ROWS:-300000}
PG_ROWS=${PG_ROWS:-300000}
case $MEASURE in
  wall | cpu) ;;
  callgrind) ROUNDS=1 ;;
  *) echo "ab.sh: MEASURE is wall, cpu or callgrind, not '$MEASURE'" >&2; exit 2 ;;
esac
W=$(mktemp -d "${TMPDIR:-/tmp}/ferry-ab.XXXXXX")
chmod 755 "$W"
trap 'cd /; rm -rf "$W"' EXIT
cd "$W"
# shellcheck source=lib.sh
. "$FERRY_SRC/bench/lib.sh"

pipeline() { # pipeline NAME SOURCE SINK
  printf 'version: 1\nname: ab%s\nsource: %s\nsink: %s\n%s\n' "$1" "$2" "$3" "${EXTRA:-}" > "$1.yaml"
}
pipeline null "{type: sample, rows: $NULL_ROWS, seed: 42, resources: [{table: orders}]}" \
  "{type: null}"
pipeline sqlite "{type: sample, rows: $SQLITE_ROWS, seed: 42, resources: [{table: orders}]}" \
  "{type: sqlite, path: $W/out.db}"
case " ${FILES:-null sqlite pg} " in
  *" pg "*)
    bench_pg_start
    bench_src_dst
    psql -v ON_ERROR_STOP=1 -qX -d src >/dev/null <<SQL
CREATE TABLE public.orders (id bigint PRIMARY KEY, customer_id int NOT NULL, status text NOT NULL,
  amount numeric(12,2) NOT NULL, note text, created_at timestamptz NOT NULL);
INSERT INTO public.orders SELECT g, (g*7)%100000, (ARRAY['new','paid','shipped'])[1+g%3],
  round((g%100000)/100.0, 2), CASE WHEN g%4=0 THEN NULL ELSE 'note '||md5(g::text) END,
  timestamptz '2020-01-01' + g * interval '37 seconds' FROM generate_series(1, $PG_ROWS) g;
VACUUM ANALYZE public.orders;
SQL
    psql -qX -d dst -c "CREATE TABLE public.orders (id bigint, customer_id int, status text,
      amount numeric(12,2), note text, created_at timestamptz)" >/dev/null
    pipeline pg "{type: postgres, url: \"$BENCH_SRC_URL\", resources: [{table: public.orders}]}" \
      "{type: postgres, url: \"$BENCH_DST_URL\", write: append}"
    ;;
esac

one() { # one BIN NAME -> the run's measure
  rm -f "$W"/out.db* "$W"/state.db*
  if [ "$2" = pg ]; then
    psql -qX -d dst -c "TRUNCATE public.orders" -c "DROP SCHEMA IF EXISTS _ferry CASCADE" \
      >/dev/null 2>&1
  fi
  local run=("$1" run "$2.yaml" --quiet --fresh --state "$W/state.db")
  case $MEASURE in
    wall)
      local s e
      s=$(date +%s.%N)
      "${run[@]}" >/dev/null
      e=$(date +%s.%N)
      awk -v s="$s" -v e="$e" 'BEGIN{printf "%.3f", e-s}' ;;
    cpu)
      /usr/bin/time -f '%e %U %S' -o "$W/t" "${run[@]}" >/dev/null
      awk '{printf "%.2f/%.2f", $1, $2+$3}' "$W/t" ;;
    callgrind)
      valgrind --tool=callgrind --separate-threads=no --callgrind-out-file="$W/cg.out" \
        "${run[@]}" >/dev/null 2>"$W/vg.err"
      grep -o 'Collected : [0-9]*' "$W/vg.err" | awk '{printf "%s", $3}' ;;
  esac
  if [ "$2" = pg ]; then
    local n
    n=$(psql -qXAt -d dst -c 'SELECT count(*) FROM public.orders')
    [ "$n" = "$PG_ROWS" ] || { echo "ab.sh: pg: $n rows arrived, not $PG_ROWS" >&2; exit 1; }
  fi
}

echo "load before: $(uptime)"
for f in ${FILES:-null sqlite pg}; do
  ta=() tb=()
  for _ in $(seq 1 "$ROUNDS"); do
    if [ "${ORDER:-AB}" = BA ]; then
      tb+=("$(one "$B" "$f")")
      ta+=("$(one "$A" "$f")")
    else
      ta+=("$(one "$A" "$f")")
      tb+=("$(one "$B" "$f")")
    fi
  done
  echo "$f A ($A): ${ta[*]}"
  echo "$f B ($B): ${tb[*]}"
done
echo "load after: $(uptime)"
