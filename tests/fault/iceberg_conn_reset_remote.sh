#!/usr/bin/env bash
# shared: s3
# iceberg_conn_reset_remote: the catalog's conn_reset row for the Iceberg sink on remote
# catalogs (the PostgreSQL SQL catalog: iceberg_conn_reset.sh). tests/tools/tcpproxy.mjs sits
# between ferry and the server that takes the commit, and cuts the connection when the commit
# request passes, `before` (the server never sees it) and `after` (the server applies it,
# ferry never hears):
#   1. an S3 warehouse with the filesystem catalog (s3rver honouring If-None-Match, as S3
#      does): the commit is the conditional PUT of vN.metadata.json;
#   2. the REST catalog (tests/tools/rest_catalog.mjs): the commit-table POST.
# After each cut: no half snapshot (every snapshot's manifest list is there, icebird reads the
# table as before or after the commit), each (run, checkpoint) committed once; the resume
# converges: one more copy of the rows in all (icebird, set equality with the source), and
# again no checkpoint committed twice.
. "$(dirname "$0")/../e2e/lib.sh"
ROWS=20000
. "$FERRY_SRC/tests/s3/s3.sh"
. "$FERRY_SRC/tests/tools/iceberg_lib.sh"
s3_have || fail "node and tests/tools/node_modules (s3rver, aws4) are needed: run scripts/install-deps.sh"
export S3_KEY=S3RVER S3_SECRET=S3RVER AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER
S3_CONDITIONAL_BUCKETS=cond s3_start cond
COND=$(s3_bucket cond)
export S3_ENDPOINT

PIDS=()
trap "__px_rc=\$?; for p in \${PIDS[@]}; do kill \$p 2>/dev/null; done; set +e; (exit \$__px_rc); $(trap -p EXIT | sed "s/^trap -- '//; s/' EXIT\$//")" EXIT
proxy_start() { # NAME TARGET_PORT: the proxy's port in $T/NAME.port, control in $T/NAME.ctl
  node "$FERRY_SRC/tests/tools/tcpproxy.mjs" "$2" "$T/$1.port" "$T/$1.ctl" > "$T/$1.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 1 100); do [ -s "$T/$1.port" ] && [ -s "$T/$1.ctl" ] && break; sleep 0.1; done
  [ -s "$T/$1.ctl" ] || fail "proxy $1 did not start: $(cat "$T/$1.log")"
}
ctl() { curl -fsS "http://127.0.0.1:$(cat "$T/$1.ctl")$2"; }
hex() { printf '%s' "$1" | od -An -tx1 | tr -d ' \n'; }

# snapshots_once META_JSON_FILE (its ice_pipeline, below, takes the row count itself)
. "$FERRY_SRC/tests/fault/iceberg_faults.bash"

# ---- 1. S3 warehouse, filesystem catalog ---------------------------------------------------------
proxy_start s3px "$S3_PORT"
PX_EP="http://127.0.0.1:$(cat "$T/s3px.port")"
ice_pipeline() { # FILE NAME SINK_LINES...: the orders table only
  local file=$1 name=$2; shift 2
  pipeline "$file" "$name" "$ROWS" "$@"
  sed -i '/- {table: users, mode: full}/d' "$file"
}
ice_pipeline s3.yaml ice-s3 "type: iceberg" "warehouse: s3://$COND/wh" "namespace: db" \
  "endpoint: \"$PX_EP\"" "path_style: true" "access_key_id: env:S3_KEY" "secret_access_key: env:S3_SECRET"
