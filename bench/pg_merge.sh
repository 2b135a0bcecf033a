# bench/pg_merge.sh - the merge-with-deletes part of bench/pg.sh (sourced by bench/pg_upsert.sh,
# not run; issue 22). A change backlog of one source transaction over a keyed table of
# UPSERT_ROWS rows (every key already in the destination): a quarter of the keys updated,
# a quarter deleted, a quarter updated twice, UPSERT_ROWS/4 new keys inserted (1.25 ×
# UPSERT_ROWS changes). Per round, interleaved:
#   anchor INSERT: the changes (src.public.chg: the row images with op and seq, made by SQL
#     to equal the transaction's) COPY binary into a temporary table of one dst
#     transaction, then DELETE … USING the keys whose last change is a delete and INSERT …
#     SELECT … ON CONFLICT (id) DO UPDATE of the last image of the others (ferry's SQL
#     before PostgreSQL 15), both from `DISTINCT ON (id) … ORDER BY id, seq DESC`;
#   anchor MERGE: the same, one MERGE (WHEN MATCHED AND op = 'd' THEN DELETE …);
#   ferry merge (cdc): after an untimed snapshot run and the source transaction, the timed
#     `ferry run` that replays the backlog, with its MERGE path and with FERRY_PG_NO_MERGE=1;
#   ferry → null sink: the same replay into the null sink (its own pipeline and slot), which
#     writes nothing: the decoding floor (the walsender decoding the transaction, ferry
#     reading and digesting the changes) that a replay pays and the anchors do not.
# ferry also decodes the WAL (the walsender's work is in its wall time, not the anchors').
# pgoutput (protocol 1) sends a transaction only once the walsender has decoded it to its
# commit, so for one large transaction that decoding comes before the first change arrives.
# Every destination is verified against the source after the transaction.

K=$UPSERT_ROWS
CHG_SQL=$(bench_merge_txn public.orders_cdc public.orders_up "$K")
# The same changes as row images: seq orders them as the transaction made them.
qs >/dev/null <<SQL
DROP TABLE IF EXISTS public.orders_cdc, public.cdc_after, public.chg;
CREATE TABLE public.cdc_after AS SELECT * FROM public.orders_up;
ALTER TABLE public.cdc_after ADD PRIMARY KEY (id);
$(bench_merge_txn public.cdc_after public.orders_up "$K")
CREATE TABLE public.chg AS
$(bench_merge_images public.orders_up "$K");
VACUUM ANALYZE public.cdc_after, public.chg;
SQL
# shellcheck disable=SC2059
cdc_digest=$(qs -c "$(printf "$DIGEST_SQL" public.cdc_after)")
n_chg=$(qs -c "SELECT count(*) FROM public.chg")

LAST="(SELECT DISTINCT ON (id) * FROM s ORDER BY id, seq DESC) l"
ANCHOR_CDC_INSERT="DELETE FROM cdc.orders_cdc d USING $LAST WHERE l.op = 'd' AND d.id = l.id;
INSERT INTO cdc.orders_cdc SELECT id, $(echo "$UCOLS" | tr ' ' ',' | sed 's/,/, /g') FROM $LAST
  WHERE l.op <> 'd' ON CONFLICT (id) DO UPDATE SET $(set_list EXCLUDED)"
ANCHOR_CDC_MERGE="MERGE INTO cdc.orders_cdc d USING $LAST ON d.id = l.id
  WHEN MATCHED AND l.op = 'd' THEN DELETE WHEN MATCHED THEN UPDATE SET $(set_list l)
  WHEN NOT MATCHED AND l.op <> 'd' THEN INSERT VALUES (l.id, $(for c in $UCOLS; do printf 'l.%s, ' "$c"; done | sed 's/, $//'))"

# prep_cdc_anchor: dst.cdc.orders_cdc = the source before the changes, vacuumed, checkpointed.
prep_cdc_anchor() {
  qd -c "DROP SCHEMA IF EXISTS cdc CASCADE" -c "CREATE SCHEMA cdc" \
     -c "CREATE TABLE cdc.orders_cdc ($COLS, PRIMARY KEY (id))" >/dev/null
  psql -qX -v ON_ERROR_STOP=1 -d src -c "COPY public.orders_up TO STDOUT (FORMAT binary)" |
    psql -qX -v ON_ERROR_STOP=1 -d dst -c "COPY cdc.orders_cdc FROM STDIN (FORMAT binary)" >/dev/null
  qd -c "VACUUM ANALYZE cdc.orders_cdc" -c "CHECKPOINT" >/dev/null
}

