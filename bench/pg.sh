#!/usr/bin/env bash
# PostgreSQL → PostgreSQL benchmark (issue 3): one throw-away server (tests/pg/pg.sh) holding
# two databases, `src` and `dst`; a ROWS-row orders-like table made with generate_series in
# src; then, on the same data in one run, best of REPS wall times for
#   a. psql COPY … TO STDOUT (FORMAT binary) | psql COPY … FROM STDIN (FORMAT binary)
#   b. ferry postgres → postgres, write: append (integrity digest on), parallelism 1, the
#      build's defaults (per_apply; since session 28 `overlap_commits: auto`, before it `true`)
#   b0. ferry append per_apply with `overlap_commits: false` (one connection, each batch's
#      COMMIT waited for before the next batch starts: the A/B of overlapped commits)
#   b". the same with `durability: at_commit`: one destination transaction, like the pipe's
#      single COPY; the source then reads without key order (docs/connectors.md)
#   c. pgcopydb copy table-data
#   d. pgloader (PostgreSQL source; its error is recorded when it fails)
#   e. ferry write: upsert into the already-populated keyed table (every key exists)
# with rows/s, MB/s (of the COPY binary byte count of the source table), the clients' peak RSS
# (/usr/bin/time %M; the pipe's two psql processes both; server backends not counted) and the
# ratio to the COPY pipe. Every destination is checked after its tool's last run: row count
# and md5 over the rows in key order equal the source's, else the row says WRONG.
# Prints a markdown table and writes it to bench/results/pg-<date>.md. Never gates CI.
#   ROWS=5000000 REPS=3 bash bench/pg.sh
#   PAR2=auto|1|0 runs b'. ferry append with parallelism 2 (auto: when the source reads shards
#   in parallel).
#   FERRY_REV=label names the source tree in the results (default: git HEAD).
#   OUT=pg-20261130-atcommit.md names the results file (default pg-<date>[-<rows>rows].md).
#   QUICK=1 runs only a, b0, b and b" (no pgcopydb, pgloader, e, nor the upsert part below
#   unless UPSERT=1).
#   FSYNC=on runs the server with fsync, synchronous_commit and full_page_writes on (the
#   throw-away server of tests/pg/pg.sh has them off): each commit then waits for the disk.
#   PROFILE=1 also records `perf record -g` of one ferry append run (write it to results).
# Upserts at the staging limit (issue 22): a table of UPSERT_ROWS rows (default 1000000, the
# first rows of the source) upserted into a keyed destination prepared with three key mixes:
# all-new (empty), all-existing (every key, with another status), half (every even key).
# Per mix, interleaved, best of REPS: the staging-table anchor an engineer writes by hand
# (psql COPY binary | psql -1: CREATE TEMP TABLE … (LIKE …); COPY … FROM STDIN (FORMAT
# binary); INSERT … SELECT … ON CONFLICT (id) DO UPDATE), the same with MERGE (PostgreSQL
# 15), and ferry write: upsert; ratio to the INSERT anchor; every destination verified.
#   ONLY=upsert runs only that part (ONLY=copy only a-e); UPSERT=0 skips it.
#   UPSERT_PROFILE=1 also records `perf record -g` of one ferry upsert run (half mix), with and
#   without FERRY_PG_NO_MERGE=1. UPSERT_OLD=1 adds per mix a ferry run with FERRY_PG_NO_MERGE=1.
#   UPSERT_BATCHED=1 adds the INSERT anchor committed per batch (bench/pg_upsert.sh).
#   Then merge with deletes (bench/pg_merge.sh: a cdc backlog of UPSERT_ROWS × 1.25 changes,
#   ferry's MERGE path and pre-15 SQL against the two anchors); MERGE_CDC=0 skips it.
set -euo pipefail
cd "$(dirname "$0")/.."
FERRY_SRC=$PWD
ROWS=${ROWS:-5000000}
REPS=${REPS:-3}
PROFILE=${PROFILE:-0}
ONLY=${ONLY:-}
UPSERT_ROWS=${UPSERT_ROWS:-1000000}
[ "$UPSERT_ROWS" -gt "$ROWS" ] && UPSERT_ROWS=$ROWS
UPSERT_PROFILE=${UPSERT_PROFILE:-0}
RUN_COPY=1 RUN_UPSERT=${UPSERT:-1}
[ "${QUICK:-0}" = 1 ] && RUN_UPSERT=${UPSERT:-0} # (QUICK=1 UPSERT=1: both)
[ "$ONLY" = upsert ] && RUN_COPY=0 && RUN_UPSERT=1
[ "$ONLY" = copy ] && RUN_UPSERT=0
# b'. ferry append with parallelism 2: auto runs it unless the source documents that it reads
# its shards one after the other (then the row would only repeat b); 1 forces it, 0 skips it.
PAR2=${PAR2:-auto}
if [ "$PAR2" = auto ]; then
  if grep -q 'reads shards one after the other' docs/connectors.md 2>/dev/null; then PAR2=0; else PAR2=1; fi
