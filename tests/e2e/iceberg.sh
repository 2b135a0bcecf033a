#!/usr/bin/env bash
# labels: asan smoke
# The iceberg sink (part 1 of 2, see iceberg_more.sh), read back by readers ferry did not
# write: icebird (npm) reads each table over HTTP (tests/tools/read_iceberg.mjs serves the
# warehouse on loopback: metadata, manifest list, manifests in Avro, Parquet data) and
# DuckDB reads the data files the manifests list (read_parquet, Parquet field ids).
# Rows are compared with a reference copy of the same sample written by the sqlite sink:
# set equality of whole rows and each column's type (tests/tools/iceberg_lib.sh).
#   1. append: table created (format v2, field ids, identifier fields), one snapshot with
#      ferry's checkpoint in its summary; a second run adds a second snapshot and time
#      travel to the first metadata file shows the first rows only; manifest statistics
#      (value/null counts, bounds) agree with the data;
#   2. crash before the sink commit: no snapshot, nothing visible; resume: one snapshot;
#      crash after the sink commit: the resumed run commits nothing more (no second
#      snapshot for the same checkpoint) (kill -9 and concurrent writers: iceberg_more.sh);
#      a crash between two tables' commits: the run's counters equal what its snapshots added;
#   3. replace: an overwrite snapshot, readers see exactly the new rows; a crash before its
#      commit leaves the previous table whole; `ferry iceberg expire` drops the old
#      snapshots and deletes exactly the files only they reached;
. "$(dirname "$0")/lib.sh"
. "$FERRY_SRC/tests/tools/iceberg_lib.sh"

# ---- 1. append -----------------------------------------------------------------------------
pipeline app.yaml app "$ROWS" "type: iceberg" "warehouse: $WH" "namespace: db"
expect_exit 0 ferry run app.yaml --quiet
M=$(latest_meta "$WH/db/orders")
[ "$(basename "$M")" = v2.metadata.json ] || fail "first run: want v1 (create) + v2 (snapshot), got $M"
[ "$(cat "$WH/db/orders/metadata/version-hint.text")" = 2 ] || fail "version-hint.text should say 2"
[ "$(jq '."format-version"' "$M")" = 2 ] || fail "format-version should be 2"
[ "$(jq -c '.schemas[0]."identifier-field-ids"' "$M")" = '[1]' ] || fail "identifier fields: the key id"
[ "$(jq -c '[.schemas[0].fields[] | [.id, .name, .type, .required]][:5]' "$M")" = \
  '[[1,"id","long",true],[2,"customer_id","int",true],[3,"status","string",true],[4,"quantity","int",true],[5,"amount","decimal(12, 2)",true]]' ] \
  || fail "schema: $(jq -c '.schemas[0].fields' "$M")"
[ "$(jq '.snapshots | length' "$M")" = 1 ] || fail "one snapshot after one run"
jq -e '.snapshots[0].summary | .operation == "append" and ."ferry.run-id" == "1" and
  (."ferry.checkpoint" | fromjson | ."0" | fromjson | .done == true) and ."added-records" == "'"$ROWS"'"' \
  "$M" >/dev/null || fail "snapshot summary: $(jq -c '.snapshots[0].summary' "$M")"
[ "$(jq '."current-snapshot-id" == .snapshots[0]."snapshot-id" and .refs.main."snapshot-id" == ."current-snapshot-id"' "$M")" = true ] \
  || fail "current snapshot and main ref"
