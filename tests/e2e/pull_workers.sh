#!/usr/bin/env bash
# shared: pg
# Pull workers and a distributed run (docs/operations.md, scale-out): a PostgreSQL table of
# 300 000 rows planned into 10 keyset shards (shard_rows 30 000) is copied to PostgreSQL by
# three `ferry worker --pull` processes sharing the state with `ferry serve --dispatch
# pull`. One worker that holds a shard (not the run's coordinator) is killed with SIGKILL
# mid-shard; its lease expires, another worker leases the shard again (token 2) and resumes
# it from its last durable checkpoint; the run completes. Checked against the real
# databases: source and destination are equal as sets; under append every duplicated key
# lies in a shard that was leased more than once (the re-leased range), under upsert there
# are none; in the upsert variant a second worker is stopped with SIGTERM mid-shard (it
# drains, gives the shard back, exits 0; another worker resumes it). Also: /metrics names
# the leader, no password in any output, and a distributed run into a sink that is durable
# only at commit is refused before any data moves. pull_workers_pg.sh runs the same with
# the PostgreSQL state store.
. "$(dirname "$0")/lib.sh"
. "$FERRY_SRC/tests/serve/lib.sh"
. "${FERRY_PG_SH:-$FERRY_SRC/tests/pg/pg.sh}"
pg_start
export DEST_URL="$FERRY_PG_URL"
ROWS=300000

p() { psql "$FERRY_PG_URL" -X -q -v ON_ERROR_STOP=1 -A -t "$@"; }
# The shared state: the SQLite file, or (FERRY_PULL_STORE=postgres, pull_workers_pg.sh) the
# PostgreSQL store in a schema of the test's database. sq SQL: a query on it.
if [ "${FERRY_PULL_STORE:-sqlite}" = postgres ]; then
  STATE="$FERRY_PG_URL?schema=ferry_state"
  sq() { p -c "SET search_path = ferry_state; $1"; }
else
  STATE="$T/state.db"
  sq() { q "$STATE" "$1"; }
fi

p -c "CREATE TABLE public.items (id bigint PRIMARY KEY, name text NOT NULL, qty integer,
        price numeric(12,2), at timestamptz NOT NULL)"
p -c "INSERT INTO public.items SELECT g, 'item-' || g, g % 97, (g % 1000) / 7.0,
        timestamptz '2026-01-01 00:00:00+00' + g * interval '1 second'
      FROM generate_series(1, $ROWS) g"

pipeline() { # NAME SCHEMA WRITE [DURABILITY]
  cat <<EOF
version: 1
name: $1
distribute: true
source:
  type: postgres
  url: env:FERRY_PG_URL
  shard_rows: 30000
  resources:
    - {table: public.items, mode: full}
sink:
  type: postgres
  url: env:DEST_URL
  schema: $2
  write: $3
${4:+  durability: $4}
batch: {rows: 1000}
EOF
}

# Each batch waits after its apply, so that a kill lands mid-shard on any machine: a holder is
# picked with at least half its shard (15 batches) to go, which leaves it >= 1.2 s (2.4 s in
# the upsert variant, whose SIGTERM follows a second pick), more than a loaded machine takes
# between the pick and the signal.
export FERRY_FAILPOINTS="after_sink_apply=sleep(80)"
start_serve --dispatch pull --sweep 500ms --store "$STATE"
# The only control plane leads (and says so in /metrics).
for _ in $(seq 1 100); do
  curl -sS -H "Authorization: Bearer $TOKEN" "$BASE/metrics" | grep -q '^ferry_control_leader 1$' && break
  sleep 0.1
done
curl -sS -H "Authorization: Bearer $TOKEN" "$BASE/metrics" | grep -q '^ferry_control_leader 1$' ||
  fail "/metrics does not report the leader"
WORKER_PIDS=""
start_workers() {
  WORKER_PIDS=""
  for w in 1 2 3; do
    "$FERRY_BIN" worker --pull --owner "w$w-$1" --lease-ms 2000 --store "$STATE" \
      > "$T/w$w-$1.log" 2>&1 &
    WORKER_PIDS="$WORKER_PIDS $!"
    EXTRA_PIDS="$EXTRA_PIDS $!"
  done
}
stop_workers() {
  for pid in $WORKER_PIDS; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in $WORKER_PIDS; do wait "$pid" 2>/dev/null || true; done
}

