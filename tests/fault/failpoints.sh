#!/usr/bin/env bash
# Crashes and errors at each engine boundary, then a re-run: nothing lost, nothing doubled
# (the sqlite sink is transactional), at_commit sinks show nothing before commit, and a
# flipped bit is caught every time with nothing of that batch written.
. "$(dirname "$0")/../e2e/lib.sh"
ROWS=30000
write_pipeline ref.yaml ref $ROWS ref.db append full "" "" "batch: {rows: 2000}"
expect_exit 0 ferry run ref.yaml

n=0
for durability in per_apply at_commit; do
  for fp in before_sink_apply=crash@4 after_sink_apply=crash@4 before_sink_commit=crash \
            after_sink_commit=crash before_checkpoint_save=crash@2 after_checkpoint_save=crash@2 \
            after_bus_publish=crash@9 after_sink_apply=error@3 before_sink_apply=enospc@2; do
    n=$((n + 1))
    db="d$n.db"
    write_pipeline p.yaml "fp$n" $ROWS "$db" append full "" "  durability: $durability" "batch: {rows: 2000}"
    set +e
    FERRY_FAILPOINTS=$fp "$FERRY_BIN" run p.yaml --quiet > "log$n" 2>&1
    rc=$?
    set -e
    case $fp in
      *crash*) [ $rc = 137 ] || fail "$fp ($durability): expected the crash, got exit $rc: $(cat "log$n")" ;;
      *) [ $rc = 1 ] || fail "$fp ($durability): expected exit 1, got $rc: $(cat "log$n")"
         grep -q "failpoint\|No space left" "log$n" || fail "$fp: message $(cat "log$n")" ;;
    esac
    if [ "$durability" = at_commit ] && [ "$fp" != after_sink_commit=crash ] && [ -e "$db" ]; then
      got=$(q "$db" "SELECT count(*) FROM sqlite_master WHERE name='orders'")
      [ "$got" = 0 ] || [ "$(q "$db" 'SELECT count(*) FROM orders')" = 0 ] \
        || fail "$fp ($durability): rows visible before commit"
    fi
    expect_exit 0 ferry run p.yaml --json
    same_table ref.db "$db" orders || fail "$fp ($durability): destination differs after resume"
    pass "$fp ($durability): resumed, exact, no duplicates"
  done
done

# bitflip: the divergence is detected, names the batch, and nothing of that batch lands.
for durability in per_apply at_commit; do
  db="flip-$durability.db"
  write_pipeline f.yaml "flip-$durability" $ROWS "$db" append full "" "  durability: $durability" "batch: {rows: 2000}"
  FERRY_FAILPOINTS=before_sink_apply=bitflip@3 expect_exit 4 ferry run f.yaml
  printf '%s' "$OUT" | grep -q "batch 3" || fail "bitflip message names the batch: $OUT"
  printf '%s' "$OUT" | grep -qi "integrity" || fail "bitflip message: $OUT"
  want=4000; [ $durability = at_commit ] && want=0
  got=0
  [ -e "$db" ] && got=$(q "$db" "SELECT CASE WHEN EXISTS (SELECT 1 FROM sqlite_master WHERE name='orders') THEN (SELECT count(*) FROM orders) ELSE 0 END")
  [ "$got" = "$want" ] || fail "bitflip ($durability): $got rows written, expected $want"
  run=$(ferry runs --json | jq -r '.[0].id')
  ferry events "$run" --json | jq -r .type | grep -qx batch.chunk_divergence || fail "divergence event"
  [ "$(ferry show "$run" --json | jq -r .state)" = failed ] || fail "run failed"
  pass "bitflip ($durability): detected in batch 3, $got rows written"
done
