#!/usr/bin/env bash
# conn_reset: network faults between ferry and PostgreSQL, through tests/tools/tcpproxy.mjs
# (one proxy for the source connection, one for the sink), PG -> PG, per_apply append:
#   1. every connection of the sink reset mid-copy, then of the source: the run fails with a
#      message naming the side and the peer (never the password); a plain re-run resumes and
#      the destination equals the source as a multiset (no row missing, none doubled);
#   2. the sink's connection cut exactly when its COMMIT passes: `after` (the server commits,
#      ferry never hears back) and `before` (the server never sees it). The state store never
#      records a checkpoint for the unconfirmed batch (its checkpoint stays below what the
#      destination holds after `after`), and the re-run converges with no duplicate;
#   3. a black hole (bytes acknowledged by the proxy's kernel, nothing answered) on the sink,
#      then on the source: ferry notices within its io_timeout (3 s here) and fails saying so,
#      instead of hanging; a re-run completes exactly;
#   4. the proxy refusing connections: a clear connection error, nothing written.
. "$(dirname "$0")/../e2e/lib.sh"
. "${FERRY_PG_SH:-$FERRY_SRC/tests/pg/pg.sh}"
pg_start
p() { psql "$FERRY_PG_URL" -X -q -v ON_ERROR_STOP=1 -A -t "$@"; }
command -v node > /dev/null || fail "node is needed (scripts/install-deps.sh)"

PROXY_PIDS=()
proxy_start() { # NAME: starts a proxy to the server; sets <NAME>_PORT and <NAME>_CTL
  local name=$1 i
  node "$FERRY_SRC/tests/tools/tcpproxy.mjs" "$PGPORT" "$T/$name.port" "$T/$name.ctl" > "$T/$name.log" 2>&1 &
  PROXY_PIDS+=($!)
  for i in $(seq 1 100); do [ -s "$T/$name.port" ] && [ -s "$T/$name.ctl" ] && break; sleep 0.1; done
  [ -s "$T/$name.ctl" ] || fail "proxy $name did not start: $(cat "$T/$name.log")"
  printf -v "${name}_PORT" '%s' "$(cat "$T/$name.port")"
  printf -v "${name}_CTL" '%s' "$(cat "$T/$name.ctl")"
}
ctl() { curl -fsS "http://127.0.0.1:$1$2"; } # CTL_PORT PATH
cleanup_proxies() { local x; for x in "${PROXY_PIDS[@]}"; do kill "$x" 2>/dev/null || true; done; }
trap "__cr_rc=\$?; cleanup_proxies; set +e; (exit \$__cr_rc); $(trap -p EXIT | sed "s/^trap -- '//; s/' EXIT\$//")" EXIT

proxy_start SRC
proxy_start DST
export SRC_URL="postgresql://ferry_reader:$PG_READER_PASSWORD@127.0.0.1:$SRC_PORT/ferry?sslmode=disable"
export DEST_URL="postgresql://ferry_admin:$PG_ADMIN_PASSWORD@127.0.0.1:$DST_PORT/ferry?sslmode=disable"

ROWS=120000
p -c "CREATE TABLE public.src (id bigint PRIMARY KEY, v text, n numeric, t timestamptz)"
p -c "INSERT INTO public.src SELECT g, md5(g::text), g / 7.0, '2024-01-01'::timestamptz + g * interval '1 s' FROM generate_series(1, $ROWS) g"
p -c "GRANT SELECT ON public.src TO ferry_reader"

# CONN_RESET_OVERLAP=true|false: the sink's overlap_commits (unset: its default)
SINK_EXTRA=${CONN_RESET_OVERLAP:+, overlap_commits: $CONN_RESET_OVERLAP}
pipeline() { # FILE NAME SCHEMA [EXTRA_SOURCE] [EXTRA_SINK]
  cat > "$1" <<EOF
version: 1
name: $2
source: {type: postgres, url: env:SRC_URL, io_timeout: 3s${4:-}, resources: [{table: public.src, mode: full}]}
sink: {type: postgres, url: env:DEST_URL, schema: $3, write: append, io_timeout: 3s$SINK_EXTRA${5:-}}
batch: {rows: 1000}
EOF
}

exact() { # SCHEMA LABEL
  local missing extra
  missing=$(p -c "SELECT count(*) FROM (TABLE public.src EXCEPT ALL TABLE \"$1\".src) x")
  extra=$(p -c "SELECT count(*) FROM (TABLE \"$1\".src EXCEPT ALL TABLE public.src) x")
  [ "$missing" = 0 ] && [ "$extra" = 0 ] || fail "$2: $missing rows missing, $extra extra (duplicates) in $1.src"
}

batches_written() { # PIPELINE: batch.written events of its newest run (each pipeline runs once)
  q -cmd ".timeout 5000" "$FERRY_STATE" "SELECT count(*) FROM events WHERE type = 'batch.written' AND run_id = (SELECT max(id) FROM runs WHERE pipeline = '$1')" 2>/dev/null || echo 0
}

start_slow() { # FILE: runs ferry in the background, each apply slowed a little
  FERRY_FAILPOINTS="after_sink_apply=sleep(15)" "$FERRY_BIN" run "$1" > "$T/run.log" 2>&1 &
  RUN_PID=$!
}

wait_batches() { # PIPELINE N
  local i
  for i in $(seq 1 600); do
    [ "$(batches_written "$1")" -ge "$2" ] && return 0
    kill -0 $RUN_PID 2>/dev/null || fail "$1: the run ended early: $(cat "$T/run.log")"
    sleep 0.05
  done
  fail "$1: no progress"
}

