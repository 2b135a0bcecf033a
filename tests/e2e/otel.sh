#!/usr/bin/env bash
# OpenTelemetry traces over OTLP/HTTP JSON (docs/operations.md, traces) received by a
# receiver started here (tests/tools/otlp_receiver.mjs, checking ids and times): a
# `ferry run` of two resources and a run served by `ferry serve` each give one trace with a
# root run span, resource spans whose parent is it, and one batch span per written batch
# whose parent is its resource span, carrying rows, bytes and the CRC32-C the batch.written
# events carry; rows and batches add up to the run's.
. "$(dirname "$0")/lib.sh"
. "$FERRY_SRC/tests/serve/lib.sh"
ROWS=23000

node "$FERRY_SRC/tests/tools/otlp_receiver.mjs" port spans.log &
EXTRA_PIDS="$EXTRA_PIDS $!"
for _ in $(seq 1 100); do [ -s port ] && break; sleep 0.05; done
[ -s port ] || fail "the OTLP receiver did not start"
export OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:$(cat port)" OTEL_SERVICE_NAME=ferry-test

# check_trace RUN STATE [PARENT]: the spans of the run's trace against its events; the run
# span's parent is PARENT (none by default).
check_trace() {
  local run=$1 state=$2 parent=${3:-}
  for _ in $(seq 1 200); do
    jq -e -s "[.[] | select(.attrs[\"ferry.run_id\"] == $run)] | length == 1" spans.log > /dev/null 2>&1 && break
    sleep 0.05
  done
  ! grep -q '"invalid"' spans.log || fail "the receiver refused a request: $(grep invalid spans.log)"
  jq -s -c ".[] | select(.attrs[\"ferry.run_id\"] == $run)" spans.log > root.json
  [ "$(wc -l < root.json)" = 1 ] || fail "run $run: $(wc -l < root.json) run spans"
  local trace root
  trace=$(jq -r .traceId root.json); root=$(jq -r .spanId root.json)
  jq -e --arg p "$parent" '.parentSpanId == $p and .service == "ferry-test" and (.name | startswith("run "))' root.json > /dev/null \
    || fail "root span: $(cat root.json)"
  jq -s -c "[.[] | select(.traceId == \"$trace\")]" spans.log > trace.json
  "$FERRY_BIN" show "$run" --json > show.json
  "$FERRY_BIN" events "$run" --json | jq -s -c '[.[] | select(.type == "batch.written") | {r: .resource, seq: .payload.seq, crc: .payload.crc, rows: .payload.rows}] | sort_by(.r, .seq)' > written.json
  for r in $(jq -r '.resources[].resource' show.json); do
    rspan=$(jq -r ".[] | select(.name == \"resource $r\") | .spanId" trace.json)
    [ "$(printf '%s\n' "$rspan" | grep -c .)" = 1 ] || fail "resource $r: spans $rspan"
    jq -e ".[] | select(.name == \"resource $r\") | .parentSpanId == \"$root\"" trace.json > /dev/null \
      || fail "resource $r span: parent is not the run span"
    got=$(jq -c "[.[] | select(.parentSpanId == \"$rspan\") | {r: .attrs[\"ferry.resource\"], seq: .attrs[\"ferry.batch.seq\"], crc: .attrs[\"ferry.batch.crc32c\"], rows: .attrs[\"ferry.batch.rows\"]}] | sort_by(.seq)" trace.json)
    want=$(jq -c "[.[] | select(.r == \"$r\")]" written.json)
    [ "$got" = "$want" ] || fail "resource $r: batch spans $got, batch.written $want"
  done
  [ "$(jq '[.[] | select(.attrs["ferry.batch.rows"] != null) | .attrs["ferry.batch.rows"]] | add' trace.json)" = "$(jq .rows show.json)" ] \
    || fail "batch span rows do not add up to the run's $(jq .rows show.json)"
  [ "$(jq '[.[] | select(.attrs["ferry.batch.rows"] != null)] | length' trace.json)" = "$(jq .batches show.json)" ] \
    || fail "batch spans != the run's batches"
  [ "$(jq -r .state show.json)" = "$state" ] || fail "state"
}

cat > two.yaml <<YAML
version: 1
name: two
source: {type: sample, rows: $ROWS, seed: 7, resources: [{table: orders, mode: full}, {table: users, mode: full}]}
sink: {type: sqlite, path: $T/two.db, write: append}
batch: {rows: 4000}
YAML
"$FERRY_BIN" run two.yaml --json > two.json || fail "run: $(cat two.json)"
check_trace "$(jq -r .run_id two.json)" completed
pass "ferry run: run -> resource -> batch spans with rows, bytes and CRC, parents right"

sample_yaml served "$T/served.db" > served.yaml
start_serve
api POST /v1/pipelines --data-binary @served.yaml > /dev/null
[ "$CODE" = 201 ] || fail "register: $CODE $BODY"
TP_TRACE=4bf92f3577b34da6a3ce929d0e0e4736 TP_PARENT=00f067aa0ba902b7
run=$(api POST /v1/pipelines/served/runs -H "traceparent: 00-$TP_TRACE-$TP_PARENT-01" | jq -r .id)
wait_done "$run" completed
FERRY_STATE="$T/state.db" check_trace "$run" completed "$TP_PARENT"
jq -e ".traceId == \"$TP_TRACE\" and .parentSpanId == \"$TP_PARENT\"" root.json > /dev/null \
  || fail "the API request's traceparent is not the run span's parent: $(cat root.json)"
stop_serve
pass "served run: its worker exported the trace, under the API request's traceparent"