export FERRY_STATE="$T/state-s3.db"
s3_meta() { nodetool "$READ" s3://$COND/wh db --metadata orders > "$1" || fail "icebird could not read the table metadata"; }
s3_complete() { # META: every snapshot's manifest list is an object
  local ml
  for ml in $(jq -r '.snapshots[]."manifest-list"' "$1"); do
    s3c "$COND" get "${ml#s3://$COND/}" > /dev/null 2>&1 || fail "half snapshot: manifest list $ml is missing"
  done
}
s3_rows() { # COPIES
  nodetool "$READ" s3://$COND/wh db orders > ib.jsonl || fail "icebird could not read s3://$COND/wh db.orders"
  python3 compare.py "$T/ref.db" icebird ib.jsonl "$1" || fail "icebird rows differ from the source"
}
expect_exit 0 ferry run s3.yaml --quiet
s3_rows 1
copies=1
for when in before after; do
  v=$(s3c "$COND" get wh/db/orders/metadata/version-hint.text)
  ctl s3px "/cut?dir=up&hex=$(hex "PUT /$COND/wh/db/orders/metadata/v$((v + 1)).metadata.json")&when=$when" > /dev/null
  set +e
  FERRY_LOG=info "$FERRY_BIN" run s3.yaml > run.log 2>&1
  rc=$?
  set -e
  [ "$(ctl s3px /stats | jq .cuts)" -ge 1 ] || fail "s3 cut $when: the proxy never saw the PUT of v$((v + 1)).metadata.json: $(cat run.log)"
  sleep 1.5 # `after`: the proxy closes the server side 1 s after forwarding
  s3_meta m.json
  s3_complete m.json
  n=$(snapshots_once m.json)
  [ "$n" = "$copies" ] || [ "$n" = $((copies + 1)) ] || fail "s3 cut $when: $n snapshots, want $copies or $((copies + 1))"
  s3_rows "$n"
  outcome="exit $rc, $n snapshots"
  if [ $rc -ne 0 ]; then
    ctl s3px /pass > /dev/null
    expect_exit 0 ferry run s3.yaml --quiet
  fi
  copies=$((copies + 1))
  s3_meta m.json
  s3_complete m.json
  n=$(snapshots_once m.json)
  [ "$n" = "$copies" ] || fail "s3 cut $when: $n snapshots after the resume, want $copies"
  s3_rows "$copies"
  pass "S3 warehouse, connection cut $when the PUT of v$((v + 1)).metadata.json ($outcome): no half snapshot, resume converged ($copies snapshots, each checkpoint once, rows exact)"
done

# ---- 2. REST catalog ------------------------------------------------------------------------------
export REST_TOKEN="rest-token-$RANDOM$RANDOM"
node "$FERRY_SRC/tests/tools/rest_catalog.mjs" "$T/rest" "$T/rest.port" > "$T/rest.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 1 100); do [ -s "$T/rest.port" ] && break; sleep 0.1; done
[ -s "$T/rest.port" ] || fail "the REST catalog did not start: $(cat "$T/rest.log")"
proxy_start restpx "$(cat "$T/rest.port")"
ice_pipeline rest.yaml ice-rest "type: iceberg" "warehouse: $WH" "namespace: db" "catalog: rest" \
  "catalog_uri: \"http://127.0.0.1:$(cat "$T/restpx.port")\"" "catalog_token: env:REST_TOKEN"
export FERRY_STATE="$T/state-rest.db"
rest_meta() { # the metadata file the catalog names (must exist) -> FILE
  local l
  l=$(jq -r --arg k "db"$'\x1f'"orders" '.tables[$k]' "$T/rest/catalog.json")
  [ -n "$l" ] && [ -s "${l#file://}" ] || fail "the REST catalog names a metadata file that does not exist: '$l'"
  cp "${l#file://}" "$1"
  basename "$l"
}
rest_complete() { # META
  local ml
  for ml in $(jq -r '.snapshots[]."manifest-list"' "$1" | sed 's|^file://||'); do
    [ -s "$ml" ] || fail "half snapshot: manifest list $ml is missing"
  done
}
rest_rows() { # METADATA_FILE_NAME COPIES
  nodetool "$READ" "$WH" db orders "$1" > ib.jsonl || fail "icebird could not read db.orders at $1"
  python3 compare.py "$T/ref.db" icebird ib.jsonl "$2" || fail "icebird rows differ from the source"
}
expect_exit 0 ferry run rest.yaml --quiet
f=$(rest_meta m.json)
rest_rows "$f" 1
copies=1
for when in before after; do
  ctl restpx "/cut?dir=up&hex=$(hex "POST /v1/ferry-test/namespaces/db/tables/orders HTTP")&when=$when" > /dev/null
  set +e
  FERRY_LOG=info "$FERRY_BIN" run rest.yaml > run.log 2>&1
  rc=$?
  set -e
  [ "$(ctl restpx /stats | jq .cuts)" -ge 1 ] || fail "rest cut $when: the proxy never saw the commit-table POST: $(cat run.log)"
  grep -q "$REST_TOKEN" run.log && fail "rest cut $when: the token appears in: $(cat run.log)"
  sleep 1.5
  f=$(rest_meta m.json)
  rest_complete m.json
  n=$(snapshots_once m.json)
  [ "$n" = "$copies" ] || [ "$n" = $((copies + 1)) ] || fail "rest cut $when: $n snapshots, want $copies or $((copies + 1))"
  rest_rows "$f" "$n"
  outcome="exit $rc, $n snapshots"
  if [ $rc -ne 0 ]; then
    grep -qi "catalog\|127.0.0.1" run.log || fail "rest cut $when: the error names neither the catalog nor its host: $(cat run.log)"
    ctl restpx /pass > /dev/null
    expect_exit 0 ferry run rest.yaml --quiet
  fi
  copies=$((copies + 1))
  f=$(rest_meta m.json)
  rest_complete m.json
  n=$(snapshots_once m.json)
  [ "$n" = "$copies" ] || fail "rest cut $when: $n snapshots after the resume, want $copies"
  rest_rows "$f" "$copies"
  pass "REST catalog, connection cut $when the commit-table POST ($outcome): no half snapshot, resume converged ($copies snapshots, each checkpoint once, rows exact)"
done
