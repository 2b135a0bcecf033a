# tests/tools/tcpproxy.bash - one tests/tools/tcpproxy.mjs in front of a local server for a
# test (sourced after tests/e2e/lib.sh; not a test itself).
#   px_start TARGET_PORT   starts it (killed when the test exits, chained onto the EXIT trap);
#                          its port in $T/px.port and PX_PORT, its control port in $T/px.ctl.
#                          A proxy that does not start FAILS the test.
#   ctl PATH               one control request (/cut?..., /pass, /stats, ...), body on stdout
px_start() {
  command -v node > /dev/null || fail "node is needed (scripts/install-deps.sh)"
  node "$FERRY_SRC/tests/tools/tcpproxy.mjs" "$1" "$T/px.port" "$T/px.ctl" > "$T/px.log" 2>&1 &
  PX_PID=$!
  # shellcheck disable=SC2064
  trap "__px_rc=\$?; kill $PX_PID 2>/dev/null; set +e; (exit \$__px_rc); $(trap -p EXIT | sed "s/^trap -- '//; s/' EXIT\$//")" EXIT
  local _
  for _ in $(seq 1 100); do [ -s "$T/px.port" ] && [ -s "$T/px.ctl" ] && break; sleep 0.1; done
  [ -s "$T/px.ctl" ] || fail "proxy did not start: $(cat "$T/px.log")"
  PX_PORT=$(cat "$T/px.port")
}
ctl() { curl -fsS "http://127.0.0.1:$(cat "$T/px.ctl")$1"; }
