#!/usr/bin/env bash
# bench/pgoutput_peek.sh - what pgoutput's text and binary value forms cost the server, without
# any consumer (issue 22: where CDC time goes). One throw-away server (bench/lib.sh; fsync off:
# nothing here commits), the orders table of bench/lib.sh with ROWS rows, a publication and a
# pgoutput slot, then one UPDATE of every row (one transaction). Per round, text then binary:
# `pg_logical_slot_peek_binary_changes` (protocol 1, the same publication, `binary` 'true' or
# not) over the whole backlog in one backend, timed, with the messages' count and bytes (the
# peek decodes again from the slot's start every time: the same WAL for both forms). A
# warm-up peek first. ferry's cdc reads text values (pg_cdc.c put_text). Writes
# bench/results/pgoutput-peek-<date>.md. Never gates CI.
#   ROWS=1000000 ROUNDS=3 bash bench/pgoutput_peek.sh
set -euo pipefail
cd "$(dirname "$0")/.."
FERRY_SRC=$PWD
ROWS=${ROWS:-1000000}
ROUNDS=${ROUNDS:-3}
. bench/lib.sh # the server (tests/pg/pg.sh), BENCH_ORDERS_COLS, bench_orders
pg_start
psql -qX -v ON_ERROR_STOP=1 -d postgres -c "CREATE DATABASE src" >/dev/null
export PGDATABASE=src
bench_orders_rows() { # the orders rows of bench/lib.sh's bench_orders, ROWS of them
  psql -qX -v ON_ERROR_STOP=1 >/dev/null <<SQL
CREATE TABLE public.orders ($BENCH_ORDERS_COLS, PRIMARY KEY (id));
INSERT INTO public.orders SELECT g, (hashint8(g) & 1048575)::int,
  (ARRAY['new', 'paid', 'shipped', 'delivered', 'cancelled', 'refunded'])[1 + (g % 6)],
  round(((hashint8(g + 1) & 16777215) / 100.0)::numeric, 2), (1 + (g % 50))::smallint,
  CASE WHEN g % 5 = 0 THEN NULL ELSE (g % 100) / 100.0 END, g % 2 = 0,
  CASE WHEN g % 4 = 0 THEN NULL ELSE 'note ' || g END,
  timestamptz '2024-01-01' + g * interval '1 second', timestamptz '2024-06-01' + g * interval '1 second'
  FROM generate_series(1, $ROWS) g;
SQL
}
bench_orders_rows
psql -qX -v ON_ERROR_STOP=1 -c "CREATE PUBLICATION peek_pub FOR TABLE public.orders" \
  -c "SELECT pg_create_logical_replication_slot('peek', 'pgoutput')" >/dev/null
psql -qX -v ON_ERROR_STOP=1 -c "UPDATE public.orders SET status = 'changed'" >/dev/null
psql -qX -v ON_ERROR_STOP=1 -c "CHECKPOINT" >/dev/null

# peek FORM: "ms messages bytes" of one peek of the whole backlog.
peek() {
  local opt="" t0 t1 out
  [ "$1" = binary ] && opt=", 'binary', 'true'"
  t0=$(date +%s%N)
  out=$(psql -qXAt -F' ' -v ON_ERROR_STOP=1 -c "SELECT count(*), coalesce(sum(length(data)), 0)
    FROM pg_logical_slot_peek_binary_changes('peek', NULL, NULL, 'proto_version', '1',
         'publication_names', 'peek_pub'$opt)")
  t1=$(date +%s%N)
  echo "$(( (t1 - t0) / 1000000 )) $out"
}
peek text >/dev/null # warm-up
declare -A MS N B
for r in $(seq 1 "$ROUNDS"); do
  for form in text binary; do
    read -r ms n bytes < <(peek "$form")
    echo "round $r, $form: $ms ms, $n messages, $bytes bytes" >&2
    MS[$form]="${MS[$form]:-} $ms"
    N[$form]=$n B[$form]=$bytes
  done
done
med() { tr ' ' '\n' <<<"$1" | grep . | sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
out=bench/results/${OUT:-pgoutput-peek-$(date -u +%Y%m%d).md}
{
  echo "# pgoutput text against binary values, server side only ($(date -u '+%Y-%m-%d %H:%M UTC'))"
  echo
  echo "One UPDATE of all $ROWS rows of the orders table (bench/lib.sh's columns: bigint, int, text,"
  echo "numeric(12,2), smallint, float8, bool, text, two timestamptz), one transaction, decoded by"
  echo "\`pg_logical_slot_peek_binary_changes\` (protocol 1, one publication) in one backend; each peek"
  echo "decodes the same WAL from the slot's start. PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}'), $(nproc) CPUs, load at the end $(cut -d' ' -f1-3 /proc/loadavg)."
  echo
  echo "| values | median ms | every round, ms | messages | bytes of output |"
  echo "|---|---|---|---|---|"
  for form in text binary; do
    echo "| $form | $(med "${MS[$form]}") |${MS[$form]} | ${N[$form]} | ${B[$form]} |"
  done
} > "$out"
cat "$out"
