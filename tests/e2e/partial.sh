#!/usr/bin/env bash
# on_resource_error: continue (docs/pipeline-file.md): a files source with three CSV
# resources, the middle one malformed halfway. With continue the other two finish and are
# committed exactly (set equality with the source rows), the run ends `partial` (exit 1,
# named in ferry show, --json and the events), the failed resource keeps its error naming
# file:line:column. Without it (the default, fail) the run is `failed` and never partial.
. "$(dirname "$0")/lib.sh"

mkdir -p in
python3 - <<'PY'
for name, rows, bad in (("good1", 3000, None), ("broken", 3000, 1500), ("good2", 2500, None)):
    with open("in/%s.csv" % name, "w") as f, open("%s.expected" % name, "w") as g:
        f.write("id,v,n\n")
        for i in range(1, rows + 1):
            if bad and i == bad:
                f.write("%d,v%d,not-a-number\n" % (i, i))
                continue
            f.write("%d,v%d,%d\n" % (i, i, i * 7))
            g.write("%d|v%d|%d\n" % (i, i, i * 7))
PY

# pipeline FILE NAME DB [EXTRA]
pipeline() {
  cat > "$1" <<YAML
version: 1
name: $2
source:
  type: files
  format: csv
  resources:
$(for t in good1 broken good2; do printf '    - {table: %s, path: "in/%s.csv", schema: {id: int64, v: utf8, n: int64}, key: [id]}\n' $t $t; done)
sink: {type: sqlite, path: $3, write: append}
batch: {rows: 500}
$4
YAML
}

pipeline cont.yaml cont "$T/cont.db" "on_resource_error: continue"
set +e
"$FERRY_BIN" run cont.yaml --state "$T/s1.db" --json > cont.json 2> cont.err
rc=$?
set -e
[ $rc = 1 ] || fail "a partial run exits 1, got $rc: $(cat cont.json cont.err)"
[ "$(jq -r .state cont.json)" = partial ] || fail "state: $(cat cont.json)"
grep -q "partial: 1 resource(s) failed: broken: .*broken.csv:" cont.err || fail "stderr: $(cat cont.err)"
run=$(jq -r .run_id cont.json)
for t in good1 good2; do
  q "$T/cont.db" "SELECT id || '|' || v || '|' || n FROM $t ORDER BY id" > $t.got
  sort -n $t.expected | diff - $t.got > /dev/null || fail "$t differs from its source ($(wc -l < $t.got) rows)"
done
"$FERRY_BIN" show "$run" --state "$T/s1.db" --json > show.json
jq -e '.state == "partial" and (.error | test("broken")) and
       ([.resources[] | select(.resource == "broken")][0] | .state == "failed" and (.error | test("broken.csv:1501:")))
       and ([.resources[] | select(.state == "completed")] | length) == 2' show.json > /dev/null \
  || fail "ferry show: $(jq -c '{state, error, resources: [.resources[] | {resource, state, error}]}' show.json)"
"$FERRY_BIN" show "$run" --state "$T/s1.db" | grep -q "^state      partial" || fail "human show"
"$FERRY_BIN" events "$run" --state "$T/s1.db" --json | jq -s -e '[.[] | select(.type == "run.completed")][0].payload |
  .partial == true and .failed_resources == 1' > /dev/null || fail "run.completed carries no partial"
"$FERRY_BIN" runs --state "$T/s1.db" | grep -q partial || fail "ferry runs does not show partial"
pass "on_resource_error: continue: good1 and good2 exact, broken failed at broken.csv:1501, run partial"

pipeline stop.yaml stop "$T/stop.db" ""
set +e
"$FERRY_BIN" run stop.yaml --state "$T/s2.db" --json > stop.json 2> stop.err
rc=$?
set -e
[ $rc = 1 ] || fail "the default fails the run: exit $rc"
[ "$(jq -r .state stop.json)" = failed ] || fail "default state: $(cat stop.json)"
[ "$(q "$T/s2.db" "SELECT state FROM runs")" = failed ] || fail "stored state"
pass "default on_resource_error (fail): the run fails, never partial"
