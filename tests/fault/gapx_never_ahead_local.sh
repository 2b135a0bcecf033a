#!/usr/bin/env bash
# checkpoint_never_ahead, crashes around the commit, for the local sinks sqlite (per_apply and
# at_commit) and files (jsonl, csv): see gapx_never_ahead.bash for what is injected and checked.
. "$(dirname "$0")/../e2e/lib.sh"
. "$FERRY_SRC/tests/fault/gapx_never_ahead.bash"
never_ahead_kinds sqlite sqlite_at jsonl csv
