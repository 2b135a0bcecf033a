#!/usr/bin/env bash
# bench/pg_read_order.sh - what reading in key order costs the source server (issue 22: the
# per-batch-durable copy against the COPY pipe). A copy that commits batch by batch resumes
# after its last key, so it reads each shard `ORDER BY` the key (an index scan); the pipe
# and an at_commit copy read the table as it lies (a sequential scan). Per round, in order:
#   table     psql COPY public.orders TO STDOUT (binary) > /dev/null: the pipe's read
#   ordered   the same rows as ferry's ordered plan reads them: one COPY (SELECT ... WHERE
#             id >= lo AND id <= hi ORDER BY id) per shard of SHARD_ROWS rows (the postgres
#             source's default shard_rows), > /dev/null
#   subranges the same rows in key ranges of SUB_KEYS ids (default 50000, about a batch) read
#             without ORDER BY, in one REPEATABLE READ transaction, > /dev/null: what a read
#             that only needs whole key ranges per batch, not the order inside them, would cost
#   bitmap    the same with index scans off (`enable_indexscan = off`, no parallel workers):
#             bitmap heap scans, which visit each heap page once, in page order
#   pipe      psql COPY binary | psql COPY binary into an emptied dst.public.orders
#   opipe     the same pipe reading in key order (the `ordered` statements)
#   bpipe     the pipe committed batch by batch (bench/batch_pipe.c): the table read's
#             CopyData messages passed unchanged into one COPY per transaction of BPIPE_ROWS
#             rows (default 50000, ferry's default batch), each transaction also updating a
#             position row as a resumable copy's checkpoint would: what per-batch commits
#             cost the servers with no client work at all
#   spipe     bench/batch_pipe.c in one transaction: the pipe as one process (no psql
#             in between, no pipe between two processes), the same servers' work
#   obpipe    bpipe reading in key order (one `COPY (SELECT … ORDER BY id)`): the lower
#             bound of any copy that commits per batch and resumes after its last key
#   per_apply ferry, defaults (per-batch durability, `overlap_commits: auto`, integrity on)
#   overlap   the same with `overlap_commits: true` (two destination connections, always)
#   no_overlap  the same with `overlap_commits: false` (one destination connection)
#   at_commit ferry with `durability: at_commit` (reads without key order)
#   big       no_overlap with batches 8 times larger (`batch: {rows: 400000, bytes: 16MiB}`):
#             8 times fewer destination transactions, COPY statements and checkpoint writes
#   big4      the same with `{rows: 200000, bytes: 8MiB}` (4 times)
#   b50       the same with `{rows: 50000, bytes: 8MiB}`: 50000-row batches (the default rows,
#             with room in bytes), the transactions of `bpipe` at its default
#   b3q2 b4q1 b6q1  per_apply (overlap_commits auto) with batches of 3MiB and queue 2, 4MiB
#             and queue 1, 6MiB and queue 1: candidates for the default batch size that stay
#             in the 32 MiB memory budget (bench/memory.sh SET=batchsize)
# Each run also counts the blocks the src and dst databases read into shared_buffers (misses,
# pg_stat_database.blks_read): whether a run makes the server read anything twice.
# HUGE_PAGES=off|on|try (default try, PostgreSQL's own default) sets the server's `huge_pages`:
# `on` needs vm.nr_hugepages of at least about 70 for its 128MB of shared buffers (the server
# refuses to start otherwise); `try` uses them only when the kernel has some reserved.
# Destinations are emptied (TRUNCATE + CHECKPOINT, untimed) and their counts checked.
# SHMEM_THP=always|never sets the kernel's transparent huge pages for shared memory for the
# run (root; restored at exit): `always` gives PostgreSQL's ordinary shared memory 2 MB pages.
# SLOW_FLUSH_US=N (default 0) makes every WAL flush of the server wait N µs first, like a disk
# slow to flush (`commit_delay` with `commit_siblings = 0`), where overlapped commits pay.
# WHO="table pipe per_apply ..." runs some of them (table and pipe always: the ratios need them).
# Prints and writes bench/results/OUT.md: every round's wall seconds, medians, ratios, and the
# server's CPU seconds and minor page faults (first touches of shared memory) per run.
#   ROWS=2000000 ROUNDS=5 OUT=pg-read-order-20261204 bash bench/pg_read_order.sh
set -euo pipefail
cd "$(dirname "$0")/.."
FERRY_SRC=$PWD
ROWS=${ROWS:-2000000} ROUNDS=${ROUNDS:-5} SHARD_ROWS=${SHARD_ROWS:-1000000}
FERRY=${FERRY:-build/bench/ferry}
BATCH_PIPE=${BATCH_PIPE:-build/bench/batch_pipe}
BPIPE_ROWS=${BPIPE_ROWS:-50000}
. bench/lib.sh
bench_workdir readorder
[ -x "$FERRY" ] || { echo "pg_read_order.sh: $FERRY: not built (cmake --preset bench)" >&2; exit 2; }
[ -x "$BATCH_PIPE" ] || { echo "pg_read_order.sh: $BATCH_PIPE: not built (cmake --build --preset bench --target batch_pipe)" >&2; exit 2; }
HUGE_PAGES=${HUGE_PAGES:-try}
case $HUGE_PAGES in off | on | try) ;; *) echo "pg_read_order.sh: HUGE_PAGES=$HUGE_PAGES: off, on or try" >&2; exit 2 ;; esac
SLOW_FLUSH_US=${SLOW_FLUSH_US:-0}
# before the server starts; the EXIT trap (chained by pg_start) puts the old setting back
if [ -n "${SHMEM_THP:-}" ]; then
  case $SHMEM_THP in always | never) ;; *) echo "pg_read_order.sh: SHMEM_THP=$SHMEM_THP: always or never" >&2; exit 2 ;; esac
  thp_old=$(bench_shmem_thp) || { echo "pg_read_order.sh: $BENCH_THP_KNOB: not readable" >&2; exit 2; }
  echo "$SHMEM_THP" > "$BENCH_THP_KNOB" || { echo "pg_read_order.sh: $BENCH_THP_KNOB: cannot write (root?)" >&2; exit 2; }
  trap 'rm -rf "$W"; echo "$thp_old" > "$BENCH_THP_KNOB"' EXIT
