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

# nodetool: the short-lived node tools, run by one process per test (tests/tools/toolsd.mjs)
. "$FERRY_SRC/tests/tools/nodetool.bash"

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

# write_pipeline, sample_pipeline and sample_source: the pipeline-file writers (shared with
# bench/iceberg.sh, which cannot source this file).
. "$FERRY_SRC/tests/e2e/pipelines.bash"

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

# mount_small DIR SIZE [STOP] : a small tmpfs of SIZE (e.g. 12m) on DIR, made if missing, for
# the disk_full tests (mount needs root, as CI runs: the test checks that first and fails,
# never skips). The first call chains a lazy unmount of every such mount onto the EXIT trap,
# ahead of what the trap did so far; STOP (first call only) is a command run before the
# unmounts, to stop a server that keeps its files on the mount (s3_stop).
MOUNTS=()
umount_all() { local m; for m in "${MOUNTS[@]}"; do umount -l "$m" 2>/dev/null || true; done; }
mount_small() {
  mkdir -p "$1"
  mount -t tmpfs -o "size=$2,mode=0755" tmpfs "$1" || fail "cannot mount a tmpfs on $1"
  if [ ${#MOUNTS[@]} = 0 ]; then
    # shellcheck disable=SC2064,SC2154 # the previous trap and STOP are expanded now, on purpose
    trap "__mnt_rc=\$?; set +e; ${3:+$3;} umount_all; (exit \$__mnt_rc); $(trap -p EXIT | sed "s/^trap -- '//; s/' EXIT\$//")" EXIT
  fi
  MOUNTS+=("$1")
}

# wait_run_rows PIPELINE [TRIES] : polls `ferry runs` every 0.05 s, at most TRIES times (400),
# until the newest run of PIPELINE is running and has written something (an earlier, finished
# run's rows never count); status 1 (no exit) when it never did
wait_run_rows() {
  local r _
  for _ in $(seq 1 "${2:-400}"); do
    r=$(ferry runs --pipeline "$1" --json 2>/dev/null |
      jq -r 'if .[0].state == "running" then .[0].rows // 0 else 0 end' 2>/dev/null || echo 0)
    [ "${r:-0}" -gt 0 ] && return 0
    sleep 0.05
  done
  return 1
}

# bg_kill_on_exit [COMMAND] : from now on, the PIDs a test appends to BG are killed (SIGKILL)
# and reaped when it exits, after COMMAND (when given; a test's own way of telling its
# background loops to stop), ahead of what the EXIT trap did so far (so before a server
# started earlier is stopped).
BG=()
bg_kill_on_exit() {
  BG_STOP=${1:-}
  # shellcheck disable=SC2064,SC2154 # the previous trap is expanded now, on purpose
  trap "__bg_rc=\$?; stop_bg; set +e; (exit \$__bg_rc); $(trap -p EXIT | sed "s/^trap -- '//; s/' EXIT\$//")" EXIT
}
stop_bg() {
  local p
  [ -z "${BG_STOP:-}" ] || eval "$BG_STOP" || true
  for p in "${BG[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  for p in "${BG[@]}"; do wait "$p" 2>/dev/null || true; done
}

# vmhwm_kb PID : the process's peak resident set size (VmHWM, KiB) from /proc
vmhwm_kb() { awk '/^VmHWM:/ {print $2}' "/proc/$1/status"; }

# wait_for_log FILE PATTERN PID TRIES : polls FILE every 0.05 s until a line matches PATTERN
# (grep), at most TRIES times, giving up early when PID has ended; fails (status 1, no exit)
# when PATTERN never showed.
wait_for_log() {
  local _
  for _ in $(seq 1 "$4"); do
    grep -q "$2" "$1" && return 0
    kill -0 "$3" 2>/dev/null || break
    sleep 0.05
  done
  grep -q "$2" "$1"
}

crc32c() { # CRC32-C of a file, computed independently of ferry: crcmod (python3-crcmod, C)
  python3 -c 'import sys, crcmod.predefined
with open(sys.argv[1], "rb") as f:
    print(crcmod.predefined.mkCrcFun("crc-32c")(f.read()))' "$1"
}