fi
jobs=$(nproc 2>/dev/null || echo 2)

# ---- what the benchmark needs ----------------------------------------------------------------
need=()
for p in postgresql postgresql-contrib pgcopydb pgloader time jq; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
{ [ "$PROFILE" = 1 ] || [ "$UPSERT_PROFILE" = 1 ]; } && ! command -v perf >/dev/null && need+=(linux-perf)
if [ "${#need[@]}" -gt 0 ]; then
  echo "installing: ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# ---- ferry, Release --------------------------------------------------------------------------
build_note="Release (-O3), warnings as errors"
if ! { cmake -S . -B build/bench -DCMAKE_BUILD_TYPE=Release -DFERRY_WERROR=ON >/dev/null &&
       cmake --build build/bench -j"$jobs" --target ferry >/dev/null 2>"${TMPDIR:-/tmp}/pgbench-build.err"; }; then
  # A warning that -O3 finds and the Debug build does not must not stop the measurement; it
  # is reported in the results so that it gets fixed.
  echo "pg.sh: Release build failed with warnings as errors; rebuilding with FERRY_WERROR=OFF:" >&2
  grep -m3 'error:' "${TMPDIR:-/tmp}/pgbench-build.err" >&2 || true
  build_note="Release (-O3) with FERRY_WERROR=OFF: the -Werror build failed ($(grep -m1 'error:' "${TMPDIR:-/tmp}/pgbench-build.err" | sed 's|^.*/src/|src/|' | cut -c1-140))"
  cmake -S . -B build/bench -DCMAKE_BUILD_TYPE=Release -DFERRY_WERROR=OFF >/dev/null
  cmake --build build/bench -j"$jobs" --target ferry >/dev/null
fi
FERRY=$FERRY_SRC/build/bench/ferry
BATCH_PIPE=$FERRY_SRC/build/bench/batch_pipe # UPSERT_BATCHED=1 (bench/pg_upsert.sh)
[ "${UPSERT_BATCHED:-0}" = 1 ] && cmake --build build/bench -j"$jobs" --target batch_pipe >/dev/null

W=$(mktemp -d "${TMPDIR:-/tmp}/ferry-pgbench.XXXXXX")
chmod 755 "$W"
trap 'rm -rf "$W"' EXIT
# shellcheck source=lib.sh
. "$FERRY_SRC/bench/lib.sh" # the server, src and dst, the orders table
bench_pg_start "${FSYNC:-off}"
cd "$W"

bench_src_dst
qs() { psql -v ON_ERROR_STOP=1 -qXAt -d src "$@"; }
qd() { psql -v ON_ERROR_STOP=1 -qXAt -d dst "$@"; }
COLS=$BENCH_ORDERS_COLS

UPTIME0=$(uptime)
echo "generating $ROWS rows in src.public.orders..." >&2
bench_orders "$ROWS"
# a-d land in a table like the source without a key (what ferry's append creates itself);
# e needs the key: up.orders, populated by one COPY pipe (timed once, shown for context).
qd -c "CREATE TABLE public.orders ($COLS)" -c "CREATE SCHEMA up" -c "CREATE TABLE up.orders ($COLS, PRIMARY KEY (id))"

