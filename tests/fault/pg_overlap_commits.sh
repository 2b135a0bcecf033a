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
#     checkpoint the state store recorded as durable is covered by it (K or less), the
#     resume lands the table exactly (count + md5, no duplicate), and the run counts every
#     row once (the checkpoint row's run counts make up for what the store missed);
#   - an error between the commits: the run fails, batch N (committed) is recorded, N+1 is
#     not in the destination, the resume is exact;
#   - a COMMIT that fails (a deferred constraint trigger raises at the commit of the batch
#     holding id 7001): the run fails naming the commit and the table, nothing of that batch
#     or a later one is in the destination, its checkpoint is the batch before, the store
#     never recorded the failed batch; after the trigger is dropped the resume is exact;
#   - overlap_commits: false gives the same table with one destination backend;
#   - overlap_commits: auto (the default) overlaps after its first 4 batches when their
#     commits were slow (a deferred trigger sleeps at each COMMIT) and keeps one backend when
#     they were quick (a row trigger makes the copies slow); the plain table logs a choice
#     (machine-dependent) that its backends must match;
#     a value other than auto, true or false is refused naming the key;
#   - network faults through tests/tools/tcpproxy.mjs (io_timeout 3 s): the connection cut
#     right after or before a COMMIT passes while the next batch is copied on the other
#     connection, and a black hole opened after the first batch (the abort then goes back
#     to the first connection, also black-holed: it must be watched by io_timeout too, it
#     used to wait there forever): each run fails with a clear error naming the sink, never
#     hangs, the destination and the store stay consistent, the resume is exact.
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

# ---- overlap_commits: auto (the default) times its first 4 batches' commits ------------
# Slow commits, made by the server: a deferred constraint trigger sleeps 50 ms at the
# COMMIT of every batch (at its first row). Slow copies: a row trigger sleeps 150 ms while
# each batch is copied, so the commits (fsync off) are a small share. Each run must choose
# so, say it in the log, and land the table exactly. The plain table (`auto` said) must say
# a choice; which one depends on the machine.
pd >/dev/null <<'SQL'
CREATE FUNCTION public.nap() RETURNS trigger LANGUAGE plpgsql AS
$$BEGIN PERFORM pg_sleep(TG_ARGV[0]::float8); RETURN NEW; END$$;
CREATE SCHEMA slowcommit;
CREATE TABLE slowcommit.ord (id bigint PRIMARY KEY, v int NOT NULL, note text);
CREATE CONSTRAINT TRIGGER nap AFTER INSERT ON slowcommit.ord DEFERRABLE INITIALLY DEFERRED
  FOR EACH ROW WHEN (NEW.id % 2000 = 1) EXECUTE FUNCTION public.nap('0.05');
CREATE SCHEMA slowcopy;
CREATE TABLE slowcopy.ord (id bigint PRIMARY KEY, v int NOT NULL, note text);
CREATE TRIGGER nap BEFORE INSERT ON slowcopy.ord
  FOR EACH ROW WHEN (NEW.id % 2000 = 1) EXECUTE FUNCTION public.nap('0.15');
SQL
for case in "slowcommit overlap from now on" "slowcopy stay on one connection" \
  "auto (overlap from now on|stay on one connection)"; do
  read -r name said <<< "$case"
  rm -f "$FERRY_STATE"*
  mark "$name"
  # the default (no overlap_commits line), and `auto` said
  line="  durability: per_apply"
  [ "$name" = auto ] && line="  overlap_commits: auto"
  pipeline "$name.yaml" "$name" "$line"
  FERRY_LOG=debug expect_exit 0 ferry run "$name.yaml"
  exact "$name" "overlap_commits auto, $name"
  grep -Eq "overlap_commits auto: 4 batches took .* committing each; commits $said" <<< "$OUT" ||
    fail "overlap_commits auto, $name: the log does not say 'commits $said': $OUT"
  want=1 # the backends the choice said
  grep -q "commits overlap from now on" <<< "$OUT" && want=2
  got=$(copy_backends "$name" "$name")
  [ "$got" = "$want" ] || fail "overlap_commits auto, $name: COPYs from $got backends, want $want"
done
pipeline bad.yaml bad "  overlap_commits: sometimes"
expect_exit 2 ferry run bad.yaml
grep -q 'overlap_commits.*expected one of auto, true, false, got "sometimes"' <<< "$OUT" ||
  fail "overlap_commits: sometimes: message: $OUT"
pass "overlap_commits auto: slow commits overlap, slow copies keep one connection, the plain table's logged choice matches its backends; a bad value is named"

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
  # the run's counter is exact: the batches committed in the destination but not recorded
  # in the state (up to two here) are counted from the checkpoint row's run counts
  counted=$(ferry runs --pipeline "c$n" --json | jq -r '.[0].rows')
  [ "$counted" = "$ROWS" ] || fail "$fp: the run counts $counted rows, the destination holds $ROWS"
  [ "$(pd -c "SELECT run_rows FROM _ferry.checkpoints WHERE pipeline LIKE 'c$n@%'")" = "$ROWS" ] ||
    fail "$fp: the checkpoint row's run_rows is not $ROWS"
  pass "$fp: the destination held ids 1..$k as its checkpoint says, the store no further; resume exact, $counted rows counted"
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

