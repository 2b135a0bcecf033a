#!/usr/bin/env bash
# shared: pg
# tests/e2e/tables.sh - table patterns (`tables:` / `exclude:`) on the sqlite and postgres
# sources: `ferry check` prints one resource per matching table, a run copies each (set
# equality per table), exclusions and explicit `table:` entries win, quoted parts match
# exactly, a partitioned table is read once through its parent (never its partitions
# again), a pattern that matches nothing fails naming it with nothing written, malformed
# patterns and `table:` with `tables:` are refused at load.
. "$FERRY_SRC/tests/e2e/lib.sh"
. "$FERRY_SRC/tests/pg/pg.sh"

# ---- sqlite --------------------------------------------------------------------------------
q src.db <<'SQL'
CREATE TABLE a (id INTEGER PRIMARY KEY, v TEXT);
INSERT INTO a VALUES (1, 'x'), (2, 'y');
CREATE TABLE b (id INTEGER PRIMARY KEY, n REAL);
INSERT INTO b VALUES (5, 1.5);
CREATE TABLE tmp_c (id INTEGER PRIMARY KEY);
INSERT INTO tmp_c VALUES (9);
CREATE TABLE "Odd Name" (id INTEGER PRIMARY KEY, w TEXT);
INSERT INTO "Odd Name" VALUES (1, 'odd');
SQL
cat > s.yaml <<'EOF'
version: 1
name: s
source:
  type: sqlite
  path: src.db
  resources:
    - table: b
      mode: full
    - tables: ["*"]
      exclude: ["tmp_*"]
sink: {type: sqlite, path: out.db, write: append}
EOF
expect_exit 0 ferry check s.yaml
for t in 'a: mode full' 'b: mode full' '"Odd Name": mode full'; do
  printf '%s\n' "$OUT" | grep -qF "  $t" || fail "check does not list $t: $OUT"
done
printf '%s\n' "$OUT" | grep -q "tmp_c" && fail "check lists the excluded tmp_c: $OUT"
expect_exit 0 ferry run s.yaml --quiet
for t in a b "Odd Name"; do
  same_table src.db out.db "$t" || fail "sqlite: table $t differs"
done
[ "$(q out.db "SELECT count(*) FROM sqlite_master WHERE name = 'tmp_c'")" = 0 ] || fail "tmp_c was copied"
pass "sqlite: tables [*] exclude [tmp_*] copies a, b and a quoted name, each equal to the source"

sed 's/\["\*"\]/["nothing_*"]/' s.yaml > none.yaml
sed -i 's/out.db/none.db/' none.yaml
expect_exit 7 ferry run none.yaml
printf '%s\n' "$OUT" | grep -q "table pattern 'nothing_\*' matches no table" || fail "no-match error: $OUT"
[ ! -e none.db ] || [ "$(q none.db "SELECT count(*) FROM sqlite_master WHERE name = 'b'")" = 0 ] \
  || fail "a run whose pattern matched nothing wrote b"
for bad in '["a.b.c"]' '["\"open"]' '[]'; do
  sed "s/\[\"\*\"\]/$bad/" s.yaml > bad.yaml
  expect_exit 2 ferry check bad.yaml
  printf '%s\n' "$OUT" | grep -q "s.yaml\|bad.yaml" || fail "a bad pattern $bad is not named with its file: $OUT"
done
pass "sqlite: a pattern matching nothing and malformed patterns are refused, naming them"

# ---- postgres ------------------------------------------------------------------------------
pg_start
pgq >/dev/null <<'SQL'
CREATE SCHEMA sales;
CREATE TABLE public.orders (id bigint PRIMARY KEY, amount numeric(12,2));
INSERT INTO public.orders SELECT g, g * 1.5 FROM generate_series(1, 20000) g;
CREATE TABLE public.users (id int PRIMARY KEY, name text);
INSERT INTO public.users SELECT g, 'u' || g FROM generate_series(1, 50) g;
CREATE TABLE public.audit_log (id int PRIMARY KEY);
CREATE TABLE public.events (id int, at date, PRIMARY KEY (id, at)) PARTITION BY RANGE (at);
CREATE TABLE public.events_2025 PARTITION OF public.events FOR VALUES FROM ('2025-01-01') TO ('2026-01-01');
CREATE TABLE public.events_2026 PARTITION OF public.events FOR VALUES FROM ('2026-01-01') TO ('2027-01-01');
INSERT INTO public.events SELECT g, DATE '2025-06-01' + (g % 400) FROM generate_series(1, 700) g;
CREATE TABLE sales."Big Deals" (id int PRIMARY KEY, note text);
INSERT INTO sales."Big Deals" VALUES (1, 'a'), (2, 'b');
CREATE TABLE sales.deals (id int PRIMARY KEY);
INSERT INTO sales.deals VALUES (7);
SQL
dest=$(pg_db dest)
export SRC_URL="$FERRY_PG_URL" DEST_URL="postgresql://ferry_admin:$PGPASSWORD@127.0.0.1:$PGPORT/$dest"
cat > p.yaml <<'EOF'
version: 1
name: p
source:
  type: postgres
  url: env:SRC_URL
  resources:
    - tables: ["public.*", "sales.\"Big Deals\""]
      exclude: ["audit_*"]