DIGEST_SQL="SELECT count(*) || ' ' || md5(string_agg(md5(t::text), '' ORDER BY t.id)) FROM %s t"
# shellcheck disable=SC2059
src_digest=$(qs -c "$(printf "$DIGEST_SQL" public.orders)")
rel_bytes=$(qs -c "SELECT pg_total_relation_size('public.orders')")
copy_bytes=$(psql -qX -d src -c "COPY public.orders TO STDOUT (FORMAT binary)" | wc -c)

# verify DB TABLE -> "ok" or "WRONG (…)"
verify() {
  local got
  # shellcheck disable=SC2059
  got=$(psql -v ON_ERROR_STOP=1 -qXAt -d "$1" -c "$(printf "$DIGEST_SQL" "$2")" 2>&1) || got="query failed: $got"
  if [ "$got" = "$src_digest" ]; then echo ok; else echo "WRONG (count+md5 $got, source $src_digest)"; fi
}
now() { date +%s.%N; }
# tm FILE: "peak_rss_kib cpu_seconds" from /usr/bin/time -f '%M %U %S' output (last line)
tm() { tail -n1 "$1" | awk '{printf "%s %.2f", $1, $2 + $3}'; }
fresh_dst() { qd -c "TRUNCATE public.orders" -c "DROP SCHEMA IF EXISTS _ferry CASCADE" -c "CHECKPOINT"; }
noop() { :; }

# Each one_* runs once (preparation untimed) and prints "secs rss..." or "FAIL message".
one_pipe() { # one_pipe SCHEMA
  local t0 t1
  t0=$(now)
  if ! /usr/bin/time -f '%M %U %S' -o "$W/rss_out" psql -qX -v ON_ERROR_STOP=1 -d src \
         -c "COPY public.orders TO STDOUT (FORMAT binary)" 2>"$W/err_out" |
       /usr/bin/time -f '%M %U %S' -o "$W/rss_in" psql -qX -v ON_ERROR_STOP=1 -d dst \
         -c "COPY $1.orders FROM STDIN (FORMAT binary)" >/dev/null 2>"$W/err_in"; then
    echo "FAIL $(tail -n1 "$W/err_out" "$W/err_in" | tr '\n' ' ')"; return
  fi
  t1=$(now)
  echo "$(echo "$t1 - $t0" | bc) $(tm "$W/rss_out") $(tm "$W/rss_in")"
}

ferry_yaml() { # ferry_yaml FILE NAME WRITE SCHEMA PARALLELISM [DURABILITY [TABLE]]
  cat > "$1" <<YAML
version: 1
name: $2
source:
  type: postgres
  url: env:BENCH_SRC_URL
  parallelism: $5
  resources:
    - {table: ${7:-public.orders}, mode: full}
sink:
  type: postgres
  url: env:BENCH_DST_URL
  schema: $4
  write: $3
  durability: ${6:-per_apply}
YAML
}
one_ferry() { # one_ferry FILE [ROWS]
  local t0 t1 rows
  rm -f "$W"/state.db*
  t0=$(now)
  if ! /usr/bin/time -f '%M %U %S' -o "$W/rss_ferry" "$FERRY" run "$1" --json --fresh --state "$W/state.db" \
         >"$W/ferry.json" 2>"$W/err_ferry"; then
    echo "FAIL $(jq -r '.error.message // empty' "$W/ferry.json" 2>/dev/null) $(tail -n1 "$W/err_ferry")"; return
  fi
  t1=$(now)
  rows=$(jq -r .rows "$W/ferry.json")
  [ "$rows" = "${2:-$ROWS}" ] || { echo "FAIL ferry reported $rows rows"; return; }
  echo "$(echo "$t1 - $t0" | bc) $(tm "$W/rss_ferry")"
}

