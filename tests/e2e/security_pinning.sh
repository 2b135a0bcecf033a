#!/usr/bin/env bash
# shared: pg
# DNS pinning (docs/security.md): a served run's worker checks the policy after resolving
# the source's host name, and its PostgreSQL connection goes to the address it approved,
# not to what the name says a moment later. A name in /etc/hosts points at loopback (the
# policy allows 127.0.0.1/32 on PostgreSQL's port); the worker is held right after its
# check (failpoint after_policy_check) while the name is pointed at 192.0.2.10 (TEST-NET-1,
# nothing answers there, and the policy refuses it); the run still copies every row from
# the server on loopback. (The HTTP client's pinning: unit/test_pins.)
. "$(dirname "$0")/lib.sh"
. "${FERRY_PG_SH:-$FERRY_SRC/tests/pg/pg.sh}"
pg_start
. "$FERRY_SRC/tests/serve/lib.sh"
[ -w /etc/hosts ] || fail "this test edits /etc/hosts (its own line only, removed at exit): run as root"
NAME="ferry-pin-$RANDOM$RANDOM.test"
# Only this test's line is touched (other tests may edit the file meanwhile); rewritten in
# place (cat >), as /etc/hosts may be a bind mount.
# Never truncates the file: the rewrite happens only when the filtered copy has lines.
drop_name() { grep -v " $NAME\$" /etc/hosts > "$T/hosts.new" || true; if [ -s "$T/hosts.new" ]; then cat "$T/hosts.new" > /etc/hosts; fi; }
point_name() { drop_name; echo "$1 $NAME" >> /etc/hosts; }
restore_hosts() { [ -f "$T/hosts.new" ] || return 0; drop_name; }
# serve/lib.sh's EXIT trap, after /etc/hosts is put back
__pin_prev=$(trap -p EXIT); __pin_prev=${__pin_prev#trap -- \'}; __pin_prev=${__pin_prev%\' EXIT}
# shellcheck disable=SC2064 # the previous trap is expanded now, on purpose
trap "restore_hosts; $__pin_prev" EXIT

point_name 127.0.0.1
pgq -c "CREATE TABLE pinned (id int PRIMARY KEY, note text); INSERT INTO pinned SELECT g, 'n' || g FROM generate_series(1, 500) g" > /dev/null
export PIN_URL="${FERRY_PG_URL/127.0.0.1/$NAME}"
mkdir -p "$T/out"
cat > policy.yaml <<EOF2
paths: ["$T/out"]
env: [PIN_URL]
hosts: ["127.0.0.1/32:$PGPORT"]
EOF2
cat > pin.yaml <<EOF2
version: 1
name: pin
source: {type: postgres, url: env:PIN_URL, resources: [{table: public.pinned, mode: full}]}
sink: {type: sqlite, path: "$T/out/pin.db", write: append}
EOF2
FERRY_FAILPOINTS='after_policy_check=sleep(4000)' start_serve --policy "$T/policy.yaml" --workers 1
api POST /v1/pipelines --data-binary @pin.yaml > /dev/null
[ "$CODE" = 201 ] || fail "register: $CODE $BODY"
run=$(api POST /v1/pipelines/pin/runs | jq -r .id)
for _ in $(seq 1 400); do
  api GET "/v1/runs/$run/log?lines=50" | jq -r '.lines[]?' 2>/dev/null | grep -q 'failpoint after_policy_check fired' && break
  sleep 0.05
done
api GET "/v1/runs/$run/log?lines=50" | jq -r '.lines[]?' | grep -q 'failpoint after_policy_check fired' \
  || fail "the worker never reached after_policy_check: $BODY"
point_name 192.0.2.10
[ "$(getent hosts "$NAME" | awk '{print $1}')" = 192.0.2.10 ] || fail "the name does not point at 192.0.2.10 now"
wait_done "$run" completed
[ "$(q "$T/out/pin.db" "SELECT count(*) || ':' || sum(id) FROM pinned")" = "500:125250" ] || fail "pinned copy: $(q "$T/out/pin.db" 'SELECT count(*) FROM pinned')"
api GET "/v1/runs/$run/log?lines=200" | jq -r '.lines[]' > run.log
! grep -qE '192\.0\.2\.10|transient error' run.log || fail "the worker went to the moved name or retried: $(cat run.log)"
pass "the worker connected to the address its policy check approved although the name moved to 192.0.2.10"

# Control: a run started now is checked with the moved name and refused by the worker.
run2=$(api POST /v1/pipelines/pin/runs | jq -r .id)
wait_done "$run2" failed
api GET "/v1/runs/$run2" | jq -e '.error | contains("refused by policy rule hosts") and contains("192.0.2.10")' > /dev/null \
  || fail "a run after the move was not refused: $BODY"
stop_serve
pass "control: once the name points at 192.0.2.10, the worker's check refuses it"
