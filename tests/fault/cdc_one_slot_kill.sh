#!/usr/bin/env bash
# kill -9 during the first run of a 20-table cdc pipeline (one shared slot): the copy of the
# tables is slowed by a failpoint in the sink and the process killed at a random point while
# multi-table transactions commit at the source; the next run resumes (the slot's exported
# snapshot died with the process: the unfinished copies read a fresh one and the stream
# replays from the slot's start, merge converges), one more run reads to now: exactly one slot
# all along, every table equals its source (set equality of whole rows), the slot confirmed
# no further than the least saved position.
. "$(dirname "$0")/../e2e/lib.sh"
. "${FERRY_PG_SH:-$FERRY_SRC/tests/pg/pg.sh}"
pg_start

psql -qX -v ON_ERROR_STOP=1 -c "CREATE DATABASE dest" >/dev/null
export SRC_URL="$FERRY_PG_URL"
export DEST_URL="postgresql://ferry_admin:$PGPASSWORD@127.0.0.1:$PGPORT/dest"
N=20
for i in $(seq -w 1 $N); do
  echo "CREATE TABLE k$i (id int PRIMARY KEY, v int NOT NULL, note text);"
  echo "INSERT INTO k$i SELECT g, g, md5(g::text) FROM generate_series(1, 1500) g;"
done | pgq >/dev/null
cat > kc.yaml <<EOF
version: 1
name: kc
source:
  type: postgres
  url: env:SRC_URL
  resources:
    - {tables: [public.k*], mode: cdc}
sink: {type: postgres, url: env:DEST_URL, schema: public, write: merge}
batch: {rows: 300, flush_after: 100ms}
EOF
digests() {
  local sql="" i
  for i in $(seq -w 1 $N); do
    [ -n "$sql" ] && sql="$sql UNION ALL "
    sql="$sql SELECT 'k$i', md5(coalesce(string_agg(x::text, ',' ORDER BY x.id), '')) FROM k$i x"
  done
  pgq ${1:+-d "$1"} -c "$sql ORDER BY 1"
}
slots() { pgq -c "SELECT count(*) FROM pg_replication_slots"; }

FERRY_FAILPOINTS="before_sink_apply=sleep(40)" "$FERRY_BIN" run kc.yaml --quiet > first.log 2>&1 &
fpid=$!
for k in $(seq 1 200); do
  a=$(printf '%02d' $(( k % N + 1 ))); b=$(printf '%02d' $(( (k * 7) % N + 1 )))
  echo "BEGIN; UPDATE k$a SET v = v + 1 WHERE id = $(( k % 1500 + 1 )); DELETE FROM k$b WHERE id = $(( (k * 11) % 1500 + 1 )); INSERT INTO k$b VALUES (10000 + $k, $k, 'new'); COMMIT; SELECT pg_sleep(0.01);"
done | pgq >/dev/null &
wl=$!
sleep $(( 1 + RANDOM % 3 )).$(( RANDOM % 10 ))
kill -9 $fpid 2>/dev/null || fail "the first run ended before the kill: $(cat first.log)"
wait $fpid 2>/dev/null || true
[ "$(slots)" = 1 ] || fail "want one slot after the kill: $(pgq -c 'SELECT slot_name FROM pg_replication_slots')"
[ "$(ferry runs --pipeline kc --json | jq -r '.[0].state')" != completed ] || fail "the kill came after the first run"
expect_exit 0 ferry run kc.yaml
wait $wl
expect_exit 0 ferry run kc.yaml
a=$(digests); b=$(digests dest)
[ "$a" = "$b" ] || { diff <(echo "$a") <(echo "$b") | head; fail "destination differs after kill -9 in the copy"; }
[ "$(slots)" = 1 ] || fail "more than one slot"
c=$(pgq -c "SELECT (confirmed_flush_lsn - '0/0')::bigint FROM pg_replication_slots WHERE slot_name = 'ferry_kc'")
s=$(ferry checkpoints --json | jq -r '.[] | select(.pipeline == "kc" and .shard == 0) | .position' | jq -r '.n // 0' | sort -n | head -n 1)
[ "$c" -le "$s" ] || fail "slot confirmed $c past the least saved position $s"
pass "kill -9 during the 20-table first copy, resumed: one slot, $N tables equal, confirmed $c <= least saved $s"
