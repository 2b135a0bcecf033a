#!/usr/bin/env bash
# scripts/check-source.sh - the static checks of ferry's C sources (run by scripts/test.sh).
#
# 1. Banned functions anywhere in src/ and include/: atoi (no error report), sprintf,
#    strcpy and strcat (no bound). Use strtol/ferry_cfg_int, snprintf, memcpy with a length,
#    ferry_buf_append.
# 2. Functions longer than 150 lines in src/ (counted from the line that opens the body to
#    the line that closes it). Every one is listed; the check fails on any not in KNOWN_LONG
#    below: the ones left to split (issue 16), so that no new one appears. Remove a line
#    from KNOWN_LONG when its function is split.
# 3. A connector including another connector's header; libcurl outside src/net/.
# Exits non-zero on a finding. Needs bash and awk only.
set -euo pipefail
cd "$(dirname "$0")/.."
max=150
status=0

banned='\b(atoi|sprintf|vsprintf|strcpy|strcat)[[:space:]]*\('
# lines that are comments (starting with /*, * or //) do not count
if hits=$(grep -rnE --include='*.c' --include='*.h' "$banned" src include 2>/dev/null |
          grep -vE '^\S+:[0-9]+:\s*(/?\*|//)'); then
  if [ -n "$hits" ]; then
    echo "check-source: banned function (atoi, sprintf, strcpy, strcat):" >&2
    echo "$hits" >&2
    status=1
  fi
fi

# Functions over $max lines: a definition starts at a line that begins with a non-blank,
# non-# character and holds '(' (no ';'), and its body opens with a '{' in column 0 and
# closes with a '}' in column 0 (the tree's clang-format style).
KNOWN_LONG='^$'
long=$(find src -name '*.c' -print0 | sort -z | xargs -0 awk -v max="$max" '
  FNR == 1 { name = ""; start = 0 }
  /^[A-Za-z_].*\(/ && !/;[[:space:]]*$/ { cand = $0; sub(/\(.*/, "", cand); n = split(cand, w, /[ *]+/); name = w[n] }
  /^\{/ { start = FNR }
  /^\}/ && start { len = FNR - start + 1; if (len > max) printf "%s:%d: %s: %d lines\n", FILENAME, start, name, len; start = 0 }
')
if [ -n "$long" ]; then
  echo "check-source: functions over $max lines:" >&2
  echo "$long" >&2
  if echo "$long" | grep -vqE "$KNOWN_LONG"; then
    echo "check-source: new functions over $max lines (split them):" >&2
    echo "$long" | grep -vE "$KNOWN_LONG" >&2
    status=1
  fi
fi
# 3. Layers (issue 16): a connector never includes another connector's folder (shared code
#    lives in src/formats/, src/objstore/, src/net/); only src/net/ includes libcurl.
cross=$(grep -rnE '^#include "connectors/[a-z0-9_]+/' src/connectors --include='*.c' --include='*.h' |
        awk -F: '{ split($1, own, "/"); match($3, /connectors\/[a-z0-9_]+\//);
                   inc = substr($3, RSTART + 11, RLENGTH - 12); if (inc != own[3]) print }')
if [ -n "$cross" ]; then
  echo "check-source: a connector includes another connector's header:" >&2
  echo "$cross" >&2
  status=1
fi
if curl=$(grep -rln --include='*.c' --include='*.h' '#include <curl/curl.h>' src include |
          grep -v '^src/net/'); then
  echo "check-source: libcurl used outside src/net/ (use net/http.h):" >&2
  echo "$curl" >&2
  status=1
fi

# 4. Tests on the shared servers (tests/fixture.sh, docs/internals/testing.md): ferry names a
#    replication slot and a binlog client's server_id after the pipeline, so a pipeline name
#    written in a shared CDC test (`name: X`, `pipeline FILE X`) must not appear in another.
dup=$(grep -lE '^# shared:.*\b(pg|mysql)\b' tests/e2e/*.sh tests/fault/*.sh 2>/dev/null |
      xargs -r grep -l 'mode: cdc' |
      xargs -r grep -oHE '(name: |^pipeline [^ ]+ )[a-z][a-z0-9_]*' |
      sed -E 's/^([^:]+):(name: |pipeline [^ ]+ )/\1 /' | sort -u |
      awk '{ file[NR] = $1; name[NR] = $2 }
           END { for (i = 1; i <= NR; i++) for (j = i + 1; j <= NR; j++) {
                   if (file[i] == file[j]) continue
                   a = name[i]; b = name[j] # a name ending in _ is a printf prefix (X_%s)
                   if (a == b || (a ~ /_$/ && index(b, a) == 1) || (b ~ /_$/ && index(a, b) == 1))
                     print a " (" file[i] ") ~ " b " (" file[j] ")" } }')
if [ -n "$dup" ]; then
  echo "check-source: a pipeline name used by two shared CDC tests (slot names would collide):" >&2
  echo "$dup" >&2
  status=1
fi

[ $status -eq 0 ] && echo "check-source: ok"
exit $status
