#!/usr/bin/env bash
# shared: pg
# OpenTelemetry traces over OTLP/HTTP JSON (docs/operations.md, traces) received by a
# receiver started here (tests/tools/otlp_receiver.mjs, checking ids and times): a
# `ferry run` of two resources and a run served by `ferry serve` each give one trace with a
# root run span, resource spans whose parent is it, and one batch span per written batch
# whose parent is its resource span, carrying rows, bytes and the CRC32-C the batch.written
# events carry; rows and batches add up to the run's. The metrics of each attempt arrive at
# /v1/metrics of the same receiver: rows, bytes and batches per resource equal to what
# `ferry show` counts, one run duration (a histogram point) with the run's state, and for
# a PostgreSQL cdc run the replication lag gauges equal to the run's last
# cursor.watermark_advanced event.
. "$(dirname "$0")/lib.sh"
. "${FERRY_PG_SH:-$FERRY_SRC/tests/pg/pg.sh}"
. "$FERRY_SRC/tests/serve/lib.sh"
ROWS=23000

node "$FERRY_SRC/tests/tools/otlp_receiver.mjs" port spans.log metrics.log &
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

# check_metrics RUN PIPELINE STATE: the metrics points of PIPELINE against `ferry show RUN`.
check_metrics() {
  local run=$1 pl=$2 state=$3 r
  for _ in $(seq 1 200); do
    jq -e -s "[.[] | select(.metric == \"ferry.run.duration\" and .attrs[\"ferry.pipeline\"] == \"$pl\")] | length == 1" metrics.log > /dev/null 2>&1 && break
    sleep 0.05
  done
  ! grep -q '"invalid"' spans.log || fail "the receiver refused a request: $(grep invalid spans.log)"
  "$FERRY_BIN" show "$run" --json > show.json
  for r in $(jq -r '.resources[].resource' show.json); do
    for m in rows bytes batches; do
      got=$(jq -s "[.[] | select(.metric == \"ferry.$m\" and .attrs[\"ferry.pipeline\"] == \"$pl\" and .attrs[\"ferry.resource\"] == \"$r\") | select(.kind == \"sum\" and .temporality == 1 and .monotonic) | .value]" metrics.log)
      want=$(jq -c "[.resources[] | select(.resource == \"$r\") | .$m]" show.json)
      [ "$(printf '%s' "$got" | jq -c .)" = "$want" ] || fail "$pl $r ferry.$m: got $got, ferry show says $want"
    done
  done
  jq -s -c "[.[] | select(.metric == \"ferry.run.duration\" and .attrs[\"ferry.pipeline\"] == \"$pl\")][0]" metrics.log > dur.json
  jq -e --arg s "$state" --argjson secs "$(jq '(.ended_us - .started_us) / 1e6 + 1' show.json)" \
    '.kind == "histogram" and .unit == "s" and .count == 1 and .sum > 0 and .sum <= $secs and .attrs["ferry.state"] == $s' dur.json > /dev/null \
    || fail "$pl ferry.run.duration: $(cat dur.json), run: $(jq -c '{started_us, ended_us}' show.json)"
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
check_metrics "$(jq -r .run_id two.json)" two completed
pass "ferry run: OTLP metrics rows, bytes, batches per resource and the run's duration"

# a cdc run: the replication lag gauges are the run's last watermark
pg_start
export SRC_URL="$FERRY_PG_URL"
pgq -c "CREATE TABLE c1 (id int PRIMARY KEY, note text); INSERT INTO c1 SELECT g, 'r' || g FROM generate_series(1, 100) g" > /dev/null
printf 'version: 1\nname: cdcm\nsource: {type: postgres, url: env:SRC_URL, resources: [{table: c1, mode: cdc}]}\nsink: {type: sqlite, path: "%s", write: merge}\n' "$T/cdc.db" > cdc.yaml
"$FERRY_BIN" run cdc.yaml --state "$T/cdc-state.db" --json > cdc1.json || fail "cdc snapshot: $(cat cdc1.json)"
pgq -c "INSERT INTO c1 SELECT g, 'n' || g FROM generate_series(101, 300) g" > /dev/null
: > metrics.log
"$FERRY_BIN" run cdc.yaml --state "$T/cdc-state.db" --json > cdc2.json || fail "cdc stream: $(cat cdc2.json)"
run=$(jq -r .run_id cdc2.json)
FERRY_STATE="$T/cdc-state.db" check_metrics "$run" cdcm completed
FERRY_STATE="$T/cdc-state.db" "$FERRY_BIN" events "$run" --json \
  | jq -s -c '[.[] | select(.type == "cursor.watermark_advanced")] | last | .payload | {s: .lag_seconds, b: .lag_bytes}' > wm.json
jq -e '.s != null' wm.json > /dev/null || fail "the cdc run reported no watermark: $(cat wm.json)"
got=$(jq -s -c '{s: ([.[] | select(.metric == "ferry.cdc.lag" and .attrs["ferry.resource"] == "c1")] | last | .value),
                 b: ([.[] | select(.metric == "ferry.cdc.lag_bytes" and .attrs["ferry.resource"] == "c1")] | last | .value)}' metrics.log)
[ "$got" = "$(cat wm.json)" ] || fail "cdc lag gauges $got, last watermark $(cat wm.json)"
jq -e -s '[.[] | select(.metric == "ferry.cdc.lag")][0] | .kind == "gauge" and .unit == "s"' metrics.log > /dev/null || fail "ferry.cdc.lag kind"
pass "cdc run: OTLP gauges ferry.cdc.lag and ferry.cdc.lag_bytes equal to its last watermark ($(cat wm.json))"
: > spans.log # the served run's id is counted in another state store: the same numbers again
: > metrics.log

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
FERRY_STATE="$T/state.db" check_metrics "$run" served completed
pass "served run: its worker exported the trace, under the API request's traceparent, and its metrics"