check_orders 1
# types as DuckDB reads them, and the Parquet field ids are the Iceberg ids
f=$(nodetool "$READ" "$WH" db --files users | jq -r '.data_file.file_path' | head -n 1 | sed 's|^file://||')
got=$(nodetool "$DUCK" "SELECT string_agg(name || ':' || field_id, ',' ORDER BY field_id) FROM parquet_schema('$f') WHERE field_id IS NOT NULL" | jq -r '.[0]')
want=$(jq -r '[.schemas[0].fields[] | "\(.name):\(.id)"] | join(",")' "$(latest_meta "$WH/db/users")")
[ "$got" = "$want" ] || fail "parquet field ids: $got, want $want"
types=$(nodetool "$DUCK" "SELECT string_agg(column_type, ',') FROM (DESCRIBE SELECT * FROM read_parquet('$f'))" | jq -r '.[0]')
[ "$types" = "BIGINT,VARCHAR,VARCHAR,TINYINT,FLOAT,DECIMAL(38,10),VARCHAR,DATE,TIME,TIMESTAMP,UUID,BLOB,JSON,BOOLEAN,TIMESTAMP WITH TIME ZONE" ] \
  || fail "users types as DuckDB reads them: $types"
[ "$(nodetool "$READ" "$WH" db users | wc -l)" = "$ROWS" ] || fail "icebird: users row count"
# manifest statistics agree with the data: id bounds, null counts of note
nodetool "$READ" "$WH" db --files orders > files.jsonl
python3 - "$(sed 's|^file://||' <<< "$(jq -r '.data_file.file_path' files.jsonl | head -n 1)")" <<'EOF' > stats.txt
import json, struct, sys
e = json.loads(open('files.jsonl').readline())['data_file']
lo = {d['key']: bytes.fromhex(d['value']) for d in e['lower_bounds']}
hi = {d['key']: bytes.fromhex(d['value']) for d in e['upper_bounds']}
nulls = {d['key']: int(d['value']) for d in e['null_value_counts']}
vals = {d['key']: int(d['value']) for d in e['value_counts']}
print(struct.unpack('<q', lo[1])[0], struct.unpack('<q', hi[1])[0], nulls[8], vals[8],
      lo[3].decode(), hi[3].decode(), e['record_count'])
EOF
duck=$(nodetool "$DUCK" "SELECT min(id), max(id), count(*) - count(note), count(*), min(status), max(status), count(*) FROM read_parquet('$(jq -r '.data_file.file_path' files.jsonl | head -n 1 | sed 's|^file://||')')" | jq -r 'map(tostring) | join(" ")')
[ "$(cat stats.txt)" = "$duck" ] || fail "manifest statistics [$(cat stats.txt)] differ from the data [$duck]"
# column_sizes (taken from the Parquet writer's chunks) = the chunks' compressed sizes in the footer
sizes=$(jq -r '.data_file | [.column_sizes[] | select(.key == 1 or .key == 3) | .value | tostring] | join(" ")' <<< "$(head -n 1 files.jsonl)")
dsizes=$(nodetool "$DUCK" "SELECT (SELECT sum(total_compressed_size) FROM parquet_metadata('$(jq -r '.data_file.file_path' files.jsonl | head -n 1 | sed 's|^file://||')') WHERE path_in_schema = 'id')::BIGINT AS a, (SELECT sum(total_compressed_size) FROM parquet_metadata('$(jq -r '.data_file.file_path' files.jsonl | head -n 1 | sed 's|^file://||')') WHERE path_in_schema = 'status')::BIGINT AS b" | jq -r 'map(tostring) | join(" ")')
[ -n "$sizes" ] && [ "$sizes" = "$dsizes" ] || fail "manifest column_sizes [$sizes] differ from the footer's chunk sizes [$dsizes]"
# a second run: a second snapshot; time travel to the first shows the first rows only
expect_exit 0 ferry run app.yaml --quiet
M=$(latest_meta "$WH/db/orders")
[ "$(jq '.snapshots | length' "$M")" = 2 ] || fail "two snapshots after two runs"
[ "$(jq '.snapshots[1]."parent-snapshot-id" == .snapshots[0]."snapshot-id" and .snapshots[1]."sequence-number" == 2' "$M")" = true ] \
  || fail "second snapshot: parent and sequence number"
[ "$(jq '."snapshot-log" | length' "$M")" = 2 ] && [ "$(jq '."metadata-log" | length' "$M")" = 2 ] \
  || fail "snapshot-log / metadata-log"
check_orders 2
check_orders 1 v2.metadata.json
pass "append: v2 metadata, field ids, statistics, two snapshots, time travel, rows equal the source (icebird, DuckDB)"

