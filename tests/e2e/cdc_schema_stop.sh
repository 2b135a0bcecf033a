#!/usr/bin/env bash
# shared: pg
# A column added at the source *during* a cdc run, after that run's discover, with a change
# carrying it inside the run's streamed range: the stream stops cleanly before that change
# (position at the last commit), `ferry run` starts the next run at once, whose discover sees
# the column and whose sink prepare adds it to the destination before the rows that use it.
# Deterministic: failpoint cdc_before_end holds the run after discover, before the WAL
# position it streams to is taken; the test changes the source then (first run with its
# snapshot copy into PostgreSQL; a later, streaming-only run into SQLite).
. "$(dirname "$0")/lib.sh"
. "${FERRY_PG_SH:-$FERRY_SRC/tests/pg/pg.sh}"
pg_start

dest=$(pg_db dest)
export SRC_URL="$FERRY_PG_URL"
export DEST_URL="postgresql://ferry_admin:$PGPASSWORD@127.0.0.1:$PGPORT/$dest"
pgq >/dev/null <<'SQL'
CREATE TABLE c1 (id int PRIMARY KEY, note text);
INSERT INTO c1 SELECT g, 'row ' || g FROM generate_series(1, 100) g;
SQL
for sink in pg lite; do
  if [ $sink = pg ]; then s="{type: postgres, url: env:DEST_URL, schema: public, write: merge}"
  else s="{type: sqlite, path: $T/lite.db, write: merge}"; fi
  printf 'version: 1\nname: scstop_%s\nsource:\n  type: postgres\n  url: env:SRC_URL\n  resources:\n    - {table: c1, mode: cdc}\nsink: %s\nbatch: {rows: 500, flush_after: 100ms}\n' \
    "$sink" "$s" > $sink.yaml
done

# The failpoint announces itself on stderr when it fires: discover is done by then.
held() { # LOG
  for i in $(seq 1 400); do
    grep -q 'failpoint cdc_before_end fired' "$1" 2>/dev/null && return 0
    sleep 0.05
  done
  fail "the run never reached cdc_before_end: $(cat "$1")"
}
FERRY_FAILPOINTS="cdc_before_end=sleep(3000)@1" FERRY_LOG=info "$FERRY_BIN" run pg.yaml > run.log 2>&1 &
fpid=$!
held run.log
pgq >/dev/null <<'SQL'
INSERT INTO c1 VALUES (1000, 'before');
ALTER TABLE c1 ADD COLUMN extra int;
INSERT INTO c1 VALUES (1001, 'after', 42);
UPDATE c1 SET extra = 7, note = 'updated' WHERE id = 1;
SQL
set +e; wait $fpid; rc=$?; set -e
[ $rc = 0 ] || fail "ferry run exited $rc: $(cat run.log)"
# One `ferry run`: two runs, the first stopped early at the schema change.
states=$(ferry runs --pipeline scstop_pg --json | jq -r '[.[] | .state] | join(" ")')
[ "$states" = "completed completed" ] || fail "expected two completed runs, got: $states ($(cat run.log))"
grep -q 'new column "extra"' run.log || fail "no schema-change stop in the log: $(cat run.log)"
a=$(pgq -c "COPY (SELECT id, note, extra FROM c1 ORDER BY id) TO STDOUT" | md5sum)
b=$(pgq -d "$dest" -c "COPY (SELECT id, note, extra FROM public.c1 ORDER BY id) TO STDOUT" | md5sum)
[ "$a" = "$b" ] || fail "postgres destination differs: $(pgq -d "$dest" -c 'SELECT * FROM c1 WHERE id IN (1, 1000, 1001)')"
[ "$(pgq -d "$dest" -c "SELECT extra FROM public.c1 WHERE id = 1001")" = 42 ] || fail "extra of 1001"
pass "postgres: a column added mid-run stops the stream; the next run adds it, no row lost"

# The same on SQLite, for a later (streaming-only) run: its plan is held after discover.
expect_exit 0 ferry run lite.yaml
pgq -c "INSERT INTO c1 VALUES (2000, 'pre')" >/dev/null
FERRY_FAILPOINTS="cdc_before_end=sleep(3000)@1" FERRY_LOG=info "$FERRY_BIN" run lite.yaml > run2.log 2>&1 &
fpid=$!
held run2.log
pgq >/dev/null <<'SQL'
ALTER TABLE c1 ADD COLUMN more text;
INSERT INTO c1 VALUES (2001, 'post', 5, 'm');
SQL
set +e; wait $fpid; rc=$?; set -e
[ $rc = 0 ] || fail "ferry run (sqlite) exited $rc: $(cat run2.log)"
a=$(pgq -c "SELECT id || '|' || note || '|' || coalesce(extra::text, '') || '|' || coalesce(more, '') FROM c1 ORDER BY id" | md5sum)
b=$(q lite.db "SELECT id || '|' || note || '|' || coalesce(extra, '') || '|' || coalesce(more, '') FROM c1 ORDER BY id" | md5sum)
[ "$a" = "$b" ] || fail "sqlite destination differs"
[ "$(q lite.db "SELECT more FROM c1 WHERE id = 2001")" = m ] || fail "sqlite: more of 2001"
states=$(ferry runs --pipeline scstop_lite --json | jq -r '[.[] | .state] | join(" ")')
[ "$states" = "completed completed completed" ] || fail "sqlite: expected 3 completed runs, got: $states"
grep -q 'new column "more"' run2.log || fail "no schema-change stop in the sqlite run: $(cat run2.log)"
pass "sqlite: a column added while a later run streams reaches the destination"
