# bench/lib.sh - the PostgreSQL set-up the benchmarks share (sourced, not run; bench/pg.sh,
# memory.sh, overlap_profile.sh). Needs FERRY_SRC; source it after setting the script's own
# EXIT trap: pg_start chains onto it (the server is stopped first, then the script's trap runs).
#   bench_pg_start [on]  tests/pg/pg.sh's throw-away server (fsync, synchronous_commit and
#                        full_page_writes off); `on`: all three on, each COMMIT waits for the
#                        disk (the scripts' FSYNC=on)
#   bench_src_dst        the databases src and dst; exports BENCH_SRC_URL and BENCH_DST_URL
#   bench_orders ROWS    src's public.orders, keyed by id: ROWS orders-like rows made with
#                        generate_series (NULLs in discount and note), VACUUM ANALYZE;
#                        BENCH_ORDERS_COLS: its columns (without the PRIMARY KEY clause)
#   bench_merge_txn T FROM K    the merge-with-deletes transaction of issue 22 on table T
#                        (holding FROM's K rows): a quarter of the keys updated, a quarter
#                        deleted, a quarter updated twice, K/4 new keys (1.25 × K changes)
#   bench_merge_images FROM K   the same changes as row images with op ('u', 'd', 'i') and seq
#                        (the order the transaction made them), a SELECT
#   bench_copy_dst       an empty dst.public.orders for copies of src's (no key)
#   bench_append_yaml FILE NAME [SINK_KEYS]  a pipeline: src.public.orders appended into it
#   bench_fresh_dst      empties it and drops ferry's checkpoints, CHECKPOINT (untimed prep)
#   bench_pipe           the binary COPY pipe, psql | psql, src.public.orders into it
#   bench_server_sum EXPR  a sum over /proc/PID/stat of the server's postmaster (its reaped
#                        backends included) and live backends: '$14 + $15 + $16 + $17' is
#                        CPU ticks, '$10 + $11' minor page faults
#   bench_shmem_thp      the mode of BENCH_THP_KNOB, the kernel's transparent huge pages for
#                        shared memory (always, never, advise...)
#   bench_pages          "N huge pages reserved (vm.nr_hugepages), transparent huge pages for
#                        shared memory: MODE": the page sizes PostgreSQL's shared memory can
#                        get, which move the per-batch copy's ratios (docs/performance.md)
#   bench_workdir NAME   checks OUT (a file name under bench/results, required) and makes the
#                        work folder $W, removed by the EXIT trap; call it before
#                        bench_pg_start, which chains the server's stop onto that trap
# shellcheck source=../tests/pg/pg.sh
. "$FERRY_SRC/tests/pg/pg.sh"

BENCH_ORDERS_COLS="id bigint NOT NULL, customer_id int NOT NULL, status text NOT NULL,
  amount numeric(12,2) NOT NULL, quantity smallint NOT NULL, discount float8,
  paid bool NOT NULL, note text, created_at timestamptz NOT NULL, updated_at timestamptz NOT NULL"

bench_workdir() {
  [ -n "${OUT:-}" ] || { echo "${0##*/}: set OUT, the result file's name under bench/results" >&2; exit 2; }
  case $OUT in */* | .*) echo "${0##*/}: OUT=$OUT: a file name under bench/results" >&2; exit 2 ;; esac
  W=$(mktemp -d "${TMPDIR:-/tmp}/ferry-$1.XXXXXX")
  chmod 755 "$W"
  trap 'rm -rf "$W"' EXIT
}

BENCH_THP_KNOB=/sys/kernel/mm/transparent_hugepage/shmem_enabled
# the knob's current mode (the bracketed word of "always within_size advise [never] ..."); fails
# when it cannot be read
bench_shmem_thp() { sed 's/.*\[\(.*\)\].*/\1/' "$BENCH_THP_KNOB" 2>/dev/null; }

bench_pages() {
  local thp
  thp=$(bench_shmem_thp) || thp=unknown
  echo "$(awk '/^HugePages_Total/ { print $2 }' /proc/meminfo) huge pages reserved (vm.nr_hugepages), transparent huge pages for shared memory: ${thp:-unknown}"
}

bench_pg_start() {
  if [ "${1:-off}" = on ]; then
    PG_CONF_EXTRA="$(printf '%s\n%s\n%s' 'fsync = on' 'synchronous_commit = on' 'full_page_writes = on')" pg_start
  else
    pg_start
  fi
}

