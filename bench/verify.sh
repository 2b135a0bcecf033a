#!/usr/bin/env bash
# `ferry verify` benchmark (issue 8): one throw-away server (tests/pg/pg.sh) holding two
# databases, `src` and `dst`; a ROWS-row orders-like table made with generate_series in src
# and copied byte for byte into dst (COPY binary pipe). Then, best of REPS wall times, on
# the same data in one run:
#   a. ferry verify (tables equal): one digest query per side, run concurrently
#   b. the query `pgcopydb compare data` sends for a table (src/bin/pgcopydb/schema.c:
#      count(1) and sum(hashtext(row::text)::bigint)), run on both sides concurrently as
#      pgcopydb does. The installed pgcopydb (Debian 0.10) has no `compare` command, so its
#      query is run through psql; connection setup is included for both tools.
#   c. a naive md5(string_agg(t::text, '' ORDER BY id)) on both sides concurrently
#   d. ferry verify after 5 changes in dst (one row deleted, one added, three changed):
#      the time and traffic to name exactly those keys
# Bytes are what crosses to the client: statement text plus result values, counted the same
# way for every row (ferry counts its own; b and c are one short query and one row per
# side). Table size is pg_table_size of the source. The load average before and after is
# recorded: these machines are shared. Writes bench/results/verify-<date>.md. Never gates CI.
#   ROWS=5000000 REPS=3 bash bench/verify.sh
set -euo pipefail
cd "$(dirname "$0")/.."
FERRY_SRC=$PWD
ROWS=${ROWS:-5000000}
REPS=${REPS:-3}
jobs=$(nproc 2>/dev/null || echo 2)
[ "$jobs" -gt 2 ] && jobs=2

cmake -S . -B build/verify-bench -DCMAKE_BUILD_TYPE=Release -DFERRY_WERROR=OFF >/dev/null
cmake --build build/verify-bench -j"$jobs" --target ferry >/dev/null
FERRY=$FERRY_SRC/build/verify-bench/ferry

. "$FERRY_SRC/tests/pg/pg.sh"
pg_start
W=$(mktemp -d "${TMPDIR:-/tmp}/ferry-vbench.XXXXXX")
trap 'rm -rf "$W"; pg_stop' EXIT
export FERRY_STATE=$W/state.db
pgq() { psql -v ON_ERROR_STOP=1 -qXAt "$@"; }
pgq -c "CREATE DATABASE src" -c "CREATE DATABASE dst"
export SRC_URL="${FERRY_PG_URL%/*}/src" DST_URL="${FERRY_PG_URL%/*}/dst"
schema="CREATE TABLE public.orders (id bigint PRIMARY KEY, customer_id int NOT NULL, status text,
  amount numeric(12,2), discount float8, created_at timestamptz, note text, ref uuid);"
pgq -d src -c "$schema"
pgq -d dst -c "$schema"
echo "generating $ROWS rows..." >&2
pgq -d src -c "INSERT INTO orders SELECT g, g % 10007, (ARRAY['new','paid','shipped','returned'])[1 + g % 4],
  (g % 100000) / 100.0, CASE WHEN g % 5 = 0 THEN NULL ELSE (g % 7) * 0.5 END,
  '2024-01-01'::timestamptz + g * interval '7 seconds', CASE WHEN g % 3 = 0 THEN NULL ELSE 'note ' || g END,
  md5(g::text)::uuid FROM generate_series(1, $ROWS) g"
psql -qXAt -d src -c "COPY orders TO STDOUT (FORMAT binary)" | psql -qXAt -d dst -c "COPY orders FROM STDIN (FORMAT binary)"
pgq -d src -c "VACUUM ANALYZE orders"
pgq -d dst -c "VACUUM ANALYZE orders"
table_bytes=$(pgq -d src -c "SELECT pg_table_size('orders')")

cat > "$W/v.yaml" <<EOF
version: 1
name: vbench
source:
  type: postgres
  url: env:SRC_URL
  resources:
    - table: public.orders
      mode: full
sink:
  type: postgres
  url: env:DST_URL
  schema: public
  write: upsert
EOF

now() { date +%s.%N; }
best() { printf '%s\n' "$@" | sort -g | head -n 1; }

load_before=$(cut -d' ' -f1-3 /proc/loadavg)

# a. ferry verify, equal tables
ta=()
for _ in $(seq "$REPS"); do
  t0=$(now); "$FERRY" verify "$W/v.yaml" --json > "$W/a.json"; t1=$(now)
  ta+=("$(echo "$t1 - $t0" | bc)")
done
[ "$(jq -r .equal "$W/a.json")" = true ] || { echo "ferry verify: tables not equal" >&2; cat "$W/a.json" >&2; exit 1; }
bytes_a=$(jq -r '.resources[0].source_bytes + .resources[0].dest_bytes' "$W/a.json")

# b. pgcopydb compare data's query, both sides at once
cols="(id, customer_id, status, amount, discount, created_at, note, ref)"
qb="select count(1) as cnt, md5(format('%s-%s', sum(hashtext(${cols}::text)::bigint), count(1)))::uuid as chksum from only public.orders"
tb=()
for _ in $(seq "$REPS"); do
  t0=$(now)
  psql -qXAt -d src -c "$qb" > "$W/b.src" & p1=$!
  psql -qXAt -d dst -c "$qb" > "$W/b.dst" & p2=$!
  wait $p1 $p2; t1=$(now)
  tb+=("$(echo "$t1 - $t0" | bc)")
