#!/usr/bin/env bash
# mysql sink append: LOAD DATA LOCAL INFILE from memory against multi-row INSERT statements
# (issue 18: "whichever measures faster"). One throw-away MariaDB (tests/mysql/mysql.sh); the
# sample source's `users` table (15 columns of every ferry type) of ROWS rows, written with
# `append_method: load_data` and `append_method: insert` alternately into fresh tables, best
# of REPS wall times each; every table is checked afterwards (row count, and a checksum over
# every column equal between the two methods). Prints a markdown table and writes it to
# bench/results/mysql-sink-<date>.md. Never gates CI.
#   ROWS=200000 REPS=3 FERRY_BIN=build/dev/ferry bash bench/mysql_sink.sh
set -euo pipefail
cd "$(dirname "$0")/.."
FERRY_SRC=$PWD
ROWS=${ROWS:-200000}
REPS=${REPS:-3}
FERRY_BIN=${FERRY_BIN:-$PWD/build/dev/ferry}
T=$(mktemp -d "${TMPDIR:-/tmp}/ferry-mysinkbench.XXXXXX")
chmod 755 "$T"
trap 'rm -rf "$T"' EXIT
. tests/mysql/mysql.sh
my_start
export FERRY_STATE="$T/state.db"
best() { sort -n | head -n 1; }
declare -A times
for method in load_data insert; do : > "$T/$method.times"; done
for rep in $(seq 1 "$REPS"); do
  for method in load_data insert; do
    myq -e "DROP TABLE IF EXISTS users_$method; DELETE FROM _ferry_checkpoints" 2>/dev/null || true
    cat > "$T/p.yaml" <<YAML
version: 1
name: sinkbench-$method-$rep
source:
  type: sample
  rows: $ROWS
  resources:
    - {table: users, target: users_$method, columns: [id, email, name, age, score, balance, birth_date, wake_time, last_login, uuid, avatar, profile, active, updated_at]}
sink:
  type: mysql
  url: env:FERRY_MY_WRITER_URL
  write: append
  append_method: $method
YAML
    s=$(date +%s.%N)
    "$FERRY_BIN" run "$T/p.yaml" --quiet --fresh
    e=$(date +%s.%N)
    echo "$e - $s" | bc >> "$T/$method.times"
  done
done
sum_of() {
  myq -e "SELECT COUNT(*), SUM(CRC32(CONCAT_WS(X'7c', id, CAST(email AS BINARY), CAST(name AS BINARY),
    age, score, balance, birth_date, wake_time, last_login, CAST(uuid AS BINARY), HEX(avatar),
    CAST(profile AS BINARY), active, updated_at))) FROM users_$1"
}
a=$(sum_of load_data) b=$(sum_of insert)
check="equal ($a)"
[ "$a" = "$b" ] || check="DIFFERENT: load_data $a, insert $b"
[ "${a%%$'\t'*}" = "$ROWS" ] || check="WRONG row count: $a"
ld=$(best < "$T/load_data.times") ins=$(best < "$T/insert.times")
out="bench/results/mysql-sink-$(date -u +%Y%m%d).md"
{
  echo "# mysql sink append: LOAD DATA LOCAL INFILE vs multi-row INSERT ($(date -u +%F))"
  echo
  echo "sample users (14 columns, every type but decimal text), $ROWS rows, MariaDB $(myq -e 'SELECT VERSION()'),"
  echo "$(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), binary $FERRY_BIN; best of $REPS."
  echo
  echo "| method | best wall s | rows/s |"
  echo "|---|---|---|"
  printf '| LOAD DATA LOCAL INFILE | %.2f | %.0f |\n' "$ld" "$(echo "$ROWS / $ld" | bc -l)"
  printf '| multi-row INSERT (1 MiB statements) | %.2f | %.0f |\n' "$ins" "$(echo "$ROWS / $ins" | bc -l)"
  echo
  echo "Tables written by the two methods: $check."
} | tee "$out"
