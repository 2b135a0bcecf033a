#!/usr/bin/env bash
# bench/cdc_client.sh - ferry's own cost of replaying one large cdc transaction, two ferry
# binaries in the same rounds (issue 22: on 2 cores the client's CPU is taken from the
# walsender and the destination's backend). One throw-away server with fsync on (bench/lib.sh);
# per round and binary: a fresh source table of ROWS rows and a slot, ferry's untimed snapshot
# run, then bench/pg_merge.sh's transaction (a quarter of the keys updated, a quarter deleted,
# a quarter updated twice, ROWS/4 new keys: 1.25 × ROWS changes), then the timed replay
#   null:  into the null sink (the decoding floor: nothing written),
#   merge: into PostgreSQL with `write: merge` (every destination checked: count and md5 of
#          the rows in key order equal the source's).
# Reports wall, the client's user and system CPU (/usr/bin/time) and peak RSS per round and
# the medians; then one more replay per binary into the null sink under `strace -c -f` (the
# client's system calls by kind) and, with PROFILE=1, under `perf record` (self symbols).
# Writes bench/results/OUT.md. Never gates CI.
#   A=build/bench/ferry B=/path/to/old/ferry A_LABEL=HEAD B_LABEL=487a38c ROWS=1000000 \
#     ROUNDS=3 OUT=cdc-client-20261204 bash bench/cdc_client.sh
# A_SOURCE / B_SOURCE: extra keys of that binary's source section, for example
# A_SOURCE="stream_large_transactions: true" with A=B (docs/connectors.md, large transactions).
# A_PGOPTIONS / B_PGOPTIONS: libpq's PGOPTIONS for that binary's runs, for example
# A_PGOPTIONS="-c logical_decoding_work_mem=1GB" with A=B: the server's decoding memory for
# ferry's replication session (docs/connectors.md, large transactions).
set -euo pipefail
cd "$(dirname "$0")/.."
FERRY_SRC=$PWD
ROWS=${ROWS:-1000000} ROUNDS=${ROUNDS:-3} PROFILE=${PROFILE:-0}
: "${A:?A=ferry binary}" "${B:?B=ferry binary}"
A_LABEL=${A_LABEL:-A} B_LABEL=${B_LABEL:-B}
. bench/lib.sh
bench_workdir cdcclient
bench_pg_start on
bench_src_dst
bench_orders "$ROWS"
qs() { psql -qAtX -v ON_ERROR_STOP=1 -d src "$@"; }
qd() { psql -qAtX -v ON_ERROR_STOP=1 -d dst "$@"; }
K=$ROWS
CHG_SQL=$(bench_merge_txn public.orders_cdc public.orders "$K")
N_CHG=$((K + K / 4))
# yaml WHO SINK: the pipeline file of that binary's runs into SINK (A_SOURCE / B_SOURCE: extra
# keys of the source section)
yaml() {
  local extra=${A_SOURCE:-}
  [ "$1" = B ] && extra=${B_SOURCE:-}
  {
    echo "version: 1"
    echo "name: cdc_client_$2"
    echo "source: {type: postgres, url: env:BENCH_SRC_URL, ${extra:+$extra, }resources: [{table: public.orders_cdc, mode: cdc}]}"
    if [ "$2" = null ]; then echo 'sink: {type: "null", write: merge}'
    else echo "sink: {type: postgres, url: env:BENCH_DST_URL, schema: cdc, write: merge}"; fi
  } > "$W/$2.yaml"
}
DIGEST="SELECT count(*) || ' ' || md5(string_agg(t::text, ',' ORDER BY id)) FROM %s.orders_cdc t"

# prep FERRY SINK: a fresh table, slot and snapshot, then the transaction (untimed).
prep() {
  "$1" cdc drop "$W/$2.yaml" --state "$W/$2.db" >/dev/null 2>&1 || true
  rm -f "$W/$2".db*
  qd -c "DROP SCHEMA IF EXISTS cdc CASCADE" -c "DROP SCHEMA IF EXISTS _ferry CASCADE" >/dev/null 2>&1
  qs -c "DROP TABLE IF EXISTS public.orders_cdc" -c "CREATE TABLE public.orders_cdc AS SELECT * FROM public.orders" \
     -c "ALTER TABLE public.orders_cdc ADD PRIMARY KEY (id)" >/dev/null 2>&1
  "$1" run "$W/$2.yaml" --quiet --state "$W/$2.db" >/dev/null
  qs -1 -c "$CHG_SQL" >/dev/null
  [ "$2" = merge ] && qd -c "VACUUM ANALYZE cdc.orders_cdc" >/dev/null
  qs -c "CHECKPOINT" >/dev/null
}
# replay FERRY SINK [WRAPPER...]: the timed run; prints "wall user sys rss_kib".
replay() {
  local f=$1 sink=$2 t0 t1 rows; shift 2
  t0=$(date +%s.%N)
  "$@" env PGOPTIONS="$PGOPT" /usr/bin/time -f '%U %S %M' -o "$W/time" "$f" run "$W/$sink.yaml" --json --state "$W/$sink.db" > "$W/out.json"
  t1=$(date +%s.%N)
  rows=$(jq -r .rows "$W/out.json")
  [ "$rows" = "$N_CHG" ] || { echo "cdc_client.sh: $f: $rows rows, not $N_CHG" >&2; exit 1; }
  if [ "$sink" = merge ]; then
    # shellcheck disable=SC2059
    [ "$(qs -c "$(printf "$DIGEST" public)")" = "$(qd -c "$(printf "$DIGEST" cdc)")" ] ||
      { echo "cdc_client.sh: $f: destination differs from the source" >&2; exit 1; }
  fi
  echo "$(echo "$t1 - $t0" | bc) $(cat "$W/time")"
}
declare -A R
for r in $(seq 1 "$ROUNDS"); do
  for sink in null merge; do
    for who in A B; do
      f=$A PGOPT=${A_PGOPTIONS:-}; [ $who = B ] && f=$B PGOPT=${B_PGOPTIONS:-}
      yaml "$who" "$sink"
      prep "$f" "$sink"
      line=$(replay "$f" "$sink")
      line="$line $(qs -c "SELECT spill_bytes FROM pg_stat_replication_slots WHERE slot_name LIKE '%client_$sink%'" | head -n1)"
      R[$who.$sink]="${R[$who.$sink]:-}|$line"
      echo "round $r: $who $sink: $line" >&2
    done
  done
