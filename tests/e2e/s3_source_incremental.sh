#!/usr/bin/env bash
# shared: s3
# mode: incremental of the s3 source against the S3 test server (route checkpoint: the key,
# ETag and size of every object listed by the last completed run):
#   1. two CSV objects read; a run with nothing new reads nothing;
#   2. a new (gzip) object lands: only it is read;
#   3. an object changes: it is re-read whole; with write: append its unchanged rows arrive
#      twice (documented), with write: upsert and a key they do not;
#   4. a run failing at its first write: the next run (its resumption) reads the new object;
#   5. a cursor over CSV objects is refused naming the object;
#   6. a cursor over Parquet objects (written by DuckDB, row groups of 2048 rows): the first
#      run reads every row; after a new object lands (ids above the cursor, plus rows below
#      it that a cursor read leaves out by design) and an old object is rewritten with the
#      same ids, the next run reads only the rows above the saved cursor, the old objects' row
#      groups skipped by their statistics (resource.started's row_groups_skipped), read by
#      ranged GETs of the footer and the groups it plans.
. "$(dirname "$0")/lib.sh"
. "$FERRY_SRC/tests/s3/s3.sh"
s3_have || fail "node and tests/tools/node_modules (s3rver, aws4) are needed: run scripts/install-deps.sh"
export S3_KEY=S3RVER S3_SECRET=S3RVER
s3_start lake

gen_csv() { # FROM TO [TAG]
  awk -v a="$1" -v b="$2" -v tag="${3:-v}" 'BEGIN { print "id,val"; for (i = a; i < b; i++) printf "%d,%s%d\n", i, tag, i }'
}
pipe() { # FILE NAME DB WRITE [RESOURCE_EXTRA]
  cat > "$1" <<YAML
version: 1
name: $2
source:
  type: s3
  bucket: $S3_BUCKET
  endpoint: "$S3_ENDPOINT"
  path_style: true
  access_key_id: env:S3_KEY
  secret_access_key: env:S3_SECRET
  prefix: in/
  resources: [{table: t, mode: incremental${5:-}}]
sink: {type: sqlite, path: $3, write: $4}
YAML
}
mkdir data
gen_csv 0 100 > data/a.csv
gen_csv 100 200 > data/b.csv
s3c "$S3_BUCKET" put in/a.csv data/a.csv
s3c "$S3_BUCKET" put in/b.csv data/b.csv
pipe app.yaml inc-app "$T/app.db" append
pipe ups.yaml inc-ups "$T/ups.db" upsert ", key: [id]"

# ---- 1 ----
expect_exit 0 ferry run app.yaml
expect_exit 0 ferry run ups.yaml
[ "$(q app.db 'SELECT count(*) || "|" || sum(id) FROM t')" = "200|19900" ] || fail "first run: $(q app.db 'SELECT count(*), sum(id) FROM t')"
expect_exit 0 ferry run app.yaml
[ "$(q app.db 'SELECT count(*) FROM t')" = 200 ] || fail "a run with nothing new read $(q app.db 'SELECT count(*) - 200 FROM t') rows again"
pass "s3 incremental: first run reads every object; a run with nothing new reads nothing"

# ---- 2 ----
gen_csv 200 250 | gzip -c > data/c.csv.gz
s3c "$S3_BUCKET" put in/c.csv.gz data/c.csv.gz
expect_exit 0 ferry run app.yaml
expect_exit 0 ferry run ups.yaml
[ "$(q app.db 'SELECT count(*) || "|" || count(DISTINCT id) || "|" || max(id) FROM t')" = "250|250|249" ] \
  || fail "after a new object: $(q app.db 'SELECT count(*), count(DISTINCT id), max(id) FROM t')"
pass "s3 incremental: a new object is read, the others are not"

# ---- 3 ----
{ gen_csv 100 200; echo "1000,new"; } | sed 's/^150,v150$/150,changed/' > data/b2.csv
s3c "$S3_BUCKET" put in/b.csv data/b2.csv
expect_exit 0 ferry run app.yaml
expect_exit 0 ferry run ups.yaml
[ "$(q app.db 'SELECT count(*) FROM t')" = 351 ] || fail "append after a change: $(q app.db 'SELECT count(*) FROM t') rows, want 250 + 101"
[ "$(q app.db 'SELECT count(*) FROM t WHERE id = 120')" = 2 ] || fail "append: the changed object's unchanged rows arrive again"
[ "$(q app.db 'SELECT count(*) FROM t WHERE id < 100 OR id >= 200 AND id < 1000')" = 150 ] || fail "append: other objects were read again"
[ "$(q ups.db 'SELECT count(*) || "|" || count(DISTINCT id) FROM t')" = "251|251" ] || fail "upsert after a change: $(q ups.db 'SELECT count(*), count(DISTINCT id) FROM t')"
[ "$(q ups.db 'SELECT val FROM t WHERE id = 150')" = changed ] || fail "upsert: the changed row: $(q ups.db 'SELECT val FROM t WHERE id = 150')"
[ "$(q ups.db 'SELECT val FROM t WHERE id = 1000')" = new ] || fail "upsert: the new row"
pass "s3 incremental: a changed object is re-read whole (append: its rows again; upsert: none twice)"