# ---- network faults while a COMMIT is in flight (through a proxy) --------------------------
command -v node > /dev/null || fail "node is needed (scripts/install-deps.sh)"
node "$FERRY_SRC/tests/tools/tcpproxy.mjs" "$PGPORT" "$T/px.port" "$T/px.ctl" > "$T/px.log" 2>&1 &
PX_PID=$!
trap "__ov_rc=\$?; kill $PX_PID 2>/dev/null || true; set +e; (exit \$__ov_rc); $(trap -p EXIT | sed "s/^trap -- '//; s/' EXIT\$//")" EXIT
for _ in $(seq 1 100); do [ -s "$T/px.ctl" ] && break; sleep 0.1; done
[ -s "$T/px.ctl" ] || fail "proxy did not start: $(cat "$T/px.log")"
PX_CTL=$(cat "$T/px.ctl")
ctl() { curl -fsS "http://127.0.0.1:$PX_CTL$1" > /dev/null; }
export PX_URL="postgresql://$PGUSER:$PGPASSWORD@127.0.0.1:$(cat "$T/px.port")/dst?sslmode=disable"
net_pipeline() { # FILE NAME
  pipeline "$1" "$2" "  overlap_commits: true
  io_timeout: 3s"
  sed -i 's/env:DST_URL/env:PX_URL/' "$1"
}
# run_bounded SECONDS FAILPOINTS FILE: runs ferry in the background; a run still going after
# SECONDS is a hang (killed, the test fails); sets RC and OUT; RUN_PID while it runs
run_start() { FERRY_FAILPOINTS=$1 "$FERRY_BIN" run "$2" > "$T/run.log" 2>&1 & RUN_PID=$!; }
run_wait() { # SECONDS LABEL
  local i
  for i in $(seq 1 $(($1 * 10))); do kill -0 $RUN_PID 2>/dev/null || break; sleep 0.1; done
  if kill -0 $RUN_PID 2>/dev/null; then
    kill -9 $RUN_PID
    fail "$2: ferry still running $1 s after the fault (a silent hang): $(tail -n 3 "$T/run.log")"
  fi
  set +e; wait $RUN_PID; RC=$?; set -e
  OUT=$(cat "$T/run.log")
  [ $RC = 1 ] || fail "$2: exit $RC, want 1: $OUT"
  grep -q "postgres sink" <<< "$OUT" || fail "$2: the error does not name the sink: $OUT"
  ! grep -q -e "$PGPASSWORD" <<< "$OUT" || fail "$2: the password is shown"
}

commit_hex=$(printf 'Q\0\0\0\013COMMIT\0' | od -An -tx1 | tr -d ' \n')
for when in after before; do
  name="cut_$when"
  rm -f "$FERRY_STATE"*
  net_pipeline "$name.yaml" "$name"
  ctl "/cut?dir=up&hex=$commit_hex&when=$when&skip=3"
  run_start "after_sink_apply=sleep(20)" "$name.yaml"
  run_wait 60 "cut $when a COMMIT"
  sleep 1.5 # `after`: the proxy closes the server side 1 s after the COMMIT passed
  k=$(consistent "$name" "cut $when a COMMIT")
  expect_exit 0 ferry run "$name.yaml"
  exact "$name" "cut $when a COMMIT, resumed"
  pass "connection cut $when a COMMIT in flight: clear error ($(grep -o 'postgres sink[^;]*' "$T/run.log" | head -n 1 | cut -c1-90)), destination ids 1..$k, store no further; resume exact"
done

# The first batch's COMMIT answered, the run paused (the second connection is current); then
# every connection is black-holed: the second apply times out, and the abort goes back to
# the first connection, which must be watched by io_timeout as well.
rm -f "$FERRY_STATE"*
net_pipeline hole.yaml hole
run_start "after_sink_apply=sleep(6000)@1" hole.yaml
for _ in $(seq 1 600); do
  [ "$(dest_key hole)" -gt 0 ] && break
  kill -0 $RUN_PID 2>/dev/null || fail "black hole: the run ended early: $(cat "$T/run.log")"
  sleep 0.05
done
sleep 0.3 # the COMMIT's answer on its way through the proxy
ctl /stall
run_wait 60 "black hole"
ctl /reset
ctl /pass
grep -q "io_timeout" <<< "$OUT" || fail "black hole: the error does not name io_timeout: $OUT"
k=$(consistent hole "black hole")
expect_exit 0 ferry run hole.yaml
exact hole "black hole, resumed"
pass "black hole after the first overlapped batch: io_timeout on both connections, no hang ($(grep -o 'made no progress[^;]*' "$T/run.log" | head -n 1)); destination ids 1..$k; resume exact"