fi
PG_CONF_EXTRA="$(printf '%s\n' 'fsync = on' 'synchronous_commit = on' 'full_page_writes = on' "huge_pages = $HUGE_PAGES" \
  "commit_delay = $SLOW_FLUSH_US" 'commit_siblings = 0')" pg_start
bench_src_dst
bench_orders "$ROWS"
bench_copy_dst
psql -qX -v ON_ERROR_STOP=1 -d dst -c "CREATE TABLE public.bpipe_position (id int PRIMARY KEY, batches bigint NOT NULL)" >/dev/null
for d in per_apply overlap no_overlap at_commit; do
  case $d in
  overlap) extra="durability: per_apply, overlap_commits: true" ;;
  no_overlap) extra="durability: per_apply, overlap_commits: false" ;;
  *) extra="durability: $d" ;;
  esac
  bench_append_yaml "$W/$d.yaml" read_order "$extra"
done
for d in big:16MiB:400000 big4:8MiB:200000 b50:8MiB:50000; do
  IFS=: read -r name bytes rows <<< "$d"
  bench_append_yaml "$W/$name.yaml" read_order "durability: per_apply, overlap_commits: false"
  echo "batch: {rows: $rows, bytes: $bytes}" >> "$W/$name.yaml"
done
for d in b3q2:3MiB:2 b4q1:4MiB:1 b6q1:6MiB:1; do
  IFS=: read -r name bytes queue <<< "$d"
  bench_append_yaml "$W/$name.yaml" read_order "durability: per_apply"
  echo "batch: {bytes: $bytes, queue: $queue}" >> "$W/$name.yaml"
