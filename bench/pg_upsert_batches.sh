#!/usr/bin/env bash
# bench/pg_upsert_batches.sh - what splitting an upsert into batches costs the destination
# server alone (issue 22: ferry's upsert of existing keys against the staging anchor). No
# ferry here: the same SQL ferry's postgres sink sends, from one psql session, against the
# anchor's one statement. The source rows sit in the destination database (public.src, ROWS
# orders-like rows), so no client moves data and only the server's work is timed. Per round,
# interleaved, each into public.d prepared (untimed) with every key (status 'stale'),
# VACUUM ANALYZE and CHECKPOINT (MIX=half: every even key only, so half the rows are new):
#   one     one transaction: a temporary table filled with every row, one INSERT … SELECT …
#           ON CONFLICT (id) DO UPDATE (the anchor). STAGE=copy (default): the temporary table
#           is filled by COPY FROM a binary file the server wrote beforehand (untimed), as the
#           anchor and ferry fill it; STAGE=insert: by INSERT … SELECT (session 27's runs)
#   batches per BATCH rows, one transaction each: TRUNCATE the temporary table, fill it,
#           INSERT … ON CONFLICT, COMMIT (ferry's per-batch durability without a savepoint)
#   savepoint  the same with SAVEPOINT / RELEASE around the INSERT (what ferry sends: the
#           savepoint catches a key staged twice, docs/internals/postgres.md)
# fsync, synchronous_commit and full_page_writes on. Every run's destination is checked
# (count and md5 of the rows in key order equal the source's). Server CPU is every postgres
# process's user + sys over the run, from /proc. Never gates CI.
#   MIX=existing ROWS=1000000 BATCH=20000 ROUNDS=4 OUT=pg-upsert-batches-20261205.md bash bench/pg_upsert_batches.sh
set -euo pipefail
cd "$(dirname "$0")/.."
FERRY_SRC=$PWD
ROWS=${ROWS:-1000000} BATCH=${BATCH:-20000} ROUNDS=${ROUNDS:-4} MIX=${MIX:-existing}
case $MIX in existing) HAVE="" ;; half) HAVE="WHERE id % 2 = 0" ;; *) echo "pg_upsert_batches.sh: MIX=$MIX: existing or half" >&2; exit 2 ;; esac
STAGE=${STAGE:-copy}
case $STAGE in copy | insert) ;; *) echo "pg_upsert_batches.sh: STAGE=$STAGE: copy or insert" >&2; exit 2 ;; esac
. bench/lib.sh
bench_workdir upsertbatches
[ "$STAGE" = insert ] || [ "$(id -u)" != 0 ] || chown postgres "$W" # the server writes the files
bench_pg_start on
psql -qX -v ON_ERROR_STOP=1 -d postgres -c "CREATE DATABASE src" >/dev/null
export PGDATABASE=src
q() { psql -qXAt -v ON_ERROR_STOP=1 "$@"; }
bench_orders "$ROWS"
q -c "ALTER TABLE public.orders RENAME TO src" -c "CREATE TABLE public.d (LIKE public.src)" \
  -c "ALTER TABLE public.d ADD PRIMARY KEY (id)"
COLS="customer_id status amount quantity discount paid note created_at updated_at"
SET=$(for c in $COLS; do printf '%s = EXCLUDED.%s, ' "$c" "$c"; done | sed 's/, $//')
UPSERT="INSERT INTO public.d SELECT * FROM s ON CONFLICT (id) DO UPDATE SET $SET;"
# stage LO HI: the statement that fills the temporary table s with the source's ids LO..HI
# (STAGE=copy: COPY FROM a binary file the server wrote beforehand, as ferry and the anchor
# load it, without a client; STAGE=insert: INSERT … SELECT, session 27's form)
stage() {
  if [ "$STAGE" = insert ]; then
    echo "INSERT INTO s SELECT * FROM public.src WHERE id BETWEEN $1 AND $2;"
  else
    [ -f "$W/s-$1-$2.bin" ] || q -c "COPY (SELECT * FROM public.src WHERE id BETWEEN $1 AND $2) TO '$W/s-$1-$2.bin' (FORMAT binary)"
    echo "COPY s FROM '$W/s-$1-$2.bin' (FORMAT binary);"
  fi
}
printf 'BEGIN; CREATE TEMPORARY TABLE s (LIKE public.src); %s %s COMMIT;\n' \
  "$(stage 1 "$ROWS")" "$UPSERT" > "$W/one.sql"
