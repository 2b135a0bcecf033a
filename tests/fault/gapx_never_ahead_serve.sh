#!/usr/bin/env bash
# checkpoint_never_ahead for runs under `ferry serve` (worker processes, the server's tracker
# folding their events): the server is started with a crash failpoint around the sink's
# commit in its environment (its workers inherit it), a run is requested over the API; the
# worker dies, the run fails (worker lost). The state file's checkpoints are then compared
# with the destination's durable content (gapx_never_ahead.bash: sqlite3 for sqlite, jq over
# the committed manifests' parts for files); the server is restarted without the failpoint,
# the run resumed over the API, and the destination is complete (no duplicate for sqlite).
. "$(dirname "$0")/../e2e/lib.sh"
. "$FERRY_SRC/tests/serve/lib.sh"
. "$FERRY_SRC/tests/fault/gapx_never_ahead.bash"

i=0
for kind in sqlite jsonl; do
  dup=yes
  [ $kind = sqlite ] && dup=no
  for fp in "after_sink_apply=crash@4" before_sink_commit=crash after_sink_commit=crash; do
    i=$((i + 1))
    name="sv$i-$kind"
    pipeline p.yaml "$name" $kind "s$i"
    # start_serve's child truncates serve.out only once it runs: a previous server's
    # "listening on" line must not be there for start_serve to read first
    rm -f "$T/serve.out"
    FERRY_FAILPOINTS=$fp start_serve --lease 3s --sweep 500ms --workers 1
    api POST /v1/pipelines --data-binary @p.yaml -H 'Content-Type: application/yaml' > /dev/null
    [ "$CODE" = 201 ] || [ "$CODE" = 200 ] || fail "register $name: $CODE $BODY"
    api POST "/v1/pipelines/$name/runs" > req.json
    [ "$CODE" = 202 ] || [ "$CODE" = 201 ] || fail "request a run of $name: $CODE $BODY"
    run=$(jq -r .id req.json)
    wait_state "$run" failed 600
    n=$(check_never_ahead "$name" $kind "s$i" "serve $kind $fp")
    stop_serve
    rm -f "$T/serve.out"
    start_serve --lease 3s --sweep 500ms --workers 1
    api POST "/v1/runs/$run/resume" > /dev/null
    [ "$CODE" = 202 ] || fail "resume run $run: $CODE $BODY"
    wait_state "$run" completed 1200
    check_complete $kind "s$i" "serve $kind $fp" $dup
    n2=$(check_never_ahead "$name" $kind "s$i" "serve $kind $fp (after the resume)")
    stop_serve
    if cat "$T/serve.err" "$T"/logs/* 2>/dev/null | grep -qE 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:'; then
      fail "serve $kind $fp: sanitizer report in the server's or a worker's output"
    fi
    pass "serve, $kind, $fp: the worker died, the run failed; $n checkpoints saved, none ahead of the destination; resumed over the API: complete ($n2 checkpoints, all covered)"
  done
done
