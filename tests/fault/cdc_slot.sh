#!/usr/bin/env bash
# cdc slot safety against a real PostgreSQL:
#  1. a slow sink under `ferry run --follow` (epochs) with a concurrent workload: sampled
#     again and again, the slot's confirmed_flush_lsn is never ahead of the position ferry
#     has saved (read after it, so a save in between can only make the check stricter);
#     SIGTERM pauses cleanly; the destination then equals the source;
#  2. a captured table that stays idle while another table churns: the slot still advances
#     past the churn (the saved position moves to the run's end);
#  3. the slot dropped while ferry is down: a clear "resnapshot required" error and a
#     non-zero exit, nothing written; `on_slot_lost: resnapshot` takes a new snapshot;
#  4. a slot past max_slot_wal_keep_size (wal_status unreserved, not lost yet): the run
#     still works and warns, in its output and in its cdc lag event (`ferry show`).
. "$(dirname "$0")/../e2e/lib.sh"
. "${FERRY_PG_SH:-$FERRY_SRC/tests/pg/pg.sh}"
pg_start

psql -qX -v ON_ERROR_STOP=1 -c "CREATE DATABASE dest" >/dev/null
export SRC_URL="$FERRY_PG_URL"
export DEST_URL="postgresql://ferry_admin:$PGPASSWORD@127.0.0.1:$PGPORT/dest"
pgq >/dev/null <<'SQL'
CREATE TABLE hot (id int PRIMARY KEY, v int);
CREATE TABLE idle (id int PRIMARY KEY, v text);
CREATE TABLE churn (id serial PRIMARY KEY, pad text);
INSERT INTO hot SELECT g, 0 FROM generate_series(1, 500) g;
INSERT INTO idle SELECT g, 'x' FROM generate_series(1, 10) g;
SQL

pipeline() { # FILE NAME TABLE [EXTRA]
  cat > "$1" <<YAML
version: 1
name: $2
source:
  type: postgres
  url: env:SRC_URL
  resources:
    - {table: $3, mode: cdc${4:-}}
sink: {type: postgres, url: env:DEST_URL, schema: public, write: merge}
batch: {rows: 50, flush_after: 100ms}
YAML
}
lsn_num() { pgq -c "SELECT ('$1'::pg_lsn - '0/0')::bigint"; }
confirmed() { pgq -c "SELECT coalesce((confirmed_flush_lsn - '0/0')::bigint, 0) FROM pg_replication_slots WHERE slot_name = '$1'"; }
saved() { # PIPELINE -> the saved stream position's n, or 0
  local v
  v=$(ferry checkpoints --json 2>/dev/null | jq -r ".[] | select(.pipeline == \"$1\" and .shard == 0) | .position" | jq -r '.n // 0' 2>/dev/null | tail -n 1)
  echo "${v:-0}"
}

# ---- 1. never ahead, under a slow sink, across epochs
pipeline hot.yaml slot_hot hot
expect_exit 0 ferry run hot.yaml
( for i in $(seq 1 100); do
    pgq -c "UPDATE hot SET v = v + 1 WHERE id = $((i % 500 + 1)); INSERT INTO churn (pad) VALUES ('$i')" >/dev/null
    sleep 0.01
  done ) &
wl=$!
FERRY_FAILPOINTS="before_sink_apply=sleep(120)" "$FERRY_BIN" run hot.yaml --follow --epoch 500ms --quiet > follow.log 2>&1 &
fpid=$!
samples=0 moved=0 first=$(confirmed ferry_slot_hot)
while kill -0 $wl 2>/dev/null; do
  c=$(confirmed ferry_slot_hot)
  s=$(saved slot_hot)
  [ "$c" -le "$s" ] || fail "slot confirmed $c is ahead of the saved checkpoint $s (sample $samples)"
  [ "$c" -gt "$first" ] && moved=1
  samples=$((samples + 1))
  sleep 0.1
