#!/usr/bin/env bash
# Allocation calls on the PostgreSQL read paths (issue 22, "no per-row allocation on the COPY
# paths"): one throw-away server, a 200,000-row table; under heaptrack (apt-get install
# heaptrack) a full copy into SQLite, and a bounded cdc run replaying N single-row UPDATE
# transactions. Prints the total allocation calls of each run and the allocation sites of
# libpq called from ferry's reader threads (heaptrack_print). Never gates CI.
#   N=20000 [FERRY=path/to/ferry] bash bench/pg_alloc.sh
set -euo pipefail
cd "$(dirname "$0")/.."
FERRY_SRC=$PWD
N=${N:-20000}
command -v heaptrack >/dev/null || { echo "pg_alloc.sh: needs heaptrack" >&2; exit 1; }
if [ -z "${FERRY:-}" ]; then
  cmake -S . -B build/bench -DCMAKE_BUILD_TYPE=Release -DFERRY_WERROR=ON >/dev/null
  cmake --build build/bench -j"$(nproc 2>/dev/null || echo 2)" --target ferry >/dev/null
  FERRY=$FERRY_SRC/build/bench/ferry
fi
W=$(mktemp -d "${TMPDIR:-/tmp}/ferry-allocbench.XXXXXX")
chmod 755 "$W"
trap 'rm -rf "$W"' EXIT
# shellcheck source=../tests/pg/pg.sh
. "$FERRY_SRC/tests/pg/pg.sh"
pg_start
cd "$W"
export SRC_URL="$FERRY_PG_URL"
psql -qX -v ON_ERROR_STOP=1 >/dev/null <<SQL
CREATE TABLE c1 (id int PRIMARY KEY, v text);
INSERT INTO c1 SELECT g, 'v' || g FROM generate_series(1, 200000) g;
SQL
for m in cdc full; do
  cat > $m.yaml <<Y
version: 1
name: $m
source: {type: postgres, url: env:SRC_URL, resources: [{table: c1, mode: $m}]}
sink: {type: sqlite, path: $W/$m.db, write: $([ $m = cdc ] && echo merge || echo append)}
Y
done
"$FERRY" run cdc.yaml --state "$W/s.db" >/dev/null
psql -qX >/dev/null <<SQL
DO \$\$ BEGIN FOR i IN 1..$N LOOP UPDATE c1 SET v = v || '.' WHERE id = i; COMMIT; END LOOP; END \$\$;
SQL
heaptrack -o "$W/cdc" "$FERRY" run cdc.yaml --state "$W/s.db" >/dev/null 2>&1
heaptrack -o "$W/full" "$FERRY" run full.yaml --state "$W/s2.db" >/dev/null 2>&1
for h in full cdc; do
  echo "== $h: $( [ $h = full ] && echo "copy of 200000 rows" || echo "$N single-row transactions streamed")"
  heaptrack_print -f "$W"/$h.*zst 2>/dev/null | grep -E "^calls to allocation functions" || true
  # each allocation site in libpq, and the ferry function its most frequent calls came from
  heaptrack_print -f "$W"/$h.*zst -p 0 -a 1 -n 40 -s 1 2>/dev/null |
    awk '/calls to allocation functions with/ { n = $1; getline; getline;
           if ($0 ~ /libpq/) { getline; c = $1; getline;
             print "  libpq allocation site: " n " calls, " c " of them from " $1 } }' || true
done