# ---- 2. crashes and exactly-once ------------------------------------------------------------
before=$(basename "$(latest_meta "$WH/db/orders")")
expect_exit 137 env FERRY_FAILPOINTS=before_sink_commit=crash "$FERRY_BIN" run app.yaml --quiet
[ "$(basename "$(latest_meta "$WH/db/orders")")" = "$before" ] || fail "a crash before commit made a snapshot"
check_orders 2
expect_exit 0 ferry run app.yaml --quiet   # resumes run 3
check_orders 3
expect_exit 137 env FERRY_FAILPOINTS=after_sink_commit=crash "$FERRY_BIN" run app.yaml --quiet
check_orders 4
n_meta=$(ls "$WH/db/orders/metadata/"v*.metadata.json | wc -l)
expect_exit 0 ferry run app.yaml --quiet   # resumes run 4: the table already holds its checkpoint
[ "$(ls "$WH/db/orders/metadata/"v*.metadata.json | wc -l)" = "$n_meta" ] \
  || fail "the resumed run committed again what the table already held"
check_orders 4
M=$(latest_meta "$WH/db/orders")
[ "$(jq '[.snapshots[].summary."ferry.run-id"] | group_by(.) | map(length) | max' "$M")" = 1 ] \
  || fail "a run committed two snapshots: $(jq -c '[.snapshots[].summary."ferry.run-id"]' "$M")"
pass "crash before/after commit: nothing half visible, no checkpoint committed twice, no loss"

# A crash between the two tables' catalog commits: orders' snapshot is in, users' is not. The
# resumed attempt writes users again; the run's counters equal what its snapshots added (the
# summaries' ferry.run-counts let the runner take the dead attempt's counts back and raise
# them to what the tables hold: before them, users was counted twice).
pipeline cnt.yaml cnt "$ROWS" "type: iceberg" "warehouse: $WH" "namespace: cnt"
expect_exit 137 env FERRY_FAILPOINTS=iceberg_before_catalog_commit=crash@2 "$FERRY_BIN" run cnt.yaml --quiet
expect_exit 0 ferry run cnt.yaml --quiet
run=$(ferry runs --pipeline cnt --json | jq -r '.[0].id')
added=0
for tb in orders users; do
  M=$(latest_meta "$WH/cnt/$tb")
  jq -e --arg r "$run" '[.snapshots[] | select(.summary."ferry.run-id" == $r)] | length == 1 and
    (.[0].summary | (."ferry.run-counts" | fromjson | ."0"[0] | tostring) == ."added-records")' \
    "$M" >/dev/null || fail "$tb: one snapshot of run $run whose ferry.run-counts rows equal its added-records: $(jq -c '.snapshots[-1].summary' "$M")"
  added=$((added + $(jq --arg r "$run" '[.snapshots[] | select(.summary."ferry.run-id" == $r) | .summary."added-records" | tonumber] | add' "$M")))
done
counted=$(ferry runs --pipeline cnt --json | jq -r '.[0].rows')
[ "$added" = $((2 * ROWS)) ] || fail "run $run's snapshots added $added rows, want $((2 * ROWS))"
[ "$counted" = "$added" ] || fail "run $run counted $counted rows, its snapshots added $added"
pass "a crash between two tables' commits: the run's counters equal what its snapshots added"

# ---- 3. replace ------------------------------------------------------------------------------
pipeline rep.yaml app "$ROWS" "type: iceberg" "warehouse: $WH" "namespace: db" "write: replace"
expect_exit 137 env FERRY_FAILPOINTS=before_sink_commit=crash "$FERRY_BIN" run rep.yaml --quiet
check_orders 4
expect_exit 0 ferry run rep.yaml --quiet
M=$(latest_meta "$WH/db/orders")
[ "$(jq -r '.snapshots[-1].summary.operation' "$M")" = overwrite ] || fail "replace: an overwrite snapshot"
[ "$(jq -r '.snapshots[-1].summary."total-records"' "$M")" = "$ROWS" ] || fail "replace: total-records"
check_orders 1
pass "replace: an overwrite snapshot with exactly the new rows; a crash before it keeps the old table"

