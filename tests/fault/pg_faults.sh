#!/usr/bin/env bash
# Faults around the postgres sink and source, against a real PostgreSQL (tests/pg/pg.sh):
#   crash_before_sink_commit / crash_after_sink_commit (and the checkpoint and apply
#     boundaries around them), per_apply and at_commit: a crash at each failpoint, then a
#     plain re-run; the destination must equal an uninterrupted copy as a multiset of whole
#     rows (EXCEPT ALL both ways, so one duplicate fails), and an at_commit crash before the
#     commit must leave nothing visible;
#   replace_is_atomic: a PostgreSQL source whose backend is terminated halfway through a
#     `replace` run: the run fails naming the source, the destination keeps the previous
#     complete table, no staging table is left published, and a re-run lands the new table;
#   slow_sink_backpressure: the sink's backend is SIGSTOPped mid-copy while the source keeps
#     producing: ferry's peak RSS (VmHWM) stops growing (bounded queues), and after SIGCONT
#     the run completes with every row exactly once.
. "$(dirname "$0")/../e2e/lib.sh"
. "${FERRY_PG_SH:-$FERRY_SRC/tests/pg/pg.sh}"
pg_start
export DEST_URL="$FERRY_PG_URL" SRC_URL="$FERRY_PG_READER_URL"
p() { psql "$FERRY_PG_URL" -X -q -v ON_ERROR_STOP=1 -A -t "$@"; }

# sample_to_pg FILE NAME ROWS SCHEMA WRITE [EXTRA_SINK_YAML]
sample_to_pg() {
  cat > "$1" <<EOF
version: 1
name: $2
source: {type: sample, rows: $3, seed: 7, resources: [{table: orders, mode: full}, {table: users, mode: full}]}
sink:
  type: postgres
  url: env:DEST_URL
  schema: $4
  write: $5
${6:-}
batch: {rows: 1000}
EOF
}

# same_rows SCHEMA_A SCHEMA_B TABLE: multiset equality of whole rows.
same_rows() {
  local a=$1 b=$2 t=$3 missing extra
  missing=$(p -c "SELECT count(*) FROM (TABLE \"$a\".\"$t\" EXCEPT ALL TABLE \"$b\".\"$t\") x")
  extra=$(p -c "SELECT count(*) FROM (TABLE \"$b\".\"$t\" EXCEPT ALL TABLE \"$a\".\"$t\") x")
  [ "$missing" = 0 ] && [ "$extra" = 0 ] && return 0
  echo "$b.$t: $missing rows of $a.$t missing, $extra extra (duplicates or strangers)" >&2
  return 1
}

visible_rows() { # SCHEMA TABLE: rows a reader sees (0 when the table does not exist)
  if [ "$(p -c "SELECT to_regclass('\"$1\".\"$2\"') IS NULL")" = t ]; then echo 0; return; fi
  p -c "SELECT count(*) FROM \"$1\".\"$2\""
}

ROWS=20000
sample_to_pg ref.yaml ref $ROWS ref append
expect_exit 0 ferry run ref.yaml

# ---- crashes at each boundary, then a plain re-run ---------------------------------------
n=0
for durability in per_apply at_commit; do
  for fp in before_sink_commit=crash after_sink_commit=crash before_checkpoint_save=crash@3 \
            after_checkpoint_save=crash@3 after_sink_apply=crash@5 before_store_commit=crash@8; do
    n=$((n + 1))
    schema="c$n"
    sample_to_pg c.yaml "c$n" $ROWS "$schema" append "  durability: $durability"
    set +e
    FERRY_FAILPOINTS=$fp "$FERRY_BIN" run c.yaml --quiet > "log$n" 2>&1
    rc=$?
    set -e
    [ $rc = 137 ] || fail "$fp ($durability): expected the crash (137), got $rc: $(cat "log$n")"
    if [ "$durability" = at_commit ] && [ "$fp" != after_sink_commit=crash ]; then
      for t in orders users; do
        v=$(visible_rows "$schema" $t)
        # The 8th store commit may come before or after the sink's one commit (the store
        # groups its writes by time): all or nothing, never part of the run.
        if [ "$fp" = before_store_commit=crash@8 ] && [ "$v" != 0 ]; then
          same_rows ref "$schema" $t || fail "$fp (at_commit): part of $t visible ($v rows)"
        else
          [ "$v" = 0 ] || fail "$fp (at_commit): rows of $t visible before the commit"
        fi
      done
    fi
    expect_exit 0 ferry run c.yaml --json
    for t in orders users; do same_rows ref "$schema" $t || fail "$fp ($durability): $t differs after the re-run"; done
    pass "crash at $fp ($durability): re-run equals the reference, no duplicate"
  done
done

