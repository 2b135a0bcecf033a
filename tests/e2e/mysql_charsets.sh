# tests/e2e/mysql_charsets.sh - multi-byte character sets in the mysql source's binlog stream
# shared: pg mysql
# (my_charset.h), against a real MariaDB 10.11 (tests/mysql/mysql.sh) into PostgreSQL: a
# column per set (gbk, big5, sjis, cp932, ujis, eucjpms, euckr, gb2312, ucs2, utf16, utf16le,
# utf32, utf8mb3) holding every character the set defines (each byte and two-byte pair the
# server converts to one character, ujis/eucjpms's three-byte sequences; every BMP code point
# and a spread of supplementary ones for the Unicode sets; MariaDB has no gb18030: that set
# is unit-tested only, tests/unit/test_my_charset.c), streamed by cdc and compared with the server's
# own conversion (MariaDB's text), with the full read of the same rows (SQLite) and with
# PostgreSQL's text. A sequence the set does not define stops the run naming table, column
# and row, nothing of it written.
. "$FERRY_SRC/tests/e2e/lib.sh"
. "$FERRY_SRC/tests/mysql/mysql.sh"
my_pg_start

SETS="gbk big5 sjis cp932 ujis eucjpms euckr gb2312 ucs2 utf16 utf16le utf32 utf8mb3"
cols="id int PRIMARY KEY"
for s in $SETS; do cols="$cols, c_$s text CHARACTER SET $s"; done
myq -e "CREATE TABLE mbcs ($cols)"
cat > cdc.yaml <<EOF
version: 1
name: mycharsets
source:
  type: mysql
  url: env:FERRY_MY_READER_URL
  resources:
    - table: mbcs
      mode: cdc
sink: {type: postgres, url: env:FERRY_PG_URL, write: merge}
EOF
expect_exit 0 ferry run cdc.yaml # the snapshot (empty): the rows below come by the stream

# ok EXPR SET : whether the bytes EXPR are exactly one character of SET for the server
ok() { printf "CHAR_LENGTH(CONVERT(CONVERT(%s USING %s) USING utf8mb4)) = 1 AND CONVERT(CONVERT(%s USING %s) USING utf8mb4) <> '?'" "$1" "$2" "$1" "$2"; }
# fill SET ID0 BYTES-EXPR FROM GROUP : rows ID0 + GROUP, each the characters of its group
fill() {
  myq -e "SET SESSION sql_mode = ''; SET SESSION group_concat_max_len = 1048576;
    INSERT INTO mbcs (id, c_$1) SELECT $2 + g, CONVERT(GROUP_CONCAT(b ORDER BY seq SEPARATOR '') USING $1)
    FROM (SELECT seq, $3 AS b, $5 AS g FROM $4) x WHERE $(ok b "$1") GROUP BY g
    ON DUPLICATE KEY UPDATE c_$1 = VALUES(c_$1)"
}
base=0
for s in gbk big5 sjis cp932 ujis eucjpms euckr gb2312; do
  fill $s $base "CHAR(seq)" seq_32_to_255 0                                    # single bytes
  fill $s $((base + 1)) "CHAR(seq DIV 256, seq MOD 256)" seq_32768_to_65535 "seq DIV 256 - 128" # pairs
  base=$((base + 1000))
done
for s in ujis eucjpms; do # 0x8f and two bytes: JIS X 0212
  fill $s 9000 "CHAR(143, 161 + seq DIV 94, 161 + seq MOD 94)" seq_0_to_8835 "seq DIV 94"
done
# Unicode sets: every BMP code point (surrogates left out) and every 331st supplementary one
u32="CHAR(seq USING utf32)"
for s in ucs2 utf16 utf16le utf32 utf8mb3; do
  fill $s 20000 "CONVERT($u32 USING $s)" "seq_32_to_65535 WHERE seq NOT BETWEEN 55296 AND 57343" "seq DIV 256"
done
for s in utf16 utf16le utf32; do
  fill $s 21000 "CONVERT(CHAR(65536 + seq * 331 USING utf32) USING $s)" seq_0_to_3167 "seq DIV 256"