# pick_holder NAME EXCLUDE_PID: waits for a pull worker that is not the run's coordinator
# and, per the store, holds a shard of $RUN whose durable position is still in the first
# half of its range (far from its end). Sets HOLDER (pid) and HSHARD.
pick_holder() {
  local name=$1 exclude=$2 tries=0
  HOLDER="" HSHARD=""
  while [ -z "$HOLDER" ]; do
    tries=$((tries + 1))
    [ $tries -lt 1200 ] || fail "$name: no worker held a shard: $(tail -n 5 "$T"/w*-"$name".log)"
    local w=1
    # the plan once (it does not change): each query here is time the holder goes on working
    [ -s "$T/plan-$RUN.json" ] || sq "SELECT plan FROM plans WHERE run_id = $RUN" > "$T/plan-$RUN.json" || true
    for pid in $WORKER_PIDS; do
      local log="$T/w$w-$name.log" s cp lo hi
      if [ "$pid" != "$exclude" ] && ! grep -q "claimed" "$log" &&
         grep -q "items shard [0-9]* (token" "$log" && [ -s "$T/plan-$RUN.json" ]; then
        s=$(grep -o "items shard [0-9]* (token" "$log" | tail -n 1 | awk '{print $3}')
        cp=$(sq "SELECT position FROM run_checkpoints WHERE run_id = $RUN AND shard = $s" |
             jq -r '.key[0] // empty' 2>/dev/null || true)
        hi=$(jq -r ".shards[$s].hi" "$T/plan-$RUN.json")
        lo=$(jq -r ".shards[$s].lo" "$T/plan-$RUN.json")
        if [ -n "$cp" ] && [ $((cp - lo)) -lt $(((hi - lo) / 2)) ] &&
           [ "$(sq "SELECT state || ' ' || owner FROM shard_tasks
                    WHERE run_id = $RUN AND shard = $s")" = "leased w$w-$name" ]; then
          HOLDER=$pid HSHARD=$s
          break
        fi
      fi
      w=$((w + 1))
    done
    [ -n "$HOLDER" ] || sleep 0.05
  done
}

# variant NAME WRITE: one distributed run with a worker killed mid-shard. Sets RUN.
variant() {
  local name=$1 write=$2 schema="dest_$1"
  pipeline "$name" "$schema" "$write" > "$name.yaml"
  api POST /v1/pipelines --data-binary @"$name.yaml" -H 'Content-Type: application/yaml' > /dev/null
  [ "$CODE" = 201 ] || [ "$CODE" = 200 ] || fail "$name: pipeline not registered ($CODE): $BODY"
  # The SIGTERM of the upsert variant must land while its holder still works its shard,
  # after a pick that reads the state (a loaded CI machine took seconds): slower batches.
  [ "$write" = upsert ] && export FERRY_FAILPOINTS="after_sink_apply=sleep(160)"
  start_workers "$name"
  export FERRY_FAILPOINTS="after_sink_apply=sleep(80)"
  api POST "/v1/pipelines/$name/runs" > req.json
  RUN=$(jq -r .id req.json)
  [ -n "$RUN" ] && [ "$RUN" != null ] || fail "$name: no run id: $(cat req.json)"
  # The victim: a worker that works a shard of the run without coordinating it, killed
  # while the store says it holds that shard and some of its batches are durable.
  pick_holder "$name" ""
  local victim=$HOLDER vshard=$HSHARD
  kill -KILL "$victim"
  wait "$victim" 2>/dev/null || true
  echo "$name: killed worker pid $victim in shard $vshard"
  # Under upsert, a second holder is stopped with SIGTERM instead: it drains, saves, gives
  # its shard back at once and exits 0; another worker resumes the shard.
  local termed="" tshard=""
  if [ "$write" = upsert ]; then
    pick_holder "$name" "$victim"
    termed=$HOLDER tshard=$HSHARD
    kill -TERM "$termed"
    local st=0
    wait "$termed" || st=$?
    [ "$st" = 0 ] || fail "$name: worker stopped by SIGTERM exited $st"
    echo "$name: stopped worker pid $termed in shard $tshard"
  fi
  wait_state "$RUN" completed 1800
  stop_workers
  if grep -l "Sanitizer" "$T"/w*-"$name".log; then fail "$name: sanitizer reports in a worker"; fi
  # The killed worker's shard was leased again (its token moved past 1).
  local tok
  tok=$(sq "SELECT token FROM shard_tasks WHERE run_id = $RUN AND shard = $vshard")
  [ "$tok" -ge 2 ] || fail "$name: shard $vshard was not leased again (token $tok)"
  # ... and resumed from its last durable checkpoint, not read again from its start.
  grep -q "items shard $vshard (token $tok), resuming" "$T"/w*-"$name".log ||
    fail "$name: shard $vshard was not resumed: $(grep -h "shard $vshard " "$T"/w*-"$name".log)"
  if [ -n "$termed" ]; then
    tok=$(sq "SELECT token FROM shard_tasks WHERE run_id = $RUN AND shard = $tshard")
    grep -q "items shard $tshard (token $tok), resuming" "$T"/w*-"$name".log ||
      fail "$name: the SIGTERM'd worker's shard $tshard was not resumed elsewhere"
    grep -q "public.items shard $tshard paused" "$T"/w*-"$name".log ||
      fail "$name: the SIGTERM'd worker did not pause its shard"
  fi
  [ "$(sq "SELECT count(*) FROM shard_tasks WHERE run_id = $RUN AND state <> 'done'")" = 0 ] ||
    fail "$name: tasks not done: $(sq "SELECT * FROM shard_tasks WHERE run_id = $RUN")"
  [ "$(sq "SELECT count(*) FROM shard_tasks WHERE run_id = $RUN")" = 10 ] ||
    fail "$name: expected 10 shard tasks"
  # Work was really spread: at least two processes wrote batches.
  local writers
  writers=$(grep -l "items shard [0-9]* (token" "$T"/w*-"$name".log | wc -l)
  [ "$writers" -ge 2 ] || fail "$name: only $writers worker(s) worked shards"
  # Every run attempt is the one claim: the run was never started twice.
  [ "$(sq "SELECT attempt FROM runs WHERE id = $RUN")" = 1 ] ||
    fail "$name: run $RUN has attempt $(sq "SELECT attempt FROM runs WHERE id = $RUN")"
  # Set equality, both ways.
  local missing extra
  missing=$(p -c "SELECT count(*) FROM (SELECT id, name, qty, price, at FROM public.items
                   EXCEPT SELECT id, name, qty, price, at FROM $schema.items) x")
  extra=$(p -c "SELECT count(*) FROM (SELECT id, name, qty, price, at FROM $schema.items
                 EXCEPT SELECT id, name, qty, price, at FROM public.items) x")
  [ "$missing" = 0 ] && [ "$extra" = 0 ] ||
    fail "$name: $missing source rows missing, $extra extra rows in $schema.items"
}

