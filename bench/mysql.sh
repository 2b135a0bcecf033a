#!/usr/bin/env bash
# MySQL/MariaDB → PostgreSQL benchmark (issue 18): one throw-away MariaDB (tests/mysql/mysql.sh)
# and one PostgreSQL (tests/pg/pg.sh); a ROWS-row orders-like table made with MariaDB's
# sequence engine; then, on the same data in one run, best of REPS wall times for
#   a. the text pipe: mariadb --quick --batch -e 'SELECT …' | psql -c "COPY … FROM STDIN"
#   b. ferry mysql → postgres, write: append (integrity digest on)
#   c. pgloader (MySQL source), when it runs here (its error is recorded when it fails)
# with rows/s, the clients' peak RSS (/usr/bin/time %M; the pipe's two processes both) and the
# ratio to the pipe. Every destination is checked after its tool's last run: row count and md5
# over the rows in key order equal the source's, else the row says WRONG.
# Prints a markdown table and writes it to bench/results/mysql-<date>.md. Never gates CI.
#   ROWS=5000000 REPS=3 bash bench/mysql.sh
#   FERRY_BIN=build/dev/ferry skips the Release build (the results say so).
set -euo pipefail
cd "$(dirname "$0")/.."
FERRY_SRC=$PWD
ROWS=${ROWS:-5000000}
REPS=${REPS:-3}
jobs=$(nproc 2>/dev/null || echo 2)

for p in time jq; do
  command -v "$p" >/dev/null || [ -x /usr/bin/time ] || { echo "mysql.sh: needs $p" >&2; exit 1; }
done

build_note="Release (-O3)"
if [ -z "${FERRY_BIN:-}" ]; then
  cmake -S . -B build/bench -DCMAKE_BUILD_TYPE=Release -DFERRY_WERROR=OFF >/dev/null
  cmake --build build/bench -j"$jobs" --target ferry >/dev/null
  FERRY_BIN=$PWD/build/bench/ferry
else
  build_note="given binary $FERRY_BIN"
fi

T=$(mktemp -d "${TMPDIR:-/tmp}/ferry-mybench.XXXXXX")
chmod 755 "$T"
trap 'rm -rf "$T"' EXIT
. tests/mysql/mysql.sh
. tests/pg/pg.sh
my_start
pg_start
pgq() { psql -v ON_ERROR_STOP=1 -qXAt "$@"; }

echo "making $ROWS rows in MariaDB..." >&2
myq <<SQL
CREATE TABLE orders (id bigint PRIMARY KEY, customer_id int NOT NULL, status varchar(16) NOT NULL,
  quantity int NOT NULL, amount decimal(12,2) NOT NULL, note varchar(200), created_at datetime(6) NOT NULL);
INSERT INTO orders SELECT seq, seq % 100000, ELT(1 + seq % 4, 'new', 'paid', 'shipped', 'returned'),
  1 + seq % 9, (seq % 100000) / 100, IF(seq % 5 = 0, NULL, CONCAT('note ', MD5(seq))),
  '2024-01-01' + INTERVAL seq SECOND FROM seq_1_to_$ROWS;
ANALYZE TABLE orders;
SQL
DDL="id bigint PRIMARY KEY, customer_id int NOT NULL, status text NOT NULL, quantity int NOT NULL,
     amount numeric(12,2) NOT NULL, note text, created_at timestamp NOT NULL"
src_md5=$(myq -e "SELECT CONCAT_WS('|', id, customer_id, status, quantity, amount, COALESCE(note, 'NULL'),
  DATE_FORMAT(created_at, '%Y-%m-%d %H:%i:%s')) FROM orders ORDER BY id" | md5sum | cut -d' ' -f1)
