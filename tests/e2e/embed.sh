#!/usr/bin/env bash
# ferry as a library (docs/embedding.md): `cmake --install` of the build under test into a
# fresh prefix puts libferry.a, libferry.so, the one public header and ferry.pc there; the
# shared library exports the embedding API only; examples/embed.c, compiled with pkg-config
# against that prefix (shared and static), runs pipelines whose `callback` sink hands it
# every batch through the Arrow C Data Interface. Its rows are checked against the source
# (an independent reader, sqlite3, for a sqlite source of several types; every id exactly
# once for the sample source across a pause and its resume); a cancel from another thread
# ends the run canceled; the CLI and a misused API are refused with clear messages.
. "$(dirname "$0")/lib.sh"
command -v pkg-config > /dev/null || fail "pkg-config is needed"
command -v nm > /dev/null || fail "nm is needed (binutils)"
BUILD=$(dirname "$FERRY_BIN")
[ -f "$BUILD/CMakeCache.txt" ] || fail "no CMake build beside $FERRY_BIN"

# ---- install -----------------------------------------------------------------------------
P="$T/prefix"
cmake --install "$BUILD" --prefix "$P" > install.log 2>&1 || { cat install.log; fail "cmake --install failed"; }
LIBDIR=$(dirname "$(find "$P" -name ferry.pc)")
LIBDIR=${LIBDIR%/pkgconfig}
for f in "$LIBDIR/libferry.a" "$LIBDIR/libferry.so" "$P/include/ferry/ferry.h" \
         "$LIBDIR/pkgconfig/ferry.pc" "$P/bin/ferry"; do
  [ -e "$f" ] || fail "not installed: $f (installed: $(cd "$P" && find . -type f | tr '\n' ' '))"
done
headers=$(cd "$P/include" && find . -type f | sort | tr '\n' ' ')
[ "$headers" = "./ferry/ferry.h " ] || fail "installed headers: $headers (want only ferry/ferry.h)"
if grep -nE 'ferry__|fail_after|failpoint|FERRY_FAILPOINT' "$P/include/ferry/ferry.h"; then
  fail "the public header names an internal symbol or a test hook"
fi
pass "installed: libferry.a, libferry.so, include/ferry/ferry.h, ferry.pc, bin/ferry"

# Exported: the embedding API only (ferry_*), never an internal ferry__ name.
nm -D --defined-only "$LIBDIR/libferry.so" | awk '{print $3}' | sort > exports.txt
others=$(grep -v '^ferry_[a-z]' exports.txt || true)
[ -z "$others" ] || fail "libferry.so exports non-API symbols: $(echo "$others" | head -5 | tr '\n' ' ')"
for s in ferry_job_load ferry_job_run ferry_job_cancel ferry_job_pause ferry_job_free ferry_job_converted; do
  grep -qx "$s" exports.txt || fail "libferry.so does not export $s"
done
nm -g --defined-only "$LIBDIR/libferry.a" 2> /dev/null | grep -q ' T ferry_job_run$' ||
  fail "libferry.a lacks ferry_job_run"
pass "libferry.so exports $(wc -l < exports.txt) symbols, all ferry_* API"

# ---- build the example against the installed library --------------------------------------
export PKG_CONFIG_PATH="$LIBDIR/pkgconfig"
pkg-config --exists ferry || fail "pkg-config does not find ferry in $PKG_CONFIG_PATH"
[ "$(pkg-config --modversion ferry)" = "$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$BUILD/CMakeCache.txt")" ] ||
  fail "ferry.pc version $(pkg-config --modversion ferry)"
mkdir ex && cp "$FERRY_SRC/examples/embed.c" "$FERRY_SRC/examples/Makefile" ex/
make -C ex embed embed-static > make.log 2>&1 || { cat make.log; fail "the example does not build"; }
ldd ex/embed | grep -q "libferry.so.* => $LIBDIR" || fail "embed is not linked with the installed libferry.so: $(ldd ex/embed | grep ferry)"
if ldd ex/embed-static | grep -q libferry; then fail "embed-static needs libferry.so"; fi
pass "examples/embed.c built with pkg-config: shared and static"

# ---- a sqlite source of several types, through Arrow, against sqlite3 -----------------------
q src.db "CREATE TABLE items(id INTEGER PRIMARY KEY, name TEXT NOT NULL, price REAL, qty INTEGER, note TEXT, data BLOB);
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2500)
INSERT INTO items SELECT i, 'item ' || i || CASE WHEN i % 3 = 0 THEN ' é✓' ELSE '' END,
  CASE WHEN i % 11 = 0 THEN NULL ELSE i * 0.25 + 0.125 END,
  CASE WHEN i % 4 = 0 THEN -i * 1000000007 WHEN i = 7 THEN 9223372036854775807 ELSE i % 7 END,
  CASE WHEN i % 5 = 0 THEN NULL WHEN i % 13 = 0 THEN 'tab	and
newline \\ back' ELSE 'n' || i END,
  CASE WHEN i % 6 = 0 THEN NULL ELSE randomblob(1 + i % 9) END FROM n;"
# The example's text form: \ tab newline escaped, blobs as lower-case hex, NULL as \N.
q -separator $'\t' -nullvalue '\N' src.db "SELECT id, name, price, qty,
  replace(replace(replace(note, '\\', '\\\\'), char(9), '\\t'), char(10), '\\n'),
  CASE WHEN data IS NULL THEN NULL ELSE lower(hex(data)) END FROM items ORDER BY id" > want.tsv