done
cmp -s "$W/b.src" "$W/b.dst" || { echo "pgcopydb query: checksums differ" >&2; exit 1; }
bytes_b=$(( 2 * (${#qb} + $(wc -c < "$W/b.src")) ))

# c. naive full-table md5 over string_agg, both sides at once
qc="select md5(string_agg(t::text, '' order by id)) from public.orders t"
tc=()
for _ in $(seq "$REPS"); do
  t0=$(now)
  psql -qXAt -d src -c "$qc" > "$W/c.src" & p1=$!
  psql -qXAt -d dst -c "$qc" > "$W/c.dst" & p2=$!
  wait $p1 $p2; t1=$(now)
  tc+=("$(echo "$t1 - $t0" | bc)")
done
cmp -s "$W/c.src" "$W/c.dst" || { echo "naive md5: differ" >&2; exit 1; }
bytes_c=$(( 2 * (${#qc} + $(wc -c < "$W/c.src")) ))

# d. five differences
mid=$((ROWS / 2))
pgq -d dst -c "DELETE FROM orders WHERE id = $mid" \
  -c "INSERT INTO orders VALUES ($((ROWS + 7)), 1, 'new', 1, 1, now(), 'extra', NULL)" \
  -c "UPDATE orders SET amount = amount + 0.01 WHERE id = 17" \
  -c "UPDATE orders SET note = '' WHERE id = $((ROWS - 2))" \
  -c "UPDATE orders SET discount = '-0' WHERE id = $((ROWS / 3 + 1))"
t0=$(now); set +e; "$FERRY" verify "$W/v.yaml" --json > "$W/d.json"; rc=$?; set -e; t1=$(now)
td=$(echo "$t1 - $t0" | bc)
[ "$rc" = 8 ] || { echo "ferry verify with differences: exit $rc" >&2; cat "$W/d.json" >&2; exit 1; }
found=$(jq -r '.resources[0] | "\(.missing.count) missing, \(.extra.count) extra, \(.different.count) different"' "$W/d.json")
bytes_d=$(jq -r '.resources[0].source_bytes + .resources[0].dest_bytes' "$W/d.json")
chunks_d=$(jq -r '.resources[0] | "\(.chunks) chunks, \(.chunks_mismatched) differing"' "$W/d.json")

load_after=$(cut -d' ' -f1-3 /proc/loadavg)
A=$(best "${ta[@]}"); B=$(best "${tb[@]}"); C=$(best "${tc[@]}")
f2() { printf '%.2f' "$1"; }
pct() { printf '%.4f' "$(echo "scale=6; 100 * $1 / $table_bytes" | bc)"; }
ratio() { printf '%.2f' "$(echo "scale=4; $1 / $B" | bc)"; }
out="bench/results/verify-$(date +%Y%m%d).md"
{
  echo "# ferry verify: $ROWS rows, PostgreSQL $(pgq -c 'SHOW server_version' | cut -d' ' -f1) → its copy"
  echo
  echo "$(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, load average before $load_before, after $load_after;"
  echo "source table $(( table_bytes / 1048576 )) MiB (pg_table_size); best of $REPS; ferry $(git rev-parse --short HEAD 2>/dev/null || echo '?') (Release) plus uncommitted work."
  echo
  echo "| method | wall s | vs pgcopydb query | bytes to the client | % of table |"
  echo "|---|---|---|---|---|"
  echo "| a. ferry verify (equal) | $(f2 "$A") | $(ratio "$A") | $bytes_a | $(pct "$bytes_a") |"
  echo "| b. pgcopydb compare data's query, both sides | $(f2 "$B") | 1.00 | $bytes_b | $(pct "$bytes_b") |"
  echo "| c. naive md5(string_agg) both sides | $(f2 "$C") | $(ratio "$C") | $bytes_c | $(pct "$bytes_c") |"
  echo "| d. ferry verify, 5 differences ($found; $chunks_d) | $(f2 "$td") | $(ratio "$td") | $bytes_d | $(pct "$bytes_d") |"
  echo
  echo "All runs: a ${ta[*]}; b ${tb[*]}; c ${tc[*]}."
  echo "b and c only say *whether* the tables differ; d names the keys. b hashes with 32-bit"
  echo "hashtext (collisions), c needs a sort of the whole table and one huge string per side."
  echo
  echo "Notes: the installed pgcopydb is $(pgcopydb --version 2>/dev/null | tail -n 1 | sed 's/^pgcopydb //'),"
  echo "which has no \`compare\` command (it came in 0.13); row b runs the query \`pgcopydb compare data\`"
  echo "sends for each table (count and sum of \`hashtext(row::text)\`, from its source,"
  echo "src/bin/pgcopydb/schema.c) through psql on both databases at once, as its compare workers"
  echo "do. Both databases live in one PostgreSQL on this machine, shared with other jobs (see"
  echo "the load averages): ratios are the useful part, absolute times are not. ferry's per-row"
  echo "work is a few built-in hash calls per column (no text or bytea built per row); with an"
  echo "equal table only two statements and two one-row results cross the network. d finds the"
  echo "differing ranges with one bucketed digest statement per side (width_bucket over about"
  echo "chunk_rows-row key ranges), then lists rows only in the differing ranges."
} > "$out"
cat "$out"
