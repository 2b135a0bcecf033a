#!/usr/bin/env bash
# shared: s3
# labels: asan
# crash_before_sink_commit, crash_after_sink_commit and kill -9 at seeded random moments for
# the two publishing sinks, files (local folder) and s3 (s3rver on loopback), JSON Lines:
#   - before the commit: nothing is published (no manifest, no part a reader would trust);
#   - after the commit, before the state store heard of it: the documented at-least-once
#     window. The re-run publishes every row; a row may appear twice only across attempts
#     (each attempt's parts, named by attempt, hold no duplicate), never within one;
#   - every published row equals the reference copy's (whole JSON line), none is missing;
#   - every listed part's size and CRC32-C match the manifest (checked independently).
# SEED replays the kill moments.
. "$(dirname "$0")/../e2e/lib.sh"
. "$FERRY_SRC/tests/s3/s3.sh"
s3_have || fail "node and tests/tools/node_modules (s3rver, aws4) are needed: run scripts/install-deps.sh"
SEED=${SEED:-${FERRY_SEED:-$RANDOM}}
echo "seed $SEED (SEED=$SEED replays it)"
RANDOM=$SEED
ROWS=40000
export S3_KEY=S3RVER S3_SECRET=S3RVER
s3_start lake

pipeline() { # FILE NAME KIND(files|s3) PREFIX
  {
    echo "version: 1"
    echo "name: $2"
    echo "source: {type: sample, rows: $ROWS, seed: 7, resources: [{table: orders, mode: full}]}"
    if [ "$3" = files ]; then
      echo "sink: {type: files, path: $T/$4, format: jsonl}"
    else
      echo "sink: {type: s3, bucket: $S3_BUCKET, prefix: $4, endpoint: \"$S3_ENDPOINT\", path_style: true, access_key_id: env:S3_KEY, secret_access_key: env:S3_SECRET, format: jsonl}"
    fi
    echo "batch: {rows: 2000}"
  } > "$1"
}

# published KIND PREFIX DIR: copies every part the manifests list into DIR/a<attempt>/, checking
# sizes and CRC32-C; prints the number of manifests.
published() {
  local kind=$1 prefix=$2 dir=$3 m key bytes crc att n=0
  rm -rf "$dir"; mkdir -p "$dir"
  if [ "$kind" = files ]; then
    for m in "$T/$prefix"/_runs/*/_manifest.json; do
      [ -e "$m" ] || continue
      n=$((n + 1))
      while read -r key bytes crc; do
        [ "$(stat -c %s "$T/$prefix/$key")" = "$bytes" ] || fail "$key: size differs from the manifest"
        [ "$(crc32c "$T/$prefix/$key")" = "$crc" ] || fail "$key: CRC32-C differs from the manifest"
        att=$(basename "$key" | sed -E 's/^part-[0-9]+-([0-9]+)-.*/\1/')
        mkdir -p "$dir/a$att"; cp "$T/$prefix/$key" "$dir/a$att/"
      done < <(jq -r '.files[] | "\(.path) \(.bytes) \(.crc32c)"' "$m")
    done
  else
    for m in $(s3c "$S3_BUCKET" list "$prefix/_runs/" | grep '_manifest.json$'); do
      n=$((n + 1))
      s3c "$S3_BUCKET" get "$m" > "$dir/manifest.json"
      while read -r key bytes crc; do
        s3c "$S3_BUCKET" get "$key" > "$dir/obj"
        [ "$(stat -c %s "$dir/obj")" = "$bytes" ] || fail "$key: size differs from the manifest"
        [ "$(crc32c "$dir/obj")" = "$crc" ] || fail "$key: CRC32-C differs from the manifest"
        att=$(printf '%s' "$key" | sed -E 's|.*/attempt=([0-9]+)/.*|\1|')
        mkdir -p "$dir/a$att"; mv "$dir/obj" "$dir/a$att/$(printf '%s' "$key" | tr '/=' '__')"
      done < <(jq -r '.objects[] | "\(.key) \(.bytes) \(.crc32c)"' "$dir/manifest.json")
      rm -f "$dir/manifest.json"
    done
  fi
  echo "$n"
}

