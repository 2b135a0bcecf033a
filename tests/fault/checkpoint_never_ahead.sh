#!/usr/bin/env bash
# shared: pg
# checkpoint_never_ahead: a slow PostgreSQL sink (sleep failpoint after each apply), two
# resources of six shards each read by three parallel readers. While the run goes, the state
# file is sampled again and again (an independent sqlite3 reader); for every saved checkpoint
# {"shard":S,"key":[K]} the destination is queried right after (an independent psql reader):
# it must already hold every row of shard S up to K (the sample's ids are contiguous, so that
# is exactly K - lo + 1 rows between the shard's lower bound and K). Since the destination only
# grows, reading the state first and the destination second can only favour the destination:
# one sample where it holds fewer rows is a checkpoint ahead of durable data. at_commit: no
# run checkpoint may exist before the commit made the rows visible. Each checkpoint is checked
# against its own resource's table, so one resource's flush never vouches for another's.
. "$(dirname "$0")/../e2e/lib.sh"
. "${FERRY_PG_SH:-$FERRY_SRC/tests/pg/pg.sh}"
pg_start
export DEST_URL="$FERRY_PG_URL"
p() { psql "$FERRY_PG_URL" -X -q -v ON_ERROR_STOP=1 -A -t "$@"; }
ROWS=24000

total_samples=0
for durability in per_apply at_commit; do
  name="cna-$durability"
  schema="cna_$durability"
  cat > p.yaml <<EOF
version: 1
name: $name
source: {type: sample, rows: $ROWS, seed: 7, shards: 6, parallelism: 3, resources: [{table: orders, mode: full}, {table: users, mode: full}]}
sink: {type: postgres, url: env:DEST_URL, schema: $schema, write: append, durability: $durability}
batch: {rows: 400}
EOF
  FERRY_FAILPOINTS="after_sink_apply=sleep(25)" "$FERRY_BIN" run p.yaml --quiet > run.log 2>&1 &
  pid=$!
  samples=0 checked=0
  while kill -0 $pid 2>/dev/null; do
    # state first: every saved checkpoint with its shard's lower bound from the frozen plan
    cps=$(q -cmd ".timeout 5000" "$FERRY_STATE" "
      SELECT c.resource, c.shard, json_extract(c.position, '\$.key[0]'),
             json_extract(pl.plan, '\$.shards[' || c.shard || '].lo')
      FROM run_checkpoints c JOIN plans pl ON pl.run_id = c.run_id AND pl.resource = c.resource
      JOIN runs r ON r.id = c.run_id WHERE r.pipeline = '$name'
        AND json_extract(c.position, '\$.key[0]') IS NOT NULL" 2>/dev/null || true)
    samples=$((samples + 1))
    [ -n "$cps" ] || { sleep 0.05; continue; }
    # then the destination: rows of each checkpointed shard up to its key
    sql=""
    while IFS='|' read -r res shard key lo; do
      [ -n "$sql" ] && sql="$sql UNION ALL "
      sql="${sql}SELECT '$res', $shard, $key, $lo, (SELECT count(*) FROM \"$schema\".\"$res\" WHERE id BETWEEN $lo AND $key)"
    done <<< "$cps"
    while IFS='|' read -r res shard key lo have; do
      checked=$((checked + 1))
      want=$((key - lo + 1))
      [ "$have" -ge "$want" ] || { kill -9 $pid; fail "$durability: checkpoint of $res shard $shard says key $key, but the destination holds only $have of its $want rows"; }
    done < <(p -c "$sql")
    sleep 0.05
  done
  set +e; wait $pid; rc=$?; set -e
  [ $rc = 0 ] || fail "$durability: run failed: $(cat run.log)"
  # per_apply saves checkpoints during the run: enough of them must have been compared.
  # at_commit saves them only once the commit made the rows visible, an instant before the
  # run ends: what proves the rule there is the many samples taken before it (none may show
  # a checkpoint the destination does not back, and any seen was compared above).
  if [ "$durability" = per_apply ]; then
    [ $checked -ge 5 ] || fail "$durability: only $checked checkpoints could be checked in $samples samples (the test proved nothing)"
  else
    [ $samples -ge 5 ] || fail "$durability: only $samples samples of the state during the run (the test proved nothing)"
  fi
  for t in orders users; do
    [ "$(p -c "SELECT count(*), count(DISTINCT id) FROM \"$schema\".\"$t\"")" = "$ROWS|$ROWS" ] || fail "$durability: $t incomplete"
  done
  total_samples=$((total_samples + samples))
  pass "$durability: $samples samples of the state, $checked checkpoints compared with the destination, none ahead"
done
