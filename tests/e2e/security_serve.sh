#!/usr/bin/env bash
# `ferry serve` against a hostile API caller (issue 19, docs/security.md): every attack of the
# issue replayed against a listener of the test's own on loopback and the server's own files,
# each asserted to fail safely - a 400 naming the key and the rule, the listener receiving
# nothing, the file's contents in no response, log or state file:
#   1. default policy: discover /etc/shadow, a FIFO, /dev/zero; /etc/passwd into an s3 sink
#      on our listener with env:SOME_SECRET and env:FERRY_API_TOKEN; discover as a port
#      scanner (open and closed ports answer alike); plain passwords (userinfo, password=,
#      ?password=, a plain secret key); a DNS rebinding through /etc/hosts (accepted for a
#      public address, refused by the worker once the name points at loopback);
#   2. allow-all: the state store as a sqlite sink (write: replace), env:FERRY_API_TOKEN,
#      /v1/secrets tells nothing about files or variables, a discover on a FIFO behind a glob
#      is stopped by the child's deadline while the server keeps answering;
#   3. the transport: GET /v1/runs/%FF and invalid UTF-8 bodies answer 400 JSON; 200 slow
#      connections from 127.0.0.2 while a client on 127.0.0.1 is served within a second; a
#      client never idle but never done with its headers (or its body) cut at the deadline; a
#      1 MiB hostile YAML body answered without the server growing by 32 MiB; event streams
#      capped (503 + Retry-After); state and worker log files 0600.
source "$(dirname "$0")/lib.sh"
source "$FERRY_SRC/tests/serve/lib.sh"
command -v node > /dev/null || fail "node is needed (scripts/install-deps.sh)"
# serve/lib.sh's EXIT trap, plus /etc/hosts put back (the DNS rebinding case edits it)
restore_hosts() { if [ -f "$T/hosts.orig" ]; then cat "$T/hosts.orig" > /etc/hosts; fi; }
trap 'rc=$?; restore_hosts; stop_serve; for p in $EXTRA_PIDS; do kill -TERM "$p" 2>/dev/null || true; done; if [ $rc -ne 0 ]; then echo "FAILED (workdir kept: $T)"; tail -n 30 "$T"/serve.err 2>/dev/null || true; else rm -rf "$T"; fi; exit $rc' EXIT

