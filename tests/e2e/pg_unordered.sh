#!/usr/bin/env bash
# tests/e2e/pg_unordered.sh - PostgreSQL -> PostgreSQL full copies read without key order
# when the sink is durable at its commit (docs/connectors.md, "read order"), against a real
# PostgreSQL 15 (tests/pg/pg.sh; source database `ferry`, destination database `dst`):
#   - the SQL that reaches the source server (log_statement = all): at_commit reads carry no
#     ORDER BY (one reader: `COPY table (cols) TO`; two: ctid page ranges, which the server
#     plans as a TID Range Scan), per_apply reads still do;
#   - parallelism 2 at_commit copies of a keyed, a composite-key and a key-less table and a
#     view: count + md5 over every row (SQL, both sides) equal, zero duplicates;
#   - kill -9 mid-run: nothing visible; the source then changes (update, delete, insert);
#     the resume converges to the new table exactly;
#   - a crash right after the sink's commit: the resume reads nothing again;
#   - a pause (SIGINT) commits nothing and the resume is exact;
#   - a run planned at_commit resumed into per_apply is refused with a clear message;
#   - per_apply killed mid-shard resumes after its last durable key (`"id" > N` in the log).
. "$(dirname "$0")/lib.sh"
. "${FERRY_PG_SH:-$FERRY_SRC/tests/pg/pg.sh}"
pg_start

pgq -d postgres -c "CREATE DATABASE dst" >/dev/null
pgq -c "ALTER SYSTEM SET log_statement = 'all'" -c "SELECT pg_reload_conf()" >/dev/null
export DST_URL="postgresql://$PGUSER:$PGPASSWORD@127.0.0.1:$PGPORT/dst"
LOG="$PG_DIR/server.log"
pd() { pgq -d dst "$@"; }

pgq >/dev/null <<'SQL'
CREATE TABLE public.ord (id bigint PRIMARY KEY, v int NOT NULL, amount numeric(12,2),
                         note text, at timestamptz NOT NULL);
INSERT INTO ord SELECT g, g % 1000, round((g * 1.37)::numeric, 2),
       CASE WHEN g % 4 = 0 THEN NULL ELSE md5(g::text) END,
       timestamptz '2024-01-01 00:00+00' + g * interval '1 minute'
FROM generate_series(1, 120000) g;
CREATE TABLE public.comp (a int, b text, v float8, PRIMARY KEY (a, b));
INSERT INTO comp SELECT g / 7, 'k' || (g % 7), g / 3.0 FROM generate_series(1, 30000) g;
CREATE TABLE public.nokey (x int, y text);
INSERT INTO nokey SELECT g % 500, CASE WHEN g % 3 = 0 THEN NULL ELSE 'y' || g END
FROM generate_series(1, 30000) g;
INSERT INTO nokey SELECT 7, 'same' FROM generate_series(1, 50);  -- whole-row duplicates
CREATE VIEW public.ordv AS SELECT id, v, note FROM ord WHERE v < 500;
ANALYZE;
SQL

# digest DB RELATION: row count and md5 over every row's text, in a fixed order.
digest() {
  pgq -d "$1" -c "SELECT count(*) || ' ' || coalesce(md5(string_agg(md5(t::text), '' ORDER BY md5(t::text))), '-') FROM $2 t"
}
same() { # same SRC_RELATION DST_RELATION LABEL
  local a b
  a=$(digest ferry "$1")
  b=$(digest dst "$2")
  [ "$a" = "$b" ] || fail "$3: source $1 ($a) and destination $2 ($b) differ"
}
no_dups() { # no_dups DST_RELATION KEY_EXPR
  [ "$(pd -c "SELECT count(*) - count(DISTINCT ($2)) FROM $1")" = 0 ] || fail "$1 has duplicate keys"
}
# pipeline FILE NAME DURABILITY PARALLELISM TABLES...
pipeline() {
  local file=$1 name=$2 dur=$3 par=$4
  shift 4
  {
    echo "version: 1"
    echo "name: $name"
    echo "source:"
    echo "  type: postgres"
    echo "  url: env:FERRY_PG_READER_URL"
    echo "  parallelism: $par"
    echo "  shard_rows: 20000"
    echo "  resources:"
    for t in "$@"; do echo "    - {table: $t, mode: full}"; done
    echo "sink:"
    echo "  type: postgres"
    echo "  url: env:DST_URL"
    echo "  schema: $name"
    echo "  write: append"
    echo "  durability: $dur"
    echo "batch: {rows: 2000}"
  } > "$file"
}
mark() { pgq -c "SELECT 'ferry-test-mark $1'" >/dev/null; }
# The COPY statements the server ran after a mark (log_statement = all).
since() { sed -n "/ferry-test-mark $1/,\$p" "$LOG" | grep 'TO STDOUT'; }

