#!/usr/bin/env bash
# shared: pg
# `create: like_source` (postgres -> postgres): the destination schema made as the source
# has it - an enum and a domain type, the source's own column types, defaults (a serial's
# sequence, an identity column, now(), an enum default), then after the data the primary
# keys, a unique constraint, a unique expression index, a plain index, a check constraint
# and a foreign key, and the sequences set to the source's values. The schema-only dumps of
# both databases (pg_dump, normalised) are equal, the rows are equal, the clone behaves as a
# database (a foreign-key violation, a check violation and a bad enum label are refused; a
# new row takes the next serial value), and a second run changes nothing in the schema.
. "$(dirname "$0")/lib.sh"
. "${FERRY_PG_SH:-$FERRY_SRC/tests/pg/pg.sh}"
pg_start

dest=$(pg_db dest)
export SRC_URL="$FERRY_PG_URL"
export DEST_URL="postgresql://ferry_admin:$PGPASSWORD@127.0.0.1:$PGPORT/$dest"
pgq >/dev/null <<'SQL'
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE DOMAIN posint AS integer CHECK (VALUE > 0);
CREATE TABLE customers (
  id serial PRIMARY KEY,
  email text NOT NULL UNIQUE,
  feel mood NOT NULL DEFAULT 'ok',
  score posint,
  created timestamptz NOT NULL DEFAULT now());
CREATE UNIQUE INDEX customers_lower_email ON customers (lower(email));
CREATE TABLE orders (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  customer_id int NOT NULL REFERENCES customers (id) ON DELETE CASCADE,
  qty int NOT NULL CONSTRAINT qty_positive CHECK (qty > 0),
  note varchar(20) DEFAULT 'none',
  amount numeric(10,2));
CREATE INDEX orders_customer_idx ON orders (customer_id);
INSERT INTO customers (email, feel, score)
  SELECT 'c' || g || '@x', (ARRAY['sad','ok','happy'])[1 + g % 3]::mood, g FROM generate_series(1, 200) g;
INSERT INTO orders (customer_id, qty, note, amount)
  SELECT 1 + g % 200, 1 + g % 7, 'n' || g, g * 1.25 FROM generate_series(1, 1000) g;
DELETE FROM orders WHERE id % 10 = 0;
SQL
cat > clone.yaml <<'YAML'
version: 1
name: clone
source:
  type: postgres
  url: env:SRC_URL
  resources:
    - {table: public.customers}
    - {table: public.orders}
sink:
  type: postgres
  url: env:DEST_URL
  schema: public
  write: upsert
  create: like_source
YAML
expect_exit 0 ferry run clone.yaml

schema_of() { # DB: the schema-only dump, normalised (comments, SET lines, blank lines out)
  pg_dump -s --no-owner --no-privileges -N _ferry -d "$1" |
    grep -v -e '^--' -e '^SET ' -e '^SELECT pg_catalog.set_config' -e '^$' -e '^\\restrict ' -e '^\\unrestrict '
}
schema_of "$PGDATABASE" > src.sql
schema_of "$dest" > dst.sql
diff -u src.sql dst.sql > schema.diff || fail "the destination schema differs from the source: $(cat schema.diff)"
for want in 'CREATE TYPE public.mood AS ENUM' 'CREATE DOMAIN public.posint AS integer' \
            'FOREIGN KEY (customer_id) REFERENCES public.customers(id) ON DELETE CASCADE' \
            'CREATE UNIQUE INDEX customers_lower_email' 'CREATE INDEX orders_customer_idx' \
            'CONSTRAINT qty_positive CHECK' 'ADD GENERATED ALWAYS AS IDENTITY' \
            "DEFAULT nextval('public.customers_id_seq'::regclass)" 'customers_email_key UNIQUE (email)'; do
  grep -qF "$want" dst.sql || fail "the destination schema has no $want"
done
pass "pg_dump --schema-only of source and destination are equal ($(wc -l < dst.sql) lines)"