one_pgcopydb() {
  local t0 t1
  rm -rf "$W/pgcopydb"
  t0=$(now)
  if ! /usr/bin/time -f '%M %U %S' -o "$W/rss_pgcopydb" pgcopydb copy table-data --source "$BENCH_SRC_URL" \
         --target "$BENCH_DST_URL" --dir "$W/pgcopydb" --table-jobs 1 >"$W/out_pgcopydb" 2>&1; then
    echo "FAIL $(grep -m1 -E 'ERROR|FATAL' "$W/out_pgcopydb" | sed 's/postgresql:[^ ]*@/…@/g' | cut -c1-200)"; return
  fi
  t1=$(now)
  echo "$(echo "$t1 - $t0" | bc) $(tm "$W/rss_pgcopydb")"
}

one_pgloader() {
  local t0 t1
  cat > "$W/load.pgl" <<EOF
LOAD DATABASE
  FROM pgsql://$PGUSER:$PGPASSWORD@127.0.0.1:$PGPORT/src
  INTO pgsql://$PGUSER:$PGPASSWORD@127.0.0.1:$PGPORT/dst
  WITH data only, truncate, workers = 2, concurrency = 1, prefetch rows = 25000
  INCLUDING ONLY TABLE NAMES MATCHING 'orders' IN SCHEMA 'public';
EOF
  rm -rf "$W/pgloader"
  t0=$(now)
  if ! /usr/bin/time -f '%M %U %S' -o "$W/rss_pgloader" pgloader --no-ssl-cert-verification -D "$W/pgloader" \
         --on-error-stop "$W/load.pgl" >"$W/out_pgloader" 2>&1; then
    echo "FAIL $(grep -m1 -A1 -E 'ERROR|FATAL|rror' "$W/out_pgloader" | sed 's/pgsql:[^ ]*@/…@/g' | tr '\n' ' ' | cut -c1-200)"; return
  fi
  t1=$(now)
  # pgloader exits 0 with rows in error: the verification below catches those.
  echo "$(echo "$t1 - $t0" | bc) $(tm "$W/rss_pgloader")"
}

# Rounds interleave the tools (a b c d e, REPS times) so that anything else using the machine
# weighs on all of them alike; each tool keeps its best run, or its first failure. The
# destination is verified right after each tool's run of the last round.
declare -A R V NF FM
LOADS=""
# measure TOOL PREP TABLE RUN... (TABLE: what to verify in dst). A failed run is counted and
# its message kept; the tool's row shows its best successful run, if any, and the failures.
measure() {
  local tool=$1 prep=$2 table=$3 line; shift 3
  $prep >/dev/null
  LOADS="$LOADS $(cut -d' ' -f1 /proc/loadavg)"
  line=$("$@")
  case $line in
    FAIL*) NF[$tool]=$((${NF[$tool]:-0} + 1)); FM[$tool]=${FM[$tool]:-$line} ;;
    *) if [ -z "${R[$tool]:-}" ] || awk -v a="${line%% *}" -v c="${R[$tool]%% *}" 'BEGIN{exit !(a<c)}'
       then R[$tool]=$line; fi ;;
  esac
  if [ "$round" = "$REPS" ]; then
    case $line in FAIL*) V[$tool]="not checked (last run failed)" ;; *) V[$tool]=$(verify dst "$table") ;; esac
  fi
  return 0
}
# result TOOL -> "secs rss cpu…" or "FAIL msg"; failures of a tool that also succeeded are
# appended to its verification cell by `note`.
result() { if [ -n "${R[$1]:-}" ]; then echo "${R[$1]}"; else echo "${FM[$1]:-FAIL no run}"; fi; }
note() {
  local v=${V[$1]:-not checked}
  if [ -n "${R[$1]:-}" ] && [ "${NF[$1]:-0}" -gt 0 ]; then
    v="$v; FAILED ${NF[$1]} of $REPS runs: ${FM[$1]#FAIL }"
  fi
  echo "$v"
}
# Every ferry run uses a new state file, so its run ids start again at 1: the destination's
# `_ferry` checkpoints of an earlier run 1 would be taken for this run's progress (and the
# run would move nothing), so they are dropped before each run.
vacuum_up() { qd -c "VACUUM up.orders" -c "DROP SCHEMA IF EXISTS _ferry CASCADE" -c "CHECKPOINT"; }

