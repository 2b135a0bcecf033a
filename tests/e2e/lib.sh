# tests/e2e/lib.sh - shared helpers for the end-to-end and fault tests.
# Each test is a bash script run by CTest with FERRY_BIN (the binary under test) and
# FERRY_SRC (the source tree). Tests talk to real files and real processes only.
set -euo pipefail

FERRY_BIN=${FERRY_BIN:-$(pwd)/build/dev/ferry}
FERRY_SRC=${FERRY_SRC:-$(pwd)}
T=$(mktemp -d "${TMPDIR:-/tmp}/ferry-test.XXXXXX")
export FERRY_STATE="$T/state.db"
trap 'rc=$?; if [ $rc -ne 0 ]; then echo "FAILED (workdir kept: $T)"; else rm -rf "$T"; fi; exit $rc' EXIT
cd "$T"

fail() { echo "FAIL: $*" >&2; exit 1; }
pass() { echo "ok - $*"; }

# `producer | grep -q PATTERN` under pipefail: grep -q exits at the first match, and a
# producer still writing (bash's printf writes line by line) then dies of SIGPIPE, so the
# pipeline fails although grep matched - or a `... && fail` check silently passes. When
# grep -q reads its standard input, this wrapper drains the rest of it after grep exits.
grep() {
  local a q=0 operands=0 opts=1
  for a in "$@"; do
    if [ $opts = 1 ] && [ "$a" = -- ]; then opts=0; continue; fi
    if [ $opts = 1 ] && [[ $a == -[!-]* ]]; then
      [[ $a == *q* ]] && q=1
      continue
    fi
    [ $opts = 1 ] && [[ $a == --* ]] && { [ "$a" = --quiet ] && q=1; continue; }
    operands=$((operands + 1))
  done
  # the first operand is the pattern (or -e's argument); more operands are files
  if [ $q = 0 ] || [ $operands -gt 1 ]; then command grep "$@"; return; fi
  local rc=0
  command grep "$@" || rc=$?
  cat >/dev/null
  return $rc
}

ferry() { "$FERRY_BIN" "$@"; }

# expect_exit CODE CMD... : runs CMD, checks its exit status, keeps stdout+stderr in $OUT.
expect_exit() {
  local want=$1; shift
  set +e
  OUT=$("$@" 2>&1)
  local got=$?
  set -e
  [ "$got" = "$want" ] || fail "expected exit $want, got $got from: $* -- output: $OUT"
}

q() { sqlite3 -batch -noheader -cmd ".timeout 10000" "$@"; }

# The columns of the sample tables, in order (for set comparisons with sqlite3).
ORDERS_COLS='id, customer_id, status, quantity, amount, discount, express, note, created_at, updated_at'

# same_table DB_A DB_B TABLE : set equality of two tables (rows as whole tuples), both ways,
# plus no duplicate key on either side. Prints the differences on failure.
same_table() {
  local a=$1 b=$2 t=$3
  local missing extra dupa dupb
  missing=$(q "$a" "ATTACH '$b' AS o; SELECT count(*) FROM (SELECT * FROM main.\"$t\" EXCEPT SELECT * FROM o.\"$t\");")
  extra=$(q "$a" "ATTACH '$b' AS o; SELECT count(*) FROM (SELECT * FROM o.\"$t\" EXCEPT SELECT * FROM main.\"$t\");")
  dupa=$(q "$a" "SELECT count(*) FROM (SELECT id FROM \"$t\" GROUP BY id HAVING count(*) > 1);")
  dupb=$(q "$b" "SELECT count(*) FROM (SELECT id FROM \"$t\" GROUP BY id HAVING count(*) > 1);")
  if [ "$missing" != 0 ] || [ "$extra" != 0 ] || [ "$dupa" != 0 ] || [ "$dupb" != 0 ]; then
    echo "table $t: $missing rows of $a missing from $b, $extra extra rows in $b, duplicate keys: $dupa / $dupb" >&2
    q "$a" "ATTACH '$b' AS o; SELECT 'missing', * FROM (SELECT * FROM main.\"$t\" EXCEPT SELECT * FROM o.\"$t\") LIMIT 5;" >&2 || true
    q "$a" "ATTACH '$b' AS o; SELECT 'extra', * FROM (SELECT * FROM o.\"$t\" EXCEPT SELECT * FROM main.\"$t\") LIMIT 5;" >&2 || true
    return 1
  fi
}