# ---- our listener: must receive nothing, ever ----
node "$FERRY_SRC/tests/tools/listener.mjs" "$T/listener.bytes" > "$T/listener.port" &
EXTRA_PIDS="$EXTRA_PIDS $!"
for _ in $(seq 1 100); do [ -s "$T/listener.port" ] && break; sleep 0.05; done
LPORT=$(cat "$T/listener.port")
[ -n "$LPORT" ] || fail "listener did not start"
# a closed port: bound once, then released
CPORT=$(node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')
listener_silent() {
  [ ! -s "$T/listener.bytes" ] || fail "$1: the listener received: $(head -c 300 "$T/listener.bytes")"
}

export SOME_SECRET="somesecret-$RANDOM$RANDOM"
export FERRY_SECRET_K="allowedkey$RANDOM"
SHADOW_LINE=$(head -n 1 /etc/shadow)
PASSWD_LINE=$(head -n 1 /etc/passwd)
mkfifo "$T/fifo"

# expect_refused STATUS WORD... (after api): the status, and every WORD in the error message
expect_refused() {
  local want=$1 w
  shift
  [ "$CODE" = "$want" ] || fail "expected $want, got $CODE: $BODY"
  for w in "$@"; do
    printf '%s' "$BODY" | jq -e --arg w "$w" '.error.message | contains($w)' > /dev/null \
      || fail "the answer does not say \"$w\": $BODY"
  done
}

# ---- 1. the default policy ----
start_serve --policy default --lease 10s --workers 2
[ "$(stat -c %a "$T/state.db")" = 600 ] || fail "state file mode $(stat -c %a "$T/state.db")"

files_src() { printf 'version: 1\nname: %s\nsource: {type: files, format: csv, resources: [{table: t, path: "%s"}]}\nsink: {type: "null"}\n' "$1" "$2"; }
for target in /etc/shadow "$T/fifo" /dev/zero; do
  files_src steal "$target" > steal.yaml
  api POST /v1/connectors/discover --data-binary @steal.yaml > /dev/null
  expect_refused 400 "source.resources[0].path: refused by policy rule"
  api POST /v1/pipelines --data-binary @steal.yaml > /dev/null
  expect_refused 400 "refused by policy rule"
done
pass "discover and register refuse /etc/shadow, a FIFO and /dev/zero (400 naming key and rule)"

cat > exfil.yaml <<EOF
version: 1
name: exfil
source: {type: files, format: csv, resources: [{table: passwd, path: /etc/passwd}]}
sink:
  type: s3
  bucket: loot
  endpoint: "http://127.0.0.1:$LPORT"
  path_style: true
  access_key_id: env:SOME_SECRET
  secret_access_key: env:FERRY_SECRET_K
  session_token: env:FERRY_API_TOKEN
EOF
api POST /v1/pipelines --data-binary @exfil.yaml > /dev/null
expect_refused 400 "refused by policy rule paths"
sed -i 's|type: files, format: csv, resources: \[{table: passwd, path: /etc/passwd}\]|type: sample, rows: 10, resources: [{table: orders, mode: full}]|' exfil.yaml
api POST /v1/pipelines --data-binary @exfil.yaml > /dev/null
expect_refused 400 "sink.endpoint: refused by policy rule hosts" "loopback"
sed -i "s|endpoint: .*|endpoint: \"http://192.0.2.1:$LPORT\"|" exfil.yaml
api POST /v1/pipelines --data-binary @exfil.yaml > /dev/null
expect_refused 400 "sink.access_key_id: refused by policy rule env" "env:SOME_SECRET"
sed -i "s|access_key_id: env:SOME_SECRET|access_key_id: env:FERRY_SECRET_K|" exfil.yaml
api POST /v1/pipelines --data-binary @exfil.yaml > /dev/null
expect_refused 400 "sink.session_token: refused by policy rule env" "env:FERRY_API_TOKEN"
for host in 169.254.169.254 "[::1]" 0.0.0.0 localhost; do
  sed -i "s|endpoint: .*|endpoint: \"http://$host:$LPORT\"|" exfil.yaml
  api POST /v1/pipelines --data-binary @exfil.yaml > /dev/null
  expect_refused 400 "sink.endpoint: refused by policy rule hosts"
done
listener_silent "exfiltration"
pass "/etc/passwd to our listener with env:SOME_SECRET and env:FERRY_API_TOKEN: refused key by key; nothing received"

# discover as a port scanner: an open and a closed port on loopback answer alike
pg_src() { printf 'version: 1\nname: scan\nsource: {type: postgres, url: "%s", resources: [{table: public.t}]}\nsink: {type: "null"}\n' "$1"; }
pg_src "postgres://u@127.0.0.1:$LPORT/db" > scan.yaml
api POST /v1/connectors/discover --data-binary @scan.yaml > /dev/null
expect_refused 400 "source.url: refused by policy rule hosts" "loopback"
open_answer=$(printf '%s' "$BODY" | sed "s/$LPORT/PORT/g")
pg_src "postgres://u@127.0.0.1:$CPORT/db" > scan.yaml
api POST /v1/connectors/discover --data-binary @scan.yaml > /dev/null
[ "$(printf '%s' "$BODY" | sed "s/$CPORT/PORT/g")" = "$open_answer" ] || fail "open and closed ports answer differently: $open_answer / $BODY"
pg_src "host=127.0.0.1 port=$LPORT dbname=x" > scan.yaml
api POST /v1/connectors/discover --data-binary @scan.yaml > /dev/null
expect_refused 400 "source.url: refused by policy rule hosts"
listener_silent "port scan"
pass "discover cannot scan loopback ports: open and closed answer the same 400"

for url in "postgres://app:pw$RANDOM@192.0.2.1/db" "host=192.0.2.1 dbname=x password=pw$RANDOM" \
  "postgres://app@192.0.2.1/db?sslmode=disable&password=pw$RANDOM"; do
  pg_src "$url" > plain.yaml
  api POST /v1/pipelines --data-binary @plain.yaml > /dev/null
  expect_refused 400 "source.url: " "reference"
done
sed "s|secret_access_key: env:FERRY_SECRET_K|secret_access_key: plainsecret$RANDOM|; s|endpoint: .*|endpoint: \"http://192.0.2.1:9\"|; s|access_key_id: .*|access_key_id: env:FERRY_SECRET_K|; /session_token/d" exfil.yaml > plainkey.yaml
api POST /v1/pipelines --data-binary @plainkey.yaml > /dev/null
expect_refused 400 "sink.secret_access_key: a credential must be a reference"
api GET /v1/pipelines > /dev/null
[ "$(printf '%s' "$BODY" | jq '.pipelines | length')" = 0 ] || fail "a refused pipeline was stored: $BODY"
pass "plain passwords (userinfo, password=, ?password=, a plain secret key) refused with 400 naming the key"

# a run with the default policy: its worker's log file is the owner's only
printf 'version: 1\nname: ok\nsource: {type: sample, rows: 100, resources: [{table: orders, mode: full}]}\nsink: {type: "null"}\n' > ok.yaml
api POST /v1/pipelines --data-binary @ok.yaml > /dev/null
[ "$CODE" = 201 ] || fail "a harmless pipeline: $CODE $BODY"
run=$(api POST /v1/pipelines/ok/runs | jq -r .id)
wait_done "$run" completed 600
for f in "$T/state.db" "$T"/logs/run-*.log; do
  [ "$(stat -c %a "$f")" = 600 ] || fail "$f has mode $(stat -c %a "$f")"
done
pass "state and worker log files are created 0600"

# DNS rebinding: a name that resolved to a public address at registration points at loopback
# when the worker connects; the worker checks again and refuses.
REBIND="ferry-rebind-$RANDOM$RANDOM.test"
[ -w /etc/hosts ] || fail "the DNS rebinding case edits /etc/hosts (put back at exit): run as root"
cp /etc/hosts "$T/hosts.orig"
echo "192.0.2.10 $REBIND" >> /etc/hosts
sed "s|endpoint: .*|endpoint: \"http://$REBIND:$LPORT\"|; s|access_key_id: .*|access_key_id: env:FERRY_SECRET_K|; /session_token/d; s|^name: exfil|name: rebind|" exfil.yaml > rebind.yaml
api POST /v1/pipelines --data-binary @rebind.yaml > /dev/null
[ "$CODE" = 201 ] || fail "rebind pipeline (public address) should register: $CODE $BODY"
restore_hosts
echo "127.0.0.1 $REBIND" >> /etc/hosts
run=$(api POST /v1/pipelines/rebind/runs | jq -r .id)
wait_done "$run" failed 600
api GET "/v1/runs/$run" | jq -e '.error | contains("refused by policy rule hosts") and contains("loopback")' > /dev/null \
  || fail "the worker did not refuse the rebound name: $BODY"
restore_hosts
listener_silent "DNS rebinding"
pass "DNS rebinding through /etc/hosts: accepted while public, refused by the worker once loopback"

# ---- 3. the transport (same server) ----
code=$(curl -sS -o get_ff.json -w '%{http_code}' -H "Authorization: Bearer $TOKEN" "$BASE/v1/runs/%FF")
[ "$code" = 400 ] && jq -e '.error.code == "invalid_utf8"' get_ff.json > /dev/null || fail "GET /v1/runs/%FF: $code $(cat get_ff.json)"
printf '{"name": "\xff"}' > bad_utf8.json
api POST /v1/pipelines -H 'Content-Type: application/json' --data-binary @bad_utf8.json > /dev/null
[ "$CODE" = 400 ] && printf '%s' "$BODY" | jq -e '.error.code == "invalid_utf8"' > /dev/null || fail "invalid UTF-8 body: $CODE $BODY"
pass "GET /v1/runs/%FF and an invalid UTF-8 body answer 400 JSON"

# 1 MiB YAML bodies built to be costly: many keys (quadratic duplicate check), long keys
# nested deep (a key path per node)
awk 'BEGIN { for (i = 0; i < 85000; i++) printf "k%07d: 1\n", i }' > many_keys.yaml
awk 'BEGIN { k = ""; for (j = 0; j < 1000; j++) k = k "x"; ind = "";
             for (d = 0; d < 60; d++) { printf "%s%s%d:\n", ind, k, d; ind = ind " " }
             for (i = 0; i < 13000; i++) printf "%sl%d: 1\n", ind, i }' > deep_keys.yaml