sink: {type: postgres, url: env:DEST_URL, schema: copy, write: append}
EOF
expect_exit 0 ferry check p.yaml
for t in 'orders: mode full' 'users: mode full' 'events: mode full' 'sales."Big Deals": mode full'; do
  printf '%s\n' "$OUT" | grep -qF "  $t" || fail "check does not list $t: $OUT"
done
printf '%s\n' "$OUT" | grep -qE "events_20|audit_log|sales.deals" && fail "check lists a partition, an excluded or an unmatched table: $OUT"
# largest first
first=$(printf '%s\n' "$OUT" | grep -E '^  [^ ].*: mode full' | head -n 1)
[[ $first == "  orders: "* ]] || fail "the largest table is not planned first: $first"
expect_exit 0 ferry run p.yaml --quiet
for pair in "public.orders|copy.orders" "public.users|copy.users" "public.events|copy.events" \
            'sales."Big Deals"|copy."Big Deals"'; do
  s=${pair%%|*} d=${pair#*|}
  a=$(pgq -c "SELECT count(*), md5(string_agg(t::text, ',' ORDER BY t::text)) FROM $s t")
  b=$(pgq -d "$dest" -c "SELECT count(*), md5(string_agg(t::text, ',' ORDER BY t::text)) FROM $d t")
  [ "$a" = "$b" ] || fail "postgres: $s [$a] differs from $d [$b]"
done
[ "$(pgq -d "$dest" -c "SELECT count(*) FROM copy.events")" = 700 ] || fail "the partitioned table was not read exactly once"
[ "$(pgq -d "$dest" -c "SELECT count(*) FROM pg_tables WHERE schemaname = 'copy' AND tablename LIKE 'events\_%'")" = 0 ] \
  || fail "partitions were copied as tables of their own"
pass "postgres: public.* and a quoted sales table, excluding audit_*, each equal; the partitioned events read once through its parent"

# ---- ferry copy: the same in one line ----------------------------------------------------
dest2=$(pg_db dest2)
export DEST2_URL="postgresql://ferry_admin:$PGPASSWORD@127.0.0.1:$PGPORT/$dest2"
expect_exit 0 ferry copy env:SRC_URL env:DEST2_URL --tables 'public.*' --exclude 'audit_*' \
  --schema copy --save copy.yaml --quiet
grep -q 'url: "env:SRC_URL"' copy.yaml || fail "the saved pipeline does not reference the source: $(cat copy.yaml)"
grep -q "$PGPASSWORD" copy.yaml && fail "the saved pipeline holds the password"
for t in orders users events; do
  a=$(pgq -c "SELECT count(*), md5(string_agg(t::text, ',' ORDER BY t::text)) FROM public.$t t")
  b=$(pgq -d "$dest2" -c "SELECT count(*), md5(string_agg(t::text, ',' ORDER BY t::text)) FROM copy.$t t")
  [ "$a" = "$b" ] || fail "ferry copy: $t [$a] differs from [$b]"
done
[ "$(pgq -d "$dest2" -c "SELECT count(*) FROM pg_tables WHERE schemaname = 'copy'")" = 3 ] \
  || fail "ferry copy wrote other tables: $(pgq -d "$dest2" -c "SELECT tablename FROM pg_tables WHERE schemaname = 'copy'")"
# the same command again replaces (write: replace), never doubles
pgq -c "INSERT INTO public.users VALUES (1000, 'late')"
expect_exit 0 ferry copy env:SRC_URL env:DEST2_URL --tables 'public.*' --exclude 'audit_*' \
  --schema copy --save copy.yaml --quiet
[ "$(pgq -d "$dest2" -c "SELECT count(*) FROM copy.users")" = 51 ] || fail "a second ferry copy did not replace users"
[ "$(pgq -d "$dest2" -c "SELECT count(*) FROM copy.orders")" = 20000 ] || fail "a second ferry copy doubled orders"
expect_exit 0 ferry run copy.yaml --quiet
pass "ferry copy env:SRC env:DEST --tables --exclude: each table equal, the saved pipeline runs again, re-runs replace"
expect_exit 2 ferry copy "postgresql://ferry_admin:$PGPASSWORD@127.0.0.1:$PGPORT/$PGDATABASE" env:DEST2_URL
printf '%s\n' "$OUT" | grep -q "password on the command line" || fail "a URL with a password: $OUT"
printf '%s\n' "$OUT" | grep -q "$PGPASSWORD" && fail "the refusal echoes the password"
expect_exit 2 ferry copy env:NOT_SET_ANYWHERE env:DEST2_URL
printf '%s\n' "$OUT" | grep -q "NOT_SET_ANYWHERE is not set" || fail "an unset reference: $OUT"
pass "ferry copy refuses a password on the command line (never echoed) and an unset reference"
