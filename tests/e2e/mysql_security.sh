# tests/e2e/mysql_security.sh - the mysql source's refusals against a real MariaDB 10.11
# (tests/mysql/mysql.sh, with TLS): a missing table, a URL of the wrong scheme, a wrong
# password and a plain URL holding a password each give one clear message naming the key or
# the host and never show the (canary) password, which is in no state row either; TLS: a
# user that requires it is refused without it, served with `tls: required` and
# `tls: verify_full` (the right CA), refused with verify_full against another CA, and
# verify_full without tls_ca is a configuration error; a cdc change log onto a table that has
# one of its columns is refused naming both.
. "$FERRY_SRC/tests/e2e/lib.sh"
MY_TLS=1
. "$FERRY_SRC/tests/mysql/mysql.sh"
my_start
myq <<'SQL'
CREATE TABLE every (id int PRIMARY KEY, v varchar(10));
INSERT INTO every VALUES (1, 'a'), (2, 'b'), (3, NULL), (4, 'd');
SQL
cat > types.yaml <<EOF
version: 1
name: mytypes
source:
  type: mysql
  url: env:FERRY_MY_READER_URL
  resources:
    - table: every
      mode: full
sink:
  type: null
EOF
expect_exit 0 ferry run types.yaml

# ---- errors: missing table, bad URL, wrong password; the password never shown ----------
sed 's/- table: every/- table: no_such_table/; s/^name: mytypes/name: mymissing/' types.yaml > missing.yaml
expect_exit 7 ferry run missing.yaml
printf '%s' "$OUT" | grep -q '`ferry`.`no_such_table` not found' || fail "missing table named: $OUT"
canary="canary-S3cr3t-$RANDOM"
export BAD_URL="postgres://ferry_reader:$canary@127.0.0.1:$MY_PORT/ferry"
sed 's/FERRY_MY_READER_URL/BAD_URL/; s/^name: mytypes/name: mybadurl/' types.yaml > badurl.yaml
expect_exit 2 ferry run badurl.yaml
printf '%s' "$OUT" | grep -q 'source.url' || fail "bad url names the key: $OUT"
printf '%s' "$OUT" | grep -q 'mysql://' || fail "bad url says the expected form: $OUT"
case $OUT in *"$canary"*) fail "bad url: the password is shown: $OUT" ;; esac
export BAD_URL="mysql://ferry_reader:$canary@127.0.0.1:$MY_PORT/ferry"
expect_exit 1 ferry run badurl.yaml
printf '%s' "$OUT" | grep -q "127.0.0.1:$MY_PORT/ferry" || fail "wrong password names host and port: $OUT"
printf '%s' "$OUT" | grep -qi 'access denied' || fail "wrong password says access denied: $OUT"
case $OUT in *"$canary"*) fail "wrong password: the password is shown: $OUT" ;; esac
if [ -f "$FERRY_STATE" ] && sqlite3 "$FERRY_STATE" .dump | grep -q "$canary"; then
  fail "the password is in the state db"
fi
sed "s|url: env:BAD_URL|url: mysql://ferry_reader:$canary@127.0.0.1:$MY_PORT/ferry|" badurl.yaml > plain.yaml
expect_exit 2 ferry run plain.yaml
printf '%s' "$OUT" | grep -q 'must not hold a password' || fail "a plain url with a password is refused: $OUT"
case $OUT in *"$canary"*) fail "plain url: the password is shown: $OUT" ;; esac
pass "missing table, bad URL, wrong password, plain URL with password: one clear message each, password never shown"

# ---- TLS ------------------------------------------------------------------------------------
tls_yaml() { # NAME "KEY: VALUE" lines for the source
  cat <<EOF
version: 1
name: $1
source:
  type: mysql
  url: env:FERRY_MY_TLS_URL
$2
  resources:
    - table: every
sink:
  type: sqlite
  path: $T/$1.db
  write: append
EOF
}
tls_yaml mytls0 "  tls: disabled" > tls0.yaml
expect_exit 1 ferry run tls0.yaml
printf '%s' "$OUT" | grep -q 'Access denied' || fail "a REQUIRE SSL user without TLS is refused: $OUT"
tls_yaml mytls1 "  tls: required" > tls1.yaml
expect_exit 0 ferry run tls1.yaml
[ "$(q mytls1.db 'SELECT count(*) FROM every')" = 4 ] || fail "tls: required read the table"
tls_yaml mytls2 "  tls: verify_full
  tls_ca: $MY_TLS_CA" > tls2.yaml
expect_exit 0 ferry run tls2.yaml
[ "$(q mytls2.db 'SELECT count(*) FROM every')" = 4 ] || fail "tls: verify_full read the table"
tls_yaml mytls3 "  tls: verify_full
  tls_ca: $MY_TLS_OTHER_CA" > tls3.yaml
expect_exit 1 ferry run tls3.yaml
printf '%s' "$OUT" | grep -qi 'certificate' || fail "verify_full against another CA names the certificate: $OUT"
tls_yaml mytls4 "  tls: verify_full" > tls4.yaml
expect_exit 2 ferry run tls4.yaml
printf '%s' "$OUT" | grep -q 'needs tls_ca' || fail "verify_full without tls_ca: $OUT"
pass "TLS: required and verify_full (right CA) read; no TLS, another CA, a missing tls_ca refused clearly"

# ---- mode: cdc as a change log (write: append): a table that already has one of the log's
# columns is refused naming table and column (e2e/mysql_cdc_log tests the log itself) -----
myq -e "CREATE TABLE haslog (id int PRIMARY KEY, _ferry_seq int); INSERT INTO haslog VALUES (1, 1)"
sed 's/- table: every/- table: haslog/; s/      mode: full/      mode: cdc/; s/^name: mytypes/name: myhaslog/' types.yaml > haslog.yaml
expect_exit 2 ferry run haslog.yaml
printf '%s' "$OUT" | grep -q 'table "haslog" already has a column _ferry_seq, which the cdc change log adds' ||
  fail "a change log onto a table with _ferry_seq: $OUT"
sed 's/      mode: full/      mode: cdc/; s/^name: mytypes/name: mycdc/' types.yaml > cdc.yaml
expect_exit 0 ferry run cdc.yaml
pass "mode: cdc as a change log: runs; refused clearly onto a table that has one of its columns"
