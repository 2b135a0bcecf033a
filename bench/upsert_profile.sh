#!/usr/bin/env bash
# Where the server's time goes in an upsert: the staging-table anchor against ferry (issue 22,
# bench/pg_upsert.sh has the timed comparison). One throw-away server (tests/pg/pg.sh) with
# fsync, synchronous_commit and full_page_writes on; src.public.orders_up (ROWS orders-like
# rows, keyed) upserted into dst.up.orders_up prepared with the MIX's keys (new: none,
# existing: all, half: the even ones; status 'stale'), VACUUM ANALYZE and CHECKPOINT before
# every run. Per round, interleaved:
#   anchor  psql COPY binary | psql -1: CREATE TEMPORARY TABLE s, COPY s, INSERT … SELECT …
#           ON CONFLICT (id) DO UPDATE (the hand-written way);
#   ferry   `ferry run`, write: upsert, default settings.
# Each run under `perf record -a -g` (the whole machine: the backends are what counts):
# wall s, server CPU s (every postgres process, reaped backends included), the run's CPU
# samples per command (postgres, ferry, psql), and of the last round the top postgres symbols
# of each. Every run's destination is checked against the source (count + md5).
# Writes bench/results/upsert-profile-<date>-<mix>.md.
#   ROWS=1000000 MIX=half REPS=2 bash bench/upsert_profile.sh
set -euo pipefail
cd "$(dirname "$0")/.."
FERRY_SRC=$PWD
ROWS=${ROWS:-1000000}
MIX=${MIX:-half}
REPS=${REPS:-2}
case $MIX in new) WHERE=false ;; existing) WHERE=true ;; half) WHERE="id % 2 = 0" ;;
  *) echo "upsert_profile.sh: MIX is new, existing or half, not '$MIX'" >&2; exit 2 ;; esac
if [ -z "${FERRY:-}" ]; then
  cmake -S . -B build/bench -DCMAKE_BUILD_TYPE=Release -DFERRY_WERROR=ON >/dev/null
  cmake --build build/bench -j2 --target ferry >/dev/null
  FERRY=$FERRY_SRC/build/bench/ferry
fi
command -v perf >/dev/null || { echo "upsert_profile.sh: needs perf (apt-get install linux-perf)" >&2; exit 1; }
W=$(mktemp -d "${TMPDIR:-/tmp}/ferry-upprof.XXXXXX")
chmod 755 "$W"
trap 'rm -rf "$W"' EXIT
# shellcheck source=lib.sh
. "$FERRY_SRC/bench/lib.sh"
bench_pg_start on
cd "$W"
UPTIME0=$(uptime)
bench_src_dst
bench_orders "$ROWS"
qs() { psql -qXAt -v ON_ERROR_STOP=1 -d src "$@"; }
qd() { psql -qXAt -v ON_ERROR_STOP=1 -d dst "$@"; }
qs -c "CREATE TABLE public.orders_up AS SELECT * FROM public.orders" \
   -c "ALTER TABLE public.orders_up ADD PRIMARY KEY (id)" -c "VACUUM ANALYZE public.orders_up" >/dev/null
