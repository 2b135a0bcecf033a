#!/usr/bin/env bash
# shared: s3
# labels: asan
# bitflip_sinks: the catalog's bitflip row on every sink besides sqlite (failpoints.sh has
# sqlite): one bit of batch 3 flipped between the pipeline's digest and the sink
# (before_sink_apply=bitflip@3, src/pipeline/flow.c) for the postgres sink (per_apply), the
# files sink (jsonl and parquet), the s3 sink (s3rver on loopback) and the iceberg sink.
# Each: exit 4, the message names batch 3 and the integrity digest, a batch.chunk_divergence
# event, the run failed; nothing of batch 3 (ids 4001-6000) reaches a reader - at_commit
# sinks publish nothing at all (no manifest, no snapshot); then a plain re-run completes and
# the destination holds every row exactly once, whole rows equal to an unfaulted copy
# (jsonl text, parquet and iceberg through DuckDB, postgres through psql; ids for all).
# Then the postgres cdc source into a sqlite merge: a flipped bit in the snapshot copy and
# in the change stream, each: exit 4 naming batch 3, and the re-run equals the source.
. "$(dirname "$0")/../e2e/lib.sh"
. "${FERRY_PG_SH:-$FERRY_SRC/tests/pg/pg.sh}"
. "$FERRY_SRC/tests/s3/s3.sh"
s3_have || fail "node and tests/tools/node_modules (s3rver, aws4) are needed: run scripts/install-deps.sh"
DUCK="$FERRY_SRC/tests/tools/duckdb_exec.mjs"
pg_start
[ -n "${FERRY_PG_URL:-}" ] || fail "pg_start exported no FERRY_PG_URL"
export S3_KEY=S3RVER S3_SECRET=S3RVER
s3_start lake
export DEST_URL="$FERRY_PG_URL"
ROWS=20000

pipeline() { # FILE NAME SINK_YAML
  cat > "$1" <<EOF
version: 1
name: $2
source: {type: sample, rows: $ROWS, seed: 7, resources: [{table: orders, mode: full}]}
sink: $3
batch: {rows: 2000}
EOF
}

sink_yaml() { # KIND TAG
  case $1 in
    postgres) echo "{type: postgres, url: env:DEST_URL, schema: $2, write: append, durability: per_apply}" ;;
    jsonl | parquet) echo "{type: files, path: $T/$2, format: $1}" ;;
    s3) echo "{type: s3, bucket: $S3_BUCKET, prefix: $2, endpoint: \"$S3_ENDPOINT\", path_style: true, access_key_id: env:S3_KEY, secret_access_key: env:S3_SECRET, format: jsonl}" ;;
    iceberg) echo "{type: iceberg, warehouse: $T/$2, namespace: db}" ;;
  esac
}

# rows KIND TAG OUT: the destination as a reader sees it, one JSON array per row, sorted
# (postgres: psql text rows); empty when nothing is published
rows() {
  local kind=$1 tag=$2 out=$3 files m
  : > "$out"
  case $kind in
    postgres)
      if [ -n "$(psql "$FERRY_PG_URL" -XAtqc "SELECT to_regclass('\"$tag\".orders')")" ]; then
        psql "$FERRY_PG_URL" -XAtqc "SELECT json_build_array(id, customer_id, status, quantity, amount::text, discount, express, note, created_at, updated_at) FROM \"$tag\".orders" > "$out"
      fi ;;
    jsonl)
      for m in "$T/$tag"/_runs/*/_manifest.json; do
        [ -e "$m" ] || continue
        (cd "$T/$tag" && cat $(jq -r '.files[].path' "$m")) | jq -c '[.id, .customer_id, .status, .quantity, .amount, .discount, .express, .note, .created_at, .updated_at]' >> "$out"
      done ;;
    parquet)
      for m in "$T/$tag"/_runs/*/_manifest.json; do
        [ -e "$m" ] || continue
        files=$(jq -r '.files[].path' "$m" | awk -v d="$T/$tag" '{printf "%s\x27%s/%s\x27", (NR>1?",":""), d, $0}')
        nodetool "$DUCK" "SELECT id, customer_id, status, quantity, amount::VARCHAR, discount, express, note, epoch_us(created_at), epoch_us(updated_at) FROM read_parquet([$files])" >> "$out"
      done ;;
    s3)
      for m in $(s3c "$S3_BUCKET" list "$tag/_runs/" | grep '_manifest.json$'); do
        for key in $(s3c "$S3_BUCKET" get "$m" | jq -r '.objects[].key'); do
          s3c "$S3_BUCKET" get "$key" | jq -c '[.id, .customer_id, .status, .quantity, .amount, .discount, .express, .note, .created_at, .updated_at]' >> "$out"
        done
      done ;;
    iceberg)
      [ -d "$T/$tag/db/orders/metadata" ] || return 0
      m=$(ls "$T/$tag"/db/orders/metadata/v*.metadata.json | sort -V | tail -n 1)
      [ "$(jq '.snapshots | length' "$m")" -gt 0 ] || return 0
      files=$(nodetool "$FERRY_SRC/tests/tools/read_iceberg.mjs" "$T/$tag" db --files orders | jq -r '.data_file.file_path' | sed 's|^file://||' \
        | awk '{printf "%s\x27%s\x27", (NR>1?",":""), $0}')
      nodetool "$DUCK" "SELECT id, customer_id, status, quantity, amount::VARCHAR, discount, express, note, epoch_us(created_at), epoch_us(updated_at) FROM read_parquet([$files])" >> "$out" ;;
  esac
  sort -o "$out" "$out"
}

ids() { jq -r '.[0]' "$1"; } # ids of a rows file

