#!/usr/bin/env bash
# The web UI of `ferry serve` in a real browser: Debian's chromium, headless, driven by
# playwright-core (tests/tools/ui_check.mjs). Loads the UI, refuses a wrong token, starts a
# run from the pipelines page, sees live progress on the run page until it completes, sees a
# failed run's error, pauses and resumes a run with the buttons, and
# checks the page in a narrow window. Screenshots are kept under the test's build folder
# (their paths are printed); the destination is compared with a reference run.
. "$(dirname "$0")/lib.sh"
. "$FERRY_SRC/tests/serve/lib.sh"

command -v /usr/bin/chromium > /dev/null || fail "chromium is not installed (scripts/install-deps.sh)"
[ -d "$FERRY_SRC/tests/tools/node_modules/playwright-core" ] || fail "playwright-core missing: npm ci --prefix tests/tools"
OUT="$(dirname "$FERRY_BIN")/test-artifacts/ui"
mkdir -p "$OUT"

# Slow enough to watch: 30 ms per batch of 5000 rows.
export FERRY_FAILPOINTS="after_sink_apply=sleep(30)"
ROWS=300000
write_pipeline ui.yaml ui-demo $ROWS "$T/ui.db" append full "" "" "batch: {rows: 5000}"
write_pipeline ref.yaml ref $ROWS "$T/ref.db" append full "" "" "batch: {rows: 5000}"
FERRY_FAILPOINTS= "$FERRY_BIN" run ref.yaml --state "$T/ref-state.db" --quiet > /dev/null
start_serve --lease 20s
api POST /v1/pipelines --data-binary @ui.yaml > /dev/null
[ "$CODE" = 201 ] || fail "register: $CODE $BODY"

# A pipeline whose destination cannot be created: its run fails, the page shows why.
mkdir -p "$T/readonly" && touch "$T/readonly/file"
write_pipeline bad.yaml ui-broken 10 "$T/readonly/file/x.db" append full
api POST /v1/pipelines --data-binary @bad.yaml > /dev/null
[ "$CODE" = 201 ] || fail "register the failing pipeline: $CODE $BODY"

write_pipeline pause.yaml ui-pause $ROWS "$T/pause.db" append full "" "" "batch: {rows: 5000}"
api POST /v1/pipelines --data-binary @pause.yaml > /dev/null
[ "$CODE" = 201 ] || fail "register the pause pipeline: $CODE $BODY"

node "$FERRY_SRC/tests/tools/ui_check.mjs" "$BASE" "$TOKEN" ui-demo "$OUT" ui-broken ui-pause | tee ui.log
grep -q '^failed run .* shows: .*x\.db' ui.log || fail "the failed run's error does not name the destination"
grep -q '^screenshot: ' ui.log || fail "no screenshot"
for f in $(sed -n 's/^screenshot: //p' ui.log); do
  [ -s "$f" ] || fail "empty screenshot $f"
  [ "$(head -c 8 "$f" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] || fail "$f is not a PNG"
done
run=$(api GET '/v1/runs?pipeline=ui-demo' | jq -r '.runs[0].id')
[ "$(run_state "$run")" = completed ] || fail "the run the UI started: $BODY"
worker_exited "$run"
same_table ref.db ui.db orders || fail "the run started from the UI: destination differs"
grep -q '^run .* paused at .* resumed, completed$' ui.log || fail "pause/resume through the buttons"
prun=$(api GET '/v1/runs?pipeline=ui-pause' | jq -r '.runs[0].id')
[ "$(api GET "/v1/runs/$prun" | jq -r .attempt)" = 2 ] || fail "the paused run resumed in a second attempt: $BODY"
worker_exited "$prun"
same_table ref.db pause.db orders || fail "paused and resumed from the UI: destination differs"
pass "UI: started run $run, live progress to completion, narrow window, a failed run's error, pause + resume buttons; screenshots in $OUT"
stop_serve
no_sanitizer_reports