done
myq -e "UPDATE mbcs SET c_utf32 = CONCAT(c_utf32, CONVERT(X'0010FFFF' USING utf32)), c_utf16 = CONCAT(c_utf16, CONVERT(X'DBFFDFFF' USING utf16)) WHERE id = 21000"
n=$(myq -e "SELECT count(*) FROM mbcs")
chars=$(myq -e "SELECT SUM($(for s in $SETS; do printf 'IFNULL(CHAR_LENGTH(c_%s), 0) + ' "$s"; done) 0) FROM mbcs")
# the log's end after the changes, as a position (file number << 32 | offset)
p0=$(myq -e "SHOW MASTER STATUS" | awk '{ n = split($1, a, "."); printf "%.0f", a[n] * 4294967296 + $2 }')
[ "$n" -gt 1000 ] && [ "$chars" -gt 200000 ] || fail "too few rows ($n) or characters ($chars) inserted"
expect_exit 0 ferry run cdc.yaml
[ "$(pgq -c 'SELECT count(*) FROM mbcs')" = "$n" ] || fail "the stream wrote $(pgq -c 'SELECT count(*) FROM mbcs') of $n rows"
# lag reporting: the stream's position and lag in the run's events and in `ferry show`; the
# run ended caught up, so its last report has the log's end as position and no lag
run=$(ferry runs --pipeline mycharsets --json | jq '.[0].id')
wm=$(ferry events "$run" --json | jq -c 'select(.type == "cursor.watermark_advanced") | .payload | if type == "string" then fromjson else . end' | tail -1)
[ "$(jq -r '"\(.lag_bytes) \(.lag_seconds) \(.position.n >= '"$p0"')"' <<<"$wm")" = "0 0 true" ] ||
  fail "the last watermark of a caught-up stream: $wm (the log's end after the changes: $p0)"
ferry show "$run" | grep -q 'cdc position .*lag .* bytes' || fail "ferry show has no cdc lag: $(ferry show "$run")"

# the same rows by the full read (the server converts them) into SQLite
sed -e 's/^name: mycharsets$/name: mycharsets_full/; s/mode: cdc/mode: full/' \
    -e "s|^sink: .*|sink: {type: sqlite, path: $PWD/full.db, write: append}|" cdc.yaml > full.yaml
expect_exit 0 ferry run full.yaml
# compared as the hex of the UTF-8 bytes (psql's text output drops U+10FFFF)
my_text=$(myq -e "SELECT CONCAT_WS('|', id $(for s in $SETS; do printf ", IFNULL(HEX(CONVERT(c_%s USING utf8mb4)), '-')" "$s"; done)) FROM mbcs ORDER BY id" | md5sum)
pg_text=$(pgq -c "SELECT concat_ws('|', id $(for s in $SETS; do printf ", coalesce(upper(encode(convert_to(c_%s, 'UTF8'), 'hex')), '-')" "$s"; done)) FROM mbcs ORDER BY id" | md5sum)
full_text=$(q full.db "SELECT id $(for s in $SETS; do printf "|| '|' || CASE WHEN c_%s IS NULL THEN '-' ELSE hex(c_%s) END" "$s" "$s"; done) FROM mbcs ORDER BY id" | md5sum)
[ "$full_text" = "$my_text" ] || fail "the full read differs from the server's text"
if [ "$pg_text" != "$my_text" ]; then
  for s in $SETS; do # name the first set that differs
    a=$(myq -e "SELECT CONCAT(id, '|', HEX(CONVERT(c_$s USING utf8mb4))) FROM mbcs WHERE c_$s IS NOT NULL ORDER BY id" | md5sum)
    b=$(pgq -c "SELECT id || '|' || upper(encode(convert_to(c_$s, 'UTF8'), 'hex')) FROM mbcs WHERE c_$s IS NOT NULL ORDER BY id" | md5sum)
    [ "$a" = "$b" ] || fail "the stream's $s differs from the server's conversion"
  done
  fail "the streamed rows differ from the server's text"
fi
pass "cdc of 13 character sets ($n rows, $chars characters): every character the sets define as the server converts it, equal to the full read and in PostgreSQL"

# a sequence the set does not define: a gbk pair of well-formed bytes that maps to no
# character (the server prints it '?'), stored by a non-strict session
pair=$(myq -e "SELECT HEX(CHAR(seq DIV 256, seq MOD 256)) FROM seq_33088_to_65278 WHERE seq MOD 256 BETWEEN 64 AND 254
  AND seq MOD 256 <> 127 AND CONVERT(CONVERT(CHAR(seq DIV 256, seq MOD 256) USING gbk) USING utf8mb4) = '?' LIMIT 1")
[ -n "$pair" ] || fail "no unmapped gbk pair found"
myq -e "SET SESSION sql_mode = ''; INSERT INTO mbcs (id, c_gbk) VALUES (99999, CONVERT(X'41${pair}41' USING gbk))"
[ "$(myq -e "SELECT HEX(c_gbk) FROM mbcs WHERE id = 99999")" = "41${pair}41" ] ||
  fail "the server did not keep the unmapped gbk bytes $pair: $(myq -e "SELECT HEX(c_gbk) FROM mbcs WHERE id = 99999")"
expect_exit 1 ferry run cdc.yaml
case $OUT in *mbcs*'column "c_gbk"'*"a byte its character set does not define"*) ;;
  *) fail "an undefined gbk sequence is not refused naming the column: $OUT" ;; esac
[ "$(pgq -c 'SELECT count(*) FROM mbcs WHERE id = 99999')" = 0 ] || fail "the undefined sequence was written"
pass "an unmapped gbk pair ($pair) stops the stream naming table, column and row, nothing written"
