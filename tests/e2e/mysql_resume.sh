# tests/e2e/mysql_resume.sh - the mysql source's keyset shards resumed against a real MariaDB
# shared: mysql
# 10.11 (tests/mysql/mysql.sh), read by the least-privilege user into SQLite: a multi-shard
# full copy killed with SIGKILL and resumed, and one paused with SIGINT mid-shard (the
# streamed result is abandoned, not drained) and resumed: each an equal set with no duplicate.
. "$FERRY_SRC/tests/e2e/lib.sh"
. "$FERRY_SRC/tests/mysql/mysql.sh"
my_start

# ---- multi-shard full copy, SIGKILL, resume ---------------------------------------------
myq <<'SQL'
CREATE TABLE big (id bigint PRIMARY KEY, v varchar(40), amount decimal(12,2), at datetime(6));
INSERT INTO big SELECT seq, MD5(seq), (seq % 100000) / 100, '2024-01-01' + INTERVAL seq SECOND FROM seq_1_to_60000;
ANALYZE TABLE big;
SQL
cat > big.yaml <<EOF
version: 1
name: mybig
source:
  type: mysql
  url: env:FERRY_MY_READER_URL
  shard_rows: 8000
  resources:
    - table: big
      mode: full
sink:
  type: sqlite
  path: $T/big.db
  write: append
batch: {rows: 2000}
EOF
FERRY_FAILPOINTS="before_sink_apply=sleep(20)" "$FERRY_BIN" run big.yaml --quiet > big1.log 2>&1 &
pid=$!
for _ in $(seq 1 600); do
  got=$(q big.db "SELECT count(*) FROM big" 2>/dev/null || echo 0)
  [ "${got:-0}" -ge 10000 ] && break
  sleep 0.05
done
kill -9 $pid 2>/dev/null || true
wait $pid 2>/dev/null || true
partial=$(q big.db "SELECT count(*) FROM big" 2>/dev/null || echo 0)
[ "$partial" -lt 60000 ] || fail "the kill came after the copy ended ($partial rows)"
expect_exit 0 ferry run big.yaml --json
[ "$(json_field "$OUT" .resumed)" = true ] || fail "the killed run is resumed: $OUT"
myq -e "SELECT CONCAT(id, '|', v, '|', amount) FROM big ORDER BY id" > big_src.txt
q big.db "SELECT id || '|' || v || '|' || printf('%.2f', amount) FROM big ORDER BY id" > big_dst.txt
cmp -s big_src.txt big_dst.txt || fail "big: set differs after resume: $(diff big_src.txt big_dst.txt | head -5)"
[ "$(q big.db 'SELECT count(*) - count(DISTINCT id) FROM big')" = 0 ] || fail "big: duplicates after resume"
pass "multi-shard full copy killed at $partial rows and resumed: equal set, no duplicates"

# SIGINT pauses mid-shard (the streamed result is abandoned, not drained); the next run resumes.
sed 's/^name: mybig$/name: mypause/; s|big.db|pause.db|' big.yaml > pause.yaml
FERRY_FAILPOINTS="before_sink_apply=sleep(20)" "$FERRY_BIN" run pause.yaml --quiet > pause1.log 2>&1 &
pid=$!
for _ in $(seq 1 600); do
  got=$(q pause.db "SELECT count(*) FROM big" 2>/dev/null || echo 0)
  [ "${got:-0}" -ge 4000 ] && break
  sleep 0.05
done
kill -INT $pid
rc=0; wait $pid || rc=$?
[ $rc = 5 ] || fail "SIGINT should pause (exit 5), got $rc: $(cat pause1.log)"
partial=$(q pause.db "SELECT count(*) FROM big")
[ "$partial" -lt 60000 ] || fail "paused after the copy ended ($partial rows)"
expect_exit 0 ferry run pause.yaml --json
[ "$(json_field "$OUT" .resumed)" = true ] || fail "the paused run is resumed: $OUT"
q pause.db "SELECT id || '|' || v || '|' || printf('%.2f', amount) FROM big ORDER BY id" > pause_dst.txt
cmp -s big_src.txt pause_dst.txt || fail "pause: set differs after resume: $(diff big_src.txt pause_dst.txt | head -5)"
pass "SIGINT paused the copy at $partial rows (exit 5); resumed: equal set, no duplicates"