# a replace run paused half way publishes nothing; resumed, it replaces the table in one
# overwrite snapshot (readers never see half a table)
pipeline prep.yaml prep 20000 "type: iceberg" "warehouse: $T/wr" "namespace: db"
expect_exit 0 ferry run prep.yaml --quiet
snaps_before=$(jq '.snapshots | length' "$(latest_meta "$T/wr/db/orders")")
pipeline prep2.yaml prep 20000 "type: iceberg" "warehouse: $T/wr" "namespace: db" "write: replace"
FERRY_FAILPOINTS='after_sink_apply=sleep(60)' "$FERRY_BIN" run prep2.yaml > prep.log 2>&1 &
pid=$!
wait_run_rows prep || true
kill -INT "$pid"
set +e; wait "$pid"; rc=$?; set -e
[ $rc = 5 ] || fail "SIGINT should pause the replace run (exit 5), got $rc: $(cat prep.log)"
[ "$(jq '.snapshots | length' "$(latest_meta "$T/wr/db/orders")")" = "$snaps_before" ] \
  || fail "a paused replace run must not commit a snapshot"
expect_exit 0 ferry run prep2.yaml --quiet
for t in orders users; do
  n=$(nodetool "$READ" "$T/wr" db $t | jq -r .id | sort -u | wc -l)
  all=$(nodetool "$READ" "$T/wr" db $t | wc -l)
  [ "$n" = 20000 ] && [ "$all" = 20000 ] || fail "paused replace of $t: $all rows, $n distinct ids (want 20000)"
done
M=$(latest_meta "$T/wr/db/orders")
[ "$(jq -r '[.snapshots[] | select(.summary."ferry.run-id" == "'"$(jq -r '.snapshots[-1].summary."ferry.run-id"' "$M")"'") | .summary.operation] | join(",")' "$M")" = overwrite ] \
  || fail "the resumed replace run should commit exactly one overwrite snapshot"
pass "replace paused: nothing published; resumed: one overwrite snapshot, exact table"

# ---- 3b. expire: old snapshots go, and the files only they reached --------------------------
n_snap=$(jq '.snapshots | length' "$(latest_meta "$WH/db/orders")")
expect_exit 0 ferry iceberg expire orders --warehouse "$WH" --namespace db --older-than 1d --json
[ "$(json_field "$OUT" .snapshots_expired)" = 0 ] && [ "$(json_field "$OUT" .files_deleted)" = 0 ] \
  || fail "nothing is a day old yet: $OUT"
before=$(find "$WH/db/orders" -type f | wc -l)
expect_exit 0 ferry iceberg expire orders --warehouse "$WH" --namespace db --older-than 0s --dry-run --json
[ "$(json_field "$OUT" .snapshots_expired)" = $((n_snap - 1)) ] || fail "dry run: $OUT"
[ "$(find "$WH/db/orders" -type f | wc -l)" = "$before" ] || fail "a dry run deleted files"
expect_exit 0 ferry iceberg expire orders --warehouse "$WH" --namespace db --older-than 0s --retain-last 1
M=$(latest_meta "$WH/db/orders")
[ "$(jq '.snapshots | length' "$M")" = 1 ] && [ "$(jq '."snapshot-log" | length' "$M")" = 1 ] \
  || fail "after expire: $(jq -c '[.snapshots[]."snapshot-id"]' "$M")"
listed=$(nodetool "$READ" "$WH" db --files orders | jq -r '.data_file.file_path' | sed 's|^file://||' | sort)
on_disk=$(find "$WH/db/orders/data" -name '*.parquet' | sort)
[ "$listed" = "$on_disk" ] || fail "after expire, data files on disk: [$on_disk], listed: [$listed]"
[ "$(find "$WH/db/orders/metadata" -name '*.avro' | wc -l)" = 2 ] || fail "after expire: one manifest list + one manifest"
check_orders 1
pass "expire: old snapshots dropped, unreachable files deleted, the table still reads whole"