check() { # TABLE -> ok | WRONG
  local n m
  n=$(pgq -c "SELECT count(*) FROM $1")
  m=$(pgq -c "SELECT concat_ws('|', id, customer_id, status, quantity, amount, coalesce(note, 'NULL'),
       to_char(created_at, 'YYYY-MM-DD HH24:MI:SS')) FROM $1 ORDER BY id" | md5sum | cut -d' ' -f1)
  if [ "$n" = "$ROWS" ] && [ "$m" = "$src_md5" ]; then echo ok; else echo "WRONG ($n rows)"; fi
}
best() { sort -n | head -1; }
measure() { # LABEL TABLE CMD... : best wall time and peak RSS of REPS runs
  local label=$1 table=$2; shift 2
  local times=() rss=0 r
  for r in $(seq 1 "$REPS"); do
    pgq -c "DROP TABLE IF EXISTS $table; CREATE TABLE $table ($DDL)" >/dev/null
    local t0 t1
    t0=$(date +%s.%N)
    if ! /usr/bin/time -f '%M' -o "$T/rss" bash -c "$*" >"$T/out" 2>"$T/err"; then
      printf '%s\tfailed: %s\t\t\n' "$label" "$(tail -c 200 "$T/err" | tr '\n|' '  ')"
      return
    fi
    t1=$(date +%s.%N)
    times+=("$(echo "$t1 - $t0" | bc)")
    local m
    m=$(tail -n1 "$T/rss")
    [ "$m" -gt "$rss" ] && rss=$m
  done
  local t
  t=$(printf '%s\n' "${times[@]}" | best)
  printf '%s\t%s\t%s\t%s\n' "$label" "$t" "$rss" "$(check "$table")"
}

pipe() {
  mariadb --no-defaults --default-character-set=utf8mb4 -S "$MY_SOCK" -uroot --quick --batch -N \
    --raw ferry -e "SELECT id, customer_id, status, quantity, amount, COALESCE(note, '\\\\N'),
      created_at FROM orders" |
    psql -qX -v ON_ERROR_STOP=1 -c "COPY pipe_orders FROM STDIN"
}
cat > "$T/ferry.yaml" <<EOF
version: 1
name: mybench
source:
  type: mysql
  url: env:FERRY_MY_URL
  resources:
    - {table: orders, target: ferry_orders}
sink:
  type: postgres
  url: env:FERRY_PG_URL
  write: append
EOF
run_ferry() { FERRY_STATE="$T/state-$RANDOM.db" "$FERRY_BIN" run "$T/ferry.yaml" --quiet; }
cat > "$T/load.pgl" <<EOF
LOAD DATABASE FROM mysql://ferry_admin:$MY_ADMIN_PASSWORD@127.0.0.1:$MY_PORT/ferry
  INTO postgresql://ferry_admin:$PG_ADMIN_PASSWORD@127.0.0.1:$PGPORT/ferry
  WITH data only, truncate
  INCLUDING ONLY TABLE NAMES MATCHING 'orders'
  ALTER TABLE NAMES MATCHING 'orders' RENAME TO 'pgl_orders'
  ALTER SCHEMA 'ferry' RENAME TO 'public';
EOF
run_pgloader() { pgloader --no-ssl-cert-verification "$T/load.pgl"; }

export T FERRY_BIN MY_SOCK
export -f pipe run_ferry run_pgloader
rows=()
rows+=("$(measure "a. mariadb --quick --batch \\| psql COPY" pipe_orders pipe)")
rows+=("$(measure "b. ferry mysql -> postgres, append" ferry_orders run_ferry)")
if command -v pgloader >/dev/null; then
  rows+=("$(measure "c. pgloader" pgl_orders run_pgloader)")
else
  rows+=("$(printf 'c. pgloader\tnot installed\t\t')")
fi

base=$(printf '%s\n' "${rows[0]}" | cut -f2)
out="bench/results/mysql-$(date +%Y%m%d)-${ROWS}rows.md"
{
  echo "# MySQL → PostgreSQL, $ROWS rows (best of $REPS), $(date -u +%Y-%m-%dT%H:%MZ)"
  echo
  echo "MariaDB $(myq -e 'SELECT VERSION()'), PostgreSQL $(pgq -c 'SHOW server_version'); ferry: $build_note, rev $(git rev-parse --short HEAD); $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)."
  echo
  echo "| tool | seconds | rows/s | peak RSS (MiB) | vs pipe | result |"
  echo "|---|---|---|---|---|---|"
  for r in "${rows[@]}"; do
    IFS=$'\t' read -r label t rss res <<<"$r"
    case $t in ""|failed*|not*) echo "| $label | | | | | $t |"; continue ;; esac
    printf '| %s | %.2f | %.0f | %.1f | %.2f× | %s |\n' "$label" "$t" "$(echo "$ROWS / $t" | bc -l)" \
      "$(echo "$rss / 1024" | bc -l)" "$(echo "$t / $base" | bc -l)" "$res"
  done
} | tee "$out"