for v in batches savepoint; do
  echo "CREATE TEMPORARY TABLE s (LIKE public.src);" > "$W/$v.sql"
  lo=1
  while [ "$lo" -le "$ROWS" ]; do
    hi=$((lo + BATCH - 1))
    if [ $v = savepoint ]; then u="SAVEPOINT ferry_upsert; $UPSERT RELEASE SAVEPOINT ferry_upsert;"; else u=$UPSERT; fi
    echo "BEGIN; TRUNCATE s; $(stage "$lo" "$hi") $u COMMIT;" >> "$W/$v.sql"
    lo=$((hi + 1))
  done
done
DIGEST="SELECT count(*) || ' ' || md5(string_agg(t::text, ',' ORDER BY id)) FROM %s t"
# shellcheck disable=SC2059
want=$(q -c "$(printf "$DIGEST" public.src)")
srv_ticks() { bench_server_sum '$14 + $15 + $16 + $17'; }
HZ=$(getconf CLK_TCK)
now() { date +%s.%N; }
prep() {
  q -c "TRUNCATE public.d" -c "INSERT INTO public.d SELECT id, customer_id, 'stale', amount, quantity,
        discount, paid, note, created_at, updated_at FROM public.src $HAVE" >/dev/null
  q -c "VACUUM ANALYZE public.d" -c "CHECKPOINT" >/dev/null
}
WHO="one batches savepoint"
declare -A T C
for r in $(seq 1 "$ROUNDS"); do
  for who in $WHO; do
    prep
    c0=$(srv_ticks) t0=$(now)
    q -f "$W/$who.sql" >/dev/null
    t=$(echo "$(now) - $t0" | bc) c=$(echo "scale=2; ($(srv_ticks) - $c0) / $HZ" | bc)
    # shellcheck disable=SC2059
    [ "$(q -c "$(printf "$DIGEST" public.d)")" = "$want" ] || { echo "pg_upsert_batches.sh: $who: destination differs from the source" >&2; exit 1; }
    T[$who]="${T[$who]:-} $(printf %.2f "$t")" C[$who]="${C[$who]:-} $(printf %.2f "$c")"
    echo "round $r: $who $(printf %.2f "$t") s, server CPU $(printf %.2f "$c") s" >&2
  done
done
med() { tr ' ' '\n' | grep . | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# three decimals, rounded (bc's scale cuts: 1.0579 would read 1.05)
ratio() { printf '%.3f' "$(echo "scale=6; $1 / $2" | bc)"; }
out=bench/results/$OUT
m_one=$(echo "${T[one]}" | med)
how='`INSERT … SELECT`'
[ "$STAGE" = copy ] && how='`COPY … FROM` a binary file the server wrote beforehand'
{
  echo "# The destination's cost of per-batch upserts, keys: $MIX ($(date -u +%F))"
  echo
  echo "$ROWS orders-like rows upserted into a table holding $([ "$MIX" = half ] && echo "every even key" || echo "every key"), from the same database (no"
  echo "client moves data): \`one\` is the anchor's one transaction, \`batches\` one transaction"
  echo "per $BATCH rows (TRUNCATE the temporary table, fill it, INSERT … ON CONFLICT, COMMIT),"
  echo "the temporary table filled by $how,"
  echo "\`savepoint\` the same inside SAVEPOINT / RELEASE, as ferry sends it. fsync,"
  echo "synchronous_commit and full_page_writes on; every destination verified (count + md5)."
  echo "$ROUNDS rounds, interleaved; medians."
  echo
  echo "| run | median wall s | × one | median server CPU s | every round, wall s | every round, server CPU s |"
  echo "|---|---|---|---|---|---|"
  for who in $WHO; do
    m=$(echo "${T[$who]}" | med)
    echo "| $who | $m | $(ratio "$m" "$m_one")× | $(echo "${C[$who]}" | med) |${T[$who]} |${C[$who]} |"
  done
  echo
  echo "## Machine"
  echo
  echo "- $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), $(uname -sr)"
  echo "- $(q -c 'SELECT version()')"
  echo "- kernel: $(bench_pages)"
  echo "- \`uptime\` after: $(uptime)"
  echo "- ferry tree $(git rev-parse --short HEAD 2>/dev/null || echo unknown) (the script's commit; ferry itself does not run)"
} > "$out"
cat "$out"
echo "written to $out" >&2