done
wait $wl
sleep 1
kill -TERM $fpid
set +e; wait $fpid; frc=$?; set -e
[ $frc = 0 ] || [ $frc = 5 ] || fail "--follow after SIGTERM exited $frc: $(cat follow.log)"
[ $moved = 1 ] || fail "the slot never advanced during --follow ($samples samples)"
expect_exit 0 ferry run hot.yaml
c=$(confirmed ferry_slot_hot); s=$(saved slot_hot)
[ "$c" -le "$s" ] || fail "after the last run: confirmed $c > saved $s"
a=$(pgq -c "COPY (SELECT * FROM hot ORDER BY id) TO STDOUT" | md5sum)
b=$(pgq -d dest -c "COPY (SELECT * FROM public.hot ORDER BY id) TO STDOUT" | md5sum)
[ "$a" = "$b" ] || fail "destination differs after --follow"
runs=$(ferry runs --pipeline slot_hot --json --limit 1000 | jq length)
pass "confirmed_flush_lsn never ahead of the saved checkpoint ($samples samples, $runs runs); SIGTERM exit $frc; destination equal"

# ---- 2. idle captured table, churn elsewhere: the slot advances
pipeline idle.yaml slot_idle idle
expect_exit 0 ferry run idle.yaml
before=$(confirmed ferry_slot_idle)
pgq -c "INSERT INTO churn (pad) SELECT repeat('x', 200) FROM generate_series(1, 20000)" >/dev/null
wal=$(lsn_num "$(pgq -c 'SELECT pg_current_wal_lsn()')")
expect_exit 0 ferry run idle.yaml
after=$(confirmed ferry_slot_idle)
[ "$after" -ge "$wal" ] || fail "idle slot did not advance past the churn: before $before, WAL $wal, after $after"
[ "$after" -le "$(saved slot_idle)" ] || fail "idle slot ahead of its saved position"
pass "idle captured table with churn elsewhere: the slot advanced $((after - before)) bytes"

# ---- 3. slot dropped while ferry is down
pgq -c "SELECT pg_drop_replication_slot('ferry_slot_idle')" >/dev/null
pgq -c "INSERT INTO idle VALUES (11, 'lost?')" >/dev/null
expect_exit 1 ferry run idle.yaml
printf '%s' "$OUT" | grep -q "resnapshot required" || fail "slot loss message: $OUT"
printf '%s' "$OUT" | grep -q "ferry_slot_idle" || fail "the message names the slot: $OUT"
[ "$(pgq -d dest -c 'SELECT count(*) FROM public.idle WHERE id = 11')" = 0 ] || fail "rows moved after slot loss"
[ "$(pgq -c "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'ferry_slot_idle'")" = 0 ] ||
  fail "a slot was silently recreated"
pass "slot dropped while down: $(printf '%s' "$OUT" | grep -o 'replication slot "[^"]*" does not exist[^;]*; [^:]*' | head -1)"

pipeline idle2.yaml slot_idle idle ", on_slot_lost: resnapshot"
expect_exit 0 ferry run idle2.yaml --fresh
[ "$(pgq -d dest -c "SELECT v FROM public.idle WHERE id = 11")" = "lost?" ] || fail "resnapshot did not copy"
pass "on_slot_lost: resnapshot copies a new snapshot"

# ---- 4. wal_status unreserved: a warning (log and event), the run still works
pgq -c "ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'" -c "SELECT pg_reload_conf()" >/dev/null
pgq -c "INSERT INTO idle VALUES (12, 'late')" >/dev/null
ws=
for i in 1 2 3 4 5 6; do
  pgq -c "INSERT INTO churn (pad) SELECT repeat('y', 500) FROM generate_series(1, 20000)" -c "SELECT pg_switch_wal()" >/dev/null
  ws=$(pgq -c "SELECT wal_status FROM pg_replication_slots WHERE slot_name = 'ferry_slot_idle'")
  [ "$ws" = unreserved ] && break
done
[ "$ws" = unreserved ] || fail "could not make the slot unreserved (wal_status $ws)"
expect_exit 0 ferry run idle2.yaml --json
printf '%s' "$OUT" | grep -q 'wal_status unreserved' || fail "no unreserved warning: $OUT"
run=$(printf '%s\n' "$OUT" | tail -n 1 | jq -r .run_id)
[ "$(ferry show "$run" --json | jq -r '.resources[0].cdc.wal_status')" = unreserved ] ||
  fail "ferry show does not carry wal_status: $(ferry show "$run" --json)"
[ "$(pgq -d dest -c "SELECT v FROM public.idle WHERE id = 12")" = late ] || fail "the unreserved run moved nothing"
pgq -c "ALTER SYSTEM RESET max_slot_wal_keep_size" -c "SELECT pg_reload_conf()" >/dev/null
pass "wal_status unreserved: warned in the output and in the run's cdc event; data still moved"