# wait_exit SECONDS: the run must end by itself (a hang is the failure); sets RC
wait_exit() {
  local i
  for i in $(seq 1 $(($1 * 10))); do
    kill -0 $RUN_PID 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 $RUN_PID 2>/dev/null; then
    kill -9 $RUN_PID
    fail "ferry still blocked $1 s after the fault: a silent hang ($(tail -n 3 "$T/run.log"))"
  fi
  set +e; wait $RUN_PID; RC=$?; set -e
}

no_secret() { # FILE
  ! grep -q -e "$PG_READER_PASSWORD" -e "$PG_ADMIN_PASSWORD" "$1" || fail "a password appears in $1"
}

# ---- 1. resets ----------------------------------------------------------------------------
for side in DST SRC; do
  name="reset-$side"; schema="reset_${side,,}"
  pipeline p.yaml "$name" "$schema"
  start_slow p.yaml
  wait_batches "$name" 8
  ctl "$(eval echo "\$${side}_CTL")" /reset > /dev/null
  wait_exit 60
  [ $RC -ne 0 ] && [ $RC -ne 137 ] || fail "$side reset: exit $RC: $(cat run.log)"
  if [ $side = DST ]; then want="postgres sink"; port=$DST_PORT; else want="postgres source"; port=$SRC_PORT; fi
  grep -q "$want" run.log || fail "$side reset: the message does not name the $want: $(cat run.log)"
  grep -q "127.0.0.1:$port" run.log || fail "$side reset: the message does not name the peer: $(cat run.log)"
  no_secret run.log
  expect_exit 0 ferry run p.yaml
  grep -q "resum" <<< "$OUT" || fail "$side reset: the re-run did not resume: $OUT"
  exact "$schema" "$side reset"
  pass "$side connections reset mid-copy: clear error ($(grep -o "$want[^;]*" run.log | head -n 1 | cut -c1-100)...), resumed exactly"
done

# ---- 2. cut on the sink's COMMIT -----------------------------------------------------------
COMMIT_HEX=$(printf 'Q\0\0\0\013COMMIT\0' | od -An -tx1 | tr -d ' \n')
for when in after before; do
  name="commit-$when"; schema="commit_$when"
  pipeline p.yaml "$name" "$schema"
  ctl "$DST_CTL" "/cut?dir=up&hex=$COMMIT_HEX&when=$when&skip=10" > /dev/null
  start_slow p.yaml
  wait_exit 60
  [ $RC -ne 0 ] || fail "cut $when COMMIT: the run succeeded: $(cat run.log)"
  [ "$(ctl "$DST_CTL" /stats | jq .cuts)" -ge 1 ] || fail "cut $when COMMIT: the proxy never saw a COMMIT"
  no_secret run.log
  sleep 1.5 # `after`: the proxy closes the server side 1 s after forwarding the COMMIT
  state_key=$(q "$FERRY_STATE" "SELECT coalesce(max(json_extract(position, '\$.key[0]')), 0) FROM run_checkpoints c JOIN runs r ON r.id = c.run_id WHERE r.pipeline = '$name'")
  dest_max=$(p -c "SELECT coalesce(max(id), 0) FROM \"$schema\".src")
  if [ $when = after ]; then
    [ "$state_key" -lt "$dest_max" ] || fail "cut after COMMIT: the state checkpoint ($state_key) covers the unconfirmed batch (destination up to $dest_max)"
  else
    [ "$state_key" -le "$dest_max" ] || fail "cut before COMMIT: state checkpoint $state_key ahead of the destination ($dest_max)"
  fi
  expect_exit 0 ferry run p.yaml
  exact "$schema" "cut $when COMMIT"
  pass "connection cut $when the sink's COMMIT: state checkpoint $state_key <= destination $dest_max, re-run exact, no duplicate"
done

# ---- 3. black holes ------------------------------------------------------------------------
for side in DST SRC; do
  name="hole-$side"; schema="hole_${side,,}"
  pipeline p.yaml "$name" "$schema"
  # the source side is throttled so that it is still reading when the hole opens
  [ $side = SRC ] && ctl "$SRC_CTL" "/slow?bps=400000" > /dev/null
  start_slow p.yaml
  wait_batches "$name" 5
  ctl "$(eval echo "\$${side}_CTL")" /stall > /dev/null
  wait_exit 60
  ctl "$(eval echo "\$${side}_CTL")" /reset > /dev/null
  ctl "$(eval echo "\$${side}_CTL")" /pass > /dev/null
  [ $RC -ne 0 ] && [ $RC -ne 137 ] || fail "$side black hole: exit $RC: $(cat run.log)"
  grep -q "io_timeout" run.log || fail "$side black hole: the error does not name io_timeout: $(cat run.log)"
  no_secret run.log
  expect_exit 0 ferry run p.yaml
  exact "$schema" "$side black hole"
  pass "$side black hole: noticed within io_timeout ($(grep -o "made no progress[^;]*\|sent nothing[^;]*" run.log | head -n 1)), re-run exact"
done

# ---- 4. refused connections ----------------------------------------------------------------
ctl "$DST_CTL" /refuse > /dev/null
pipeline p.yaml refused refused
expect_exit 1 ferry run p.yaml
grep -q "postgres sink.*127.0.0.1:$DST_PORT" <<< "$OUT" || fail "refused: message: $OUT"
grep -q -e "$PG_ADMIN_PASSWORD" <<< "$OUT" && fail "refused: the password is shown"
ctl "$DST_CTL" /pass > /dev/null
[ "$(p -c "SELECT count(*) FROM pg_catalog.pg_namespace WHERE nspname = 'refused'")" = 0 ] || fail "refused: something was written"
pass "refused connections: one clear error naming the sink and its peer, nothing written"