# write_pipeline FILE NAME ROWS SINKPATH WRITE [MODE] [EXTRA_SOURCE_YAML] [EXTRA_SINK_YAML] [BATCH_YAML]
write_pipeline() {
  local file=$1 name=$2 rows=$3 sinkpath=$4 write=$5 mode=${6:-full}
  local extra_src=${7:-} extra_sink=${8:-} batch=${9:-}
  local cursor=""
  [ "$mode" = incremental ] && cursor="      cursor: [updated_at]"
  {
    echo "version: 1"
    echo "name: $name"
    echo "source:"
    echo "  type: sample"
    echo "  rows: $rows"
    echo "  seed: 7"
    [ -n "$extra_src" ] && echo "$extra_src"
    echo "  resources:"
    echo "    - table: orders"
    echo "      mode: $mode"
    [ -n "$cursor" ] && echo "$cursor"
    echo "sink:"
    echo "  type: sqlite"
    echo "  path: $sinkpath"
    echo "  write: $write"
    [ -n "$extra_sink" ] && echo "$extra_sink"
    [ -n "$batch" ] && echo "$batch"
    true
  } > "$file"
}

# sample_pipeline FILE NAME ROWS SINK_LINE... : the sample source (orders and users, full,
# seed 7, ROWS rows each) into the sink described by SINK_LINEs ("key: value"), batches of 700.
sample_pipeline() {
  local file=$1 name=$2 rows=$3; shift 3
  {
    echo "version: 1"
    echo "name: $name"
    echo "source:"
    echo "  type: sample"
    echo "  rows: $rows"
    echo "  seed: 7"
    echo "  resources:"
    echo "    - {table: orders, mode: full}"
    echo "    - {table: users, mode: full}"
    echo "sink:"
    for l in "$@"; do echo "  $l"; done
    echo "batch: {rows: 700}"
  } > "$file"
}

# check_manifest DIR [FORMAT] : the files sink's folder DIR is consistent with its run
# manifests: every listed file exists with its size and CRC32-C, no part file is unlisted, no
# temporary file is left. With FORMAT: every manifest says it, every part ends in .FORMAT, and
# a parquet part has the PAR1 magic at both ends.
check_manifest() {
  local dir=$1 format=${2:-} m listed on_disk
  for m in "$dir"/_runs/*/_manifest.json; do
    [ -z "$format" ] || [ "$(jq -r .format "$m")" = "$format" ] || fail "$m: format should be $format"
    jq -r '.files[] | "\(.path) \(.bytes) \(.crc32c)"' "$m" | while read -r p bytes crc; do
      [ -f "$dir/$p" ] || fail "$m lists $p, which does not exist"
      [ -z "$format" ] || [[ $p == *."$format" ]] || fail "$p: a $format part should end in .$format"
      [ "$(stat -c %s "$dir/$p")" = "$bytes" ] || fail "$p: size differs from the manifest"
      [ "$(crc32c "$dir/$p")" = "$crc" ] || fail "$p: CRC32-C differs from the manifest"
      if [ "$format" = parquet ]; then
        [ "$(head -c 4 "$dir/$p")" = PAR1 ] && [ "$(tail -c 4 "$dir/$p")" = PAR1 ] \
          || fail "$p: not a complete parquet file (magic)"
      fi
    done
  done
  listed=$(cat "$dir"/_runs/*/_manifest.json 2>/dev/null | jq -r '.files[].path' | sort)
  on_disk=$(cd "$dir" && find . -name 'part-*' | sed 's|^\./||' | sort)
  [ "$listed" = "$on_disk" ] || fail "$dir: part files on disk differ from the manifests: listed [$listed] on disk [$on_disk]"
  [ -z "$(find "$dir" -name '.tmp-*')" ] || fail "$dir: temporary files left: $(find "$dir" -name '.tmp-*')"
}

# files_enospc FORMAT : a files sink run writing FORMAT whose writes meet ENOSPC fails with an
# error naming the part file, and leaves no part, temporary file or manifest behind.
files_enospc() {
  local format=$1 rc
  sample_pipeline full.yaml full 2000 "type: files" "path: out-full/" "format: $format" "write: append"
  set +e
  OUT=$(FERRY_FAILPOINTS=files_sink_write=enospc "$FERRY_BIN" run full.yaml 2>&1)
  rc=$?
  set -e
  [ "$rc" != 0 ] || fail "a $format write that meets ENOSPC should fail the run"
  printf '%s' "$OUT" | grep -q "out-full/orders/\.tmp-.*\.$format: No space left on device" \
    || fail "ENOSPC should name the $format file: $OUT"
  [ -z "$(find out-full \( -name 'part-*' -o -name '.tmp-*' -o -name '_manifest.json' \))" ] \
    || fail "a failed run left files: $(find out-full -type f)"
}

# run_json: the last JSON line of `ferry ... --json`
json_field() { printf '%s\n' "$1" | tail -n 1 | jq -r "$2"; }

crc32c() { # CRC32-C (Castagnoli, reflected) of a file, computed independently of ferry
  python3 - "$1" <<'EOF'
import sys
t = []
for i in range(256):
    c = i
    for _ in range(8):
        c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    t.append(c)
crc = 0xFFFFFFFF
with open(sys.argv[1], 'rb') as f:
    for b in f.read():
        crc = t[(crc ^ b) & 0xFF] ^ (crc >> 8)
print(crc ^ 0xFFFFFFFF)
EOF
}