# check_published DIR LABEL: every reference row present, nothing foreign, duplicates only
# across attempts. Prints the number of duplicate rows.
check_published() {
  local dir=$1 label=$2 a
  for a in "$dir"/a*; do
    [ -d "$a" ] || continue
    [ -z "$(cat "$a"/* | sort | uniq -d | head -n 1)" ] || fail "$label: a row appears twice within attempt ${a##*/a}"
  done
  cat "$dir"/a*/* 2>/dev/null | sort -u > "$dir.uniq"
  cmp -s "$dir.uniq" ref.sorted || fail "$label: published rows differ from the reference ($(comm -23 ref.sorted "$dir.uniq" | wc -l) missing, $(comm -13 ref.sorted "$dir.uniq" | wc -l) foreign)"
  echo $(( $(cat "$dir"/a*/* | wc -l) - $(wc -l < "$dir.uniq") ))
}

pipeline ref.yaml ref files refout
expect_exit 0 ferry run ref.yaml
cat refout/orders/*.jsonl | sort > ref.sorted
[ "$(wc -l < ref.sorted)" = $ROWS ] || fail "reference copy"

kills=0
for kind in files s3; do
  # before the commit: nothing published; the re-run publishes exactly one copy
  pipeline b.yaml "b-$kind" $kind "b-$kind"
  expect_exit 137 env FERRY_FAILPOINTS=before_sink_commit=crash "$FERRY_BIN" run b.yaml --quiet
  [ "$(published $kind "b-$kind" pub)" = 0 ] || fail "$kind: a crash before the commit published a manifest"
  if [ $kind = files ]; then
    [ -z "$(find "b-$kind" -name 'part-*' 2>/dev/null)" ] || fail "files: a part under its final name before the commit"
  fi
  expect_exit 0 ferry run b.yaml
  [ "$(published $kind "b-$kind" pub)" = 1 ] || fail "$kind: one manifest after the re-run"
  [ "$(check_published pub "$kind before commit")" = 0 ] || fail "$kind: duplicates after a crash before the commit"
  pass "$kind crash_before_sink_commit: nothing published, re-run publishes every row once"

  # after the commit: at-least-once; duplicates only across attempts, all rows present
  pipeline a.yaml "a-$kind" $kind "a-$kind"
  expect_exit 137 env FERRY_FAILPOINTS=after_sink_commit=crash "$FERRY_BIN" run a.yaml --quiet
  [ "$(published $kind "a-$kind" pub)" = 1 ] || fail "$kind: the commit published its manifest"
  [ "$(check_published pub "$kind after commit (crashed)")" = 0 ] || fail "$kind: duplicates in one committed attempt"
  expect_exit 0 ferry run a.yaml
  published $kind "a-$kind" pub > /dev/null
  d=$(check_published pub "$kind after commit")
  pass "$kind crash_after_sink_commit: every row present, $d duplicate rows, all across attempts"

  # kill -9 at random moments until the run completes
  pipeline k.yaml "k-$kind" $kind "k-$kind"
  for attempt in 1 2 3 4; do
    "$FERRY_BIN" run k.yaml --quiet > klog 2>&1 &
    pid=$!
    ms=$((20 + RANDOM % 400))
    sleep "$(printf '0.%03d' $ms)"
    kill -9 $pid 2>/dev/null && kills=$((kills + 1))
    wait $pid 2>/dev/null || true
    [ "$(ferry runs --pipeline "k-$kind" --json | jq -r '.[0].state')" = completed ] && break
  done
  [ "$(ferry runs --pipeline "k-$kind" --json | jq -r '.[0].state')" = completed ] || expect_exit 0 ferry run k.yaml
  published $kind "k-$kind" pub > /dev/null
  d=$(check_published pub "$kind kill -9 (seed $SEED)")
  pass "$kind kill -9 schedule (seed $SEED): every row present, $d duplicate rows, all across attempts"
done
echo "kills: $kills"

# S3 connections reset (RST) again and again during a run, through tests/tools/tcpproxy.mjs in
# front of the S3 server: the sink retries what failed; the run completes (or fails clearly and
# a re-run completes), every row is published, duplicates only across attempts.
node "$FERRY_SRC/tests/tools/tcpproxy.mjs" "$S3_PORT" "$T/s3px.port" "$T/s3px.ctl" > "$T/s3px.log" 2>&1 &
S3_PIDS+=($!)
for _ in $(seq 1 100); do [ -s "$T/s3px.ctl" ] && [ -s "$T/s3px.port" ] && break; sleep 0.1; done
[ -s "$T/s3px.ctl" ] || fail "tcp proxy did not start: $(cat "$T/s3px.log")"
S3_ENDPOINT_DIRECT=$S3_ENDPOINT
S3_ENDPOINT="http://127.0.0.1:$(cat "$T/s3px.port")"
pipeline r.yaml r-s3 s3 r-s3
S3_ENDPOINT=$S3_ENDPOINT_DIRECT
sed -i 's/batch: {rows: 2000}/batch: {rows: 500}/' r.yaml
"$FERRY_BIN" run r.yaml --quiet > r.log 2>&1 &
pid=$!
resets=0
while kill -0 $pid 2>/dev/null && [ $resets -lt 40 ]; do
  curl -fsS "http://127.0.0.1:$(cat "$T/s3px.ctl")/reset" > /dev/null && resets=$((resets + 1))
  sleep 0.05
done
set +e; wait $pid; rc=$?; set -e
[ $rc = 0 ] || [ $rc = 1 ] || fail "s3 resets: exit $rc: $(cat r.log)"
[ "$(curl -fsS "http://127.0.0.1:$(cat "$T/s3px.ctl")/stats" | jq .resets)" -ge 1 ] || fail "s3 resets: no connection was reset"
[ "$(ferry runs --pipeline r-s3 --json | jq -r '.[0].state')" = completed ] || expect_exit 0 ferry run r.yaml
published s3 r-s3 pub > /dev/null
d=$(check_published pub "s3 resets")
pass "s3 connections reset $resets times mid-run (first run exit $rc): every row published, $d duplicate rows, all across attempts"

# A truncated compressed input read with `on_error: skip`: a broken stream is not a bad record
# to skip. It used to be skipped and read again forever (found by tests/fuzz/fuzz_csv); now the
# run fails naming the file.
mkdir -p zin
python3 -c "import sys; sys.stdout.write('id,v\n' + ''.join('%d,x%d\n' % (i, i) for i in range(1, 300000)))" | zstd -q -c > whole.zst
head -c $(( $(stat -c %s whole.zst) / 2 )) whole.zst > zin/t.csv.zst
cat > z.yaml <<EOF2
version: 1
name: zcut
source: {type: files, path: $T/zin/t.csv.zst, format: csv, on_error: skip, resources: [{table: t, key: [id]}]}
sink: {type: sqlite, path: $T/zcut.db}
EOF2
set +e
timeout -k 5 120 "$FERRY_BIN" run z.yaml > z.log 2>&1
rc=$?
set -e
[ $rc -ne 124 ] && [ $rc -ne 137 ] || fail "truncated zstd with on_error: skip: ferry did not end ($(tail -n 2 z.log))"
[ $rc -ne 0 ] || fail "truncated zstd with on_error: skip: the run succeeded"
grep -q "zin/t.csv.zst.*truncated zstd stream" z.log || fail "truncated zstd: message: $(cat z.log)"
pass "truncated zstd input with on_error: skip: fails naming the file (exit $rc), no endless skipping"