hwm0=$(vmhwm_kb "$SERVE_PID")
for f in many_keys.yaml deep_keys.yaml; do
  api POST /v1/connectors/validate --data-binary @"$f" > /dev/null
  [ "$CODE" = 400 ] || fail "$f: $CODE $BODY"
done
grown=$(( $(vmhwm_kb "$SERVE_PID") - hwm0 ))
[ "$grown" -lt 32768 ] || fail "two 1 MiB bodies grew the server by $grown KiB"
pass "1 MiB hostile YAML bodies answered 400; the server grew by $grown KiB (< 32 MiB)"

# slow connections from 127.0.0.2; a client on 127.0.0.1 is still served
node "$FERRY_SRC/tests/tools/slow_clients.mjs" 127.0.0.1 "$PORT" 127.0.0.2 200 > slow.out &
SLOW_PID=$!
EXTRA_PIDS="$EXTRA_PIDS $SLOW_PID"
for _ in $(seq 1 200); do grep -q '^open' slow.out && break; sleep 0.05; done
grep -q '^open' slow.out || fail "the slow clients did not settle"
for i in 1 2 3; do
  # The requirement is "within a second": the one timing this suite asserts.
  curl -sS -m 1 -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $TOKEN" "$BASE/v1/pipelines" > fast.code \
    || fail "a client on 127.0.0.1 was not served within a second while 127.0.0.2 held 200 connections"
  [ "$(cat fast.code)" = 200 ] || fail "served $(cat fast.code)"