done
lo=1
: > "$W/ordered.sql"
while [ "$lo" -le "$ROWS" ]; do
  hi=$((lo + SHARD_ROWS - 1))
  echo "COPY (SELECT * FROM public.orders WHERE id >= $lo AND id <= $hi ORDER BY id) TO STDOUT (FORMAT binary);" >> "$W/ordered.sql"
  lo=$((hi + 1))
done
SUB_KEYS=${SUB_KEYS:-50000}
for v in subranges bitmap; do
  {
    [ $v = bitmap ] && echo "SET enable_indexscan = off; SET max_parallel_workers_per_gather = 0;"
    echo "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY;"
    lo=0
    while [ "$lo" -lt "$ROWS" ]; do
      echo "COPY (SELECT * FROM public.orders WHERE id > $lo AND id <= $((lo + SUB_KEYS))) TO STDOUT (FORMAT binary);"
      lo=$((lo + SUB_KEYS))
    done
    echo "COMMIT;"
  } > "$W/$v.sql"
done
plan=$(psql -qXAt -d src -c "EXPLAIN SELECT * FROM public.orders WHERE id >= 1 AND id <= $SHARD_ROWS ORDER BY id" | head -1)

now() { date +%s.%N; }
# the server's CPU ticks (utime stime cutime cstime) and minor page faults (minflt + cminflt:
# first touches of shared memory), its reaped backends included
srv_ticks() { bench_server_sum '$14 + $15 + $16 + $17'; }
srv_faults() { bench_server_sum '$10 + $11'; }
HZ=$(getconf CLK_TCK)
# blocks each database read into shared_buffers (misses: from the kernel's page cache or the
# disk) and found there (hits), and the transactions dst committed, from pg_stat_database:
# "src_read src_hit dst_read dst_hit dst_commits". Backends report their counts when they
# exit; every run here ends its connections first.
db_blks() {
  psql -qXAt -F' ' -d postgres -c "SELECT sum(blks_read) FILTER (WHERE datname = 'src'),
    sum(blks_hit) FILTER (WHERE datname = 'src'), sum(blks_read) FILTER (WHERE datname = 'dst'),
    sum(blks_hit) FILTER (WHERE datname = 'dst'), sum(xact_commit) FILTER (WHERE datname = 'dst')
    FROM pg_stat_database"
}
# runs that only read the source (to /dev/null): no destination to empty or count
read_only() { case $1 in table | ordered | subranges | bitmap) return 0 ;; *) return 1 ;; esac; }
count_ok() { [ "$(psql -qXAt -d dst -c "SELECT count(*) FROM public.orders")" = "$ROWS" ]; }
run() {
  case $1 in
  table) psql -qXAt -v ON_ERROR_STOP=1 -d src -c "COPY public.orders TO STDOUT (FORMAT binary)" >/dev/null ;;
  ordered | subranges | bitmap) psql -qXAt -v ON_ERROR_STOP=1 -d src -f "$W/$1.sql" >/dev/null ;;
  pipe) bench_pipe ;;
  bpipe | obpipe | spipe)
    local read="COPY public.orders TO STDOUT (FORMAT binary)" per=$BPIPE_ROWS
    [ "$1" = obpipe ] && read="COPY (SELECT * FROM public.orders ORDER BY id) TO STDOUT (FORMAT binary)"
    [ "$1" = spipe ] && per=$((ROWS + 1))
    "$BATCH_PIPE" "$BENCH_SRC_URL" "$BENCH_DST_URL" "$read" \
      "COPY public.orders FROM STDIN (FORMAT binary)" "$per" \
      "INSERT INTO public.bpipe_position VALUES (1, 1) ON CONFLICT (id) DO UPDATE SET batches = bpipe_position.batches + 1" >/dev/null ;;
  opipe)
    psql -qX -v ON_ERROR_STOP=1 -d src -c "COPY (SELECT * FROM public.orders ORDER BY id) TO STDOUT (FORMAT binary)" |
      psql -qX -v ON_ERROR_STOP=1 -d dst -c "COPY public.orders FROM STDIN (FORMAT binary)" >/dev/null ;;
  per_apply | overlap | no_overlap | at_commit | big | big4 | b50 | b3q2 | b4q1 | b6q1)
    rm -f "$W"/state.db*
    "$FERRY" run "$W/$1.yaml" --quiet --fresh --state "$W/state.db" >/dev/null ;;
  esac
}
WHO=${WHO:-table ordered pipe opipe per_apply overlap no_overlap at_commit}
# a run named twice runs twice per round (both orders); the table shows it once
RUNS=$(echo "$WHO" | tr ' ' '\n' | awk 'NF && !seen[$0]++' | tr '\n' ' ')
declare -A T C F SR DR DC
for r in $(seq 1 "$ROUNDS"); do
  for who in $WHO; do
    read_only "$who" || bench_fresh_dst
    read -r sr0 sh0 dr0 dh0 dc0 <<< "$(db_blks)"
    c0=$(srv_ticks) f0=$(srv_faults) t0=$(now)
    run "$who"
    t=$(echo "$(now) - $t0" | bc) c=$(echo "scale=2; ($(srv_ticks) - $c0) / $HZ" | bc)
    f=$(( $(srv_faults) - f0 ))
    sleep 0.5 # the backends' exit reports
    read -r sr1 sh1 dr1 dh1 dc1 <<< "$(db_blks)"
    sr=$((sr1 - sr0)) dr=$((dr1 - dr0)) dc=$((dc1 - dc0))
    read_only "$who" || count_ok || { echo "pg_read_order.sh: $who: wrong row count" >&2; exit 1; }
    T[$who]="${T[$who]:-} $(printf %.2f "$t")" C[$who]="${C[$who]:-} $(printf %.2f "$c")" F[$who]="${F[$who]:-} $f"
    SR[$who]="${SR[$who]:-} $sr" DR[$who]="${DR[$who]:-} $dr" DC[$who]="${DC[$who]:-} $dc"
    echo "round $r: $who $(printf %.2f "$t") s, server CPU $(printf %.2f "$c") s, server minor faults $f," \
      "blocks read: src $sr (hit $((sh1 - sh0))), dst $dr (hit $((dh1 - dh0))), dst commits $dc" >&2
  done
