# bench/pg_upsert.sh - the upsert part of bench/pg.sh (sourced by it, not run; issue 22).
# Source: src.public.orders_up, the first UPSERT_ROWS rows of src.public.orders, keyed.
# Destination: dst.up.orders_up (primary key on id), prepared before each run (untimed) with
# one key mix: new (empty), existing (every key, status 'stale' so that the update shows),
# half (the even keys, 'stale'). Per mix and round, interleaved: the INSERT … ON CONFLICT
# anchor, the MERGE anchor, ferry write: upsert, and with UPSERT_OLD=1 ferry with
# FERRY_PG_NO_MERGE=1 (its SQL before PostgreSQL 15; the batches of a full read hold inserts
# only, which take INSERT … ON CONFLICT on either path). UPSERT_AT_COMMIT=1 adds ferry with
# `durability: at_commit` (one destination commit); UPSERT_AB=BINARY adds the same ferry run
# with another binary (an A/B in the same rounds; UPSERT_AB_LABEL names it). Then the
# merge-with-deletes case of bench/pg_merge.sh (MERGE_CDC=0 skips it). Defines upsert_report
# for the results file. MIXES="half" (default "new existing half") measures only those mixes;
# the report lists every round's wall time per run after the table, marked `*` when an
# autovacuum or autoanalyze of the destination table ended after the run began (read after
# the check that follows each run: per-batch commits let autovacuum start within a run, one
# transaction defers it past the run). UPSERT_NOAV=1 turns autovacuum off on that table.
# UPSERT_BATCHED=1 adds the INSERT anchor committed per batch (bench/batch_pipe.c, built by
# the bench preset): the source read in key order (as ferry's per-batch read), COPYed into an
# `ON COMMIT DELETE ROWS` temporary table, and every UPSERT_BATCH_ROWS rows (default 21645,
# what ferry's default 2 MiB batches hold of these rows) the anchor's INSERT, a position row
# and COMMIT: the floor of a key-resumable per-batch upsert, with no client work.

UCOLS="customer_id status amount quantity discount paid note created_at updated_at"
qs -c "DROP TABLE IF EXISTS public.orders_up" \
   -c "CREATE TABLE public.orders_up AS SELECT * FROM public.orders WHERE id <= $UPSERT_ROWS" \
   -c "ALTER TABLE public.orders_up ADD PRIMARY KEY (id)" -c "VACUUM ANALYZE public.orders_up"
qd -c "DROP SCHEMA IF EXISTS up CASCADE" -c "CREATE SCHEMA up" \
   -c "CREATE TABLE up.orders_up ($COLS, PRIMARY KEY (id))"
# shellcheck disable=SC2059
up_digest=$(qs -c "$(printf "$DIGEST_SQL" public.orders_up)")

# prep_mix MIX: the destination as the mix wants it, vacuumed, checkpointed, no _ferry state.
prep_mix() {
  local where
  case $1 in new) where=false ;; existing) where=true ;; half) where="id % 2 = 0" ;; esac
  qd -c "TRUNCATE up.orders_up" -c "DROP SCHEMA IF EXISTS _ferry CASCADE" >/dev/null
  psql -qX -v ON_ERROR_STOP=1 -d src -c "COPY (SELECT id, customer_id, 'stale'::text, amount,
      quantity, discount, paid, note, created_at, updated_at FROM public.orders_up WHERE $where)
      TO STDOUT (FORMAT binary)" |
    psql -qX -v ON_ERROR_STOP=1 -d dst -c "COPY up.orders_up FROM STDIN (FORMAT binary)" >/dev/null
  qd -c "VACUUM ANALYZE up.orders_up" -c "CHECKPOINT" >/dev/null
  [ "${UPSERT_NOAV:-0}" = 1 ] && qd -c "ALTER TABLE up.orders_up SET (autovacuum_enabled = off)" >/dev/null
  return 0
}

# autovac_since T: `*` when an autovacuum or autoanalyze of the destination ended at or after T.
autovac_since() {
  [ "$(qd -c "SELECT count(*) FROM pg_stat_user_tables WHERE relid = 'up.orders_up'::regclass
        AND greatest(last_autovacuum, last_autoanalyze) >= '$1'")" = 1 ] && echo '*'
  return 0
}

