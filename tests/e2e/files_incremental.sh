#!/usr/bin/env bash
# mode: incremental of the files source (route checkpoint: path, size and modification time
# of every file matched by the last completed run): a second run with nothing new reads
# nothing; a new file is read alone; a changed file is read again whole (append: its
# unchanged rows twice, as documented); an empty plan still completes.
. "$(dirname "$0")/lib.sh"
mkdir in
gen_csv() { awk -v a="$1" -v b="$2" -v tag="${3:-v}" 'BEGIN { print "id,val"; for (i = a; i < b; i++) printf "%d,%s%d\n", i, tag, i }'; }
gen_csv 0 100 > in/a.csv
gen_csv 100 200 | gzip -c > in/b.csv.gz
cat > inc.yaml <<YAML
version: 1
name: files-inc
source: {type: files, path: "$T/in/*", resources: [{table: t, mode: incremental}]}
sink: {type: sqlite, path: $T/inc.db, write: append}
YAML
expect_exit 0 ferry run inc.yaml
[ "$(q inc.db 'SELECT count(*) || "|" || sum(id) FROM t')" = "200|19900" ] || fail "first run: $(q inc.db 'SELECT count(*), sum(id) FROM t')"
expect_exit 0 ferry run inc.yaml
[ "$(q inc.db 'SELECT count(*) FROM t')" = 200 ] || fail "nothing new: $(q inc.db 'SELECT count(*) FROM t') rows"
gen_csv 200 230 > in/c.csv
expect_exit 0 ferry run inc.yaml
[ "$(q inc.db 'SELECT count(*) || "|" || count(DISTINCT id) FROM t')" = "230|230" ] || fail "new file: $(q inc.db 'SELECT count(*), count(DISTINCT id) FROM t')"
{ gen_csv 0 100; echo "500,x"; } > in/a.csv.new && mv in/a.csv.new in/a.csv
expect_exit 0 ferry run inc.yaml
[ "$(q inc.db 'SELECT count(*) FROM t')" = 331 ] || fail "changed file: $(q inc.db 'SELECT count(*) FROM t') rows, want 230 + 101"
[ "$(q inc.db 'SELECT count(*) FROM t WHERE id = 7')" = 2 ] || fail "the changed file is read again whole"
[ "$(q inc.db 'SELECT count(*) FROM t WHERE id >= 100 AND id < 230')" = 130 ] || fail "unchanged files read again"
pass "files incremental: nothing new, a new file, a changed file re-read whole"