# ---- the plan and the SQL ---------------------------------------------------------------
pipeline p1.yaml one at_commit 1 public.ord
expect_exit 0 ferry check p1.yaml
grep -q '"commit_once":true' <<<"$OUT" || fail "at_commit plans commit_once: $OUT"
grep -q "1 shard" <<<"$OUT" || fail "one reader: one shard: $OUT"
mark one
expect_exit 0 ferry run p1.yaml --json
same public.ord one.ord "parallelism 1, at_commit"
since one | grep -q 'COPY "public"."ord" ("id", "v", "amount", "note", "at") TO STDOUT' ||
  fail "one reader at_commit reads with COPY table TO: $(since one | grep COPY | head -3)"
since one | grep -q 'ORDER BY' && fail "an at_commit read was ordered: $(since one | grep 'ORDER BY' | head -2)"
pass "parallelism 1, at_commit: one COPY table TO, equal"

pipeline p2.yaml two at_commit 2 public.ord public.comp public.nokey public.ordv
expect_exit 0 ferry check p2.yaml
grep -q "public.ord: mode full, 6 shards" <<<"$OUT" || fail "parallelism 2: 6 page ranges for 120000 rows of 20000: $OUT"
mark two
expect_exit 0 ferry run p2.yaml --json
same public.ord two.ord "parallelism 2, ord"
same public.comp two.comp "parallelism 2, composite key"
same public.nokey two.nokey "parallelism 2, no key"
same public.ordv two.ordv "parallelism 2, view"
no_dups two.ord id
no_dups two.comp "a, b"
n_ctid=$(since two | grep -c "ctid >= '(\|ctid < '(" || true)
[ "$n_ctid" -ge 6 ] || fail "page ranges reach the server: $n_ctid: $(since two | grep COPY | head -5)"
since two | grep -q 'ORDER BY' && fail "an at_commit read was ordered: $(since two | grep 'ORDER BY' | head -2)"
# The server plans a logged page range as a TID Range Scan (no index, no sort).
sel=$(since two | grep -m1 "ctid >= '(" | sed -e 's/^.*COPY (//' -e 's/) TO STDOUT (FORMAT binary)$//')
plan=$(pgq -c "EXPLAIN $sel")
grep -q "Tid Range Scan" <<<"$plan" || fail "a page range is not a TID Range Scan: $sel -> $plan"
pass "parallelism 2, at_commit: page ranges (keyed, composite, no key) and a view, equal, no duplicates"

# ---- kill -9 mid-run, the source changes, resume -------------------------------------------
pipeline k.yaml kill at_commit 2 public.ord public.nokey
FERRY_FAILPOINTS="before_sink_apply=sleep(40)" "$FERRY_BIN" run k.yaml --quiet > k1.log 2>&1 &
pid=$!
for _ in $(seq 1 600); do
  r=$(ferry runs --pipeline kill --json 2>/dev/null | jq -r '.[0].rows // 0' 2>/dev/null || echo 0)
  [ "${r:-0}" -ge 20000 ] && break
  sleep 0.05
done
kill -9 $pid 2>/dev/null || true
wait $pid 2>/dev/null || true
[ "${r:-0}" -ge 20000 ] && [ "$r" -lt 150000 ] || fail "kill -9 landed at $r rows, not mid-run"
visible=$(pd -c "SELECT count(*) FROM kill.ord" 2>/dev/null || echo 0)
[ "$visible" = 0 ] || fail "at_commit: $visible rows visible before the commit"
pgq >/dev/null <<'SQL'
UPDATE ord SET v = v + 1, note = 'changed' WHERE id % 10 = 3;
DELETE FROM ord WHERE id % 10 = 5;
INSERT INTO ord SELECT g, 1, 1.5, 'new', now() FROM generate_series(200001, 205000) g;
DELETE FROM nokey WHERE x = 3;
INSERT INTO nokey SELECT 9999, 'new' FROM generate_series(1, 100);
SQL
expect_exit 0 ferry run k.yaml --json
[ "$(json_field "$OUT" .resumed)" = true ] || fail "the killed run is resumed: $OUT"
same public.ord kill.ord "kill -9, changed source, resume"
same public.nokey kill.nokey "kill -9, changed source, resume (no key)"
no_dups kill.ord id
pass "kill -9 at $r rows (nothing visible), source updated/deleted/inserted, resume equals the new table, no duplicates"