for t in customers orders; do
  a=$(pgq -c "COPY (SELECT * FROM $t ORDER BY id) TO STDOUT" | md5sum)
  b=$(pgq -d "$dest" -c "COPY (SELECT * FROM $t ORDER BY id) TO STDOUT" | md5sum)
  [ "$a" = "$b" ] || fail "$t: destination rows differ"
done
[ "$(pgq -c 'SELECT last_value FROM customers_id_seq')" = "$(pgq -d "$dest" -c 'SELECT last_value FROM customers_id_seq')" ] ||
  fail "the serial's sequence was not set"
[ "$(pgq -c 'SELECT last_value FROM orders_id_seq')" = "$(pgq -d "$dest" -c 'SELECT last_value FROM orders_id_seq')" ] ||
  fail "the identity's sequence was not set"
pass "rows equal; sequences at the source's values"

# The clone is a database: its defaults go on after the source's values (checked first:
# a refused insert below may take a sequence value), its constraints hold.
id=$(pgq -d "$dest" -c "INSERT INTO customers (email) VALUES ('new@x') RETURNING id")
[ "$id" = $(( $(pgq -c 'SELECT max(id) FROM customers') + 1 )) ] || fail "the serial gave $id"
oid=$(pgq -d "$dest" -c "INSERT INTO orders (customer_id, qty) VALUES ($id, 2) RETURNING id")
[ "$oid" = "$(( $(pgq -c 'SELECT last_value FROM orders_id_seq') + 1 ))" ] || fail "the identity gave $oid"
pgq -d "$dest" -c "INSERT INTO orders (customer_id, qty) VALUES (999999, 1)" >/dev/null 2>fk.err &&
  fail "a foreign-key violation was accepted"
grep -q 'violates foreign key constraint "orders_customer_id_fkey"' fk.err || fail "fk error: $(cat fk.err)"
pgq -d "$dest" -c "INSERT INTO orders (customer_id, qty) VALUES (1, 0)" >/dev/null 2>ck.err && fail "a check violation was accepted"
grep -q 'qty_positive' ck.err || fail "check error: $(cat ck.err)"
pgq -d "$dest" -c "INSERT INTO customers (email, feel) VALUES ('z@x', 'bogus')" >/dev/null 2>en.err && fail "a bad enum label was accepted"
pgq -d "$dest" -c "INSERT INTO customers (email, score) VALUES ('neg@x', -1)" >/dev/null 2>dm.err && fail "the domain's check was not kept"
pgq -d "$dest" -c "INSERT INTO customers (email) VALUES ('C1@X')" >/dev/null 2>ux.err && fail "the unique expression index was not kept"
pgq -d "$dest" -c "DELETE FROM customers WHERE id = $id" >/dev/null
[ "$(pgq -d "$dest" -c "SELECT count(*) FROM orders WHERE id = $oid")" = 0 ] || fail "ON DELETE CASCADE not kept"
pass "foreign key, check, enum, domain and unique index refuse bad rows; serial and identity go on"

# A second run: the same schema, nothing created twice, the rows still equal.
pgq -c "UPDATE customers SET score = 7 WHERE id = 5" >/dev/null
expect_exit 0 ferry run clone.yaml
schema_of "$dest" > dst2.sql
diff -u src.sql dst2.sql > schema2.diff || fail "the second run changed the destination schema: $(cat schema2.diff)"
[ "$(pgq -d "$dest" -c 'SELECT score FROM customers WHERE id = 5')" = 7 ] || fail "second run: update missing"
pass "a second run keeps the schema as it is (every object created once)"

# Refused where it cannot work: another sink.
cat > bad.yaml <<YAML
version: 1
name: badclone
source: {type: postgres, url: env:SRC_URL, resources: [{table: public.customers}]}
sink: {type: sqlite, path: $T/x.db, create: like_source}
YAML
expect_exit 2 ferry run bad.yaml
printf '%s' "$OUT" | grep -q 'create' || fail "sqlite + create: $OUT"
pass "create: like_source elsewhere is refused: $(printf '%s' "$OUT" | head -1)"