done
for who in A B; do
  f=$A PGOPT=${A_PGOPTIONS:-}; [ $who = B ] && f=$B PGOPT=${B_PGOPTIONS:-}
  export PGOPTIONS=$PGOPT
  yaml "$who" null
  prep "$f" null
  strace -f -c -o "$W/strace.$who" "$f" run "$W/null.yaml" --quiet --state "$W/null.db"
  if [ "$PROFILE" = 1 ]; then
    prep "$f" null
    perf record -q -F 999 -o "$W/perf.$who" "$f" run "$W/null.yaml" --quiet --state "$W/null.db" 2>/dev/null
  fi
  unset PGOPTIONS
done

col() { tr '|' '\n' | grep . | awk -v c="$1" '{print $c}' | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
label() { if [ "$1" = A ]; then echo "$A_LABEL"; else echo "$B_LABEL"; fi; }
pgopt() { if [ "$1" = A ]; then echo "${A_PGOPTIONS:-(none)}"; else echo "${B_PGOPTIONS:-(none)}"; fi; }
out=bench/results/$OUT.md
{
  echo "# ferry's client cost replaying one large cdc transaction, two binaries ($(date -u '+%Y-%m-%d %H:%M UTC'))"
  echo
  echo "One source transaction of $N_CHG changes over a $ROWS-row keyed table (bench/pg_merge.sh's"
  echo "mix), replayed after ferry's snapshot by \`ferry run\` (cdc, \`write: merge\`) into the null"
  echo "sink and into PostgreSQL; one PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}') server, fsync on. $ROUNDS rounds, A then B"
  echo "each time; medians. CPU: the ferry process's user and system seconds (/usr/bin/time)."
  echo "Every merge destination equals the source (count and md5 in key order). Spilled: the"
  echo "slot's spill_bytes after the replay (pg_stat_replication_slots; the walsender wrote the"
  echo "transaction to disk and read it back when it exceeded logical_decoding_work_mem)."
  echo
  echo "| binary | sink | wall s | client user s | client sys s | client CPU s | peak RSS MiB | spilled MiB | every round (wall user sys) |"
  echo "|---|---|---|---|---|---|---|---|---|"
  for sink in null merge; do
    for who in A B; do
      v=${R[$who.$sink]}
      u=$(echo "$v" | col 2) s=$(echo "$v" | col 3)
      echo "| $(label $who) | $sink | $(printf %.2f "$(echo "$v" | col 1)") | $u | $s | $(echo "$u + $s" | bc) | $(echo "$(echo "$v" | col 4) / 1024" | bc) | $(echo "$(echo "$v" | col 5) / 1048576" | bc) | $(echo "$v" | tr '|' '\n' | grep . | awk '{printf "%s%.1f %.2f %.2f", (NR > 1 ? "; " : ""), $1, $2, $3}') |"
    done
  done
  for who in A B; do
    echo
    echo "## System calls of one replay into the null sink: $(label $who) (strace -c -f)"
    echo
    echo '```'
    head -n 9 "$W/strace.$who"
    echo '```'
    if [ "$PROFILE" = 1 ]; then
      echo
      echo "## Profile of one replay into the null sink: $(label $who) (perf, self)"
      echo
      echo '```'
      { perf report -i "$W/perf.$who" --no-children --sort dso,sym --stdio 2>/dev/null | grep '%' | head -n 25; } || true
      echo '```'
    fi
  done
  echo
  echo "## Machine"
  echo
  echo "- $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), $(free -g | awk '/Mem:/{print $2}') GiB RAM, Linux $(uname -r)"
  echo "- A: $A_LABEL ($A, PGOPTIONS $(pgopt A), source keys ${A_SOURCE:-(none)}), B: $B_LABEL ($B, PGOPTIONS $(pgopt B), source keys ${B_SOURCE:-(none)})"
  echo "- load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$out"
cat "$out"