if [ "$RUN_COPY" = 1 ]; then
ferry_yaml "$W/append1.yaml" bench_append append public 1
ferry_yaml "$W/append1c.yaml" bench_append_c append public 1 at_commit
ferry_yaml "$W/append1s.yaml" bench_append_s append public 1
echo "  overlap_commits: false" >> "$W/append1s.yaml"
QUICK=${QUICK:-0}
ferry_yaml "$W/upsert.yaml" bench_upsert upsert up 1
ferry_yaml "$W/append2.yaml" bench_append2 append public 2
echo "populating the keyed table dst.up.orders for e (COPY pipe, once)" >&2
fresh_dst >/dev/null
round=$REPS
measure keyed noop up.orders one_pipe up
for round in $(seq 1 "$REPS"); do
  echo "round $round/$REPS: a. COPY pipe, b. ferry append (per_apply, at_commit), c. pgcopydb, d. pgloader, e. ferry upsert" >&2
  measure pipe fresh_dst public.orders one_pipe public
  measure fs fresh_dst public.orders one_ferry "$W/append1s.yaml"
  measure f1 fresh_dst public.orders one_ferry "$W/append1.yaml"
  measure fc fresh_dst public.orders one_ferry "$W/append1c.yaml"
  [ "$QUICK" = 1 ] && continue
  [ "$PAR2" = 1 ] && measure f2 fresh_dst public.orders one_ferry "$W/append2.yaml"
  measure pgc fresh_dst public.orders one_pgcopydb
  measure pgl fresh_dst public.orders one_pgloader
  measure up vacuum_up up.orders one_ferry "$W/upsert.yaml"
done
r_pipe=$(result pipe) v_pipe=$(note pipe) r_f1=$(result f1) v_f1=$(note f1)
r_pgc=$(result pgc) v_pgc=$(note pgc) r_pgl=$(result pgl) v_pgl=$(note pgl)
r_keyed=$(result keyed) v_keyed=$(note keyed) r_up=$(result up) v_up=$(note up)
r_f2=$(result f2) v_f2=$(note f2) r_fc=$(result fc) v_fc=$(note fc)
r_fs=$(result fs) v_fs=$(note fs)

if [ "$PROFILE" = 1 ]; then
  # Two views of one ferry append run each: ferry's own samples (where the client spends its
  # CPU), and the whole machine by command (ferry against the two server backends).
  echo "profile: perf record -g of ferry append runs" >&2
  for view in ferry system; do
    fresh_dst >/dev/null
    rm -f "$W"/state.db*
    if [ $view = ferry ]; then set -- -g; else set -- -a -g; fi
    perf record -q "$@" -o "$W/perf.$view" -- "$FERRY" run "$W/append1.yaml" --quiet --fresh \
      --state "$W/state.db" >/dev/null 2>"$W/perf.err"
  done
  perf report -i "$W/perf.ferry" --no-children --sort dso,symbol --stdio 2>/dev/null |
    grep -E '^ +[0-9.]+%' | head -n 25 > "$W/perf.top" || true
  perf report -i "$W/perf.system" --no-children --sort comm --stdio 2>/dev/null |
    grep -E '^ +[0-9.]+%' | head -n 8 > "$W/perf.comm" || true
  perf report -i "$W/perf.system" --no-children --comm postgres --sort dso,symbol --stdio 2>/dev/null |
    grep -E '^ +[0-9.]+%' | head -n 20 > "$W/perf.server" || true
fi

fi # RUN_COPY

[ "$RUN_UPSERT" = 1 ] && . "$FERRY_SRC/bench/pg_upsert.sh"

