#!/usr/bin/env bash
# shared: pg
# labels: asan
# tests/fault/y_bad_config.sh - the bad_config row of the fault catalog for every connector
# (tests/e2e/bad_config.sh covers the engine's own keys). For each connector type - sample,
# null, sqlite (source and sink), postgres (source, cdc and sink), files (source and sink), s3,
# iceberg - a required key missing, a value of the wrong type or out of range, and an unknown
# (misspelt) key. Each must give: exit 2, exactly one error line naming the key (as
# `source.KEY` / `sink.KEY`, or the key and its resource), no destination written (no file,
# folder or object), no run recorded in the state, and no connection attempted: the postgres
# and s3 endpoints point at a loopback listener that counts connections, which must stay 0.
# Exception, as docs/pipeline-file.md says ("a key nobody reads is reported as unknown once the
# connector has opened"): the postgres connectors open by connecting, so their unknown keys are
# checked against a real PostgreSQL (tests/pg/pg.sh); there the run is refused before any row
# moves or any table is made (the destination database stays empty, no run recorded).
. "$(dirname "$0")/../e2e/lib.sh"
. "${FERRY_PG_SH:-$FERRY_SRC/tests/pg/pg.sh}"
pg_start
pgq -c "CREATE TABLE t (id bigint PRIMARY KEY, v text); INSERT INTO t VALUES (1, 'a')"
dest=$(pg_db dest)
export PG_URL="$FERRY_PG_URL" PG_DEST_URL="postgresql://ferry_admin:$PGPASSWORD@127.0.0.1:$PGPORT/$dest"
ferry() { env -u PGPASSWORD "$FERRY_BIN" "$@"; }

# A listener that accepts and counts connections (never answers).
python3 - "$T/listen.port" "$T/listen.count" <<'PY' &
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('127.0.0.1', 0)); s.listen(16)
open(sys.argv[1] + '.tmp', 'w').write(str(s.getsockname()[1])); __import__('os').rename(sys.argv[1] + '.tmp', sys.argv[1])
n = 0; open(sys.argv[2], 'w').write('0')
while True:
    c, _ = s.accept(); n += 1
    open(sys.argv[2], 'w').write(str(n)); c.close()
