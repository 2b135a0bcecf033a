#!/usr/bin/env bash
# shared: s3
# crash_before_sink_commit and crash_after_sink_commit with a cdc source into s3 (a JSON Lines change log) and iceberg (merge, and a change log): the
# scenario and its assertions are in cdc_crash_commit.bash. LAKE_KINDS overrides the sinks.
. "$(dirname "$0")/../e2e/lib.sh"
LAKE_KINDS=${LAKE_KINDS:-s3 iceberg iceberg_log}
. "$FERRY_SRC/tests/fault/cdc_crash_commit.bash"
