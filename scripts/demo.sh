#!/usr/bin/env bash
# Installs dependencies, builds ferry, and runs the demo pipeline (sample -> SQLite) on the
# embedded default, then shows what arrived.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j"$(nproc 2>/dev/null || echo 2)"
mkdir -p out
rm -f out/demo.db out/demo.db-wal out/demo.db-shm
./build/release/ferry run examples/demo.yaml --fresh
echo
echo "== in out/demo.db:"
sqlite3 -header -column out/demo.db \
  "SELECT count(*) AS orders, min(id) AS first_id, max(id) AS last_id, sum(CAST(amount AS REAL)) AS total_amount FROM orders;"
sqlite3 -header -column out/demo.db "SELECT id, status, quantity, amount, created_at FROM orders ORDER BY id LIMIT 3;"
echo
./build/release/ferry runs --limit 3