PY
LISTENER=$!
prev_trap=$(trap -p EXIT); prev_trap=${prev_trap#trap -- \'}; prev_trap=${prev_trap%\' EXIT}
# shellcheck disable=SC2064
trap "__rc=\$?; kill -TERM $LISTENER 2>/dev/null || true; wait $LISTENER 2>/dev/null || true; (exit \$__rc); $prev_trap" EXIT
for _ in $(seq 1 100); do [ -s listen.port ] && break; sleep 0.05; done
LP=$(cat listen.port)
export BAD_PG_URL="postgresql://u:secretpw@127.0.0.1:$LP/db?connect_timeout=2"
export S3_KEY=k S3_SECRET=s
mkdir -p in && printf 'id,v\n1,a\n' > in/t.csv
q src.db "CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT); INSERT INTO t VALUES (1, 'a');"

SAMPLE='{type: sample, rows: 10, resources: [{table: orders}]}'
NULLSINK='{type: null}'
N=0
check() { # LABEL PATTERN SOURCE_YAML SINK_YAML
  local label=$1 pattern=$2
  N=$((N + 1))
  printf 'version: 1\nname: bad%d\nsource: %s\nsink: %s\n' "$N" "$3" "$4" > bad.yaml
  expect_exit 2 ferry run bad.yaml
  printf '%s' "$OUT" | grep -q -F -- "$pattern" || fail "$label: the message should name '$pattern': $OUT"
  [ "$(printf '%s\n' "$OUT" | grep -c -i 'error')" = 1 ] || fail "$label: one message, got: $OUT"
  printf '%s' "$OUT" | grep -q secretpw && fail "$label: the password is in the message: $OUT"
  [ ! -e out.db ] && [ ! -e out ] && [ ! -e wh ] || fail "$label: a destination was written: $(ls)"
  [ "$(ferry runs --json | jq length)" = 0 ] || fail "$label: a run was recorded"
  [ "$(cat listen.count)" = 0 ] || fail "$label: a connection was attempted"
  [ "$(pgq "$dest" -c "SELECT count(*) FROM pg_class WHERE relnamespace NOT IN (SELECT oid FROM pg_namespace WHERE nspname IN ('pg_catalog', 'information_schema', 'pg_toast'))")" = 0 ] \
    || fail "$label: something was created in the destination database"
  echo "ok - $label: $(printf '%s\n' "$OUT" | grep -i error)"
}

# ---- sources ----
check "sample: wrong type" "source.rows" '{type: sample, rows: many, resources: [{table: orders}]}' "$NULLSINK"
check "sample: unknown key" "source.rowz" '{type: sample, rows: 10, rowz: 3, resources: [{table: orders}]}' "$NULLSINK"
check "sample: out of range" "source.shards" '{type: sample, rows: 10, shards: 0, resources: [{table: orders}]}' "$NULLSINK"
check "sqlite source: missing" "source.path" '{type: sqlite, resources: [{table: t}]}' "$NULLSINK"
check "sqlite source: unknown key" "source.pth" "{type: sqlite, path: $T/src.db, pth: x, resources: [{table: t}]}" "$NULLSINK"
check "postgres source: missing" "source.url" '{type: postgres, resources: [{table: t}]}' "$NULLSINK"
check "postgres source: wrong type" "source.parallelism" '{type: postgres, url: env:BAD_PG_URL, parallelism: two, resources: [{table: t}]}' "$NULLSINK"
check "postgres source: unknown key" "source.paralelism" '{type: postgres, url: env:PG_URL, paralelism: 2, resources: [{table: public.t}]}' "$NULLSINK"
check "postgres cdc: unknown resource key" "slott" '{type: postgres, url: env:PG_URL, resources: [{table: public.t, mode: cdc, slott: x}]}' "$NULLSINK"
check "postgres source: bad duration" "source.io_timeout" '{type: postgres, url: env:BAD_PG_URL, io_timeout: soon, resources: [{table: t}]}' "$NULLSINK"
check "postgres cdc: bad on_slot_lost" "on_slot_lost" '{type: postgres, url: env:PG_URL, resources: [{table: public.t, mode: cdc, on_slot_lost: ignore}]}' "$NULLSINK"
[ "$(pgq -c "SELECT count(*) FROM pg_replication_slots WHERE database = current_database()") $(pgq -c "SELECT count(*) FROM pg_publication")" = "0 0" ] \
  || fail "a refused cdc pipeline left a slot or a publication"
check "postgres source: plain password" "source.url" '{type: postgres, url: "postgresql://u:secretpw@127.0.0.1:1/db", resources: [{table: t}]}' "$NULLSINK"
check "files source: missing" "path" '{type: files, format: csv, resources: [{table: t}]}' "$NULLSINK"
check "files source: wrong type" "source.format" "{type: files, path: $T/in/t.csv, format: xml, resources: [{table: t}]}" "$NULLSINK"
check "files source: unknown key" "source.delimitr" "{type: files, path: $T/in/t.csv, format: csv, delimitr: ';', resources: [{table: t}]}" "$NULLSINK"
# ---- sinks ----
check "null: unknown key" "sink.path" "$SAMPLE" '{type: null, path: out.db}'
check "sqlite sink: missing" "sink.path" "$SAMPLE" '{type: sqlite}'
check "sqlite sink: wrong type" "sink.durability" "$SAMPLE" '{type: sqlite, path: out.db, durability: sometimes}'
check "sqlite sink: unknown key" "sink.pth" "$SAMPLE" '{type: sqlite, path: out.db, pth: x}'
check "postgres sink: missing" "sink.url" "$SAMPLE" '{type: postgres}'
check "postgres sink: unknown key" "sink.shcema" "$SAMPLE" '{type: postgres, url: env:PG_DEST_URL, shcema: x}'
check "postgres sink: wrong type" "sink.connect_timeout" "$SAMPLE" '{type: postgres, url: env:BAD_PG_URL, connect_timeout: [1]}'
check "postgres sink: plain password" "sink.url" "$SAMPLE" '{type: postgres, url: "postgresql://u:secretpw@127.0.0.1:1/db"}'
check "files sink: missing" "sink.path" "$SAMPLE" '{type: files, format: csv}'
check "files sink: wrong type" "sink.part_rows" "$SAMPLE" '{type: files, path: out, format: csv, part_rows: lots}'
check "files sink: bad value" "sink.format" "$SAMPLE" '{type: files, path: out, format: xml}'
check "files sink: unknown key" "sink.delimitr" "$SAMPLE" "{type: files, path: out, format: csv, delimitr: ';'}"
check "files sink: a key of another format" "sink.compression" "$SAMPLE" '{type: files, path: out, format: csv, compression: zstd}'
S3="type: s3, endpoint: 'http://127.0.0.1:$LP', path_style: true, access_key_id: env:S3_KEY, secret_access_key: env:S3_SECRET"
check "s3 sink: missing" "sink.bucket" "$SAMPLE" "{$S3, format: csv}"
check "s3 sink: wrong type" "sink.part_rows" "$SAMPLE" "{$S3, bucket: b, format: csv, part_rows: lots}"
check "s3 sink: unknown key" "sink.regoin" "$SAMPLE" "{$S3, bucket: b, format: csv, regoin: x}"
check "s3 sink: bad value" "sink.format" "$SAMPLE" "{$S3, bucket: b, format: xml}"
check "iceberg sink: missing" "sink.warehouse" "$SAMPLE" '{type: iceberg}'
check "iceberg sink: unknown key" "sink.namespce" "$SAMPLE" "{type: iceberg, warehouse: $T/wh, namespce: x}"
check "iceberg sink: wrong type" "sink.file_bytes" "$SAMPLE" "{type: iceberg, warehouse: $T/wh, file_bytes: huge}"
check "iceberg sink: bad value" "sink.catalog" "$SAMPLE" "{type: iceberg, warehouse: $T/wh, catalog: hive}"
pass "every connector: missing, wrong-typed and unknown keys refused naming the key, nothing written, no run, no connection"
