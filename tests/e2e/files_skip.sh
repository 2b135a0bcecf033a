#!/usr/bin/env bash
# Malformed lines in a files source, end to end:
#   1. on_error: fail (the default): the run exits non-zero naming file:line:column and a
#      files sink publishes nothing (no manifest, no part);
#   2. on_error: skip over two CSV files and a JSON Lines file: every good row lands (set
#      equality with the expected rows in sqlite), `ferry show RUN` (human and --json) gives
#      the exact count per resource and samples naming file:line:column; a canary value in a
#      bad field appears in no sample, event or output;
#   3. on_error: skip, crash after some batches were applied (exactly-once sqlite sink) and
#      resume inside the file: the count is still exact (the resumed shard counts its
#      already-delivered part again instead of adding to a partial count), no row missing or
#      duplicated.
. "$(dirname "$0")/lib.sh"
BIG=${BIG:-60000}

# gen.py KIND FILE ROWS EVERY: good rows id,v,n with ids from 1, plus bad lines; writes the
# good rows to FILE.good (id|v|n) and the bad lines' "FILE:LINE:COLUMN" to FILE.bad.
cat > gen.py <<'PY'
import sys
kind, path, rows, every = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
good, bad = [], []
line = 1
out = []
if kind == 'csv':
    out.append('id,v,n')
k = 0
for i in range(1, rows + 1):
    v, n = 'v%d' % i, i * 7
    if kind == 'csv':
        out.append('%d,%s,%d' % (i, v, n))
    else:
        out.append('{"id": %d, "v": "%s", "n": %d}' % (i, v, n))
    good.append('%d|%s|%d' % (i, v, n))
    if i % every == 0:
        k += 1
        if kind == 'csv':
            c = k % 3
            if c == 0:   # a value that is not an int64: the canary must never be shown
                s = '%d,w,SECRETCANARY%d' % (10**9 + i, i)
                out.append(s); bad.append((len(out), s.index('SECRET') + 1))
            elif c == 1:  # too few fields: named at the last field
                s = '%d,w' % (10**9 + i)
                out.append(s); bad.append((len(out), s.index(',') + 2))
            else:        # a quote inside an unquoted field
                s = '%d,w"q,3' % (10**9 + i)
                out.append(s); bad.append((len(out), s.index('"') + 1))
        else:
            if k % 2 == 0:
                s = '{"id": %d, "v": "w", "n": "SECRETCANARY"}' % (10**9 + i)
                out.append(s); bad.append((len(out), s.index('"SECRET') + 1))
            else:
                s = '{"id": %d, "v": "w", "n": 1' % (10**9 + i)
                out.append(s); bad.append((len(out), None))
open(path, 'w').write('\n'.join(out) + '\n')
open(path + '.good', 'w').write('\n'.join(good) + '\n')
open(path + '.bad', 'w').write(''.join('%s:%d%s\n' % (path, l, ':%d' % c if c else '') for l, c in bad))
PY
mkdir -p in
python3 gen.py csv in/a.csv 40 9      # 4 bad lines
python3 gen.py csv in/b.csv 25 5      # 5 bad lines
python3 gen.py jsonl in/c.jsonl 30 10 # 3 bad lines

pipeline() { # FILE NAME ON_ERROR SINK...
  local file=$1 name=$2 on_error=$3; shift 3
  {
    echo "version: 1"
    echo "name: $name"
    echo "source:"
    echo "  type: files"
    [ -n "$on_error" ] && echo "  on_error: $on_error"
    echo "  resources:"
    echo "    - {table: t, path: \"in/*.csv\", schema: {id: int64, v: utf8, n: int64}}"
    echo "    - {table: j, path: in/c.jsonl, schema: {id: int64, v: utf8, n: int64}}"
    echo "sink:"
    for l in "$@"; do echo "  $l"; done
    echo "batch: {rows: 7}"
  } > "$file"
}

# ---- 1. on_error: fail (default): file:line:column, nothing published -----------------------------
pipeline fail.yaml skip-fail "" "type: files" "path: out-fail/" "format: parquet" "write: append"
expect_exit 1 ferry run fail.yaml
first_bad=$(head -n 1 in/a.csv.bad)
printf '%s' "$OUT" | grep -qF "$first_bad: " || fail "on_error: fail should name $first_bad: $OUT"
[ -z "$(find out-fail -type f 2>/dev/null)" ] || fail "a failed run published files: $(find out-fail -type f)"
pass "on_error: fail names $first_bad and publishes nothing"