# ---- crash right after the commit: nothing is read again -----------------------------------
pipeline c.yaml crash at_commit 2 public.ord
expect_exit 137 env FERRY_FAILPOINTS=after_sink_commit=crash "$FERRY_BIN" run c.yaml --quiet
same public.ord crash.ord "crash after commit"
expect_exit 0 ferry run c.yaml --json
[ "$(json_field "$OUT" .rows)" = 0 ] || fail "after a committed crash the resume reads nothing: $OUT"
same public.ord crash.ord "crash after commit, resumed"
pass "crash after the sink's commit: the resume writes nothing again"

# ---- pause: nothing is committed, the resume is exact ---------------------------------------
pipeline pz.yaml pz at_commit 2 public.ord
FERRY_FAILPOINTS="before_sink_apply=sleep(40)" "$FERRY_BIN" run pz.yaml > pz.log 2>&1 &
pid=$!
wait_run_rows pz 600 || true
kill -INT $pid
set +e; wait $pid; prc=$?; set -e
[ $prc = 5 ] || fail "SIGINT pauses (exit 5), got $prc: $(cat pz.log)"
[ "$(pd -c "SELECT count(*) FROM pz.ord" 2>/dev/null || echo 0)" = 0 ] || fail "a paused unordered run committed rows"
expect_exit 0 ferry run pz.yaml --json
[ "$(json_field "$OUT" .resumed)" = true ] || fail "the paused run is resumed: $OUT"
same public.ord pz.ord "pause and resume"
pass "pause of an unordered at_commit run commits nothing; the resume is exact"

# ---- a run planned at_commit is not resumed per_apply ----------------------------------------
pipeline sw.yaml sw at_commit 2 public.ord
expect_exit 137 env FERRY_FAILPOINTS=before_sink_commit=crash "$FERRY_BIN" run sw.yaml --quiet
sed -i 's/durability: at_commit/durability: per_apply/' sw.yaml
expect_exit 1 ferry run sw.yaml
grep -q "was planned for a sink durable at its commit" <<<"$OUT" || fail "clear refusal: $OUT"
sed -i 's/durability: per_apply/durability: at_commit/' sw.yaml
expect_exit 0 ferry run sw.yaml --json
same public.ord sw.ord "resumed at_commit after the refusal"
pass "an unordered plan is refused for a per_apply resume, then completes at_commit"

# ---- per_apply: still in key order, resumed mid-shard after its last durable key -------------
pipeline pa.yaml pa per_apply 2 public.ord
mark pa
FERRY_FAILPOINTS="before_sink_apply=sleep(40)" "$FERRY_BIN" run pa.yaml --quiet > pa1.log 2>&1 &
pid=$!
for _ in $(seq 1 600); do
  r=$(pd -c "SELECT count(*) FROM pa.ord" 2>/dev/null || echo 0)
  [ "${r:-0}" -ge 10000 ] && break
  sleep 0.05
done
kill -9 $pid 2>/dev/null || true
wait $pid 2>/dev/null || true
since pa | grep -q 'ORDER BY "id"' || fail "per_apply reads are ordered by the key"
since pa | grep -q 'ctid' && fail "per_apply read page ranges"
mark pa2
expect_exit 0 ferry run pa.yaml --json
since pa2 | grep -q '"id" > [0-9]' || fail "per_apply resumes mid-shard after its last durable key: $(since pa2 | grep COPY | head -3)"
same public.ord pa.ord "per_apply kill -9 and resume"
no_dups pa.ord id
pass "per_apply: key order, killed at $r rows, resumed mid-shard after its last key, equal, no duplicates"
