# tests/fault/harness.bash - the kill harness shared by tests/fault/kill_schedules.sh and
# tests/fault/soak (sourced after tests/e2e/lib.sh; not a test itself: CTest only globs *.sh).
#
#   fault_until_done FILE NAME [MAX_ATTEMPTS]
#     runs `ferry run FILE` again and again until the run of pipeline NAME is completed; each
#     attempt is hit at a random moment (bash $RANDOM, seeded by the caller) by one of:
#       kill   SIGKILL                       -> the next attempt resumes
#       term   SIGTERM once (graceful pause) -> exit 5 and state paused (or completed when it
#                                               finished first); the next attempt resumes
#       stop   SIGSTOP, 0.2-1.2 s, SIGCONT   -> the same attempt goes on and must complete
#       none   no signal                     -> must complete
#     The last attempt is never hit. Counts go to FH_KILLS FH_TERMS FH_STOPS FH_ATTEMPTS.
#     FH_SIGNALS limits the choice (default "kill term stop none"); FH_MAX_DELAY_MS the moment;
#     FH_FAILPOINTS is given to each attempt as FERRY_FAILPOINTS (a sleep stretches the run).
FH_KILLS=0 FH_TERMS=0 FH_STOPS=0 FH_ATTEMPTS=0
FH_SIGNALS=${FH_SIGNALS:-kill term stop none}
FH_MAX_DELAY_MS=${FH_MAX_DELAY_MS:-1500}

fh_sleep_ms() { sleep "$(printf '%d.%03d' $(($1 / 1000)) $(($1 % 1000)))"; }

fh_state() { ferry runs --pipeline "$1" --json | jq -r '.[0].state // "none"'; }

fault_until_done() {
  local file=$1 name=$2 max=${3:-6} attempt sigs pick pid rc st
  read -r -a sigs <<< "$FH_SIGNALS"
  for attempt in $(seq 1 "$max"); do
    FH_ATTEMPTS=$((FH_ATTEMPTS + 1))
    FERRY_FAILPOINTS=${FH_FAILPOINTS:-} "$FERRY_BIN" run "$file" --quiet > "$T/fh.log" 2>&1 &
    pid=$!
    pick=none
    [ "$attempt" -lt "$max" ] && pick=${sigs[$((RANDOM % ${#sigs[@]}))]}
    if [ "$pick" != none ]; then
      fh_sleep_ms $((50 + RANDOM % FH_MAX_DELAY_MS))
      case $pick in
        kill) kill -KILL "$pid" 2>/dev/null && FH_KILLS=$((FH_KILLS + 1)) ;;
        term) kill -TERM "$pid" 2>/dev/null && FH_TERMS=$((FH_TERMS + 1)) ;;
        stop) if kill -STOP "$pid" 2>/dev/null; then
                FH_STOPS=$((FH_STOPS + 1))
                fh_sleep_ms $((200 + RANDOM % 1000))
                # the run may have ended just as SIGSTOP arrived (a process already
                # exiting ignores it) and bash reaped it: nothing left to continue
                kill -CONT "$pid" 2>/dev/null || true
              fi ;;
      esac
    fi
    set +e; wait "$pid" 2>/dev/null; rc=$?; set -e
    st=$(fh_state "$name")
    case $pick:$rc in
      kill:137 | kill:0 | term:5 | term:0 | term:143) ;; # 143: before the handler was installed
      stop:0 | none:0) [ "$st" = completed ] || fail "attempt $attempt ($pick): exit 0 but state $st" ;;
      *) fail "attempt $attempt ($pick): unexpected exit $rc, state $st: $(cat "$T/fh.log")" ;;
    esac
    [ "$pick:$rc" = term:5 ] && { [ "$st" = paused ] || fail "SIGTERM: exit 5 but state $st"; }
    [ "$st" = completed ] && return 0
  done
  fail "run of $name not completed after $max attempts"
}