# ---- 4 ----
gen_csv 300 310 > data/d.csv
s3c "$S3_BUCKET" put in/d.csv data/d.csv
if FERRY_FAILPOINTS=before_sink_apply=error "$FERRY_BIN" run app.yaml --quiet >/dev/null 2>&1; then
  fail "the failpoint should fail the run"
fi
expect_exit 0 ferry run app.yaml
[ "$(q app.db 'SELECT count(*) FROM t WHERE id >= 300 AND id < 310')" = 10 ] || fail "after a failed run: d.csv rows $(q app.db 'SELECT count(*) FROM t WHERE id >= 300 AND id < 310'), want 10"
[ "$(q app.db 'SELECT count(*) FROM t')" = 361 ] || fail "after a failed run: $(q app.db 'SELECT count(*) FROM t') rows, want 361"
pass "s3 incremental: a failed run does not move the checkpoint"

# ---- 5 ----
pipe cur.yaml inc-cur "$T/cur.db" append ", cursor: [id]"
expect_exit 2 ferry run cur.yaml
printf '%s\n' "$OUT" | grep -q "s3://$S3_BUCKET/in/a.csv: a \`cursor:\` is read from Parquet objects only" \
  || fail "a cursor over CSV objects should be refused naming the object: $OUT"
pass "s3 incremental: a cursor over CSV objects is refused naming the object"

# ---- 6 ----
DUCK="$FERRY_SRC/tests/tools/duckdb_exec.mjs"
pq() { # FROM TO FILE: ids FROM..TO-1, row groups of 2048 rows
  nodetool "$DUCK" "COPY (SELECT i::BIGINT AS id, 'v' || i AS val FROM range($1, $2) t(i))
    TO '$T/data/$3' (FORMAT parquet, ROW_GROUP_SIZE 2048)" >/dev/null || fail "DuckDB failed"
}
pq 0 5000 p1.parquet
pq 5000 6000 p2.parquet
s3c "$S3_BUCKET" put pq/p1.parquet data/p1.parquet
s3c "$S3_BUCKET" put pq/p2.parquet data/p2.parquet
sed -e 's#prefix: in/#prefix: pq/#; s#name: inc-cur#name: inc-pq#; s#cur.db#pq.db#' cur.yaml > pq.yaml
skipped() { # the last run's row_groups_skipped
  ferry events "$(json_field "$OUT" .run_id)" --json \
    | jq -r 'select(.type == "resource.started") | .payload.row_groups_skipped' | tail -1
}
expect_exit 0 ferry run pq.yaml --json
[ "$(q pq.db 'SELECT count(*) || "|" || count(DISTINCT id) || "|" || sum(id) FROM t')" = "6000|6000|17997000" ] \
  || fail "first cursor run: $(q pq.db 'SELECT count(*), count(DISTINCT id), sum(id) FROM t')"
[ "$(skipped)" = 0 ] || fail "first cursor run skipped $(skipped) row groups"
# a new object: 2000 rows above the cursor (5999) and 100 below it; p1 rewritten (new ETag)
nodetool "$DUCK" "COPY (SELECT i::BIGINT AS id, 'v' || i AS val FROM range(6000, 8000) t(i)
  UNION ALL SELECT i::BIGINT, 'late' || i FROM range(10, 110) t(i) ORDER BY 1)
  TO '$T/data/p3.parquet' (FORMAT parquet, ROW_GROUP_SIZE 2048)" >/dev/null || fail "DuckDB failed"
s3c "$S3_BUCKET" put pq/p3.parquet data/p3.parquet
pq 0 5000 p1b.parquet
s3c "$S3_BUCKET" put pq/p1.parquet data/p1b.parquet
expect_exit 0 ferry run pq.yaml --json
[ "$(q pq.db 'SELECT count(*) || "|" || count(DISTINCT id) || "|" || max(id) FROM t')" = "8000|8000|7999" ] \
  || fail "second cursor run: $(q pq.db 'SELECT count(*), count(DISTINCT id), max(id) FROM t')"
[ "$(q pq.db "SELECT count(*) FROM t WHERE val LIKE 'late%'")" = 0 ] || fail "rows below the cursor were read"
# p1's and p2's groups all end at or below 5999; each of p3's groups holds rows above it
groups() { # FILE...: row groups, as DuckDB counts them
  local f n=0
  for f in "$@"; do
    n=$((n + $(nodetool "$DUCK" "SELECT count(DISTINCT row_group_id)::INTEGER AS n FROM parquet_metadata('$T/data/$f')" | jq '.[0]')))
  done
  echo "$n"
}
old_groups=$(groups p1b.parquet p2.parquet)
[ "$old_groups" -ge 2 ] || fail "DuckDB wrote $old_groups row groups for p1 and p2"
[ "$(skipped)" = "$old_groups" ] || fail "the second run should skip $old_groups row groups by statistics, skipped $(skipped)"
expect_exit 0 ferry run pq.yaml --json
[ "$(q pq.db 'SELECT count(*) FROM t')" = 8000 ] || fail "a run with nothing new read rows"
[ "$(skipped)" = "$(groups p1b.parquet p2.parquet p3.parquet)" ] || fail "a run with nothing new should skip every group: $(skipped)"
pass "s3 incremental: a Parquet cursor reads only rows above it, row groups skipped by statistics"
