#!/usr/bin/env bash
# tests/fault/pg_overlap_commits.sh - overlapped commits of the postgres sink (per_apply
# append: batch N's COMMIT in flight on one connection while batch N+1 is copied on the
# other; docs/internals/postgres.md), against a real PostgreSQL 15 (tests/pg/pg.sh; source
# database `ferry`, destination `dst`), 2000-row batches of a keyed table read in key order:
#   - the overlap happens: the destination's server log shows the COPYs of one run coming
#     from two backends;
#   - a crash (kill -9 at that instruction, failpoints) between the two commits (N's COMMIT
#     sent, N+1's rows sent) and right after a COMMIT was sent: the destination holds
#     exactly the rows its checkpoint accounts for (ids 1..K, no gap, no duplicate), every
#     checkpoint the state store recorded as durable is covered by it (K or less), and the
#     resume lands the table exactly (count + md5, no duplicate);
#   - an error between the commits: the run fails, batch N (committed) is recorded, N+1 is
#     not in the destination, the resume is exact;
#   - a COMMIT that fails (a deferred constraint trigger raises at the commit of the batch
#     holding id 7001): the run fails naming the commit and the table, nothing of that batch
#     or a later one is in the destination, its checkpoint is the batch before, the store
#     never recorded the failed batch; after the trigger is dropped the resume is exact;
#   - overlap_commits: false gives the same table with one destination backend.
. "$(dirname "$0")/../e2e/lib.sh"
. "${FERRY_PG_SH:-$FERRY_SRC/tests/pg/pg.sh}"
pg_start

pgq -d postgres -c "CREATE DATABASE dst" >/dev/null
pgq -c "ALTER SYSTEM SET log_statement = 'all'" \
    -c "ALTER SYSTEM SET log_line_prefix = '[%p] '" -c "SELECT pg_reload_conf()" >/dev/null
export DST_URL="postgresql://$PGUSER:$PGPASSWORD@127.0.0.1:$PGPORT/dst"
LOG="$PG_DIR/server.log"
pd() { pgq -d dst "$@"; }
ROWS=20000
pgq >/dev/null <<SQL
CREATE TABLE public.ord (id bigint PRIMARY KEY, v int NOT NULL, note text);
INSERT INTO ord SELECT g, g % 1000, CASE WHEN g % 4 = 0 THEN NULL ELSE md5(g::text) END
FROM generate_series(1, $ROWS) g;
ANALYZE;
SQL

digest() { # digest DB RELATION
  pgq -d "$1" -c "SELECT count(*) || ' ' || coalesce(md5(string_agg(md5(t::text), '' ORDER BY t.id)), '-') FROM $2 t"
}
exact() { # exact SCHEMA LABEL: the destination equals the source, no duplicate key
  [ "$(digest ferry public.ord)" = "$(digest dst "$1.ord")" ] ||
    fail "$2: $1.ord differs from the source ($(digest dst "$1.ord"))"
  [ "$(pd -c "SELECT count(*) - count(DISTINCT id) FROM $1.ord")" = 0 ] || fail "$2: duplicates"
}
# The destination's checkpoint key of the table (0: none).
dest_key() {
  local pos
  pos=$(pd -c "SELECT position FROM _ferry.checkpoints WHERE pipeline LIKE '$1@%' AND resource = 'public.ord'" 2>/dev/null || true)
  [ -n "$pos" ] || { echo 0; return; }
  printf '%s' "$pos" | jq -r '.key | if type == "array" then .[0] else . end'
}
# The largest key the state store recorded as durable (batch.written, durable: true).
store_key() {
  q "$FERRY_STATE" "SELECT payload FROM events WHERE type = 'batch.written'" |
    jq -s -r '[.[] | select(.durable == true and .position != null) | .position.key
               | if type == "array" then .[0] else . end | tonumber] | max // 0'
}
# After a failed run: ids 1..K exactly, K = the destination's checkpoint, store <= K.
consistent() { # consistent NAME LABEL
  local k n mx s
  k=$(dest_key "$1")
  n=$(pd -c "SELECT count(*) FROM $1.ord" 2>/dev/null || echo 0)
  mx=$(pd -c "SELECT coalesce(max(id), 0) FROM $1.ord" 2>/dev/null || echo 0)
  s=$(store_key)
  [ "$n" = "$k" ] && [ "$mx" = "$k" ] ||
    fail "$2: the destination holds $n rows up to id $mx, its checkpoint says $k"
  [ "$s" -le "$k" ] || fail "$2: the store recorded key $s as durable, the destination holds $k"
  echo "$k"
}
pipeline() { # pipeline FILE NAME [EXTRA_SINK_LINE]
  cat > "$1" <<EOF
version: 1
name: $2
source:
  type: postgres
  url: env:FERRY_PG_READER_URL
  resources: [{table: public.ord, mode: full}]
sink:
  type: postgres
  url: env:DST_URL
  schema: $2
  write: append
${3:-  overlap_commits: true}
batch: {rows: 2000}
EOF
}
mark() { pgq -c "SELECT 'ferry-test-mark $1'" >/dev/null; }
# Backends that ran a COPY into SCHEMA.ord after the mark.
copy_backends() {
  sed -n "/ferry-test-mark $1/,\$p" "$LOG" | grep -E "COPY \"$2\"\.\"ord\".*FROM STDIN" |
    sed -E 's/^\[([0-9]+)\].*/\1/' | sort -u | wc -l
}