pipe_s=${r_pipe:-FAIL not run}
pipe_s=${pipe_s%% *}
# row LABEL RESULT VERIFIED: RESULT is "secs rss_kib cpu_s [rss_kib cpu_s]" or "FAIL …"
row() {
  local label=$1 res=$2 ver=$3
  case $res in
    "FAIL no run") printf '| %s | not run | | | | | | (QUICK=1, ONLY or PAR2) |\n' "$label"; return ;;
    FAIL*) printf '| %s | failed | | | | | | %s |\n' "$label" "${res#FAIL }"; return ;;
  esac
  set -- $res
  # (the label through the environment: awk -v would turn its "\|" into a bare "|")
  L="$label" awk -v s="$1" -v k1="$2" -v c1="$3" -v k2="${4:-}" -v c2="${5:-}" -v r="$ROWS" \
      -v b="$copy_bytes" -v p="$pipe_s" -v v="$ver" 'BEGIN{
    rss = (k2 == "") ? sprintf("%.1f", k1/1024) : sprintf("%.1f + %.1f", k1/1024, k2/1024);
    cpu = (k2 == "") ? sprintf("%.2f", c1) : sprintf("%.2f + %.2f", c1, c2);
    ratio = (p ~ /^[0-9.]+$/) ? sprintf("%.2f×", s/p) : "n/a";
    printf "| %s | %.2f | %.0f | %.1f | %s | %s | %s | %s |\n", ENVIRON["L"], s, r/s, b/s/1e6, rss, cpu, ratio, v }'
}
pgset() { qs -c "SELECT string_agg(name || '=' || current_setting(name), ', ' ORDER BY name) FROM pg_settings WHERE name IN ($1)"; }