qd -c "CREATE SCHEMA up" -c "CREATE TABLE up.orders_up ($BENCH_ORDERS_COLS, PRIMARY KEY (id))" >/dev/null
DIGEST="SELECT count(*) || ' ' || md5(string_agg(md5(t::text), '' ORDER BY id)) FROM %s t"
# shellcheck disable=SC2059
WANT=$(qs -c "$(printf "$DIGEST" public.orders_up)")
UCOLS="customer_id status amount quantity discount paid note created_at updated_at"
SET=$(for c in $UCOLS; do printf '%s = EXCLUDED.%s, ' "$c" "$c"; done | sed 's/, $//')
cat > "$W/p.yaml" <<Y
version: 1
name: upprof
source: {type: postgres, url: env:BENCH_SRC_URL, resources: [{table: public.orders_up, mode: full}]}
sink: {type: postgres, url: env:BENCH_DST_URL, schema: up, write: upsert}
Y
PM=$(head -n1 "$PG_DIR/data/postmaster.pid")
TCK=$(getconf CLK_TCK)
server_ticks() { # the postmaster's own + reaped children's + live children's user+sys ticks
  local t c
  t=$(awk '{print $14 + $15 + $16 + $17}' "/proc/$PM/stat")
  for c in $(pgrep -P "$PM"); do
    t=$((t + $(awk '{print $14 + $15}' "/proc/$c/stat" 2>/dev/null || echo 0)))
  done
  echo "$t"
}
prep() {
  qd -c "TRUNCATE up.orders_up" -c "DROP SCHEMA IF EXISTS _ferry CASCADE" >/dev/null
  psql -qX -v ON_ERROR_STOP=1 -d src -c "COPY (SELECT id, customer_id, 'stale'::text, amount,
      quantity, discount, paid, note, created_at, updated_at FROM public.orders_up WHERE $WHERE)
      TO STDOUT (FORMAT binary)" |
    psql -qX -v ON_ERROR_STOP=1 -d dst -c "COPY up.orders_up FROM STDIN (FORMAT binary)" >/dev/null
  qd -c "VACUUM ANALYZE up.orders_up" -c "CHECKPOINT" >/dev/null
}
anchor() {
  psql -qX -v ON_ERROR_STOP=1 -d src -c "COPY public.orders_up TO STDOUT (FORMAT binary)" |
    psql -qX -1 -v ON_ERROR_STOP=1 -d dst \
      -c "CREATE TEMPORARY TABLE s (LIKE up.orders_up) ON COMMIT DROP" \
      -c "COPY s FROM STDIN (FORMAT binary)" \
      -c "INSERT INTO up.orders_up SELECT * FROM s ON CONFLICT (id) DO UPDATE SET $SET" >/dev/null
}
ferry_run() {
  rm -f "$W"/state.db*
  "$FERRY" run "$W/p.yaml" --fresh --state "$W/state.db" >"$W/out" 2>&1
}
export -f anchor ferry_run
export FERRY W SET
# one NAME -> "wall server_cpu postgres% ferry% psql%" or FAIL ...
one() {
  prep
  local s0 s1 t0 t1 got
  s0=$(server_ticks)
  t0=$(date +%s.%N)
  if ! perf record -q -a -g -o "$W/perf.$1" -- bash -c "$([ "$1" = anchor ] && echo anchor || echo ferry_run)" \
       >"$W/rec.$1" 2>&1; then
    echo "FAIL $(tail -n1 "$W/out" 2>/dev/null) $(tail -n1 "$W/rec.$1")"; return
  fi
  t1=$(date +%s.%N)
  s1=$(server_ticks)
  # shellcheck disable=SC2059
  got=$(qd -c "$(printf "$DIGEST" up.orders_up)")
  [ "$got" = "$WANT" ] || { echo "FAIL destination differs: $got"; return; }
  perf report -i "$W/perf.$1" --no-children --sort comm --stdio 2>/dev/null |
    awk '/^ +[0-9.]+%/ { sub("%", "", $1); p[$2] += $1 } END { printf "%.1f %.1f %.1f", p["postgres"], p["ferry"], p["psql"] }' > "$W/comm"
  echo "$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f", b - a}') $(awk -v a="$s0" -v b="$s1" -v t="$TCK" 'BEGIN{printf "%.2f", (b - a) / t}') $(cat "$W/comm")"
}
declare -A RES
LOADS=""
for round in $(seq 1 "$REPS"); do
  for who in anchor ferry; do
    echo "round $round/$REPS: $who ($MIX keys)" >&2
    LOADS="$LOADS $(cut -d' ' -f1 /proc/loadavg)"
    RES[$who]="${RES[$who]:-}$(one "$who");"
  done
done
for who in anchor ferry; do
  perf report -i "$W/perf.$who" --comm postgres --no-children --sort symbol --stdio 2>/dev/null |
    grep -E '^ +[0-9.]+%' | sed -E 's/ +- +- *$//' | head -n 30 > "$W/top.$who" || true
done
mkdir -p "$FERRY_SRC/bench/results"
out="$FERRY_SRC/bench/results/${OUT:-upsert-profile-$(date -u +%Y%m%d)-$MIX.md}"
{
  echo "# Upsert, $MIX keys: where the server's time goes, anchor against ferry ($(date -u +%Y-%m-%d))"
  echo
  echo "$ROWS rows (orders-like, keyed) from \`src.public.orders_up\` upserted into \`dst.up.orders_up\`"
  echo "holding the $MIX mix's keys, on one PostgreSQL 15 server with **fsync, synchronous_commit and"
  echo "full_page_writes on**. anchor: \`psql COPY binary | psql -1\` into a temporary table, then one"
  echo "\`INSERT … SELECT … ON CONFLICT (id) DO UPDATE\`. ferry: \`write: upsert\`, default settings. Each run"
  echo "under \`perf record -a -g\` (the whole machine), $REPS rounds interleaved; every destination checked"
  echo "(count + md5 of the rows in key order equal the source's). server CPU: every postgres process"
  echo "over the run. Samples: the run's CPU samples by command (the rest: other processes, the kernel's"
  echo "idle work). perf adds its own cost to every process: wall times here are not the benchmark's."
  echo
  echo "| run | round | wall s | server CPU s | postgres % | ferry % | psql % |"
  echo "|---|---|---|---|---|---|---|"
  for who in anchor ferry; do
    echo "${RES[$who]}" | tr ';' '\n' | awk -v l="$who" 'NF { n++; if ($1 == "FAIL") print "| " l " | " n " | " $0 " | | | | |"; else printf "| %s | %d | %s | %s | %s | %s | %s |\n", l, n, $1, $2, $3, $4, $5 }'
  done
  for who in anchor ferry; do
    echo
    echo "## postgres processes, top self symbols: $who (last round)"
    echo
    echo '```'
    cat "$W/top.$who"
    echo '```'
  done
  echo
  echo "## Machine"
  echo
  echo "- $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), $(uname -sr)"
  echo "- $(psql -qXAt -d postgres -c 'SELECT version()')"
  echo "- \`uptime\` before and after: $UPTIME0 / $(uptime)"
  echo "- 1-minute load average at the start of each run: $LOADS"
  echo "- ferry ${FERRY_REV:-$(git -C "$FERRY_SRC" rev-parse --short HEAD 2>/dev/null || echo '?')} ($FERRY)"
} | tee "$out"