# ---- the overlap happens; both settings land the same table ---------------------------
mark ov; pipeline ov.yaml ov
expect_exit 0 ferry run ov.yaml
exact ov "overlapped"
[ "$(copy_backends ov ov)" = 2 ] || fail "overlapped: COPYs from $(copy_backends ov ov) backends, want 2"
mark one; pipeline one.yaml one "  overlap_commits: false"
expect_exit 0 ferry run one.yaml
exact one "overlap_commits: false"
[ "$(copy_backends one one)" = 1 ] || fail "overlap_commits false: COPYs from $(copy_backends one one) backends"
pass "overlapped commits: two destination backends, exact copy; overlap_commits: false one backend"

# ---- crashes around the commits, then resume ------------------------------------------
n=0
for fp in pg_sink_between_commits=crash@3 pg_sink_commit_sent=crash@4 pg_sink_between_commits=crash@1; do
  n=$((n + 1))
  rm -f "$FERRY_STATE"*
  pipeline "c$n.yaml" "c$n"
  FERRY_FAILPOINTS=$fp expect_exit 137 ferry run "c$n.yaml"
  k=$(consistent "c$n" "$fp")
  expect_exit 0 ferry run "c$n.yaml"
  exact "c$n" "$fp, resumed"
  pass "$fp: the destination held ids 1..$k as its checkpoint says, the store no further; resume exact"
done

# ---- an error between the commits: the committed batch is recorded ------------------------
rm -f "$FERRY_STATE"*
pipeline e1.yaml e1
FERRY_FAILPOINTS=pg_sink_between_commits=error@4 expect_exit 1 ferry run e1.yaml
printf '%s' "$OUT" | grep -q 'pg_sink_between_commits' || fail "error: message: $OUT"
k=$(consistent e1 "error between commits")
[ "$(store_key)" = "$k" ] || fail "error between commits: store $(store_key), destination $k (the settled batch is not recorded)"
expect_exit 0 ferry run e1.yaml
exact e1 "error between commits, resumed"
pass "an error between the commits: batch up to id $k committed and recorded, the next not written; resume exact"

# ---- a COMMIT that fails -----------------------------------------------------------------
rm -f "$FERRY_STATE"*
pd >/dev/null <<'SQL'
CREATE SCHEMA f1;
CREATE TABLE f1.ord (id bigint PRIMARY KEY, v int NOT NULL, note text);
CREATE FUNCTION f1.boom() RETURNS trigger LANGUAGE plpgsql AS
  $$BEGIN RAISE EXCEPTION 'refused at commit: id %', NEW.id; END$$;
CREATE CONSTRAINT TRIGGER boom AFTER INSERT ON f1.ord DEFERRABLE INITIALLY DEFERRED
  FOR EACH ROW WHEN (NEW.id = 7001) EXECUTE FUNCTION f1.boom();
SQL
pipeline f1.yaml f1
expect_exit 1 ferry run f1.yaml
printf '%s' "$OUT" | grep -q 'committing a batch into "f1"."ord"' || fail "failed commit: message: $OUT"
printf '%s' "$OUT" | grep -q 'refused at commit: id 7001' || fail "failed commit: server message missing: $OUT"
k=$(consistent f1 "failed commit")
[ "$k" = 6000 ] || fail "failed commit: the destination holds up to $k, want 6000 (the batch before 7001)"
pd -c "DROP TRIGGER boom ON f1.ord" >/dev/null
expect_exit 0 ferry run f1.yaml
exact f1 "failed commit, resumed"
pass "a failed COMMIT: run fails naming it, destination and store stop at id 6000, resume exact"