mkdir -p "$FERRY_SRC/bench/results"
[ "$RUN_COPY" = 1 ] || [ -n "${OUT:-}" ] || OUT=pg-upsert-$(date -u +%Y%m%d)-${UPSERT_ROWS}rows.md
out="$FERRY_SRC/bench/results/pg-$(date -u +%Y%m%d).md"
[ "$ROWS" = 5000000 ] || out="${out%.md}-${ROWS}rows.md"
# OUT=NAME writes bench/results/NAME instead (keeps an earlier result of the same day).
[ -n "${OUT:-}" ] && out="$FERRY_SRC/bench/results/$OUT"
{
  echo "# PostgreSQL → PostgreSQL benchmark ($(date -u +%Y-%m-%d))"
  echo
  if [ "$RUN_COPY" = 1 ]; then
  echo "$ROWS rows of an orders-like table (bigint key, int, text, numeric(12,2), smallint, float8 with"
  echo "20 % NULL, bool, text with 25 % NULL, two timestamptz), made with generate_series, VACUUM ANALYZE."
  echo "Source: database \`src\`; destination: database \`dst\` on the **same server** (one PostgreSQL,"
  echo "client and server share the machine's cores). Best of $REPS wall times per tool; each run starts"
  echo "from an empty destination (TRUNCATE + CHECKPOINT, untimed); the destination of a-d has no key."
  echo "The tools run interleaved (a b c d e, $REPS rounds). e upserts every row into \`dst.up.orders\`"
  echo "(primary key on id), populated once beforehand by a COPY pipe (shown as context; VACUUM between runs)."
  echo
  echo "- MB/s is of the source table's COPY binary byte count: $copy_bytes bytes"
  echo "  ($(awk -v b="$copy_bytes" 'BEGIN{printf "%.1f", b/1048576}') MiB); pg_total_relation_size of the source is $rel_bytes bytes ($(awk -v b="$rel_bytes" 'BEGIN{printf "%.1f", b/1048576}') MiB)."
  echo "- Peak RSS is of the client processes only (/usr/bin/time %M; for the pipe: COPY TO side + COPY FROM"
  echo "  side), never of the server backends; client CPU is user + sys seconds of the same processes."
  echo "- verified: count and md5(string_agg(md5(row::text) ORDER BY id)) of the destination equal the"
  echo "  source's, checked after each tool's last run."
  echo
  echo "| tool | wall s | rows/s | MB/s | client peak RSS MiB | client CPU s | × COPY pipe | verified |"
  echo "|---|---|---|---|---|---|---|---|"
  row "a. psql COPY binary \\| psql COPY binary" "$r_pipe" "$v_pipe"
  row "b0. ferry append, per_apply, overlap_commits: false (integrity on)" "$r_fs" "$v_fs"
  row "b. ferry append, parallelism 1, defaults (integrity on)" "$r_f1" "$v_f1"
  row "b\". ferry append, durability at_commit, parallelism 1 (integrity on)" "$r_fc" "$v_fc"
  if [ "$PAR2" = 1 ]; then
    row "b'. ferry append, parallelism 2 (integrity on)" "$r_f2" "$v_f2"
  else
    echo "| b'. ferry append, parallelism 2 | not run | | | | | | the source reads its shards one after the other (docs/connectors.md: \`parallelism\` is recorded in the plan only) |"
  fi
  row "c. pgcopydb copy table-data (--table-jobs 1)" "$r_pgc" "$v_pgc"
  row "d. pgloader (workers 2, concurrency 1, prefetch rows 25000)" "$r_pgl" "$v_pgl"
  row "(context) COPY pipe into the keyed table, 1 run" "$r_keyed" "$v_keyed"
  row "e. ferry upsert, every key present" "$r_up" "$v_up"
  echo
  case $r_f1 in FAIL*) ;; *)
    awk -v f="${r_f1%% *}" -v p="$pipe_s" -v k="$(echo "$r_f1" | cut -d' ' -f2)" -v ku="$(echo "$r_up" | cut -d' ' -f2)" 'BEGIN{
      printf "Targets: ferry append wall time %.2f× the COPY pipe (target ≤ 1.10×: %s); ", f/p, (f/p <= 1.10) ? "met" : "NOT met";
      printf "ferry peak RSS %.1f MiB append, %s MiB upsert (target ≤ 64 MiB: %s).\n", k/1024, (ku ~ /^[0-9]+$/) ? sprintf("%.1f", ku/1024) : "n/a",
        (k <= 65536 && (ku !~ /^[0-9]+$/ || ku <= 65536)) ? "met" : "NOT met" }'
  esac
  case $r_fc in FAIL*) ;; *)
    awk -v f="${r_fc%% *}" -v p="$pipe_s" -v k="$(echo "$r_fc" | cut -d' ' -f2)" 'BEGIN{
      printf "ferry append with durability at_commit (one transaction, as the pipe): wall time %.2f× the COPY pipe (target ≤ 1.10×: %s); peak RSS %.1f MiB.\n",
        f/p, (f/p <= 1.10) ? "met" : "NOT met", k/1024 }'
  esac
  fi # RUN_COPY
  [ "$RUN_UPSERT" = 1 ] && upsert_report
  echo
  echo "## Machine"
  echo
  echo "- $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), $(awk '/MemTotal/{printf "%.0f GiB", $2/1048576}' /proc/meminfo) RAM, $(uname -sr)"
  echo "- $(qs -c 'SELECT version()')"
  echo "- \`uptime\` before and after: $UPTIME0 / $(uptime)"
  echo "- 1-minute load average at the start of each measured run: min $(echo $LOADS | tr ' ' '\n' | sort -g | head -n1), max $(echo $LOADS | tr ' ' '\n' | sort -g | tail -n1) (anything well above 0 means other processes shared the $(nproc) cores)"
  echo "- kernel: $(bench_pages)"
  echo "- server settings: $(pgset "'fsync','synchronous_commit','full_page_writes','wal_level','shared_buffers','max_wal_size','work_mem','maintenance_work_mem'")"
  echo "- ferry ${FERRY_REV:-$(git -C "$FERRY_SRC" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$FERRY_SRC" diff --quiet 2>/dev/null || echo ' (work tree modified)')}, $build_note; default batch settings (50000 rows / 2 MiB, queue 2), shard_rows 1000000"
  echo "- $(pgcopydb --version 2>&1 | grep -m1 -o 'pgcopydb version [^ ]*'), $(pgloader --version 2>&1 | head -n1), $(psql --version)"
  if [ -s "$W/perf.top" ]; then
    echo
    echo "## perf: ferry append ($ROWS rows), perf record -g, self time"
    echo
    echo "ferry process, top symbols:"
    echo
    echo '```'
    cat "$W/perf.top"
    echo '```'
    echo
    echo "Whole machine (perf record -a) during a second run, by command:"
    echo
    echo '```'
    cat "$W/perf.comm"
    echo '```'
    echo
    echo "Whole machine, the postgres backends' top symbols (share of all samples):"
    echo
    echo '```'
    cat "$W/perf.server"
    echo '```'
  fi
} | tee "$out"
echo "written to $out"