one_cdc_anchor() { # one_cdc_anchor SQL
  local t0 t1
  t0=$(now)
  if ! /usr/bin/time -f '%M %U %S' -o "$W/rss_out" psql -qX -v ON_ERROR_STOP=1 -d src \
         -c "COPY public.chg TO STDOUT (FORMAT binary)" 2>"$W/err_out" |
       /usr/bin/time -f '%M %U %S' -o "$W/rss_in" psql -qX -1 -v ON_ERROR_STOP=1 -d dst \
         -c "CREATE TEMPORARY TABLE s (LIKE cdc.orders_cdc, op text, seq bigint) ON COMMIT DROP" \
         -c "COPY s FROM STDIN (FORMAT binary)" -c "$1" >/dev/null 2>"$W/err_in"; then
    echo "FAIL $(tail -n1 "$W/err_out" "$W/err_in" | tr '\n' ' ')"; return
  fi
  t1=$(now)
  echo "$(echo "$t1 - $t0" | bc) $(tm "$W/rss_out") $(tm "$W/rss_in")"
}

cat > "$W/cdc.yaml" <<YAML
version: 1
name: bench_merge_cdc
source:
  type: postgres
  url: env:BENCH_SRC_URL
  resources:
    - {table: public.orders_cdc, mode: cdc}
sink:
  type: postgres
  url: env:BENCH_DST_URL
  schema: cdc
  write: merge
YAML

# prep_cdc_ferry: a new source table and slot, ferry's snapshot of it in dst.cdc (untimed),
# then the source transaction: the backlog the timed run replays.
prep_cdc_ferry() {
  "$FERRY" cdc drop "$W/cdc.yaml" --state "$W/cdc-state.db" >/dev/null 2>&1 || true
  rm -f "$W"/cdc-state.db*
  qd -c "DROP SCHEMA IF EXISTS cdc CASCADE" -c "DROP SCHEMA IF EXISTS _ferry CASCADE" >/dev/null
  qs -c "DROP TABLE IF EXISTS public.orders_cdc" \
     -c "CREATE TABLE public.orders_cdc AS SELECT * FROM public.orders_up" \
     -c "ALTER TABLE public.orders_cdc ADD PRIMARY KEY (id)" >/dev/null
  "$FERRY" run "$W/cdc.yaml" --quiet --state "$W/cdc-state.db" >/dev/null 2>"$W/err_snap" ||
    { echo "snapshot run failed: $(tail -n2 "$W/err_snap")" >&2; return 1; }
  qs -1 -c "$CHG_SQL" >/dev/null
  qd -c "VACUUM ANALYZE cdc.orders_cdc" -c "CHECKPOINT" >/dev/null
}

sed -e 's/^name: bench_merge_cdc$/name: bench_merge_null/' -e '/^sink:/,$d' "$W/cdc.yaml" > "$W/null.yaml"
printf 'sink: {type: "null", write: merge}\n' >> "$W/null.yaml"

# prep_cdc_null: as prep_cdc_ferry, for the null-sink pipeline (its own slot and state).
prep_cdc_null() {
  "$FERRY" cdc drop "$W/null.yaml" --state "$W/null-state.db" >/dev/null 2>&1 || true
  rm -f "$W"/null-state.db*
  qs -c "DROP TABLE IF EXISTS public.orders_cdc" \
     -c "CREATE TABLE public.orders_cdc AS SELECT * FROM public.orders_up" \
     -c "ALTER TABLE public.orders_cdc ADD PRIMARY KEY (id)" >/dev/null
  "$FERRY" run "$W/null.yaml" --quiet --state "$W/null-state.db" >/dev/null 2>"$W/err_snap" ||
    { echo "null snapshot run failed: $(tail -n2 "$W/err_snap")" >&2; return 1; }
  qs -1 -c "$CHG_SQL" >/dev/null
  qd -c "CHECKPOINT" >/dev/null
}

# one_cdc_null: the timed replay into the null sink; its count must be every change.
one_cdc_null() {
  local t0 t1 rows
  t0=$(now)
  if ! /usr/bin/time -f '%M %U %S' -o "$W/rss_ferry" "$FERRY" run "$W/null.yaml" --json \
         --state "$W/null-state.db" >"$W/ferry.json" 2>"$W/err_ferry"; then
    echo "FAIL $(jq -r '.error.message // empty' "$W/ferry.json" 2>/dev/null) $(tail -n1 "$W/err_ferry")"; return
  fi
  t1=$(now)
  rows=$(jq -r .rows "$W/ferry.json")
  [ "$rows" = "$n_chg" ] || { echo "FAIL ferry reported $rows rows, not the $n_chg changes"; return; }
  echo "$(echo "$t1 - $t0" | bc) $(tm "$W/rss_ferry")"
}

one_cdc_ferry() { # one_cdc_ferry [no_merge]
  local t0 t1 rows
  t0=$(now)
  if ! FERRY_PG_NO_MERGE=${1:-0} /usr/bin/time -f '%M %U %S' -o "$W/rss_ferry" "$FERRY" run \
         "$W/cdc.yaml" --json --state "$W/cdc-state.db" >"$W/ferry.json" 2>"$W/err_ferry"; then
    echo "FAIL $(jq -r '.error.message // empty' "$W/ferry.json" 2>/dev/null) $(tail -n1 "$W/err_ferry")"; return
  fi
  t1=$(now)
  rows=$(jq -r .rows "$W/ferry.json")
  [ "$rows" = "$n_chg" ] || { echo "FAIL ferry reported $rows rows, not the $n_chg changes"; return; }
  echo "$(echo "$t1 - $t0" | bc) $(tm "$W/rss_ferry")"
}

