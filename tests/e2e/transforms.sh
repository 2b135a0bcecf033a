#!/usr/bin/env bash
# labels: asan
# Transforms end to end: sample -> sqlite through a chain of every kind (drop, rename, hash,
# mask, add run_id, filter, cast), checked against an untransformed copy of the same data
# with an independent reader (sqlite3); then a bad transform config refuses to start and
# leaves no table behind.
. "$(dirname "$0")/lib.sh"

# The same data twice: once as it is, once transformed (same seed, same rows).
write_pipeline plain.yaml plain 5000 plain.db append
expect_exit 0 ferry run plain.yaml

cat > tx.yaml <<YAML
version: 1
name: tx
source:
  type: sample
  rows: 5000
  seed: 7
  resources:
    - table: orders
sink:
  type: sqlite
  path: tx.db
  write: append
batch: {rows: 700}
transforms:
  - {resource: orders, drop: discount}
  - {resource: orders, rename: {note: comment}}
  - {resource: orders, column: customer_id, hash: sha256}
  - {resource: orders, mask: comment, keep_last: 3, char: "#"}
  - {resource: orders, add: loaded_by, value: run_id}
  - {resource: orders, filter: status, in: [paid, shipped]}
  - {resource: orders, cast: amount, to: utf8}
YAML
expect_exit 0 ferry run tx.yaml --json
[ "$(json_field "$OUT" .state)" = completed ] || fail "state: $OUT"
run=$(json_field "$OUT" .run_id)
[ -n "$run" ] && [ "$run" != null ] || fail "no run id: $OUT"

# filter: exactly the paid and shipped orders, each once.
want=$(q plain.db "SELECT count(*) FROM orders WHERE status IN ('paid', 'shipped')")
all=$(q plain.db "SELECT count(*) FROM orders")
[ "$want" -gt 0 ] && [ "$want" -lt "$all" ] || fail "sample data has no mix of statuses: $want of $all"
[ "$(q tx.db 'SELECT count(*), count(DISTINCT id) FROM orders')" = "$want|$want" ] || fail "filter count"
[ "$(q tx.db "SELECT count(*) FROM orders WHERE status NOT IN ('paid', 'shipped')")" = 0 ] || fail "filter kept others"
[ "$(q tx.db "ATTACH 'plain.db' AS p; SELECT count(*) FROM orders o JOIN p.orders s ON s.id = o.id WHERE s.status IN ('paid', 'shipped')")" = "$want" ] \
  || fail "filter kept the wrong ids"
pass "filter: $want paid+shipped orders of $all"

# drop, rename, add: the destination's columns, in order.
cols=$(q tx.db "SELECT group_concat(name, ',') FROM pragma_table_info('orders')")
[ "$cols" = "id,customer_id,status,quantity,amount,express,comment,created_at,updated_at,loaded_by" ] \
  || fail "columns: $cols"
pass "drop discount, rename note -> comment, add loaded_by last"

# add run_id: every row carries the run's id.
[ "$(q tx.db "SELECT count(*) FROM orders WHERE loaded_by = $run")" = "$want" ] || fail "loaded_by"
pass "add run_id = $run on every row"

# hash: the hex SHA-256 of the customer id's decimal text (checked with sha256sum).
read -r id cust < <(q tx.db -separator ' ' "ATTACH 'plain.db' AS p; SELECT o.id, s.customer_id FROM orders o JOIN p.orders s ON s.id = o.id ORDER BY o.id LIMIT 1")
got=$(q tx.db "SELECT customer_id FROM orders WHERE id = $id")
[ "$got" = "$(printf '%s' "$cust" | sha256sum | cut -d' ' -f1)" ] || fail "hash of $cust: $got"
[ "$(q tx.db "SELECT count(*) FROM orders WHERE length(customer_id) <> 64")" = 0 ] || fail "hash length"
pass "hash: sha256 of the customer id's text"

# mask: every character but the last 3 is '#', counted in characters; NULL stays NULL.
bad=$(q tx.db "ATTACH 'plain.db' AS p; SELECT count(*) FROM orders o JOIN p.orders s ON s.id = o.id
  WHERE (s.note IS NULL) <> (o.comment IS NULL)
     OR (s.note IS NOT NULL AND (length(o.comment) <> length(s.note)
         OR substr(o.comment, -3) <> substr(s.note, -3) AND length(s.note) >= 3
         OR replace(substr(o.comment, 1, max(length(s.note) - 3, 0)), '#', '') <> ''))")
[ "$bad" = 0 ] || fail "mask: $bad rows wrong"
[ "$(q tx.db "SELECT count(*) > 0 FROM orders WHERE comment IS NULL")" = 1 ] || fail "mask: no null kept"
[ "$(q tx.db "SELECT count(*) > 0 FROM orders WHERE comment LIKE '###%'")" = 1 ] || fail "mask: nothing masked"
pass "mask: keep_last 3, in characters, nulls kept"

# cast amount to utf8: text, equal to the untransformed decimal's text.
[ "$(q tx.db "SELECT count(*) FROM orders WHERE typeof(amount) <> 'text'")" = 0 ] || fail "cast type"
[ "$(q tx.db "ATTACH 'plain.db' AS p; SELECT count(*) FROM orders o JOIN p.orders s ON s.id = o.id WHERE o.amount <> CAST(s.amount AS TEXT)")" = 0 ] \
  || fail "cast values differ: $(q tx.db "ATTACH 'plain.db' AS p; SELECT o.amount, s.amount FROM orders o JOIN p.orders s ON s.id = o.id LIMIT 3")"
pass "cast amount -> utf8: same text as the decimal"

# Untouched columns are equal to the untransformed copy.
[ "$(q tx.db "ATTACH 'plain.db' AS p; SELECT count(*) FROM orders o JOIN p.orders s ON s.id = o.id
  WHERE o.status IS NOT s.status OR o.quantity IS NOT s.quantity OR o.express IS NOT s.express
     OR o.created_at IS NOT s.created_at OR o.updated_at IS NOT s.updated_at")" = 0 ] || fail "other columns"
pass "other columns unchanged"

# A bad constant is refused before any data moves: exit 2-ish config error, no table.
sed -e 's/name: tx/name: txbad/' -e 's/tx.db/bad.db/' -e 's/in: \[paid, shipped\]/greater_than: x/' \
    -e 's/filter: status/filter: quantity/' tx.yaml > bad.yaml
set +e
OUT=$(ferry run bad.yaml 2>&1)
rc=$?
set -e
[ "$rc" != 0 ] || fail "bad constant accepted"
printf '%s\n' "$OUT" | grep -q 'transforms\[5\].greater_than (line 20): "x" is not a valid int16 value for column "quantity"' \
  || fail "bad constant message: $OUT"
[ ! -e bad.db ] || [ "$(q bad.db "SELECT count(*) FROM sqlite_master WHERE name = 'orders'")" = 0 ] || fail "bad run created a table"
pass "bad filter constant refused with transform, key and line"