done
med() { tr ' ' '\n' | grep . | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
declare -A M MC MF MSR MDR MDC
for who in $RUNS; do
  M[$who]=$(echo "${T[$who]}" | med) MC[$who]=$(echo "${C[$who]}" | med) MF[$who]=$(echo "${F[$who]}" | med)
  MSR[$who]=$(echo "${SR[$who]}" | med) MDR[$who]=$(echo "${DR[$who]}" | med) MDC[$who]=$(echo "${DC[$who]}" | med)
done
# three decimals, rounded (bc's scale cuts: 1.0579 would read 1.05)
ratio() { printf '%.3f' "$(echo "scale=6; $1 / $2" | bc)"; }
out=bench/results/$OUT.md
{
  echo "# Reading in key order: the source's cost, against the COPY pipe ($(date -u '+%Y-%m-%d %H:%M UTC'))"
  echo
  echo "$ROWS rows of bench/lib.sh's orders table (keyed by id, written in key order), src → dst on one"
  echo "PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}') with fsync on. \`ordered\` reads the rows as ferry's ordered plan does, one"
  echo "\`COPY (SELECT … WHERE id >= lo AND id <= hi ORDER BY id)\` per shard of $SHARD_ROWS rows (plan: \`$plan\`);"
  echo "\`table\` is the pipe's read, \`COPY public.orders TO\`; both to /dev/null. ferry runs at its defaults"
  echo "(integrity on) with \`durability: per_apply\` (resumes after its last key: reads ordered) or"
  echo "\`at_commit\` (resumes from the start: reads without order); per_apply runs the default"
  echo "\`overlap_commits: auto\`, \`overlap\` and \`no_overlap\` are per_apply with \`overlap_commits: true\` and"
  echo "\`false\`; \`opipe\` is the pipe reading \`ORDER BY id\`. Server: huge_pages $HUGE_PAGES,"
  echo "kernel: $(bench_pages)."
  case " $WHO " in *" subranges "* | *" bitmap "*) echo "\`subranges\` and \`bitmap\` read key ranges of $SUB_KEYS ids without ORDER BY in one transaction, to /dev/null (\`bitmap\`: index scans off, plan \`$(psql -qXAt -d src -c 'SET enable_indexscan = off' -c 'SET max_parallel_workers_per_gather = 0' -c "EXPLAIN SELECT * FROM public.orders WHERE id > 0 AND id <= $SUB_KEYS" | awk 'NR == 1')\`)." ;; esac
  case " $WHO " in *"bpipe "* | *" spipe "*) echo "\`bpipe\` and \`obpipe\` are the pipe (reading as \`table\` and as \`opipe\`) committed every $BPIPE_ROWS rows by bench/batch_pipe.c, with a position row updated in each transaction; \`spipe\` is bench/batch_pipe.c in one transaction (the pipe as one process)." ;; esac
  case " $WHO " in *" b3q2 "* | *" b4q1 "* | *" b6q1 "*) echo "\`b3q2\`, \`b4q1\` and \`b6q1\` are per_apply with \`batch: {bytes: 3MiB, queue: 2}\`, \`{bytes: 4MiB, queue: 1}\` and \`{bytes: 6MiB, queue: 1}\`." ;; esac
  case " $WHO " in *" big"* | *" b50 "*) echo "\`big\`, \`big4\` and \`b50\` are no_overlap with batches of 400000 rows / 16MiB, 200000 rows / 8MiB and 50000 rows / 8MiB (defaults 50000 / 2MiB)." ;; esac
  [ "$SLOW_FLUSH_US" = 0 ] || echo "Every WAL flush waited $SLOW_FLUSH_US µs first (\`commit_delay\`, \`commit_siblings = 0\`): a disk slow to flush."
  echo "Server CPU: user + system seconds of every PostgreSQL process over the run (the postmaster's"
  echo "own and its exited children's, from /proc); server minor faults: their minor page faults"
  echo "(minflt + cminflt), mostly first touches of shared memory. Blocks read: 8 kB blocks each"
  echo "database read into shared_buffers because they were not there (pg_stat_database \`blks_read\`:"
  echo "tables, indexes, ferry's checkpoint table); dst commits: the transactions dst committed over the run (its"
  echo "xact_commit, the counting statements' own included). The source table holds $(psql -qXAt -d src -c "SELECT pg_relation_size('public.orders') / 8192") blocks, its key's"
  echo "index $(psql -qXAt -d src -c "SELECT pg_relation_size('public.orders_pkey') / 8192"); shared_buffers is $(psql -qXAt -d src -c 'SHOW shared_buffers'). $ROUNDS rounds, in the order of the table."
  echo
  echo "| run | median wall s | × table read | × pipe | median server CPU s | median server minor faults | median src blocks read | median dst blocks read | median dst commits | every round, s |"
  echo "|---|---|---|---|---|---|---|---|---|---|"
  for who in $RUNS; do
    echo "| $who | ${M[$who]} | $(ratio "${M[$who]}" "${M[table]}")× | $(ratio "${M[$who]}" "${M[pipe]}")× | ${MC[$who]} | ${MF[$who]} | ${MSR[$who]} | ${MDR[$who]} | ${MDC[$who]} |${T[$who]} |"
  done
  echo
  echo "Machine: $(nproc) cores ($(lscpu | sed -n 's/^Model name: *//p' | head -1)), load at the end $(cut -d' ' -f1-3 /proc/loadavg)."
  echo "ferry $(git rev-parse --short HEAD) ($FERRY)."
} | tee "$out"
