#!/usr/bin/env bash
# tests/e2e/mysql_tables.sh - table patterns (`tables:` / `exclude:`) on the mysql source
# against a real MariaDB 10.11: the schema part of a pattern is the database, a one-part
# pattern means the URL's database; `ferry check` lists one resource per matching table
# (largest first), views, ferry's own tables and the server's databases are never listed,
# exclusions and explicit `table:` entries win, a quoted part matches a hostile name exactly,
# a run copies each table (compared row by row), a pattern matching nothing is named.
. "$FERRY_SRC/tests/e2e/lib.sh"
. "$FERRY_SRC/tests/mysql/mysql.sh"
my_start
myq <<'SQL'
CREATE TABLE orders (id bigint PRIMARY KEY, amount decimal(12,2));
INSERT INTO orders SELECT seq, seq * 1.5 FROM seq_1_to_20000;
CREATE TABLE users (id int PRIMARY KEY, name varchar(20));
INSERT INTO users SELECT seq, CONCAT('u', seq) FROM seq_1_to_50;
CREATE TABLE audit_log (id int PRIMARY KEY);
INSERT INTO audit_log VALUES (1);
CREATE VIEW v_users AS SELECT * FROM users;
CREATE TABLE _ferry_checkpoints (pipeline varchar(10) PRIMARY KEY);
CREATE TABLE users__ferry_staging (id int PRIMARY KEY);
CREATE DATABASE sales;
CREATE TABLE sales.`Big "Deals"` (id int PRIMARY KEY, note varchar(10));
INSERT INTO sales.`Big "Deals"` VALUES (1, 'a'), (2, 'b');
CREATE TABLE sales.deals (id int PRIMARY KEY);
INSERT INTO sales.deals VALUES (7);
GRANT SELECT ON sales.* TO 'ferry_reader'@'127.0.0.1';
ANALYZE TABLE orders, users;
SQL
cat > m.yaml <<'EOF2'
version: 1
name: m
source:
  type: mysql
  url: env:FERRY_MY_READER_URL
  resources:
    - table: users
      mode: full
    - tables: ["*", "sales.\"Big \"\"Deals\"\"\""]
      exclude: ["audit_*"]
sink: {type: sqlite, path: out.db, write: append}
EOF2
expect_exit 0 ferry check m.yaml
for t in 'orders: mode full' 'users: mode full' 'sales."Big ""Deals""": mode full'; do
  printf '%s\n' "$OUT" | grep -qF "  $t" || fail "check does not list $t: $OUT"
done
printf '%s\n' "$OUT" | grep -qE "audit_log|v_users|_ferry|sales.deals|mysql\.|information_schema" \
  && fail "check lists an excluded table, a view, ferry's own or another database's table: $OUT"
# the explicit entry first, then the matched tables largest first
first=$(printf '%s\n' "$OUT" | grep -E '^  [^ ].*: mode full' | sed -n 2p)
[[ $first == "  orders: "* ]] || fail "the largest matched table is not planned first: $first"
[ "$(printf '%s\n' "$OUT" | grep -cE '^  users: ')" = 1 ] || fail "users (explicit and matched) is not listed once: $OUT"
pass "check: * and a quoted sales table, excluding audit_*; no view, no ferry table, largest first"

expect_exit 0 ferry run m.yaml --quiet
sq() { sqlite3 out.db "$@"; }
tables=$(sq "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE '\_ferry%' ESCAPE '\' ORDER BY name" | tr '\n' '|')
[ "$(sq "SELECT count(*), sum(id), CAST(sum(amount * 100) AS INTEGER) FROM orders")" = "20000|200010000|30001500000" ] \
  || fail "orders: $(sq "SELECT count(*), sum(id), sum(amount * 100) FROM orders") (tables: $tables)"
[ "$(sq "SELECT group_concat(id || name, ',') FROM (SELECT * FROM users ORDER BY id)")" = \
  "$(myq -e "SELECT GROUP_CONCAT(CONCAT(id, name) ORDER BY id SEPARATOR ',') FROM users")" ] || fail "users differ"
big=$(sq "SELECT name FROM sqlite_master WHERE name LIKE '%Deals%'")
[ -n "$big" ] || fail "the sales table was not written (tables: $tables)"
[ "$(sq "SELECT group_concat(id || note, ',') FROM (SELECT * FROM \"${big//\"/\"\"}\" ORDER BY id)")" = "1a,2b" ] \
  || fail "sales.Big \"Deals\" differs"
for t in audit_log v_users deals; do
  [ "$(sq "SELECT count(*) FROM sqlite_master WHERE name = '$t'")" = 0 ] || fail "$t was copied"
done
pass "run: orders, users and sales.Big \"Deals\" copied equal; audit_log, the view and sales.deals not"

sed 's/\["\*", .*\]$/["nothing_*"]/' m.yaml > none.yaml
sed -i 's/out.db/none.db/; s/^name: m$/name: none/' none.yaml
expect_exit 7 ferry run none.yaml
printf '%s\n' "$OUT" | grep -q "table pattern 'nothing_\*' matches no table" || fail "no-match error: $OUT"
pass "a pattern matching no table is refused, naming it"

# parallel readers: MySQL and MariaDB cannot share one consistent snapshot between
# connections, so a second reader is refused with the reason rather than reading shards at
# different moments
sed -e 's/^name: m$/name: par/; s/out.db/par.db/' -e 's/^  type: mysql$/  type: mysql\n  parallelism: 2\n  shard_rows: 2000/' \
  m.yaml > par.yaml
grep -q "parallelism: 2" par.yaml || fail "par.yaml was not written: $(cat par.yaml)"
expect_exit 1 ferry run par.yaml
printf '%s\n' "$OUT" | grep -qF 'cannot share one consistent snapshot between connections; read with `parallelism: 1`' ||
  fail "parallelism: 2 is not refused with its reason: $OUT"
pass "parallelism: 2 refused: one consistent snapshot cannot be shared between connections"