done
held=$(ss -tn state established "( dport = :$PORT )" src 127.0.0.2 | tail -n +2 | wc -l)
[ "$held" -le 32 ] || fail "the server holds $held connections from 127.0.0.2 (limit 32)"
kill "$SLOW_PID" 2>/dev/null || true
pass "200 slow connections from 127.0.0.2 ($held held, limit 32); 127.0.0.1 served within a second"
# slowloris: one client that is never idle (a header byte every second, never finishing) is
# cut at the header deadline (10 s, a total, not an idle timeout of 60 s); it is given 45 s.
# Meanwhile another trickles a body (complete headers, then a byte a second of a declared
# 100000): cut at the body deadline (30 s after its headers); it is given 75 s.
node -e '
const s = require("net").connect(+process.argv[1], "127.0.0.1", () => s.write(`POST /v1/connectors/validate HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${process.argv[2]}\r\nContent-Type: application/yaml\r\nContent-Length: 100000\r\n\r\n`));
let sent = 0;
const t = setInterval(() => { if (!s.destroyed) { s.write("a"); sent++; } }, 1000);
s.on("error", () => {});
s.on("close", () => { clearInterval(t); console.log(`closed after ${sent} bytes`); process.exit(0); });
setTimeout(() => { console.log(`still open after ${sent} bytes`); process.exit(1); }, 75000);
' "$PORT" "$TOKEN" > slowbody.out &
SLOWBODY_PID=$!
node -e '
const s = require("net").connect(+process.argv[1], "127.0.0.1", () => s.write("GET /livez HTTP/1.1\r\nHost: x\r\nX-Slow: "));
let sent = 0;
const t = setInterval(() => { if (!s.destroyed) { s.write("a"); sent++; } }, 1000);
s.on("error", () => {});
s.on("close", () => { clearInterval(t); console.log(`closed after ${sent} bytes`); process.exit(0); });
setTimeout(() => { console.log(`still open after ${sent} bytes`); process.exit(1); }, 45000);
' "$PORT" > slowloris.out || fail "a client trickling its headers was not cut: $(cat slowloris.out)"
sent=$(grep -o '[0-9]*' slowloris.out)
[ "$sent" -ge 3 ] || fail "the trickling client was cut before its header deadline: $(cat slowloris.out)"
code=$(curl -sS -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $TOKEN" "$BASE/v1/pipelines")
[ "$code" = 200 ] || fail "after the slowloris client: $code"
pass "a client sending one header byte a second is cut at the header deadline ($(cat slowloris.out))"
wait "$SLOWBODY_PID" || fail "a client trickling its body was not cut: $(cat slowbody.out)"
sent=$(grep -o '[0-9]*' slowbody.out)
[ "$sent" -ge 15 ] || fail "the trickling body was cut before its deadline: $(cat slowbody.out)"
pass "a client sending one body byte a second is cut at the body deadline ($(cat slowbody.out))"
stop_serve
for secret in "$SOME_SECRET" "$SHADOW_LINE" "$PASSWD_LINE"; do
  grep -qF -- "$secret" "$T/responses.log" "$T/serve.out" "$T/serve.err" "$T/state.db" "$T"/logs/*.log 2>/dev/null \
    && fail "a secret or a file's contents reached a response, log or the state store"
done
listener_silent "the whole default-policy part"
pass "no secret or file content in any response, log or state file"

# ---- 2. allow-all: the server's own files and token stay out of reach ----
start_serve --policy allow-all --lease 10s --workers 2 --max-streams 2 --role api
printf 'version: 1\nname: clobber\nsource: {type: sample, rows: 10, resources: [{table: schedules, mode: full}]}\nsink: {type: sqlite, path: "%s", write: replace}\n' "$T/state.db" > clobber.yaml
api POST /v1/pipelines --data-binary @clobber.yaml > /dev/null
expect_refused 400 "sink.path: refused by policy rule protected"
sed -i "s|path: \"$T/state.db\"|path: \"$T/./logs/../state.db-wal\"|" clobber.yaml
api POST /v1/pipelines --data-binary @clobber.yaml > /dev/null
expect_refused 400 "sink.path: refused by policy rule"
api POST /v1/pipelines --data-binary @exfil.yaml > /dev/null
expect_refused 400 "refused by policy rule env" "env:FERRY_API_TOKEN"
pass "allow-all: the state store is never a sink; env:FERRY_API_TOKEN is never a reference"

# /v1/secrets reveals nothing about files or variables
touch "$T/exists.key"
for ref in "file:$T/exists.key" "file:$T/missing.key" env:HOME env:NO_SUCH_VARIABLE_X; do
  name=s$(printf '%s' "$ref" | md5sum | cut -c1-8)
  printf 'version: 1\nname: %s\nsource: {type: sample, rows: 1, resources: [{table: orders, mode: full}]}\nsink: {type: s3, bucket: b, endpoint: "http://192.0.2.1:9", access_key_id: "%s", secret_access_key: env:FERRY_SECRET_K}\n' "$name" "$ref" > ref.yaml
  api POST /v1/pipelines --data-binary @ref.yaml > /dev/null
  [ "$CODE" = 201 ] || fail "register $ref: $CODE $BODY"
done
api GET /v1/secrets > /dev/null
printf '%s' "$BODY" | jq -e '[.secrets[] | keys] | unique == [["kind","pipelines","ref"]]' > /dev/null \
  || fail "/v1/secrets tells more than references: $BODY"
pass "/v1/secrets lists references only (an existing and a missing file, a set and an unset variable look alike)"

# a FIFO reached through a glob (no path to check): the discover child is stopped at its
# deadline and the server answers other clients meanwhile
mkdir -p "$T/globbed"
mkfifo "$T/globbed/a.csv"
printf 'version: 1\nname: g\nsource: {type: files, format: csv, resources: [{table: t, path: "%s/globbed/*.csv"}]}\nsink: {type: "null"}\n' "$T" > glob.yaml
api POST /v1/connectors/discover --data-binary @glob.yaml > glob.out &
DPID=$!
sleep 1
curl -sS -m 2 -o /dev/null -H "Authorization: Bearer $TOKEN" "$BASE/v1/pipelines" || fail "the server stalled during a hanging discover"
wait "$DPID" || true
jq -e '.error.code' glob.out > /dev/null || fail "hanging discover: $(cat glob.out)"
pass "a discover on a FIFO behind a glob is answered ($(jq -r .error.code glob.out)), never hangs; the server kept answering"

# validate is parsing only (docs/security.md): it opens no file and connects nowhere. A FIFO
# behind a glob as the source (opening it with no writer would block the answer), a sink file
# in a folder that does not exist (validate must not create it), our listener as the
# database (through an env: reference) and as the object store: the answer comes, the
# listener hears nothing, nothing was created and the FIFO was never opened (a writer finds
# no reader: ENXIO).
mkdir -p "$T/vglob"
mkfifo "$T/vglob/a.csv"
export FERRY_SECRET_PGURL="postgresql://u@127.0.0.1:$LPORT/db"
cat > v.yaml <<EOF
version: 1
name: v
source: {type: postgres, url: env:FERRY_SECRET_PGURL, resources: [{table: public.t, mode: full}]}
sink: {type: s3, bucket: b, endpoint: "http://127.0.0.1:$LPORT", access_key_id: env:FERRY_SECRET_K, secret_access_key: env:FERRY_SECRET_K, format: parquet}
EOF
printf 'version: 1\nname: v2\nsource: {type: files, format: csv, resources: [{table: t, path: "%s/vglob/*.csv"}]}\nsink: {type: sqlite, path: "%s/vnew/out.db", write: append}\n' "$T" "$T" > v2.yaml
for f in v.yaml v2.yaml; do
  api POST /v1/connectors/validate --data-binary @"$f" -m 10 > /dev/null
  [ "$CODE" = 200 ] && printf '%s' "$BODY" | jq -e '.valid' > /dev/null || fail "validate $f: $CODE $BODY"
done
node -e 'const fs=require("fs");try{fs.openSync(process.argv[1],fs.constants.O_WRONLY|fs.constants.O_NONBLOCK);process.exit(1)}catch(e){process.exit(e.code==="ENXIO"?0:1)}' "$T/vglob/a.csv" \
  || fail "the FIFO has a reader: validate opened it"
[ ! -e "$T/vnew" ] || fail "validate created the sink's folder"
listener_silent "validate"
pass "validate opens no file (a FIFO source, a new sink file) and connects nowhere (database, object store)"

# event streams: at most 2 per token (--max-streams 2); the third gets 503 + Retry-After
printf 'version: 1\nname: waits\nsource: {type: sample, rows: 1, resources: [{table: orders, mode: full}]}\nsink: {type: "null"}\n' > w.yaml
api POST /v1/pipelines --data-binary @w.yaml > /dev/null
run=$(api POST /v1/pipelines/waits/runs | jq -r .id) # --role api: it stays requested
for i in 1 2; do
  curl -sS -N -H "Authorization: Bearer $TOKEN" "$BASE/v1/runs/$run/events" > "stream$i.out" 2>/dev/null &
  EXTRA_PIDS="$EXTRA_PIDS $!"
done
for _ in $(seq 1 100); do [ "$(curl -sS -H "Authorization: Bearer $TOKEN" "$BASE/metrics" | awk '/^ferry_event_streams / {print $2}')" = 2 ] && break; sleep 0.05; done
code=$(curl -sS -D hdr.txt -o third.json -w '%{http_code}' -H "Authorization: Bearer $TOKEN" "$BASE/v1/runs/$run/events")
[ "$code" = 503 ] && grep -qi '^Retry-After: ' hdr.txt && jq -e '.error.code == "too_many_streams"' third.json > /dev/null \
  || fail "a third stream: $code $(cat hdr.txt third.json)"
pass "event streams capped per token: the third answers 503 with Retry-After"
stop_serve
listener_silent "the whole suite"
