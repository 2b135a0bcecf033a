#!/usr/bin/env bash
# pg_disk_full: the catalog's disk_full row for the PostgreSQL sink (root: a small tmpfs).
# The destination database's default tablespace lives on a 12 MiB tmpfs, so the server
# cannot extend the destination table halfway through a 200k-row append copy (per_apply and
# at_commit): the run fails naming the postgres sink, the table and the server's file that
# could not be extended ("No space left on device"), never the password; the committed part stays (per_apply: whole batches, no
# duplicate, ferry's checkpoint in the destination never ahead of it; at_commit: nothing);
# after the tmpfs is enlarged a plain re-run resumes and the destination equals an
# unfaulted copy as a multiset (md5 of every row in id order, count, distinct ids).
. "$(dirname "$0")/../e2e/lib.sh"
. "${FERRY_PG_SH:-$FERRY_SRC/tests/pg/pg.sh}"
[ "$(id -u)" = 0 ] || fail "pg_disk_full needs root to mount a small tmpfs (CI runs as root)"
pg_start
chmod 755 "$T" # the server (user postgres) reaches its tablespace through it
mount_small "$T/tsfs" 12m
mkdir "$T/tsfs/ts"
chown postgres "$T/tsfs/ts" 2>/dev/null || true
pgq -c "CREATE TABLESPACE small LOCATION '$T/tsfs/ts'" >/dev/null
pgq -c "CREATE DATABASE dest" >/dev/null
pgq -c "ALTER DATABASE dest SET default_tablespace = 'small'" >/dev/null
export DEST_URL="postgresql://ferry_admin:$PGPASSWORD@127.0.0.1:$PGPORT/dest"
export REF_URL="$FERRY_PG_URL"
ROWS=200000

pipeline() { # FILE NAME URL_REF SCHEMA DURABILITY
  cat > "$1" <<EOF
version: 1
name: $2
source: {type: sample, rows: $ROWS, seed: 7, resources: [{table: orders, mode: full}]}
sink: {type: postgres, url: env:$3, schema: $4, write: append, durability: $5}
batch: {rows: 2000}
EOF
}
fingerprint() { # DB SCHEMA
  pgq -d "$1" -c "SELECT count(*), count(DISTINCT id), md5(string_agg(t::text, ',' ORDER BY id)) FROM \"$2\".orders t"
}

pipeline ref.yaml ref REF_URL ref per_apply
expect_exit 0 ferry run ref.yaml --quiet
want=$(fingerprint ferry ref)

for durability in per_apply at_commit; do
  export FERRY_STATE="$T/state-$durability.db"
  schema="full_$durability"
  pipeline p.yaml "pgfull-$durability" DEST_URL "$schema" $durability
  set +e
  "$FERRY_BIN" run p.yaml > run.log 2>&1
  rc=$?
  set -e
  [ $rc -ne 0 ] && [ $rc -ne 137 ] || fail "$durability: exit $rc: $(cat run.log)"
  grep -q "postgres sink: .*orders.*could not extend file" run.log \
    || fail "$durability: the error does not name the sink, the table and the server's file: $(cat run.log)"
  grep -qi "no space left on device" run.log || fail "$durability: the error does not say the disk is full: $(cat run.log)"
  grep -q "$PGPASSWORD" run.log && fail "$durability: the password appears in: $(cat run.log)"
  got=$(pgq -d dest -c "SELECT CASE WHEN to_regclass('\"$schema\".orders') IS NULL THEN '0|0' ELSE (SELECT count(*) || '|' || count(DISTINCT id) FROM \"$schema\".orders) END")
  n=${got%%|*}
  [ "$n" = "${got#*|}" ] || fail "$durability: duplicate ids after the failure: $got"
  [ "$n" -lt $ROWS ] || fail "$durability: the disk did not fill up ($n rows)"
  if [ $durability = at_commit ]; then
    [ "$n" = 0 ] || fail "at_commit: $n rows visible after a failed run"
  else
    # Whole batches: the visible rows are exactly the batches the run's events say were
    # written, and exactly the ids up to the destination's own checkpoint (one shard, ids in
    # order). A batch may be short (the flush timer closes one while a slow destination holds
    # the queue full), so the batch size says nothing.
    run=$("$FERRY_BIN" runs --json | jq -r '[.[] | select(.pipeline == "pgfull-per_apply")] | max_by(.id) | .id')
    written=$("$FERRY_BIN" events "$run" --json | jq -r 'select(.type == "batch.written") | .payload.rows' | paste -sd+ | bc)
    [ "${written:-0}" = "$n" ] || fail "per_apply: $n rows visible, the events say ${written:-0} rows were written"
    cp=$(pgq -d dest -c "SELECT max((position::jsonb -> 'key' ->> 0)::bigint) FROM _ferry.checkpoints WHERE pipeline LIKE 'pgfull-per\_apply@%'")
    [ -n "$cp" ] || fail "per_apply: no checkpoint in the destination after $n rows: $(pgq -d dest -c "TABLE _ferry.checkpoints")"
    span=$(pgq -d dest -c "SELECT count(*) FILTER (WHERE id <= $cp) || '|' || count(*) FILTER (WHERE id > $cp) FROM \"$schema\".orders")
    [ "$span" = "$n|0" ] || fail "per_apply: the destination's checkpoint $cp does not match its $n rows (at or below|above: $span)"
  fi
  # free space: a bigger tmpfs (the server's files stay as they are)
  mount -o remount,size=256m "$T/tsfs"
  expect_exit 0 ferry run p.yaml --quiet
  have=$(fingerprint dest "$schema")
  [ "$have" = "$want" ] || fail "$durability: after the re-run [$have], unfaulted copy [$want]"
  pass "postgres sink ($durability), destination disk full: clear error naming the sink, table and server file, $n rows kept (whole batches, no duplicate), re-run after enlarging equals the unfaulted copy"
  pgq -d dest -c "SET client_min_messages = warning; DROP SCHEMA \"$schema\" CASCADE" >/dev/null
  mount -o remount,size=12m "$T/tsfs" || fail "cannot shrink the tmpfs back"
done
