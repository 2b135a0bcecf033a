#!/usr/bin/env bash
# Authoring in the web UI (Chromium + playwright-core, tests/tools/ui_author.mjs): a pipeline
# written in the editor is refused by the server with its error at line 9 (marked), then
# saved; a schedule added, switched off and removed from the pipeline page (each checked
# through the API); a run started there completes and the run page shows its attempt.
# The destination equals a reference run. Screenshots are kept beside the test binary.
. "$(dirname "$0")/lib.sh"
. "$FERRY_SRC/tests/serve/lib.sh"
command -v /usr/bin/chromium > /dev/null || fail "chromium is not installed (scripts/install-deps.sh)"
[ -d "$FERRY_SRC/tests/tools/node_modules/playwright-core" ] || fail "playwright-core missing: npm ci --prefix tests/tools"
OUT="$(dirname "$FERRY_BIN")/test-artifacts/ui"
mkdir -p "$OUT"
ROWS=20000
sample_yaml ref "$T/ref.db" > ref.yaml
"$FERRY_BIN" run ref.yaml --state "$T/ref-state.db" --quiet > /dev/null
start_serve
node "$FERRY_SRC/tests/tools/ui_author.mjs" "$BASE" "$TOKEN" authored "$T/authored.db" "$OUT" | tee ui.log
grep -q '^created$' ui.log || fail "the pipeline was not created"
[ "$(api GET /v1/pipelines/authored | jq -r .name)" = authored ] || fail "not registered: $BODY"
[ "$(api GET /v1/pipelines/authored/versions | jq '.versions | length')" = 1 ] || fail "the refused file made a version"
sid=$(sed -n 's/^schedule \([0-9]*\) added$/\1/p' ui.log)
grep -q "^schedule $sid off$" ui.log && grep -q "^schedule $sid removed$" ui.log || fail "schedule steps: $(cat ui.log)"
api GET "/v1/schedules/$sid" > /dev/null
[ "$CODE" = 404 ] || fail "the removed schedule is still there: $CODE"
run=$(sed -n 's/^run \([0-9]*\) completed$/\1/p' ui.log)
[ "$(run_state "$run")" = completed ] || fail "run $run: $BODY"
worker_exited "$run"
api GET "/v1/runs/$run/log?lines=1" > log.json
[ "$CODE" = 200 ] && [ "$(jq '.lines | length' log.json)" = 1 ] && jq -e '.truncated and (.lines[0] | test("completed"))' log.json > /dev/null \
  || fail "log tail: $CODE $(cat log.json)"
api GET "/v1/runs/$run/log?lines=0" > /dev/null; [ "$CODE" = 400 ] || fail "lines=0: $CODE"
api GET "/v1/runs/999/log" > /dev/null; [ "$CODE" = 404 ] || fail "log of an unknown run: $CODE"
same_table ref.db authored.db orders || fail "the authored pipeline's destination differs from the reference"
for f in $(sed -n 's/^screenshot: //p' ui.log); do [ -s "$f" ] || fail "empty screenshot $f"; done
stop_serve
no_sanitizer_reports
pass "UI: pipeline created (error at its line first), schedule added/off/removed, run completed"
