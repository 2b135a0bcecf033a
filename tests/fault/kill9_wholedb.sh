#!/usr/bin/env bash
# shared: pg
# tests/fault/kill9_wholedb.sh - kill -9 at seeded random moments of a whole-database full run
# (issue 17): one pipeline `tables: [public.*]` over a PostgreSQL database of 90 tables of mixed
# sizes (84 of 0-40 rows, three of 60k-150k rows split into key-range shards read by two
# readers, one with a composite key, two without a key - 120k rows, each three times - and
# 3 rows) at `concurrency: 4`, killed again and again (SIGKILL at seeded random moments:
# planning, the snapshot, the big tables' shards, the small ones, the commits; one kill while
# the key-less table is read; see kill_moment), each time run again with the same command
# until the run completes. Into PostgreSQL and into SQLite, both `write: append`
# (docs/guarantees.md: both sinks store ferry's checkpoint in the data's transaction,
# exactly-once):
#   - every table equals its source: count and md5 of its rows in a fixed order, a multiset
#     digest (no row missing, none extra, none twice; psql for PostgreSQL; for SQLite against
#     an uninterrupted copy, whose counts are checked against the source);
#   - after each kill, every table `ferry show` calls completed already equals its source
#     (completed is only said of durable data);
#   - a table completed by an earlier attempt is not copied again: no later attempt of the
#     run wrote a row of it (`ferry events`: batch.written of that table with rows > 0);
#   - one logical run all along (`ferry runs`), the last attempt resumed it.
# A table without a key has no resume point: a resumed attempt reads it again from its first
# row, so its batches commit together at its end (runner/schedule.c, run_alone); before that,
# the rows a killed attempt had committed of log_nokey were appended a second time.
# SEED=N (or FERRY_SEED=N) with the SPAN_MS it prints replays the kill moments; KILLS (most
# kills per case, default 4, at least 2), ITER (repetitions, default 1), CASES (default
# "pg lite").
. "$(dirname "$0")/../e2e/lib.sh"
. "${FERRY_PG_SH:-$FERRY_SRC/tests/pg/pg.sh}"
SEED=${SEED:-${FERRY_SEED:-$RANDOM}}
KILLS=${KILLS:-4}
[ "$KILLS" -ge 2 ] || KILLS=2
ITER=${ITER:-1}
CASES=${CASES:-pg lite}
echo "seed $SEED: $ITER iteration(s), at most $KILLS kills per case"
RANDOM=$SEED
pg_start

