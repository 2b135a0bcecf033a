#!/usr/bin/env bash
# shared: pg
# iceberg_conn_reset: the catalog's conn_reset row for the Iceberg sink. The SQL catalog in
# PostgreSQL (tests/pg/pg.sh) behind tests/tools/tcpproxy.mjs; the catalog connection is cut
# when the commit's UPDATE of iceberg_tables passes, `before` (the server never sees it) and
# `after` (the server commits, ferry never hears). The run fails naming the catalog (never
# the password); the catalog row always names a metadata file that exists, whose snapshots'
# manifest lists exist (no half snapshot), readable by icebird as the old or the new table;
# the resume converges: every (run, checkpoint) committed once, rows equal the source once
# per run (icebird through the metadata file the catalog names).
. "$(dirname "$0")/../e2e/lib.sh"
ROWS=30000
. "$FERRY_SRC/tests/tools/iceberg_lib.sh"

. "$FERRY_SRC/tests/fault/iceberg_faults.bash"

# ---- 2. conn_reset on the PostgreSQL catalog ----------------------------------------------------
. "${FERRY_PG_SH:-$FERRY_SRC/tests/pg/pg.sh}"
pg_start
. "$FERRY_SRC/tests/tools/tcpproxy.bash"
px_start "$PGPORT"
export ICE_CATALOG_URL="postgresql://ferry_admin:$PG_ADMIN_PASSWORD@127.0.0.1:$(cat "$T/px.port")/$PGDATABASE?sslmode=disable"
psql_q() { psql "$FERRY_PG_URL" -X -A -t -q -c "$1"; }
UPDATE_HEX=$(printf 'UPDATE "iceberg_tables"' | od -An -tx1 | tr -d ' \n')

WH="$T/whpg"
export FERRY_STATE="$T/state2.db"
ice_pipeline pg.yaml ice-pg "$ROWS" "type: iceberg" "warehouse: $WH" "namespace: db" "catalog: sql" \
  "catalog_uri: env:ICE_CATALOG_URL" "catalog_name: prod"
current_meta() { # TABLE: the file the catalog row names (must exist)
  local loc
  loc=$(psql_q "SELECT metadata_location FROM iceberg_tables WHERE catalog_name = 'prod' AND table_namespace = 'db' AND table_name = '$1'")
  [ -n "$loc" ] && [ -s "${loc#file://}" ] || fail "the catalog names a metadata file that does not exist: '$loc'"
  echo "${loc#file://}"
}
# icebird reads through the metadata file the catalog names
check_pg() { # COPIES
  local m
  m=$(current_meta orders)
  complete "$m"
  nodetool "$READ" "$WH" db orders "$(basename "$m")" > ib.jsonl || fail "icebird could not read db.orders at $m"
  python3 compare.py "$T/ref.db" icebird ib.jsonl "$1" || fail "icebird rows differ from the source"
}
expect_exit 0 ferry run pg.yaml --quiet
check_pg 1
copies=1
for when in before after; do
  ctl "/cut?dir=up&hex=$UPDATE_HEX&when=$when" > /dev/null
  set +e
  "$FERRY_BIN" run pg.yaml > run.log 2>&1
  rc=$?
  set -e
  [ "$(ctl /stats | jq .cuts)" -ge 1 ] || fail "cut $when: the proxy never saw the catalog UPDATE: $(cat run.log)"
  [ $rc -ne 0 ] || fail "cut $when: the run succeeded: $(cat run.log)"
  grep -qi "catalog" run.log || fail "cut $when: the error does not name the catalog: $(cat run.log)"
  grep -q "$PG_ADMIN_PASSWORD" run.log && fail "cut $when: the password appears in: $(cat run.log)"
  sleep 1.5 # `after`: the proxy closes the server side 1 s after forwarding
  # no half snapshot: the catalog names a complete metadata file, readable as before or after
  m=$(current_meta orders)
  complete "$m"
  n=$(snapshots_once "$m")
  [ "$n" = "$copies" ] || [ "$n" = $((copies + 1)) ] || fail "cut $when: $n snapshots, want $copies or $((copies + 1))"
  check_pg "$n"
  # the resume converges: one more run's rows in all, each checkpoint committed once
  ctl /pass > /dev/null
  expect_exit 0 ferry run pg.yaml --quiet
  copies=$((copies + 1))
  m=$(current_meta orders)
  n=$(snapshots_once "$m")
  [ "$n" = "$copies" ] || fail "cut $when: $n snapshots after the resume, want $copies"
  check_pg "$copies"
  pass "conn_reset $when the catalog UPDATE: run failed naming the catalog, catalog row complete, resume converged ($copies snapshots, each checkpoint once, rows exact)"
done