bench_src_dst() {
  psql -v ON_ERROR_STOP=1 -qX -d postgres -c "CREATE DATABASE src" -c "CREATE DATABASE dst" >/dev/null
  export BENCH_SRC_URL="postgresql://$PGUSER:$PGPASSWORD@127.0.0.1:$PGPORT/src"
  export BENCH_DST_URL="postgresql://$PGUSER:$PGPASSWORD@127.0.0.1:$PGPORT/dst"
}

bench_orders() {
  psql -v ON_ERROR_STOP=1 -qX -d src >/dev/null <<SQL
CREATE TABLE public.orders ($BENCH_ORDERS_COLS, PRIMARY KEY (id));
INSERT INTO public.orders
SELECT g,
       (hashint8(g) & 1048575)::int,
       (ARRAY['new', 'paid', 'shipped', 'delivered', 'cancelled', 'refunded'])[1 + (g % 6)],
       round(((hashint8(g + 1) & 16777215) / 100.0)::numeric, 2),
       (1 + (g % 50))::smallint,
       CASE WHEN g % 5 = 0 THEN NULL ELSE ((hashint8(g + 2) & 65535) / 65536.0)::float8 END,
       g % 3 = 0,
       CASE WHEN g % 4 = 0 THEN NULL ELSE 'note ' || substr(md5(g::text), 1, 8 + (g % 24)::int) END,
       timestamptz '2020-01-01 00:00:00+00' + g * interval '37 seconds',
       timestamptz '2020-01-01 00:00:00+00' + g * interval '37 seconds' + (g % 86400) * interval '1 second'
FROM generate_series(1, $1) g;
VACUUM ANALYZE public.orders;
SQL
}

bench_copy_dst() {
  psql -qX -v ON_ERROR_STOP=1 -d dst -c "CREATE TABLE public.orders ($BENCH_ORDERS_COLS)" >/dev/null
}

bench_append_yaml() {
  cat > "$1" <<YAML
version: 1
name: $2
source: {type: postgres, url: env:BENCH_SRC_URL, resources: [{table: public.orders}]}
sink: {type: postgres, url: env:BENCH_DST_URL, schema: public, write: append${3:+, $3}}
YAML
}

bench_fresh_dst() {
  psql -qX -v ON_ERROR_STOP=1 -d dst -c "TRUNCATE public.orders" -c "DROP SCHEMA IF EXISTS _ferry CASCADE" \
    -c "CHECKPOINT" >/dev/null 2>&1
}

bench_pipe() {
  psql -qX -v ON_ERROR_STOP=1 -d src -c "COPY public.orders TO STDOUT (FORMAT binary)" |
    psql -qX -v ON_ERROR_STOP=1 -d dst -c "COPY public.orders FROM STDIN (FORMAT binary)" >/dev/null
}

bench_server_sum() {
  local pm t=0 p
  pm=$(head -1 "$PG_DIR/data/postmaster.pid")
  for p in $pm $(pgrep -P "$pm"); do t=$((t + $(awk "{ print $1 }" "/proc/$p/stat" 2>/dev/null || echo 0))); done
  echo "$t"
}

bench_merge_txn() {
  cat <<SQL
UPDATE $1 SET status = 'changed', amount = amount + 1 WHERE id % 4 = 1;
DELETE FROM $1 WHERE id % 4 = 2;
UPDATE $1 SET quantity = quantity + 1 WHERE id % 4 = 3;
UPDATE $1 SET paid = NOT paid WHERE id % 4 = 3;
INSERT INTO $1 SELECT id + $3, customer_id, 'new', amount, quantity, discount, paid,
  note, created_at, updated_at FROM $2 WHERE id <= $(($3 / 4));
SQL
}

bench_merge_images() {
  cat <<SQL
SELECT id, customer_id, 'changed'::text AS status, amount + 1 AS amount, quantity, discount, paid,
       note, created_at, updated_at, 'u'::text AS op, id AS seq FROM $1 WHERE id % 4 = 1
UNION ALL SELECT id, customer_id, status, amount, quantity, discount, paid, note, created_at,
       updated_at, 'd', $2 + id FROM $1 WHERE id % 4 = 2
UNION ALL SELECT id, customer_id, status, amount, (quantity + 1)::smallint, discount, paid, note,
       created_at, updated_at, 'u', 2 * $2 + id FROM $1 WHERE id % 4 = 3
UNION ALL SELECT id, customer_id, status, amount, (quantity + 1)::smallint, discount, NOT paid,
       note, created_at, updated_at, 'u', 3 * $2 + id FROM $1 WHERE id % 4 = 3
UNION ALL SELECT id + $2, customer_id, 'new', amount, quantity, discount, paid, note, created_at,
       updated_at, 'i', 4 * $2 + id FROM $1 WHERE id <= $(($2 / 4))
SQL
}