set_list() { local c out=""; for c in $UCOLS; do out="$out${out:+, }$c = $1.$c"; done; echo "$out"; }
ANCHOR_INSERT="INSERT INTO up.orders_up SELECT * FROM s ON CONFLICT (id) DO UPDATE SET $(set_list EXCLUDED)"
ANCHOR_MERGE="MERGE INTO up.orders_up d USING s ON d.id = s.id WHEN MATCHED THEN UPDATE SET $(set_list s) WHEN NOT MATCHED THEN INSERT VALUES (s.id, $(for c in $UCOLS; do printf 's.%s, ' "$c"; done | sed 's/, $//'))"

# one_ferry_old FILE ROWS: one_ferry on ferry's SQL before PostgreSQL 15 (INSERT … ON CONFLICT).
one_ferry_old() {
  local line
  export FERRY_PG_NO_MERGE=1
  line=$(one_ferry "$@")
  unset FERRY_PG_NO_MERGE
  echo "$line"
}

# one_ferry_b FILE ROWS: one_ferry with the binary UPSERT_AB.
one_ferry_b() {
  FERRY=$UPSERT_AB one_ferry "$@"
}

# one_anchor SQL: COPY binary from src into a temporary table of one dst transaction, then SQL.
one_anchor() {
  local t0 t1
  t0=$(now)
  if ! /usr/bin/time -f '%M %U %S' -o "$W/rss_out" psql -qX -v ON_ERROR_STOP=1 -d src \
         -c "COPY public.orders_up TO STDOUT (FORMAT binary)" 2>"$W/err_out" |
       /usr/bin/time -f '%M %U %S' -o "$W/rss_in" psql -qX -1 -v ON_ERROR_STOP=1 -d dst \
         -c "CREATE TEMPORARY TABLE s (LIKE up.orders_up) ON COMMIT DROP" \
         -c "COPY s FROM STDIN (FORMAT binary)" -c "$1" >/dev/null 2>"$W/err_in"; then
    echo "FAIL $(tail -n1 "$W/err_out" "$W/err_in" | tr '\n' ' ')"; return
  fi
  t1=$(now)
  echo "$(echo "$t1 - $t0" | bc) $(tm "$W/rss_out") $(tm "$W/rss_in")"
}

# one_batched SQL: the anchor's SQL committed per batch (UPSERT_BATCHED above).
one_batched() {
  local t0 t1
  t0=$(now)
  if ! /usr/bin/time -f '%M %U %S' -o "$W/rss_bp" "$BATCH_PIPE" "$BENCH_SRC_URL" "$BENCH_DST_URL" \
         "COPY (SELECT * FROM public.orders_up ORDER BY id) TO STDOUT (FORMAT binary)" \
         "COPY s FROM STDIN (FORMAT binary)" "${UPSERT_BATCH_ROWS:-21645}" \
         "$1; INSERT INTO public.bpipe_position VALUES (1, 1) ON CONFLICT (id) DO UPDATE SET batches = bpipe_position.batches + 1" \
         "CREATE TABLE IF NOT EXISTS public.bpipe_position (id int PRIMARY KEY, batches bigint NOT NULL); CREATE TEMPORARY TABLE s (LIKE up.orders_up) ON COMMIT DELETE ROWS" \
         >/dev/null 2>"$W/err_bp"; then
    echo "FAIL $(tail -n1 "$W/err_bp")"; return
  fi
  t1=$(now)
  echo "$(echo "$t1 - $t0" | bc) $(tm "$W/rss_bp")"
}

verify_up() {
  local got
  # shellcheck disable=SC2059
  got=$(qd -c "$(printf "$DIGEST_SQL" up.orders_up)" 2>&1) || got="query failed: $got"
  if [ "$got" = "$up_digest" ]; then echo ok; else echo "WRONG (count+md5 $got, source $up_digest)"; fi
}

# measure_up KEY MIX RUN...: like measure (pg.sh), verifying up.orders_up after every run.
declare -A UV ALLT # ALLT: every round's wall s per key
measure_up() {
  local key=$1 mix=$2 line v t0; shift 2
  prep_mix "$mix"
  LOADS="$LOADS $(cut -d' ' -f1 /proc/loadavg)"
  t0=$(qd -c "SELECT now()")
  line=$("$@")
  case $line in
    FAIL*) NF[$key]=$((${NF[$key]:-0} + 1)); FM[$key]=${FM[$key]:-$line}; return 0 ;;
  esac
  v=$(verify_up)
  [ "$v" = ok ] || { NF[$key]=$((${NF[$key]:-0} + 1)); FM[$key]=${FM[$key]:-FAIL $v}; }
  UV[$key]=$v
  ALLT[$key]="${ALLT[$key]:-} ${line%% *}$(autovac_since "$t0")"
  if [ -z "${R[$key]:-}" ] || awk -v a="${line%% *}" -v c="${R[$key]%% *}" 'BEGIN{exit !(a<c)}'
  then R[$key]=$line; fi
}

