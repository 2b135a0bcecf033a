#!/usr/bin/env bash
# shared: s3
# checkpoint_never_ahead, crashes around the commit, for the lake sinks: files (parquet, read
# by DuckDB), s3 (s3rver on loopback, the signed client) and iceberg (icebird): see
# gapx_never_ahead.bash for what is injected and checked.
. "$(dirname "$0")/../e2e/lib.sh"
. "$FERRY_SRC/tests/s3/s3.sh"
s3_have || fail "node and tests/tools/node_modules (s3rver, aws4) are needed: run scripts/install-deps.sh"
[ -d "$FERRY_SRC/tests/tools/node_modules/icebird" ] || fail "tests/tools/node_modules/icebird missing: npm ci --prefix tests/tools"
. "$FERRY_SRC/tests/fault/gapx_never_ahead.bash"
s3_start lake
never_ahead_kinds parquet s3 iceberg
