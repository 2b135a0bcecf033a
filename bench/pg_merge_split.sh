#!/usr/bin/env bash
# bench/pg_merge_split.sh - does applying a merge in batches cost more than one statement?
# (issue 22). The changes of bench/pg_merge.sh's transaction (1.25 × ROWS row images with op
# and seq: a quarter of the keys updated, a quarter deleted, a quarter updated twice, ROWS/4
# new keys) merged into a ROWS-row keyed table, by hand, in ONE destination transaction, as
#   N = 1:  one temporary table holding every change, one MERGE from the last image per key;
#   N > 1:  N chunks in the order the source transaction made them (seq), each: TRUNCATE the
#           temporary table, COPY the chunk, the same MERGE (what ferry's sink does per batch).
# No decoding and no ferry: the server's cost of the statements alone. One throw-away server
# with fsync on (bench/lib.sh); the destination is rebuilt, vacuumed and checkpointed before
# every run (untimed); the chunks are written to files first (untimed) and loaded with \copy.
# Rounds interleave the Ns. Writes bench/results/OUT.md. Never gates CI.
#   ROWS=1000000 ROUNDS=4 SPLITS="1 5 25" OUT=pg-merge-split-20261204 bash bench/pg_merge_split.sh
set -euo pipefail
cd "$(dirname "$0")/.."
FERRY_SRC=$PWD
ROWS=${ROWS:-1000000} ROUNDS=${ROUNDS:-4} SPLITS=${SPLITS:-1 5 25}
. bench/lib.sh
bench_workdir mergesplit
bench_pg_start on
bench_src_dst
bench_orders "$ROWS"
K=$ROWS N_CHG=$((ROWS + ROWS / 4))
psql -qX -v ON_ERROR_STOP=1 -d src >/dev/null <<SQL
CREATE TABLE public.chg AS
$(bench_merge_images public.orders "$K");
CREATE INDEX ON public.chg (seq);
VACUUM ANALYZE public.chg;
SQL
COLS="customer_id status amount quantity discount paid note created_at updated_at"
SET=$(for c in $COLS; do printf '%s = l.%s, ' "$c" "$c"; done | sed 's/, $//')
VALS=$(for c in $COLS; do printf 'l.%s, ' "$c"; done | sed 's/, $//')
MERGE="MERGE INTO t d USING (SELECT DISTINCT ON (id) * FROM s ORDER BY id, seq DESC) l ON d.id = l.id
  WHEN MATCHED AND l.op = 'd' THEN DELETE WHEN MATCHED THEN UPDATE SET $SET
  WHEN NOT MATCHED AND l.op <> 'd' THEN INSERT VALUES (l.id, $VALS)"
# The expected result: the source table after the same changes.
psql -qX -v ON_ERROR_STOP=1 -d src >/dev/null <<SQL
CREATE TABLE public.after AS SELECT * FROM public.orders;
$(bench_merge_txn public.after public.orders "$K")
SQL
DIGEST="SELECT count(*) || ' ' || md5(string_agg(x::text, ',' ORDER BY id)) FROM %s x"
# shellcheck disable=SC2059
want=$(psql -qAtX -d src -c "$(printf "$DIGEST" public.after)")
prep() {
  psql -qX -v ON_ERROR_STOP=1 -d dst -c "DROP TABLE IF EXISTS t" \
    -c "CREATE TABLE t ($BENCH_ORDERS_COLS, PRIMARY KEY (id))" >/dev/null
  psql -qX -d src -c "COPY public.orders TO STDOUT (FORMAT binary)" |
    psql -qX -v ON_ERROR_STOP=1 -d dst -c "COPY t FROM STDIN (FORMAT binary)" >/dev/null
  psql -qX -v ON_ERROR_STOP=1 -d dst -c "VACUUM ANALYZE t" -c "CHECKPOINT" >/dev/null
}
# script N: the SQL of one run (its chunk files made once).
script() {
  local n=$1 per=$(( (N_CHG + $1 - 1) / $1 )) i
  echo "CREATE TEMPORARY TABLE s (LIKE t, op text, seq bigint);"
  for i in $(seq 0 $((n - 1))); do
    [ -f "$W/c$n.$i" ] ||
      psql -qX -d src -c "COPY (SELECT * FROM public.chg ORDER BY seq OFFSET $((i * per)) LIMIT $per) TO STDOUT" > "$W/c$n.$i"
    echo "TRUNCATE s;"
    echo "\\copy s FROM '$W/c$n.$i'"
    echo "$MERGE;"
  done
}
declare -A T
for n in $SPLITS; do script "$n" > "$W/run$n.sql"; done
for r in $(seq 1 "$ROUNDS"); do
  for n in $SPLITS; do
    prep
    t0=$(date +%s.%N)
    psql -qX -1 -v ON_ERROR_STOP=1 -d dst -f "$W/run$n.sql" >/dev/null
    t=$(echo "$(date +%s.%N) - $t0" | bc)
    # shellcheck disable=SC2059
    got=$(psql -qAtX -d dst -c "$(printf "$DIGEST" t)")
    [ "$got" = "$want" ] || { echo "pg_merge_split.sh: N=$n: destination $got, expected $want" >&2; exit 1; }
    T[$n]="${T[$n]:-} $(printf %.2f "$t")"
    echo "round $r: N=$n $(printf %.2f "$t") s" >&2
  done
done
med() { tr ' ' '\n' | grep . | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
out=bench/results/$OUT.md
{
  echo "# A merge in one statement or in batches, by hand ($(date -u '+%Y-%m-%d %H:%M UTC'))"
  echo
  echo "$N_CHG changes (bench/pg_merge.sh's mix) merged into a $ROWS-row keyed table in one"
  echo "transaction on one PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}') server, fsync on: one MERGE from a temporary"
  echo "table of every change (N = 1), or N chunks in the source's order, each TRUNCATE + \\copy +"
  echo "the same MERGE. $ROUNDS rounds, the Ns interleaved; every destination equals the expected rows."
  echo
  echo "| N | median s | every round, s |"
  echo "|---|---|---|"
  for n in $SPLITS; do echo "| $n | $(echo "${T[$n]}" | med) |${T[$n]} |"; done
  echo
  echo "## Machine"
  echo
  echo "- $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), Linux $(uname -r)"
  echo "- load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$out"
cat "$out"
