#!/usr/bin/env bash
# checkpoint_never_ahead for runs under `ferry serve` (worker processes, the server's tracker
# folding their events): the server is started with a crash failpoint around the sink's
# commit in its environment (its workers inherit it), a run is requested over the API; the
# worker dies, the run fails (worker lost). The state file's checkpoints are then compared
# with the destination's durable content (gapx_never_ahead.bash: sqlite3 for sqlite, jq over
# the committed manifests' parts for files); the server is restarted without the failpoint,
# the run resumed over the API, and the destination is complete (no duplicate for sqlite).
# Then a SIGKILL of the worker once the state holds a checkpoint of the run, the same checks.
# Shared code: never_ahead_serve in gapx_never_ahead.bash; the lake sinks under serve are
# gapx_never_ahead_serve_lake.sh.
. "$(dirname "$0")/../e2e/lib.sh"
. "$FERRY_SRC/tests/serve/lib.sh"
. "$FERRY_SRC/tests/fault/gapx_never_ahead.bash"

never_ahead_serve sqlite jsonl