# ---- replace_is_atomic: the source dies halfway ------------------------------------------
p -c "CREATE TABLE public.src (id bigint PRIMARY KEY, v text, n numeric)"
p -c "INSERT INTO public.src SELECT g, md5(g::text), g * 1.5 FROM generate_series(1, 30000) g"
p -c "GRANT SELECT ON public.src TO ferry_reader"
cat > rp.yaml <<EOF
version: 1
name: rp
source: {type: postgres, url: env:SRC_URL, resources: [{table: public.src, mode: full}]}
sink: {type: postgres, url: env:DEST_URL, schema: rp, write: replace}
batch: {rows: 500}
EOF
expect_exit 0 ferry run rp.yaml
p -c "CREATE TABLE public.rp_before AS TABLE rp.src"
p -c "INSERT INTO public.src SELECT g, md5(g::text), g * 1.5 FROM generate_series(30001, 200000) g"
prev_run=$(q "$FERRY_STATE" "SELECT max(id) FROM runs")
FERRY_FAILPOINTS="after_sink_apply=sleep(30)" "$FERRY_BIN" run rp.yaml --fresh > rp.log 2>&1 &
pid=$!
killed=
for _ in $(seq 1 300); do
  # once a few batches are in the (uncommitted) staging table, the source's backend dies
  got=$(q -cmd ".timeout 5000" "$FERRY_STATE" "SELECT count(*) FROM events WHERE type = 'batch.written' AND run_id > $prev_run" 2>/dev/null || echo 0)
  if [ "${got:-0}" -ge 6 ]; then
    killed=$(p -c "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE usename = 'ferry_reader'")
    break
  fi
  sleep 0.1
done
set +e; wait $pid; rc=$?; set -e
[ "${killed:-0}" -ge 1 ] || fail "replace: the source backend was never terminated (rc $rc): $(cat rp.log)"
[ $rc -ne 0 ] || fail "replace: the run succeeded although its source died: $(cat rp.log)"
grep -qi "postgres source\|terminat" rp.log || fail "replace: the error does not say the source failed: $(cat rp.log)"
grep -q "$PG_READER_PASSWORD" rp.log && fail "replace: the error shows the source password"
p -c "SELECT count(*) FROM (TABLE public.rp_before EXCEPT ALL TABLE rp.src) a" | grep -qx 0 \
  && p -c "SELECT count(*) FROM (TABLE rp.src EXCEPT ALL TABLE public.rp_before) a" | grep -qx 0 \
  || fail "replace: the previous table changed after the source died"
[ "$(p -c "SELECT count(*) FROM pg_catalog.pg_tables WHERE schemaname = 'rp'")" = 1 ] \
  || fail "replace: tables left in rp: $(p -c "SELECT string_agg(tablename, ',') FROM pg_catalog.pg_tables WHERE schemaname = 'rp'")"
expect_exit 0 ferry run rp.yaml
[ "$(p -c 'SELECT count(*), count(DISTINCT id), sum(id) FROM rp.src')" = "200000|200000|20000100000" ] \
  || fail "replace after the failure: $(p -c 'SELECT count(*), count(DISTINCT id) FROM rp.src')"
p -c "SELECT count(*) FROM (TABLE public.src EXCEPT ALL TABLE rp.src) a" | grep -qx 0 || fail "replace: new table differs"
pass "replace_is_atomic: source terminated halfway, previous table intact, re-run lands the new one"

# ---- slow_sink_backpressure: the sink's backend stopped, memory bounded ------------------
BIG=3000000
sample_to_pg bp.yaml bp $BIG bp append
sed -i 's/{table: orders, mode: full}, {table: users, mode: full}/{table: orders, mode: full}/; s/batch: {rows: 1000}/batch: {rows: 5000, queue: 4}/' bp.yaml
"$FERRY_BIN" run bp.yaml > bp.log 2>&1 &
pid=$!
backend=
for _ in $(seq 1 600); do
  backend=$(p -c "SELECT pid FROM pg_stat_activity WHERE usename = 'ferry_admin' AND application_name = 'ferry' LIMIT 1")
  [ -n "$backend" ] && break
  kill -0 $pid 2>/dev/null || fail "backpressure: ferry ended early: $(cat bp.log)"
  sleep 0.1
done
[ -n "$backend" ] || fail "backpressure: no COPY of the sink seen"
sleep 1
kill -STOP "$backend"
sleep 3
h1=$(vmhwm_kb $pid)
sleep 5
h2=$(vmhwm_kb $pid)
kill -0 $pid || fail "backpressure: ferry died while its sink was stopped"
kill -CONT "$backend"
set +e; wait $pid; rc=$?; set -e
[ $rc = 0 ] || fail "backpressure: the run failed after SIGCONT (exit $rc): $(cat bp.log)"
echo "VmHWM with the sink stopped: ${h1} kB after 3 s, ${h2} kB after 8 s"
# Unbounded buffering of a sample source producing ~1M rows/s would add hundreds of MiB in 5 s.
[ $((h2 - h1)) -lt 32768 ] || fail "backpressure: peak RSS grew by $(((h2 - h1) / 1024)) MiB while the sink was stopped"
[ "$h2" -lt 1048576 ] || fail "backpressure: peak RSS $((h2 / 1024)) MiB"
[ "$(p -c 'SELECT count(*), count(DISTINCT id) FROM bp.orders')" = "$BIG|$BIG" ] \
  || fail "backpressure: rows after SIGCONT: $(p -c 'SELECT count(*), count(DISTINCT id) FROM bp.orders')"
pass "slow_sink_backpressure: sink stopped 8 s, VmHWM grew $(((h2 - h1) / 1024)) MiB, $BIG rows exactly once after SIGCONT"