# ---- 2. on_error: skip -------------------------------------------------------------------------------
pipeline skip.yaml skip-ok skip "type: sqlite" "path: skip.db" "write: append"
expect_exit 0 ferry run skip.yaml
run=$(ferry runs --pipeline skip-ok --json | jq -r '.[0].id')
for t in t j; do
  if [ $t = t ]; then cat in/a.csv.good in/b.csv.good | sort > want-$t; cat in/a.csv.bad in/b.csv.bad | sort > want-bad-$t
  else sort in/c.jsonl.good > want-$t; sort in/c.jsonl.bad > want-bad-$t; fi
  q skip.db "SELECT id || '|' || v || '|' || n FROM \"$t\"" | sort > got-$t
  diff want-$t got-$t > /dev/null || fail "resource $t: the good rows differ from what landed: $(diff want-$t got-$t | head)"
  [ "$(q skip.db "SELECT count(*) FROM \"$t\" WHERE id > 1000000000")" = 0 ] || fail "resource $t: a bad row landed"
done
expect_exit 0 ferry show "$run" --json
SHOW=$OUT
[ "$(json_field "$SHOW" '.resources[] | select(.resource == "t") | .skipped')" = 9 ] \
  || fail "show --json: resource t should count 9 skipped records: $SHOW"
[ "$(json_field "$SHOW" '.resources[] | select(.resource == "j") | .skipped')" = 3 ] \
  || fail "show --json: resource j should count 3 skipped records: $SHOW"
json_field "$SHOW" '.resources[] | select(.resource == "t") | .skipped_samples[].at' | sort > got-bad-t
diff want-bad-t got-bad-t > /dev/null || fail "resource t: samples should name every bad line's file:line:column: $(diff want-bad-t got-bad-t)"
# JSON Lines: a syntax error names its own column (checked by line only); a bad value its field.
json_field "$SHOW" '.resources[] | select(.resource == "j") | .skipped_samples[].at' | sort > got-bad-j
while read -r want; do
  grep -q "^$want" got-bad-j || fail "resource j: no sample at $want: $(cat got-bad-j)"
done < want-bad-j
[ "$(wc -l < got-bad-j)" = 3 ] || fail "resource j: 3 samples expected: $(cat got-bad-j)"
json_field "$SHOW" '.resources[] | select(.resource == "t") | .skipped_samples[].reason' | grep -q 'not a int64 value' \
  || fail "samples should say why: $SHOW"
expect_exit 0 ferry show "$run"
printf '%s' "$OUT" | grep -q 'skipped 9 bad records (on_error: skip)' || fail "show: count of t: $OUT"
printf '%s' "$OUT" | grep -qF "$(head -n 1 in/b.csv.bad): " || fail "show: a sample of b.csv: $OUT"
SHOWH=$OUT
expect_exit 0 ferry events "$run" --json
EVENTS=$OUT
for o in "$SHOW" "$SHOWH" "$EVENTS"; do
  if printf '%s' "$o" | grep -q SECRETCANARY; then fail "a value of a bad field leaked into show/events"; fi
done
pass "on_error: skip: good rows all land, exact counts per resource, samples name file:line:column, no value shown"

# ---- 3. skip + crash + resume: counts stay exact --------------------------------------------------
rm -rf in && mkdir -p in
python3 gen.py csv in/big.csv "$BIG" 997
want_bad=$(wc -l < in/big.csv.bad)
cat > big.yaml <<EOF
version: 1
name: skip-big
source:
  type: files
  on_error: skip
  resources:
    - {table: t, path: in/big.csv, schema: {id: int64, v: utf8, n: int64}}
sink: {type: sqlite, path: big.db, write: append}
batch: {rows: 5000}
EOF
set +e
FERRY_FAILPOINTS=after_sink_apply=crash@4 "$FERRY_BIN" run big.yaml > crash.log 2>&1
rc=$?
set -e
[ "$rc" = 137 ] || fail "the failpoint should crash the run (exit $rc): $(cat crash.log)"
n=$(q big.db 'SELECT count(*) FROM t')
[ "$n" -gt 0 ] && [ "$n" -lt "$BIG" ] || fail "the crash should leave part of the rows ($n)"
expect_exit 0 ferry run big.yaml
printf '%s' "$OUT" | grep -q 'resuming' || fail "the second run should resume: $OUT"
run=$(ferry runs --pipeline skip-big --json | jq -r '.[0].id')
q big.db "SELECT id || '|' || v || '|' || n FROM t" | sort > got-big
sort in/big.csv.good > want-big
diff want-big got-big > /dev/null || fail "after the crash: rows differ: $(diff want-big got-big | head -5)"
expect_exit 0 ferry show "$run" --json
[ "$(json_field "$OUT" '.resources[0].skipped')" = "$want_bad" ] \
  || fail "after crash and resume the count should be $want_bad: $OUT"
[ "$(json_field "$OUT" '.resources[0].skipped_samples[0].at')" = "$(head -n 1 in/big.csv.bad)" ] \
  || fail "after crash and resume the first sample should be the first bad line: $OUT"
pass "on_error: skip across a crash and resume: $want_bad skipped, counted once, every good row once"
