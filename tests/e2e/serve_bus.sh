#!/usr/bin/env bash
# shared: pg
# `ferry serve --bus` on the external buses: the control plane, its tracker, the API's event
# streams and the worker processes all use the bus the server was given (workers get it
# through FERRY_BUS, never on a command line). Two set-ups, each with three runs requested
# over the API: PostgreSQL state store + NATS JetStream bus, and SQLite state + PostgreSQL
# bus. Each run's destination is compared with a reference run (set equality), its counts
# with its events, the SSE stream (live and replayed from a sequence) ends with
# run.completed, and the state store's own event log holds none of those events.
. "$(dirname "$0")/lib.sh"
. "$FERRY_SRC/tests/serve/lib.sh"
. "$FERRY_SRC/tests/pg/pg.sh"
pg_start
. "$FERRY_SRC/tests/nats/nats.sh"
nats_start

ROWS=30000
pipeline_yaml() { # NAME SINKPATH
  cat <<YAML
version: 1
name: $1
source:
  type: sample
  rows: $ROWS
  seed: 11
  resources:
    - table: orders
sink:
  type: sqlite
  path: $2
batch: {rows: 2000}
YAML
}
pipeline_yaml ref "$T/ref.db" >ref.yaml
"$FERRY_BIN" run ref.yaml --state "$T/ref-state.db" --quiet >/dev/null

state_db=$(pg_db state_db)
STORE_PG="${FERRY_PG_URL%/*}/$state_db?schema=ferry_e2e"
export BUSPW_URL="$FERRY_PG_URL?bus_schema=ferry_bus_serve"

check_setup() { # LABEL STORE BUS
  local label=$1 store=$2 bus=$3
  start_serve --store "$store" --bus "$bus" --workers 2 --lease 10s
  local ids=()
  for i in 1 2 3; do
    pipeline_yaml "p$i" "$T/$label-$i.db" >"$label-$i.yaml"
    api POST /v1/pipelines --data-binary @"$label-$i.yaml" -H 'Content-Type: application/yaml' >/dev/null
    [ "$CODE" = 201 ] || fail "$label: register p$i: $CODE $BODY"
    ids+=("$(api POST "/v1/pipelines/p$i/runs" | jq -r .id)")
    [ "$CODE" = 201 ] || fail "$label: request p$i: $CODE $BODY"
  done
  for i in 1 2 3; do
    local run=${ids[$((i - 1))]}
    curl -sS -N --max-time 120 -H "Authorization: Bearer $TOKEN" "$BASE/v1/runs/$run/events" >"$label-sse-$i.txt" \
      || fail "$label: run $run: the event stream did not end: $(tail -c 500 "$label-sse-$i.txt")"
    grep -q '^event: run.completed$' "$label-sse-$i.txt" || fail "$label: run $run: no run.completed"
    wait_state "$run" completed
    api GET "/v1/runs/$run" >run.json
    [ "$(jq -r .rows run.json)" = $ROWS ] || fail "$label: run $run rows: $(cat run.json)"
    local written
    written=$(grep -c '^event: batch.written$' "$label-sse-$i.txt")
    [ "$(jq -r .batches run.json)" = "$written" ] || fail "$label: batches vs batch.written events: $(cat run.json)"
    # replay from the fifth event: the same tail as the live stream
    grep '^id: ' "$label-sse-$i.txt" | awk '{print $2}' >ids
    local mid
    mid=$(sed -n 5p ids)
    curl -sS -N --max-time 60 -H "Authorization: Bearer $TOKEN" "$BASE/v1/runs/$run/events?after=$mid" \
      | grep '^id: ' | awk '{print $2}' >rids
    awk -v m="$mid" '$1 > m' ids | diff - rids || fail "$label: replay after $mid differs"
    same_table ref.db "$label-$i.db" orders || fail "$label: run $run: destination differs from the reference"
  done
  stop_serve
  no_sanitizer_reports
}

check_setup pgnats "$STORE_PG" "$NATS_URL"
[ "$(psql "${FERRY_PG_URL%/*}/$state_db" -XAtqc 'SELECT count(*) FROM ferry_e2e.events')" = 0 ] \
  || fail "events in the PostgreSQL store's log: the bus was not used"
[ "$(psql "${FERRY_PG_URL%/*}/$state_db" -XAtqc "SELECT count(*) FROM ferry_e2e.runs WHERE state = 'completed'")" = 3 ] \
  || fail "runs completed in the store"
pass "PostgreSQL store + NATS bus: 3 API runs complete, exact counts, SSE live and replayed"

rm -rf "$T/logs"
check_setup sqlitepg "$T/state.db" "env:BUSPW_URL"
[ "$(q "$T/state.db" 'SELECT count(*) FROM events')" = 0 ] || fail "events in the SQLite state file: the bus was not used"
[ "$(psql "$FERRY_PG_URL" -XAtqc "SELECT count(*) FROM ferry_bus_serve.events WHERE type = 'run.completed'")" = 3 ] \
  || fail "run.completed events on the PostgreSQL bus"
pass "SQLite state + PostgreSQL bus: 3 API runs complete, exact counts, SSE live and replayed"