[ "$(wc -l < want.tsv)" = 2500 ] || fail "reference: $(wc -l < want.tsv) lines"
cat > items.yaml <<'YAML'
version: 1
name: embedded_items
source:
  type: sqlite
  path: src.db
  resources:
    - table: items
sink:
  type: callback
batch:
  rows: 700
YAML
for bin in embed embed-static; do
  rm -f st.db
  set +e; ex/$bin items.yaml st.db > got.tsv 2> err.txt; rc=$?; set -e
  [ $rc = 0 ] || { cat err.txt; fail "$bin: exit $rc"; }
  sort -n got.tsv | cmp -s - want.tsv || { diff <(sort -n got.tsv) want.tsv | head -5; fail "$bin: rows differ from the source"; }
  grep -q '^result completed rows=2500 ' err.txt || fail "$bin: $(tail -1 err.txt)"
  for ev in run.started resource.completed run.completed; do
    grep -q "^event $ev" err.txt || fail "$bin: no $ev event"
  done
  written=$(grep -c '^event batch.written items' err.txt || true)
  [ "$written" -ge 4 ] || fail "$bin: $written batch.written events for 2500 rows in batches of at most 700"
  # The run is an ordinary run of the state file.
  ferry show 1 --state st.db --json | grep -q '"state": *"completed"' || fail "$bin: run 1 not completed in the state"
done
pass "sqlite source -> callback sink: 2500 rows of six types received through Arrow, equal to sqlite3's (shared and static)"

# ---- the sample source: pause and resume, every id exactly once ---------------------------
N=60000
{ sample_source embedded_sample $N; echo "  resources:"; echo "    - table: orders";
  echo "sink:"; echo "  type: callback"; echo "batch:"; echo "  rows: 1000"; } > sample.yaml
set +e; ex/embed-static sample.yaml ss.db --pause-after 2 > part1.tsv 2> p1.err; rc=$?; set -e
[ $rc = 4 ] || { cat p1.err; fail "pause: exit $rc, want 4 (paused)"; }
grep -q '^error paused:' p1.err || fail "pause: $(grep '^error' p1.err)"
grep -q '^event run.paused' p1.err || fail "pause: no run.paused event"
set +e; ex/embed sample.yaml ss.db > part2.tsv 2> p2.err; rc=$?; set -e
[ $rc = 0 ] || { cat p2.err; fail "resume: exit $rc"; }
grep -q '^result completed .* run=1 resumed=1' p2.err || fail "resume: $(tail -1 p2.err)"
n1=$(wc -l < part1.tsv)
[ "$n1" -ge 2000 ] && [ "$n1" -lt $N ] || fail "the paused run delivered $n1 rows"
cut -f1 part1.tsv part2.tsv | sort -n > ids.txt
seq 1 $N | cmp -s - ids.txt || fail "ids across pause and resume: $(wc -l < ids.txt) rows, $(sort -u ids.txt | wc -l) distinct, want 1..$N once each"
# The same rows as the CLI writes into sqlite from the same source (id, customer_id, status).
write_pipeline ref.yaml ref $N ref.db append
expect_exit 0 ferry run ref.yaml --state ref-state.db
q -separator $'\t' ref.db "SELECT id, customer_id, status, quantity FROM orders ORDER BY id" > ref.tsv
cat part1.tsv part2.tsv | cut -f1-4 | sort -n | cmp -s - ref.tsv || fail "sample rows differ from the sqlite sink's"
pass "sample source: paused after 2 batches ($n1 rows), resumed: ids 1..$N exactly once, equal to the sqlite sink's"

# ---- cancel from another thread -----------------------------------------------------------
set +e; ex/embed sample.yaml sc.db --cancel-after 1 > c.tsv 2> c.err; rc=$?; set -e
[ $rc = 3 ] || { cat c.err; fail "cancel: exit $rc, want 3 (canceled)"; }
grep -q '^error canceled:' c.err || fail "cancel: $(grep '^error' c.err)"
grep -q '^event run.canceled' c.err || fail "cancel: no run.canceled event"
nc=$(wc -l < c.tsv)
[ "$nc" -ge 1 ] && [ "$nc" -lt $N ] || fail "the canceled run delivered $nc rows"
ferry show 1 --state sc.db --json | grep -q '"state": *"canceled"' || fail "run 1 not canceled in the state"
pass "canceled from another thread after the first batch: run canceled, $nc of $N rows delivered"

# ---- refusals -----------------------------------------------------------------------------
expect_exit 2 ferry run items.yaml --state cli.db
echo "$OUT" | grep -q 'sink type callback: no program is receiving batches' || fail "ferry run of a callback sink: $OUT"
write_pipeline tosqlite.yaml tosqlite 100 out.db append
expect_exit 1 ex/embed tosqlite.yaml x.db
echo "$OUT" | grep -q 'error config: pipeline tosqlite: options.on_batch is given but the sink is sqlite' || fail "on_batch with a sqlite sink: $OUT"
[ ! -e out.db ] || fail "the refused run wrote out.db"
printf 'version: 1\nname: bad\nsource: [\n' > bad.yaml
expect_exit 1 ex/embed bad.yaml x.db
echo "$OUT" | grep -q '^error config: .*bad.yaml' || fail "bad YAML: $OUT"
pass "refused: the CLI with a callback sink, on_batch with another sink, bad YAML"
