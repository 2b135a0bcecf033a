#!/usr/bin/env bash
# shared: s3
# checkpoint_never_ahead under `ferry serve` for the lake sinks: files (parquet, read by
# DuckDB), s3 (s3rver on loopback, the signed client) and iceberg (icebird). The server runs
# with a crash failpoint its workers inherit (after_sink_apply@4, before/after_sink_commit,
# and the sink's own files_before_manifest / s3_before_manifest /
# iceberg_before_catalog_commit); the run fails (worker lost), the state file's checkpoints
# are compared with the destination's durable content, a server without the failpoint
# resumes the run over the API and the destination is complete (no duplicate for iceberg).
# Then a SIGKILL of the worker once the state holds a checkpoint (the lake sinks save theirs
# only after their one commit per run). Shared code: gapx_never_ahead.bash (never_ahead_serve).
. "$(dirname "$0")/../e2e/lib.sh"
. "$FERRY_SRC/tests/serve/lib.sh"
. "$FERRY_SRC/tests/s3/s3.sh"
s3_have || fail "node and tests/tools/node_modules (s3rver, aws4) are needed: run scripts/install-deps.sh"
[ -d "$FERRY_SRC/tests/tools/node_modules/icebird" ] || fail "tests/tools/node_modules/icebird missing: npm ci --prefix tests/tools"
. "$FERRY_SRC/tests/fault/gapx_never_ahead.bash"
# one EXIT trap for both helpers: the server (and its workers) first, then s3rver
trap 'rc=$?; stop_serve; s3_stop; if [ $rc -ne 0 ]; then echo "FAILED (workdir kept: $T)"; tail -n 30 "$T"/serve.err 2>/dev/null || true; else rm -rf "$T"; fi; exit $rc' EXIT
s3_start lake
never_ahead_serve parquet s3 iceberg