pgq >/dev/null <<'SQL'
DO $$
BEGIN
  FOR i IN 1..84 LOOP
    EXECUTE format('CREATE TABLE public.s%s (id int PRIMARY KEY, v text, n numeric(12,2), at timestamptz)',
                   lpad(i::text, 2, '0'));
    EXECUTE format('INSERT INTO public.s%s SELECT g, ''v'' || g || repeat(''x'', %s), g * 1.25,
                      TIMESTAMPTZ ''2026-01-01 00:00:00+00'' + g * INTERVAL ''1 minute''
                    FROM generate_series(1, %s) g', lpad(i::text, 2, '0'), i % 5, (i * 7) % 41);
  END LOOP;
END $$;
CREATE TABLE public.big_a (id bigint PRIMARY KEY, at timestamptz, ok boolean, amount numeric(14,2), note text);
INSERT INTO public.big_a SELECT g, TIMESTAMPTZ '2026-01-01 00:00:00+00' + g * INTERVAL '1 second', g % 3 = 0,
  g * 0.37, CASE WHEN g % 11 = 0 THEN NULL ELSE md5(g::text) END FROM generate_series(1, 150000) g;
CREATE TABLE public.big_b (id int PRIMARY KEY, payload text);
INSERT INTO public.big_b SELECT g, repeat(chr(97 + g % 26), 20 + g % 40) FROM generate_series(1, 100000) g;
CREATE TABLE public.big_c (id int PRIMARY KEY, k int, payload text);
INSERT INTO public.big_c SELECT g, g % 1000, md5(g::text) FROM generate_series(1, 60000) g;
CREATE TABLE public.pairs (a int, b text, v int, PRIMARY KEY (a, b));
INSERT INTO public.pairs SELECT g / 10, 'b' || g % 10, g FROM generate_series(1, 30000) g;
-- no key: one shard without a resume point; every row three times
CREATE TABLE public.log_nokey (at timestamptz, level text, msg text);
INSERT INTO public.log_nokey SELECT TIMESTAMPTZ '2026-01-01 00:00:00+00' + (g % 40000) * INTERVAL '1 second',
  CASE WHEN g % 40000 % 7 = 0 THEN 'warn' ELSE 'info' END, 'm' || (g % 40000) FROM generate_series(1, 120000) g;
CREATE TABLE public.tiny_nokey (v int);
INSERT INTO public.tiny_nokey VALUES (1), (1), (2);
CREATE TABLE public.skip_me (id int PRIMARY KEY);
INSERT INTO public.skip_me VALUES (1);
ANALYZE;
SQL
NTABLES=90
export SRC_URL="$FERRY_PG_URL"
dest=$(pg_db dest)
export DEST_URL="postgresql://ferry_admin:$PGPASSWORD@127.0.0.1:$PGPORT/$dest"

# pipeline NAME SINK : the whole-database pipeline NAME.yaml into SINK (a flow mapping)
pipeline() {
  cat > "$1.yaml" <<EOF
version: 1
name: $1
concurrency: 4
batch: {rows: 4000}
source:
  type: postgres
  url: env:SRC_URL
  shard_rows: 25000
  parallelism: 2
  resources:
    - tables: ["public.*"]
      exclude: ["public.skip_*"]
sink: $2
EOF
}

# pg_digests DB SCHEMA [TABLE...] : "table|count:md5 of its rows in text order" for those
# tables (default: all) of SCHEMA
pg_digests() {
  local db=$1 schema=$2 only=""
  shift 2
  [ $# = 0 ] || only="AND c.relname = ANY ('{$(IFS=,; echo "$*")}')"
  pgq -d "$db" -c "SELECT c.relname || '|' || (xpath('/row/x/text()', query_to_xml(format(
      'SELECT count(*) || '':'' || md5(coalesce(string_agg(t::text, '','' ORDER BY t::text), '''')) AS x FROM %I.%I t',
      n.nspname, c.relname), false, true, '')))[1]::text
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = '$schema' AND c.relkind = 'r' AND c.relname <> 'skip_me' $only ORDER BY 1"
}

# lite_digests DB [TABLE...] : the same for those tables (default: all) of a SQLite file, the
# rows ordered by every column (md5sum of sqlite3's lines)
lite_digests() {
  local db=$1 t n
  shift
  q "$db" "SELECT m.name, count(*) FROM sqlite_master m, pragma_table_info(m.name)
           WHERE m.type = 'table' AND m.name NOT LIKE '\_ferry%' ESCAPE '\' GROUP BY m.name ORDER BY m.name" |
    while IFS='|' read -r t n; do
      [ $# = 0 ] || printf '%s\n' "$@" | grep -qxF "$t" || continue
      printf '%s|%s:%s\n' "$t" "$(q "$db" "SELECT count(*) FROM \"$t\"")" \
        "$(q "$db" "SELECT * FROM \"$t\" ORDER BY $(seq -s, 1 "$n")" | md5sum | cut -d' ' -f1)"
    done
}

pg_digests "$PGDATABASE" public > src.dig
[ "$(wc -l < src.dig)" = $NTABLES ] || fail "the source has $(wc -l < src.dig) tables, want $NTABLES"

# ---- the reference: one uninterrupted copy into SQLite (also sizes the kill moments) --------
pipeline ref '{type: sqlite, path: ref.db, write: append}'
t0=$(date +%s%N)
expect_exit 0 ferry run ref.yaml
run_ms=$((($(date +%s%N) - t0) / 1000000))
printf '%s\n' "$OUT" | grep -q "$NTABLES resources, 4 at once" || fail "the reference does not copy 4 tables at once: $(printf '%s\n' "$OUT" | head -3)"
lite_digests ref.db > ref.dig
[ "$(cut -d: -f1 ref.dig)" = "$(cut -d: -f1 src.dig)" ] || {
  diff <(cut -d: -f1 src.dig) <(cut -d: -f1 ref.dig) | head; fail "the reference's tables or counts differ from the source"; }
# kill moments: 30 ms .. 60% of an uninterrupted run after each start (SPAN_MS=N to replay)
SPAN_MS=${SPAN_MS:-$((run_ms * 6 / 10))}
[ "$SPAN_MS" -ge 400 ] || SPAN_MS=400
echo "an uninterrupted run took $run_ms ms: kills at 30-$((30 + SPAN_MS)) ms after each start (replay: SEED=$SEED SPAN_MS=$SPAN_MS)"

# wait_completed NAME PID : polls until the newest run of NAME has a completed table (or PID
# ended, or 20 s passed)
wait_completed() {
  local id _
  for _ in $(seq 1 400); do
    kill -0 "$2" 2>/dev/null || return 1
    id=$(ferry runs --pipeline "$1" --json 2>/dev/null | jq -r '.[0].id // empty' 2>/dev/null || true)
    [ -n "$id" ] && ferry show "$id" --json 2>/dev/null |
      jq -e '[.resources[] | select(.state == "completed")] | length > 0' > /dev/null 2>&1 && return 0
    sleep 0.05
  done
  return 1
}

# reading_nokey : waits (a loop in the server, 5 ms steps) until a backend of the source
# database reads log_nokey; fails when ferry's connections to it have all gone (or after 20 s)
reading_nokey() {
  pgq -c "SET statement_timeout = '20s'" -c "DO \$\$
    DECLARE seen boolean := false;
    BEGIN
      LOOP
        PERFORM pg_stat_clear_snapshot();
        EXIT WHEN EXISTS (SELECT 1 FROM pg_stat_activity WHERE datname = current_database()
                            AND state = 'active' AND query LIKE '%log_nokey%' AND pid <> pg_backend_pid());
        IF EXISTS (SELECT 1 FROM pg_stat_activity WHERE datname = current_database()
                     AND application_name = 'ferry') THEN
          seen := true;
        ELSIF seen THEN
          RAISE EXCEPTION 'ferry left';
        END IF;
        PERFORM pg_sleep(0.005);
      END LOOP;
    END \$\$" > /dev/null 2>&1
}

# kill_moment NAME PID K : sleeps until the moment of kill K of NAME's attempt PID; MOMENT
# says which. Kill 2, while log_nokey is not completed: once the source reads it (pre-fix, the
# batches of it committed by then were appended again on resume), plus 0-150 ms. The last
# kill, when no killed attempt completed a table: once one is completed, plus 0-300 ms. Else
# (and kill 1 always): 30 ms .. 30 + SPAN_MS after the start.
kill_moment() {
  local name=$1 pid=$2 k=$3 ms=$((RANDOM % SPAN_MS))
  if [ "$k" = 2 ] && ! grep -q '^log_nokey ' "done.$name"; then
    ms=$((ms % 150))
    MOMENT="$ms ms after the source began reading log_nokey"
    reading_nokey || MOMENT="log_nokey not read: at once"
  elif [ "$k" = "$KILLS" ] && [ ! -s "done.$name" ]; then
    ms=$((ms % 300))
    MOMENT="$ms ms after a table completed"
    wait_completed "$name" "$pid" || MOMENT="no table completed: at once"
  else
    ms=$((30 + ms))
    MOMENT="$ms ms after the start"
  fi
  sleep "$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))"
}

# kill_until_done NAME CHECK : runs NAME.yaml, kills it at a seeded random moment, at most
# KILLS times, until the run completes; then once more without a kill when needed. After each
# kill, CHECK RUN TABLE... must find every newly completed table equal to its source; done.NAME
# gets "table attempt" for every table completed by an attempt that was killed.
kill_until_done() {
  local name=$1 check=$2 k pid run state attempt newly
  KILLED=0
  : > "done.$name"
  state=none
  for k in $(seq 1 "$KILLS"); do
    "$FERRY_BIN" run "$name.yaml" --quiet > "$name-$k.log" 2>&1 &
    pid=$!
    kill_moment "$name" "$pid" "$k"
    if kill -9 "$pid" 2>/dev/null; then KILLED=$((KILLED + 1)); fi
    wait "$pid" 2>/dev/null || true
    # The killed attempt's last events may be durable but not folded yet (a kill right after
    # its run.completed): the next ferry process folds them when it opens the state file,
    # and `ferry check` does that without starting a run, so the state read below is the one
    # the next `ferry run` will act on.
    "$FERRY_BIN" check "$name.yaml" > /dev/null 2>&1 || true
    run=$(ferry runs --pipeline "$name" --json | jq -r '.[0].id // empty')
    [ -n "$run" ] || { echo "  kill $k ($MOMENT): before the run was recorded"; continue; }
    ferry show "$run" --json > show.json
    state=$(jq -r .state show.json)
    attempt=$(jq -r .attempt show.json)
    [ "$state" = completed ] && { echo "  attempt $attempt completed before the kill ($MOMENT)"; break; }
    newly=$(jq -r '.resources[] | select(.state == "completed") | .resource' show.json |
      grep -vxF -f <(cut -d' ' -f1 "done.$name") || true)
    echo "  kill $k ($MOMENT): run $run attempt $attempt $state, $(jq '[.resources[] | select(.state == "completed")] | length' show.json) of $NTABLES tables completed"
    [ -z "$newly" ] && continue
    # shellcheck disable=SC2086 # one table name per word
    "$check" $newly || fail "seed $SEED, $name, after kill $k (attempt $attempt): a table ferry show calls completed differs from its source"
    # shellcheck disable=SC2086 # one table name per word
    printf '%s\n' $newly | sed "s/\$/ $attempt/" >> "done.$name"
  done
  if [ "$state" != completed ]; then
    expect_exit 0 ferry run "$name.yaml" --json
    [ "$(json_field "$OUT" '.state == "completed" and .resumed')" = true ] \
      || fail "seed $SEED, $name: the last run should resume the killed one and complete: $OUT"
  fi
  [ "$(ferry runs --pipeline "$name" --json | jq length)" = 1 ] \
    || fail "seed $SEED, $name: more than one run: $(ferry runs --pipeline "$name" --json | jq -c '[.[] | {id, state, attempt}]')"
  run=$(ferry runs --pipeline "$name" --json | jq -r '.[0].id')
  ferry show "$run" --json > show.json
  [ "$(jq '[.resources[] | select(.state == "completed")] | length' show.json)" = $NTABLES ] \
    || fail "seed $SEED, $name: not every table completed: $(jq -c '[.resources[] | select(.state != "completed") | {resource, state, error}]' show.json)"
  ATTEMPTS=$(jq -r .attempt show.json)
  # no attempt after the one that completed a table wrote a row of it
  local again
  again=$(ferry events "$run" --json | jq -rs --argjson 'done' \
    "$(jq -Rn '[inputs | split(" ") | {(.[0]): (.[1] | tonumber)}] | add // {}' < "done.$name")" \
    '[.[] | select(.type == "batch.written" and .payload.rows > 0 and .attempt > ($done[.resource] // 1e9))
          | "\(.resource) (attempt \(.attempt))"] | unique | join(", ")')
  [ -z "$again" ] || fail "seed $SEED, $name: tables completed by an earlier attempt were copied again: $again"
}

# same_digests WANT LABEL GOT ARG [TABLE...] : those tables (default: every table of WANT, a
# digest file) give the same lines from `GOT ARG TABLE...` as in WANT
same_digests() {
  local want=$1 label=$2 got=$3 arg=$4 pat
  shift 4
  pat=$(if [ $# = 0 ]; then cut -d'|' -f1 "$want"; else printf '%s\n' "$@"; fi | sed 's/.*/^&|/')
  grep -f <(printf '%s\n' "$pat") "$want" > want.dig
  "$got" "$arg" "$@" > got.dig
  diff want.dig got.dig > dig.diff || { echo "$label: $(head -10 dig.diff)" >&2; return 1; }
}
pg_dest_digests() { pg_digests "$dest" "$@"; }
# pg_same SCHEMA [TABLE...] : those tables of the destination's SCHEMA equal the source
pg_same() { same_digests src.dig "$1" pg_dest_digests "$@"; }
# lite_same DB [TABLE...] : the same for a SQLite destination, against the reference
lite_same() { same_digests ref.dig "$1" lite_digests "$@"; }

# into PostgreSQL, append (schema copyN)
case_pg() {
  local it=$1
  pipeline "pg$it" "{type: postgres, url: env:DEST_URL, schema: copy$it, write: append}"
  # shellcheck disable=SC2317 # called by kill_until_done
  pg_check() { pg_same "copy$it" "$@"; }
  echo "pg$it:"
  kill_until_done "pg$it" pg_check
  pg_same "copy$it" || fail "seed $SEED, pg$it: the destination differs from the source (multiset of whole rows per table)"
  pass "pg$it: $KILLED kill(s), $ATTEMPTS attempt(s) of one run: $NTABLES tables equal to the source, no row missing or twice; $(wc -l < "done.pg$it") tables completed by killed attempts, none copied again"
}

# into SQLite, append (one file, four lanes writing it)
case_lite() {
  local it=$1
  pipeline "lite$it" "{type: sqlite, path: lite$it.db, write: append}"
  # shellcheck disable=SC2317 # called by kill_until_done
  lite_check() { lite_same "lite$it.db" "$@"; }
  echo "lite$it:"
  kill_until_done "lite$it" lite_check
  lite_same "lite$it.db" || fail "seed $SEED, lite$it: the destination differs from the uninterrupted copy (multiset of whole rows per table)"
  pass "lite$it: $KILLED kill(s), $ATTEMPTS attempt(s) of one run: $NTABLES tables equal to the uninterrupted copy, no row missing or twice; $(wc -l < "done.lite$it") tables completed by killed attempts, none copied again"
}

for it in $(seq 1 "$ITER"); do
  for c in $CASES; do "case_$c" "$it"; done
done