for kind in postgres jsonl parquet s3 iceberg; do
  export FERRY_STATE="$T/state-$kind.db"
  # the truth: the same sink, no fault
  pipeline "ref-$kind.yaml" "ref-$kind" "$(sink_yaml "$kind" "ref_$kind")"
  expect_exit 0 ferry run "ref-$kind.yaml" --quiet
  rows "$kind" "ref_$kind" "ref-$kind.rows"
  [ "$(wc -l < "ref-$kind.rows")" = $ROWS ] || fail "$kind: the unfaulted copy holds $(wc -l < "ref-$kind.rows") rows"

  pipeline "f-$kind.yaml" "flip-$kind" "$(sink_yaml "$kind" "flip_$kind")"
  FERRY_FAILPOINTS=before_sink_apply=bitflip@3 expect_exit 4 ferry run "f-$kind.yaml"
  grep -q "batch 3" <<< "$OUT" && grep -qi "integrity" <<< "$OUT" || fail "$kind: the message should name batch 3 and the integrity digest: $OUT"
  run=$(ferry runs --pipeline "flip-$kind" --json | jq -r '.[0].id')
  ferry events "$run" --json | jq -r .type | grep -qx batch.chunk_divergence || fail "$kind: no batch.chunk_divergence event"
  [ "$(ferry show "$run" --json | jq -r .state)" = failed ] || fail "$kind: the run is not failed"
  rows "$kind" "flip_$kind" "got-$kind.rows"
  n=$(wc -l < "got-$kind.rows")
  bad=$(ids "got-$kind.rows" | awk '$1 >= 4001 && $1 <= 6000' | wc -l)
  [ "$bad" = 0 ] || fail "$kind: $bad rows of the flipped batch 3 are visible"
  case $kind in
    postgres) [ "$n" -le 4000 ] || fail "$kind: $n rows visible after a failure in batch 3" ;;
    *) [ "$n" = 0 ] || fail "$kind (at_commit): $n rows published by a failed run" ;;
  esac
  # whatever is visible is unchanged (a subset of the unfaulted copy)
  [ -z "$(comm -23 "got-$kind.rows" "ref-$kind.rows" | head -n 1)" ] || fail "$kind: a visible row differs from the source: $(comm -23 "got-$kind.rows" "ref-$kind.rows" | head -n 2)"
  expect_exit 0 ferry run "f-$kind.yaml" --quiet
  rows "$kind" "flip_$kind" "got-$kind.rows"
  [ -z "$(uniq -d "got-$kind.rows" | head -n 1)" ] || fail "$kind: duplicate rows after the re-run"
  cmp -s "got-$kind.rows" "ref-$kind.rows" || fail "$kind: after the re-run: $(comm -23 "ref-$kind.rows" "got-$kind.rows" | wc -l) rows missing, $(comm -13 "ref-$kind.rows" "got-$kind.rows" | wc -l) foreign"
  [ "$(ids "got-$kind.rows" | sort -n | uniq | wc -l)" = $ROWS ] || fail "$kind: ids not each once"
  pass "bitflip $kind: exit 4 naming batch 3, divergence event, run failed, $n rows visible and none of batch 3; re-run: $ROWS rows once, equal to an unfaulted copy"
done


# ---- the postgres cdc source: a flipped bit in the snapshot copy, then in the stream --------
export FERRY_STATE="$T/state-cdc.db"
pgq -c "CREATE TABLE flipsrc (id bigint PRIMARY KEY, payload text, n int)" >/dev/null
pgq -c "INSERT INTO flipsrc SELECT g, md5(g::text), g FROM generate_series(1, $ROWS) g" >/dev/null
export SRC_URL="$FERRY_PG_URL"
cat > cdc.yaml <<YAML
version: 1
name: flip-cdc
source: {type: postgres, url: env:SRC_URL, resources: [{table: flipsrc, mode: cdc}]}
sink: {type: sqlite, path: $T/cdc.db, write: merge}
batch: {rows: 2000}
YAML
same_as_source() { # LABEL
  [ "$(q "$T/cdc.db" "SELECT group_concat(id || ':' || payload || ':' || n, ',') FROM (SELECT * FROM flipsrc ORDER BY id)" | md5sum)" = \
    "$(pgq -c "SELECT string_agg(id || ':' || payload || ':' || n, ',' ORDER BY id) FROM flipsrc" | md5sum)" ] \
    || fail "$1: the sqlite destination differs from the source"
}
for phase in snapshot stream; do
  if [ $phase = stream ]; then
    pgq -c "UPDATE flipsrc SET payload = 'u' || payload, n = n + 1 WHERE id % 3 = 0" >/dev/null
    pgq -c "INSERT INTO flipsrc SELECT g, md5(g::text), g FROM generate_series($((ROWS + 1)), $((ROWS + 5000))) g" >/dev/null
  fi
  FERRY_FAILPOINTS=before_sink_apply=bitflip@3 expect_exit 4 ferry run cdc.yaml
  grep -q "batch 3" <<< "$OUT" && grep -qi "integrity" <<< "$OUT" || fail "cdc $phase: the message should name batch 3 and the integrity digest: $OUT"
  run=$(ferry runs --pipeline flip-cdc --json | jq -r '.[0].id')
  ferry events "$run" --json | jq -r .type | grep -qx batch.chunk_divergence || fail "cdc $phase: no batch.chunk_divergence event"
  expect_exit 0 ferry run cdc.yaml --quiet
  same_as_source "cdc $phase"
  pass "bitflip postgres cdc ($phase): exit 4 naming batch 3, divergence event; re-run: the sqlite merge destination equals the source"
done