# ---- append: duplicates only inside re-leased shards ----
variant pa append
# The ranges of shards leased more than once (frozen plan: shards[i].lo .. hi).
sq "SELECT plan FROM plans WHERE run_id = $RUN" > plan.json
sq "SELECT shard FROM shard_tasks WHERE run_id = $RUN AND token > 1" > released.txt
[ -s released.txt ] || fail "append: no shard was leased twice"
ranges=""
while read -r s; do
  lo=$(jq -r ".shards[$s].lo" plan.json)
  hi=$(jq -r ".shards[$s].hi" plan.json)
  [ "$lo" != null ] && [ "$hi" != null ] || fail "append: shard $s has no range in $(cat plan.json)"
  ranges="$ranges OR (id BETWEEN $lo AND $hi)"
done < released.txt
dups=$(p -c "SELECT count(*) FROM (SELECT id FROM dest_pa.items GROUP BY id HAVING count(*) > 1) d")
outside=$(p -c "SELECT count(*) FROM (SELECT id FROM dest_pa.items GROUP BY id HAVING count(*) > 1) d
                WHERE NOT (false $ranges)")
[ "$outside" = 0 ] || fail "append: $outside duplicated keys outside the re-leased shards"
pass "append: three pull workers, one killed mid-shard; sets equal, $dups duplicated keys, all inside the re-leased shard(s) $(tr '\n' ' ' < released.txt)"

# ---- upsert: no duplicates at all ----
variant pu upsert
[ "$(p -c "SELECT count(*) - count(DISTINCT id) FROM dest_pu.items")" = 0 ] ||
  fail "upsert: duplicate keys in dest_pu.items"
[ "$(p -c "SELECT count(*) FROM dest_pu.items")" = "$ROWS" ] || fail "upsert: row count"
pass "upsert: one worker killed mid-shard; sets equal, zero duplicates"

# ---- refused before any data moves: a sink durable only at its commit ----
pipeline pc dest_pc append at_commit > pc.yaml
expect_exit 3 "$FERRY_BIN" run pc.yaml --state "$T/pc-state.db" --quiet
echo "$OUT" | grep -q "per_apply" || fail "at_commit refusal does not say why: $OUT"
[ "$(p -c "SELECT count(*) FROM pg_catalog.pg_tables WHERE schemaname = 'dest_pc'")" = 0 ] ||
  fail "at_commit: a table was created before the refusal"
pass "distribute: true into an at_commit sink is refused before data moves"

stop_serve
if grep -l "Sanitizer" "$T/serve.err"; then fail "sanitizer reports in ferry serve"; fi
if grep -lF "$PG_ADMIN_PASSWORD" "$T"/w*.log "$T/serve.out" "$T/serve.err"; then
  fail "the database password appears in the output"
fi
