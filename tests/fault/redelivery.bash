# tests/fault/redelivery.bash - what bus_redelivery.sh and bus_redelivery_ext.sh share
# (sourced after tests/e2e/lib.sh; not a test itself: CTest only globs *.sh).
#
#   pipeline FILE NAME DB CLOCK   writes the pipeline both run: $ROWS sample rows of two
#                                 incremental resources (three shards each) at clock CLOCK,
#                                 upserted into the SQLite file DB
#   summary STATE NAME            counters of every run and resource of pipeline NAME and
#                                 every checkpoint, as text to compare between deliveries

pipeline() { # FILE NAME DB CLOCK
  cat > "$1" <<EOF
version: 1
name: $2
source:
  type: sample
  rows: $ROWS
  seed: 7
  clock: $4
  shards: 3
  resources:
    - {table: orders, mode: incremental, cursor: [updated_at]}
    - {table: users, mode: incremental, cursor: [updated_at]}
sink: {type: sqlite, path: $3, write: upsert}
batch: {rows: 700, flush_after: 1h}
EOF
}

summary() { # STATE NAME
  q "$1" "SELECT 'run', r.id, r.state, r.rows, r.batches, r.verified, r.diverged FROM runs r WHERE pipeline = '$2' ORDER BY r.id;
          SELECT 'res', rr.run_id, rr.resource, rr.state, rr.rows, rr.batches, rr.verified FROM run_resources rr JOIN runs r ON r.id = rr.run_id WHERE r.pipeline = '$2' ORDER BY 2, 3;
          SELECT 'cp', c.run_id, c.resource, c.shard, c.position FROM run_checkpoints c JOIN runs r ON r.id = c.run_id WHERE r.pipeline = '$2' ORDER BY 2, 3, 4;
          SELECT 'route', route, shard, position FROM route_checkpoints WHERE pipeline = '$2' ORDER BY 2, 3;"
}
