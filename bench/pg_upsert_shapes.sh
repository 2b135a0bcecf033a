#!/usr/bin/env bash
# bench/pg_upsert_shapes.sh - the destination server's side of an upsert, without ferry:
# ROWS (default 500000) orders-like rows of new keys upserted into an empty keyed table by
# psql from files of COPY binary data (made once, untimed), in the statement shapes ferry's
# postgres sink uses and the one an engineer writes by hand (issue 22):
#   anchor    one transaction: COPY everything into a temporary table, one INSERT … SELECT …
#             ON CONFLICT (id) DO UPDATE
#   ferry     per batch of BATCH rows (default 50000, ferry's default): BEGIN; TRUNCATE the
#             temporary table; COPY; SAVEPOINT; INSERT … ON CONFLICT; RELEASE; COMMIT
#   nosave    the same without the savepoint
#   oncommit  the same with an ON COMMIT DELETE ROWS table instead of the TRUNCATE
#   onetx     ferry's statements in one transaction (durability: at_commit)
# Interleaved, ROUNDS rounds (default 3), wall seconds of each psql run; the server runs with
# fsync, synchronous_commit and full_page_writes on (every COMMIT waits for the disk). The
# destination is truncated, vacuumed and checkpointed before every run. Never gates CI.
#   ROWS=500000 BATCH=50000 ROUNDS=3 bash bench/pg_upsert_shapes.sh
set -euo pipefail
FERRY_SRC=$(cd "$(dirname "$0")/.." && pwd)
ROWS=${ROWS:-500000}
BATCH=${BATCH:-50000}
ROUNDS=${ROUNDS:-3}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
# shellcheck source=lib.sh
. "$FERRY_SRC/bench/lib.sh"
bench_pg_start on
bench_src_dst
bench_orders "$ROWS"
cols() { # cols FIRST_ATTNUM FORMAT: the orders columns, each through FORMAT (%1$s: the name)
  psql -qXAt -d src -c "SELECT string_agg(format('$2', quote_ident(attname)), ', ' ORDER BY attnum)
    FROM pg_attribute WHERE attrelid = 'public.orders'::regclass AND attnum >= $1 AND NOT attisdropped"
}
COLS=$(cols 1 '%1$s')
SET=$(cols 2 '%1$s = EXCLUDED.%1$s')
psql -qX -d dst -c "CREATE SCHEMA up" -c "CREATE TABLE up.t ($BENCH_ORDERS_COLS, PRIMARY KEY (id))"
NB=$(( (ROWS + BATCH - 1) / BATCH ))
for k in $(seq 0 $((NB - 1))); do
  psql -qX -d src -c "COPY (SELECT * FROM orders WHERE id > $((k * BATCH)) AND id <= $(((k + 1) * BATCH)))
    TO STDOUT (FORMAT binary)" > "$W/b$k.bin"
done
psql -qX -d src -c "COPY orders TO STDOUT (FORMAT binary)" > "$W/all.bin"
INS="INSERT INTO up.t ($COLS) SELECT $COLS FROM s ON CONFLICT (id) DO UPDATE SET $SET;"
printf '%s\n' "CREATE TEMP TABLE s (LIKE up.t);" "BEGIN;" \
  "\\copy s FROM '$W/all.bin' (FORMAT binary)" "$INS" "COMMIT;" > "$W/anchor.sql"
shape() { # shape NAME TRUNCATE SAVEPOINT ONE_TX ON_COMMIT_DELETE (each 1 or 0)
  {
    if [ "$5" = 1 ]; then echo "CREATE TEMP TABLE s (LIKE up.t) ON COMMIT DELETE ROWS;"
    else echo "CREATE TEMP TABLE s (LIKE up.t);"; fi
    if [ "$4" = 1 ]; then echo "BEGIN;"; fi
    for k in $(seq 0 $((NB - 1))); do
      if [ "$4" = 0 ]; then echo "BEGIN;"; fi
      if [ "$2" = 1 ]; then echo "TRUNCATE s;"; fi
      echo "\\copy s FROM '$W/b$k.bin' (FORMAT binary)"
      if [ "$3" = 1 ]; then echo "SAVEPOINT x;"; fi
      echo "$INS"
      if [ "$3" = 1 ]; then echo "RELEASE x;"; fi
      if [ "$4" = 0 ]; then echo "COMMIT;"; fi
    done
    if [ "$4" = 1 ]; then echo "COMMIT;"; fi
  } > "$W/$1.sql"
}
shape ferry 1 1 0 0
shape nosave 1 0 0 0
shape oncommit 0 1 0 1
shape onetx 1 1 1 0
SHAPES="anchor ferry nosave oncommit onetx"
declare -A T
for round in $(seq 1 "$ROUNDS"); do
  for v in $SHAPES; do
    psql -qX -d dst -c "TRUNCATE up.t" -c "VACUUM ANALYZE up.t" -c "CHECKPOINT" >/dev/null
    t0=$(date +%s.%N)
    psql -qX -v ON_ERROR_STOP=1 -d dst -f "$W/$v.sql" >/dev/null
    t1=$(date +%s.%N)
    [ "$(psql -qXAt -d dst -c "SELECT count(*) FROM up.t")" = "$ROWS" ] || { echo "$v: wrong row count" >&2; exit 1; }
    T[$v]="${T[$v]:-}$(printf '%.2f' "$(echo "$t1 - $t0" | bc)") "
  done
done
echo "| shape ($ROWS new keys, batches of $BATCH, fsync on) | wall s, rounds 1..$ROUNDS |"
echo "|---|---|"
for v in $SHAPES; do echo "| $v | ${T[$v]} |"; done
echo
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
