#!/usr/bin/env bash
# bench/pg_upsert_stmt.sh - statement against statement (issue 22): one ferry-sized batch
# (50,000 rows in a never-analysed temporary table, as the sink stages it) into a K-row keyed
# table (default 1,000,000), INSERT … ON CONFLICT against MERGE, "plain" (every staged row)
# and "ordered" (DISTINCT ON (id) … ORDER BY id, seq DESC), for existing keys at the start and
# in the middle and for new keys; each in a transaction rolled back, interleaved, twice; then
# the plans of the two MERGEs. Prints psql's \timing lines. Never gates CI.
# Results: bench/results/pg-upsert-20261202.md.   K=1000000 bash bench/pg_upsert_stmt.sh
set -euo pipefail
cd "$(dirname "$0")/.."
FERRY_SRC=$PWD
W=$(mktemp -d "${TMPDIR:-/tmp}/ferry-upstmt.XXXXXX")
chmod 755 "$W"
trap 'rm -rf "$W"' EXIT
. bench/lib.sh
bench_pg_start off
K=${K:-1000000}
psql -v ON_ERROR_STOP=1 -qX -d postgres >/dev/null <<SQL
CREATE TABLE t ($BENCH_ORDERS_COLS, PRIMARY KEY (id));
INSERT INTO t SELECT g, (hashint8(g) & 1048575)::int, 'x', 1.5, 1, NULL, true, 'note', now(), now() FROM generate_series(1, $K) g;
VACUUM ANALYZE t;
SQL
cols="customer_id status amount quantity discount paid note created_at updated_at"
setl() { local c o=""; for c in $cols; do o="$o${o:+, }$c = $1.$c"; done; echo "$o"; }
vals=$(for c in id $cols; do printf 'l.%s, ' $c; done | sed 's/, $//')
for lo in 1 500001 $((K+1)); do
  for rep in 1 2; do
    for kind in ins merge ins_o merge_o; do
      src="stage l"
      case $kind in *_o) src="(SELECT DISTINCT ON (id) * FROM stage ORDER BY id, seq DESC) l";; esac
      case $kind in
        ins*) sql="INSERT INTO t SELECT id, $(echo $cols | tr " " ",") FROM $src ON CONFLICT (id) DO UPDATE SET $(setl EXCLUDED)";;
        merge*) sql="MERGE INTO t AS d USING $src ON d.id = l.id WHEN MATCHED THEN UPDATE SET $(setl l) WHEN NOT MATCHED THEN INSERT VALUES ($vals)";;
      esac
      out=$(psql -qXAt -d postgres <<SQL
CREATE TEMP TABLE stage AS SELECT t.*, 0::bigint AS seq, 0::smallint AS op FROM t WITH NO DATA;
INSERT INTO stage SELECT g, 1, 'y', 2.5, 2, NULL, false, 'n2', now(), now(), g, 0 FROM generate_series($lo, $lo + 49999) g;
BEGIN;
\timing on
$sql;
\timing off
ROLLBACK;
SQL
)
      echo "lo=$lo $kind: $(echo "$out" | grep Time)"
    done
  done
done
for kind in merge merge_o; do
  src="stage l"; case $kind in *_o) src="(SELECT DISTINCT ON (id) * FROM stage ORDER BY id, seq DESC) l";; esac
  psql -qXAt -d postgres <<SQL | grep -E "Join|Scan|Loop|Sort|Unique"
CREATE TEMP TABLE stage AS SELECT t.*, 0::bigint AS seq, 0::smallint AS op FROM t WITH NO DATA;
INSERT INTO stage SELECT g, 1, 'y', 2.5, 2, NULL, false, 'n2', now(), now(), g, 0 FROM generate_series(500001, 549999) g;
EXPLAIN MERGE INTO t AS d USING $src ON d.id = l.id WHEN MATCHED THEN UPDATE SET $(setl l) WHEN NOT MATCHED THEN INSERT VALUES ($vals);
SQL
done
