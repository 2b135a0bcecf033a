#!/usr/bin/env bash
# crash_before_sink_commit and crash_after_sink_commit with a cdc source into the files sink (JSON Lines and Parquet change logs): the
# scenario and its assertions are in cdc_crash_commit.bash. LAKE_KINDS overrides the sinks.
. "$(dirname "$0")/../e2e/lib.sh"
LAKE_KINDS=${LAKE_KINDS:-jsonl parquet}
. "$FERRY_SRC/tests/fault/cdc_crash_commit.bash"