verify_cdc() {
  local got
  # shellcheck disable=SC2059
  got=$(qd -c "$(printf "$DIGEST_SQL" cdc.orders_cdc)" 2>&1) || got="query failed: $got"
  if [ "$got" = "$cdc_digest" ]; then echo ok; else echo "WRONG (count+md5 $got, source $cdc_digest)"; fi
}

# measure_cdc KEY PREP RUN...: like measure_up, verifying cdc.orders_cdc.
measure_cdc() {
  local key=$1 prep=$2 line v; shift 2
  $prep || { NF[$key]=$((${NF[$key]:-0} + 1)); FM[$key]=${FM[$key]:-FAIL preparation}; return 0; }
  LOADS="$LOADS $(cut -d' ' -f1 /proc/loadavg)"
  line=$("$@")
  case $line in
    FAIL*) NF[$key]=$((${NF[$key]:-0} + 1)); FM[$key]=${FM[$key]:-$line}; return 0 ;;
  esac
  if [ "$prep" = prep_cdc_null ]; then v="n/a (null sink; its count checked)"
  else
    v=$(verify_cdc)
    [ "$v" = ok ] || { NF[$key]=$((${NF[$key]:-0} + 1)); FM[$key]=${FM[$key]:-FAIL $v}; }
  fi
  UV[$key]=$v
  if [ -z "${R[$key]:-}" ] || awk -v a="${line%% *}" -v c="${R[$key]%% *}" 'BEGIN{exit !(a<c)}'
  then R[$key]=$line; fi
}

for round in $(seq 1 "$REPS"); do
  echo "merge with deletes round $round/$REPS: anchor DELETE + INSERT … ON CONFLICT, anchor MERGE, ferry (MERGE), ferry (ON CONFLICT), ferry -> null" >&2
  measure_cdc ai_cdc prep_cdc_anchor one_cdc_anchor "$ANCHOR_CDC_INSERT"
  measure_cdc am_cdc prep_cdc_anchor one_cdc_anchor "$ANCHOR_CDC_MERGE"
  measure_cdc fm_cdc prep_cdc_ferry one_cdc_ferry 0
  measure_cdc fo_cdc prep_cdc_ferry one_cdc_ferry 1
  measure_cdc fn_cdc prep_cdc_null one_cdc_null
done
"$FERRY" cdc drop "$W/cdc.yaml" --state "$W/cdc-state.db" >/dev/null 2>&1 || true
"$FERRY" cdc drop "$W/null.yaml" --state "$W/null-state.db" >/dev/null 2>&1 || true

merge_report() {
  echo "## Merge with deletes: a cdc backlog ($n_chg changes over $UPSERT_ROWS keys)"
  echo
  echo "One source transaction over \`src.public.orders_cdc\` (the $UPSERT_ROWS rows above, every key"
  echo "already in the destination): a quarter of the keys updated, a quarter deleted, a quarter updated"
  echo "twice, $((K / 4)) new keys inserted. Anchors: the same changes as row images with op and seq"
  echo "(\`src.public.chg\`) through \`psql COPY binary | psql -1\` into a temporary table, then ferry's"
  echo "pre-15 SQL by hand (DELETE … USING + INSERT … ON CONFLICT, from the last image per key) or one"
  echo "MERGE. ferry: \`mode: cdc\`, \`write: merge\`, the timed run replays the backlog after an untimed"
  echo "snapshot run; its wall time includes the server decoding the WAL, which the anchors do not do."
  echo "ferry → null: the same replay into the null sink (its own pipeline and slot, nothing written),"
  echo "the decoding floor; pgoutput sends a transaction only once it is decoded to its commit."
  echo "Interleaved, best of $REPS; every destination verified equal to the source after the changes."
  echo
  echo "| run | wall s | changes/s | client peak RSS MiB | client CPU s | × INSERT anchor | verified |"
  echo "|---|---|---|---|---|---|---|"
  UPSERT_ROWS=$n_chg urow "anchor DELETE + INSERT … ON CONFLICT" ai_cdc ai_cdc
  UPSERT_ROWS=$n_chg urow "anchor MERGE" am_cdc ai_cdc
  UPSERT_ROWS=$n_chg urow "ferry merge, MERGE (PostgreSQL 15 path)" fm_cdc ai_cdc
  UPSERT_ROWS=$n_chg urow "ferry merge, FERRY_PG_NO_MERGE=1 (pre-15 SQL)" fo_cdc ai_cdc
  UPSERT_ROWS=$n_chg urow "ferry → null sink (decoding floor: no destination)" fn_cdc ai_cdc
  echo
}