ferry_yaml "$W/upsert_mix.yaml" bench_upsert_mix upsert up 1 per_apply public.orders_up
ferry_yaml "$W/upsert_mix_ac.yaml" bench_upsert_mix upsert up 1 at_commit public.orders_up
MIXES=${MIXES:-new existing half}
for round in $(seq 1 "$REPS"); do
  for mix in $MIXES; do
    echo "upsert round $round/$REPS, mix $mix: anchor INSERT … ON CONFLICT, anchor MERGE, ferry upsert" >&2
    measure_up "ai_$mix" "$mix" one_anchor "$ANCHOR_INSERT"
    measure_up "am_$mix" "$mix" one_anchor "$ANCHOR_MERGE"
    [ "${UPSERT_BATCHED:-0}" = 1 ] && measure_up "bi_$mix" "$mix" one_batched "$ANCHOR_INSERT"
    measure_up "fu_$mix" "$mix" one_ferry "$W/upsert_mix.yaml" "$UPSERT_ROWS"
    [ "${UPSERT_OLD:-0}" = 1 ] && measure_up "fo_$mix" "$mix" one_ferry_old "$W/upsert_mix.yaml" "$UPSERT_ROWS"
    [ "${UPSERT_AT_COMMIT:-0}" = 1 ] && measure_up "fc_$mix" "$mix" one_ferry "$W/upsert_mix_ac.yaml" "$UPSERT_ROWS"
    [ -n "${UPSERT_AB:-}" ] && measure_up "fb_$mix" "$mix" one_ferry_b "$W/upsert_mix.yaml" "$UPSERT_ROWS"
  done
done
[ "${MERGE_CDC:-1}" = 1 ] && . "$FERRY_SRC/bench/pg_merge.sh"

if [ "$UPSERT_PROFILE" = 1 ]; then
  # The ferry process's own samples only: on a shared machine `perf record -a` also samples
  # other users' ferry and postgres processes under the same command names.
  # Before (FERRY_PG_NO_MERGE=1: INSERT … ON CONFLICT) and after (MERGE).
  for no_merge in 1 0; do
    echo "profile: perf record -g of one ferry upsert run (half mix, FERRY_PG_NO_MERGE=$no_merge)" >&2
    prep_mix half
    rm -f "$W"/state.db*
    FERRY_PG_NO_MERGE=$no_merge perf record -q -g -o "$W/perf.up" -- "$FERRY" run \
      "$W/upsert_mix.yaml" --quiet --fresh --state "$W/state.db" >/dev/null 2>"$W/perf.err" || true
    perf report -i "$W/perf.up" --no-children --sort dso,symbol --stdio 2>/dev/null |
      grep -E '^ +[0-9.]+%' | head -n 20 | cut -c1-110 > "$W/perf.up.ferry.$no_merge" || true
  done
fi

# urow LABEL KEY ANCHOR_KEY: a table row for the upsert part.
urow() {
  local res ver a
  if [ -n "${R[$2]:-}" ]; then res=${R[$2]}; else res=${FM[$2]:-FAIL no run}; fi
  ver=${UV[$2]:-not checked}
  [ "${NF[$2]:-0}" -gt 0 ] && ver="$ver; FAILED ${NF[$2]} of $REPS runs: ${FM[$2]#FAIL }"
  case $res in FAIL*) printf '| %s | failed | | | | | %s |\n' "$1" "${res#FAIL }"; return ;; esac
  a=${R[$3]:-x}
  set -- "$1" $res
  awk -v l="$1" -v s="$2" -v k1="$3" -v c1="$4" -v k2="${5:-}" -v c2="${6:-}" -v r="$UPSERT_ROWS" \
      -v p="${a%% *}" -v v="$ver" 'BEGIN{
    rss = (k2 == "") ? sprintf("%.1f", k1/1024) : sprintf("%.1f + %.1f", k1/1024, k2/1024);
    cpu = (k2 == "") ? sprintf("%.2f", c1) : sprintf("%.2f + %.2f", c1, c2);
    ratio = (p ~ /^[0-9.]+$/) ? sprintf("%.2f×", s/p) : "n/a";
    printf "| %s | %.2f | %.0f | %s | %s | %s | %s |\n", l, s, r/s, rss, cpu, ratio, v }'
}

