#!/usr/bin/env bash
# CSV (RFC 4180) and JSON Lines (RFC 8259) conformance, cases generated from the grammars by
# tests/conformance/gen.py (fixed seeds, so a failure replays): every generated record is read
# by the files source into SQLite and compared value by value (NULL vs empty string, quotes,
# CRLF inside fields, escapes, surrogate pairs, U+10FFFF, numbers and nested values kept as
# written); every line that breaks the grammar fails the run naming file:line:column, with
# nothing written. Then the issue-23 cases: blank lines are records, a NUL in a key is refused.
. "$(dirname "$0")/lib.sh"
N=${N:-400}

for seed in 1 2 3; do
  rm -rf gen && python3 "$FERRY_SRC/tests/conformance/gen.py" gen "$seed" "$N"
  cat > csv.yaml <<EOF
version: 1
name: conf-csv
source:
  type: files
  path: gen/ok.csv
  null: ""
  resources:
    - table: c
      schema: {c1: utf8, c2: utf8, c3: utf8}
sink: {type: sqlite, path: conf$seed.db, write: append}
EOF
  expect_exit 0 ferry run csv.yaml
  cat > jsonl.yaml <<EOF
version: 1
name: conf-jsonl
source:
  type: files
  path: gen/ok.jsonl
  resources:
    - table: j
      schema: {s: utf8, n: utf8, j: utf8}
sink: {type: sqlite, path: conf$seed.db, write: append}
EOF
  expect_exit 0 ferry run jsonl.yaml
  python3 - "conf$seed.db" gen <<'PY' || fail "seed $seed: values differ from the grammar's"
import json, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
def rows(sql):
    return [[r if r is not None else "\\N" for r in row] for row in db.execute(sql)]
def check(name, got, path):
    want = [json.loads(l) for l in open(path, encoding="utf-8")]
    if len(got) != len(want):
        sys.exit("%s: %d rows, want %d" % (name, len(got), len(want)))
    for i, (g, w) in enumerate(zip(got, want)):
        if g != w:
            sys.exit("%s record %d: got %r, want %r" % (name, i + 1, g, w))
check("csv", rows("SELECT c1, c2, c3 FROM c ORDER BY rowid"), sys.argv[2] + "/ok.expect.jsonl")
check("jsonl", rows("SELECT s, n, j FROM j ORDER BY rowid"), sys.argv[2] + "/ok.expect.jsonl2")
PY
done
pass "CSV and JSON Lines from the RFC grammars (3 seeds x $N records): every value exact"

# Grammar violations: each refused naming file:line:column, nothing written.
n_bad=0
for f in gen/bad/*.jsonl gen/bad/*.csv; do
  base=${f%.*}
  where=$(cat "$base.where")
  case $f in *.csv) fmt=csv; schema="{c1: utf8, c2: utf8}" ;; *) fmt=jsonl; schema="{a: utf8}" ;; esac
  cat > bad.yaml <<EOF
version: 1
name: conf-bad
source:
  type: files
  path: $f
  format: $fmt
  resources:
    - table: b
      schema: $schema
sink: {type: sqlite, path: bad.db, write: append}
EOF
  out=$("$FERRY_BIN" run bad.yaml 2>&1) && fail "$f: a grammar violation was accepted"
  case $out in
    *"$(basename "$f"):$where"*) ;;
    *) fail "$f: the error does not name $(basename "$f"):$where: $out" ;;
  esac
  [ "$(q bad.db "SELECT count(*) FROM sqlite_master WHERE name = 'b'")" = 0 ] ||
    [ "$(q bad.db 'SELECT count(*) FROM b')" = 0 ] || fail "$f: rows written before the error"
  n_bad=$((n_bad + 1))
done
[ "$n_bad" -ge 15 ] || fail "only $n_bad violation cases ran"
pass "$n_bad grammar violations: each refused at its file:line:column, nothing written"

# Issue 23: a one-column CSV keeps its blank lines (7 records), skip_blank_lines drops them.
printf 'v\na\nb\n\n\nc\nd\ne\n' > blank.csv
for skip in false true; do
  cat > blank.yaml <<EOF
version: 1
name: conf-blank-$skip
source: {type: files, path: blank.csv, skip_blank_lines: $skip, resources: [{table: bl_$skip}]}
sink: {type: sqlite, path: blank.db, write: append}
EOF
  expect_exit 0 ferry run blank.yaml
done
[ "$(q blank.db 'SELECT count(*) || "/" || count(v) FROM bl_false')" = "7/5" ] ||
  fail "blank lines: $(q blank.db 'SELECT count(*), count(v) FROM bl_false')"
[ "$(q blank.db 'SELECT count(*) FROM bl_true')" = 5 ] || fail "skip_blank_lines: true"
pass "blank CSV lines are records (NULL); skip_blank_lines: true skips them"
