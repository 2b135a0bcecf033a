#!/usr/bin/env python3
# tests/fault/cdc_changelog.py - the oracle of a cdc change log (write: append) read back from
# a sink by a reader ferry did not write (jq, DuckDB, the signed S3 client), used by the cdc
# fault tests (not a test itself). Input on stdin, one change a line, tab-separated:
#     lsn  op  id  v  n  origin
# where origin names the run and attempt whose part held the row ("<run>:<attempt>").
#
#     cdc_changelog.py CHANGES ALLOWED FINAL_STATE_FILE
#
# Checks, failing (exit 1, a message naming the change) when one does not hold:
#   - no change (lsn, op, id) twice within one attempt's parts;
#   - every change at most twice, and a duplicate only across two attempts of one run that
#     ALLOWED names, with the same whole row (values included) and lsn >= that run's MIN_LSN
#     (the position saved before the interrupted run: the in-flight work, recognisable by its
#     lsn). ALLOWED is "RUN:MIN_LSN[,RUN:MIN_LSN...]", or "-": no duplicate allowed at all;
#   - CHANGES distinct changes (what the source made; -1: not checked);
#   - merged on (lsn, key) - for each id the change with the highest lsn, a delete removing
#     the row - the log equals FINAL_STATE_FILE ("id|v|n" lines ordered by id).
# Prints "ROWS DISTINCT DUPLICATES".
import sys

changes, final = int(sys.argv[1]), sys.argv[3]
allowed = {}
if sys.argv[2] != '-':
    for a in sys.argv[2].split(','):
        r, m = a.split(':')
        allowed[r] = int(m)
seen = {}  # (lsn, op, id) -> list of (origin, values)
rows = 0
for line in sys.stdin:
    line = line.rstrip('\n')
    if not line:
        continue
    f = line.split('\t')
    if len(f) != 6:
        sys.exit('change log: malformed line %r' % line)
    lsn, op, key, v, n, origin = f
    rows += 1
    seen.setdefault((int(lsn), op, int(key)), []).append((origin, (v, n)))

dups = 0
for (lsn, op, key), occ in sorted(seen.items()):
    if len(occ) == 1:
        continue
    what = 'change (lsn %d, %s, id %d)' % (lsn, op, key)
    origins = [o for o, _ in occ]
    if len(set(origins)) != len(origins):
        sys.exit('%s appears twice within one attempt (%s)' % (what, ', '.join(origins)))
    if not allowed:
        sys.exit('%s appears %d times (%s); no duplicate is allowed here' % (what, len(occ), ', '.join(origins)))
    if len(occ) > 2:
        sys.exit('%s appears %d times (%s): more than the one interrupted attempt can explain' % (what, len(occ), ', '.join(origins)))
    runs = set(o.split(':')[0] for o in origins)
    if len(runs) != 1:
        sys.exit('%s is in two runs (%s): a committed run was replayed' % (what, ', '.join(origins)))
    run = runs.pop()
    if run not in allowed:
        sys.exit('%s is duplicated in run %s, which was not interrupted after its commit' % (what, run))
    if occ[0][1] != occ[1][1]:
        sys.exit('%s: its two copies differ (%s vs %s)' % (what, occ[0][1], occ[1][1]))
    if lsn < allowed[run]:
        sys.exit('%s duplicated although it lies before the position %d saved before run %s' % (what, allowed[run], run))
    dups += 1

if changes >= 0 and len(seen) != changes:
    sys.exit('change log: %d distinct changes, the source made %d' % (len(seen), changes))

last = {}
for (lsn, op, key), occ in seen.items():
    if key not in last or lsn > last[key][0]:
        last[key] = (lsn, op, occ[0][1])
got = ['%d|%s|%s' % (k, last[k][2][0], last[k][2][1]) for k in sorted(last) if last[k][1] != 'delete']
want = [l.rstrip('\n') for l in open(final) if l.strip()]
if got != want:
    g, w = set(got), set(want)
    sys.exit('change log merged on (lsn, key) differs from the source: %d missing or stale (e.g. %s), %d extra or stale (e.g. %s)'
             % (len(w - g), sorted(w - g)[:3], len(g - w), sorted(g - w)[:3]))
print(rows, len(seen), dups)