upsert_report() {
  local mix
  echo "## Upsert at the staging limit ($UPSERT_ROWS rows)"
  echo
  echo "Source: \`src.public.orders_up\`, the first $UPSERT_ROWS rows of the table above, keyed. Destination:"
  echo "\`dst.up.orders_up\` (primary key on id), prepared before every run (untimed: TRUNCATE, a COPY"
  echo "pipe of the mix's keys with status 'stale', VACUUM ANALYZE, CHECKPOINT): **new** = empty,"
  echo "**existing** = every key, **half** = the even keys. Anchor = the staging-table way by hand, one"
  echo "transaction: \`psql COPY … TO STDOUT (FORMAT binary) | psql -1\` with \`CREATE TEMPORARY TABLE s"
  echo "(LIKE …)\`, \`COPY s FROM STDIN (FORMAT binary)\`, then \`INSERT INTO … SELECT * FROM s ON CONFLICT"
  echo "(id) DO UPDATE SET\` every other column (or the same with \`MERGE\`). ferry: \`write: upsert\`,"
  echo "default settings (per-batch transactions with the checkpoint, integrity digest on). Interleaved"
  echo "per mix (INSERT anchor, MERGE anchor, ferry), best of $REPS; every run's destination is verified"
  echo "(count + md5 over the rows in key order equal the source's)."
  echo
  echo "| run | wall s | rows/s | client peak RSS MiB | client CPU s | × INSERT anchor | verified |"
  echo "|---|---|---|---|---|---|---|"
  for mix in $MIXES; do
    urow "$mix: anchor INSERT … ON CONFLICT" "ai_$mix" "ai_$mix"
    urow "$mix: anchor MERGE" "am_$mix" "ai_$mix"
    [ "${UPSERT_BATCHED:-0}" = 1 ] && urow "$mix: anchor INSERT … ON CONFLICT per batch of ${UPSERT_BATCH_ROWS:-21645} rows, key order" "bi_$mix" "ai_$mix"
    urow "$mix: ferry upsert" "fu_$mix" "ai_$mix"
    [ "${UPSERT_OLD:-0}" = 1 ] && urow "$mix: ferry upsert, FERRY_PG_NO_MERGE=1" "fo_$mix" "ai_$mix"
    [ "${UPSERT_AT_COMMIT:-0}" = 1 ] && urow "$mix: ferry upsert, durability: at_commit" "fc_$mix" "ai_$mix"
    [ -n "${UPSERT_AB:-}" ] && urow "$mix: ferry upsert, ${UPSERT_AB_LABEL:-$UPSERT_AB}" "fb_$mix" "ai_$mix"
  done
  echo
  echo "Every round, wall s (in round order):"
  for mix in $MIXES; do
    for k in ai am bi fu fo fc fb; do
      [ -n "${ALLT[${k}_$mix]:-}" ] && echo "- ${k}_$mix:${ALLT[${k}_$mix]}"
    done
  done
  echo "(ai: INSERT anchor, am: MERGE anchor, bi: INSERT anchor per batch, fu: ferry upsert, fo: FERRY_PG_NO_MERGE=1, fc: at_commit, fb: UPSERT_AB;"
  echo "\* an autovacuum or autoanalyze of the destination table ended after the run began$([ "${UPSERT_NOAV:-0}" = 1 ] && echo "; autovacuum was off on it (UPSERT_NOAV=1)"))"
  for no_merge in 1 0; do
    [ -s "$W/perf.up.ferry.$no_merge" ] || continue
    echo
    echo "### perf record -g of one ferry upsert run (half mix, FERRY_PG_NO_MERGE=$no_merge): ferry's top self symbols"
    echo
    echo '```'; cat "$W/perf.up.ferry.$no_merge"; echo '```'
  done
  echo
  [ "${MERGE_CDC:-1}" = 1 ] && merge_report
  echo
}
