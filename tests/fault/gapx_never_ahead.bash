# tests/fault/gapx_never_ahead.bash - sourced (not a test) by gapx_never_ahead_local.sh,
# gapx_never_ahead_lake.sh and gapx_never_ahead_serve.sh: checkpoint_never_ahead for the
# sqlite (per_apply and at_commit), files (jsonl, csv, parquet), s3 (jsonl) and iceberg sinks.
# After a crash (failpoint `crash` = _exit, like kill -9; or a real SIGKILL at a seeded random
# moment) the state file's saved checkpoints {"shard":S,"key":[K]} are read (sqlite3) and the
# destination's durable content by a reader ferry did not write (sqlite3; jq / Python's csv /
# DuckDB over the parts the committed manifests list; the signed S3 client over the
# manifests' objects; icebird over the current snapshot): every checkpoint must be covered,
# i.e. all K-lo+1 ids of shard S up to K present (the sample's ids are contiguous). Then the
# re-run completes and every id is there; duplicates only where docs/guarantees.md allows them
# (across attempts of the publishing sinks files and s3). Needs lib.sh sourced first; s3 needs
# s3_start lake (its bucket $S3_BUCKET: `lake`, or a fresh one on the shared front). SEED
# replays the kill moments. never_ahead_kinds runs `ferry run`; never_ahead_serve (needs
# tests/serve/lib.sh) the same crashes under `ferry serve`.
DUCK="$FERRY_SRC/tests/tools/duckdb_exec.mjs"
READ="$FERRY_SRC/tests/tools/read_iceberg.mjs"
SEED=${SEED:-${FERRY_SEED:-$RANDOM}}
echo "seed $SEED (SEED=$SEED replays it)"
RANDOM=$SEED
ROWS=${ROWS:-6000}
export S3_KEY=S3RVER S3_SECRET=S3RVER

sink_yaml() { # KIND DEST
  case $1 in
    sqlite) echo "{type: sqlite, path: $T/$2.db, durability: per_apply}" ;;
    sqlite_at) echo "{type: sqlite, path: $T/$2.db, durability: at_commit}" ;;
    jsonl | csv | parquet) echo "{type: files, path: $T/$2, format: $1}" ;;
    s3) echo "{type: s3, bucket: $S3_BUCKET, prefix: $2, endpoint: \"$S3_ENDPOINT\", path_style: true, access_key_id: env:S3_KEY, secret_access_key: env:S3_SECRET, format: jsonl}" ;;
    iceberg) echo "{type: iceberg, warehouse: $T/$2, namespace: db}" ;;
  esac
}

pipeline() { # FILE NAME KIND DEST
  cat > "$1" <<EOF
version: 1
name: $2
source: {type: sample, rows: $ROWS, seed: 7, shards: 3, parallelism: 2, resources: [{table: orders, mode: full}, {table: users, mode: full}]}
sink: $(sink_yaml "$3" "$4")
batch: {rows: 400}
EOF
}

# read_dest KIND DEST: the ids of both tables the destination made durable (what a reader
# would trust), read in one pass of each reader (a node process costs ~0.5 s): ids.T.txt
# sorted and distinct, all.T.txt sorted with duplicates, for T in orders and users.
read_dest() {
  local kind=$1 d=$2 t m p
  local -A files=()
  for t in orders users; do : > "raw.$t.txt"; done
  case $kind in
    sqlite | sqlite_at)
      if [ -e "$T/$d.db" ]; then
        for t in orders users; do
          # a worker of `ferry serve` may still hold the file an instant after the run completed
          [ "$(q -cmd ".timeout 10000" "$T/$d.db" "SELECT count(*) FROM sqlite_master WHERE name = '$t'")" = 1 ] || continue
          q -cmd ".timeout 10000" "$T/$d.db" "SELECT id FROM \"$t\"" > "raw.$t.txt"
        done
      fi ;;
    jsonl | csv | parquet)
      for m in "$T/$d"/_runs/*/_manifest.json; do
        [ -e "$m" ] || continue
        while IFS=$'\t' read -r t p; do files[$t]+="$T/$d/$p"$'\n'; done \
          < <(jq -r '.files[] | select(.table == "orders" or .table == "users") | "\(.table)\t\(.path)"' "$m")
      done
      case $kind in
        jsonl) for t in orders users; do
                 [ -z "${files[$t]:-}" ] || tr '\n' '\0' <<< "${files[$t]%$'\n'}" | xargs -0 jq -r .id > "raw.$t.txt"
               done ;;
        csv) for t in orders users; do
               [ -z "${files[$t]:-}" ] || tr '\n' '\0' <<< "${files[$t]%$'\n'}" | xargs -0 python3 -c 'import csv, sys
for f in sys.argv[1:]:
    for r in csv.DictReader(open(f, newline="")): print(r["id"])' > "raw.$t.txt"
             done ;;
        parquet) # all files of both tables in one DuckDB process
          local sql="" list
          for t in orders users; do
            [ -n "${files[$t]:-}" ] || continue
            list=$(sed "s/.*/'&'/" <<< "${files[$t]%$'\n'}" | paste -sd, -)
            sql="$sql${sql:+ UNION ALL }SELECT '$t', id FROM read_parquet([$list])"
          done
          if [ -n "$sql" ]; then
            nodetool "$DUCK" "$sql" | jq -r '"\(.[0]) \(.[1])"' > both.txt
            for t in orders users; do awk -v t=$t '$1 == t { print $2 }' both.txt > "raw.$t.txt"; done
          fi ;;
      esac ;;
    s3)
      local keys dl
      for m in $(s3c "$S3_BUCKET" list "$d/_runs/" | grep '_manifest.json$'); do
        while IFS=$'\t' read -r t p; do files[$t]+="$p "; done \
          < <(s3c "$S3_BUCKET" get "$m" | jq -r '.objects[] | select(.table == "orders" or .table == "users") | "\(.table)\t\(.key)"')
      done
      keys="${files[orders]:-}${files[users]:-}"
      if [ -n "${keys// /}" ]; then
        dl=$(mktemp -d "$T/dl.XXXXXX")
        # shellcheck disable=SC2086
        s3c "$S3_BUCKET" getmany "$dl" $keys > /dev/null
        for t in orders users; do
          [ -z "${files[$t]:-}" ] || (cd "$dl" && printf '%s\n' ${files[$t]} | tr '\n' '\0' | xargs -0 jq -r .id) > "raw.$t.txt"
        done
        rm -rf "$dl"
      fi ;;
    iceberg)
      for t in orders users; do
        [ -d "$T/$d/db/$t/metadata" ] || continue
        # no snapshot yet (a crash before the first commit): nothing durable
        { nodetool "$READ" "$T/$d" db "$t" 2>/dev/null || true; } | jq -r .id > "raw.$t.txt"
      done ;;
  esac
  for t in orders users; do
    sort -n "raw.$t.txt" > "all.$t.txt"
    sort -n -u "raw.$t.txt" > "ids.$t.txt"
  done
}

# check_never_ahead NAME KIND DEST LABEL [read]: every saved checkpoint is covered by the
# destination, each resource's by its own table (one resource's flush never vouches for
# another's). The state is read first, the destination second (it only grows), as in
# checkpoint_never_ahead.sh; `read` reads the destination first (else the files check_complete
# just read are used: nothing ran since). Prints the number of checkpoints compared.
check_never_ahead() {
  local name=$1 kind=$2 d=$3 label=$4 fresh=${5:-read} cps n=0 res shard key lo have want
  cps=$(q -cmd ".timeout 5000" "$FERRY_STATE" "
    SELECT c.resource, c.shard, json_extract(c.position, '\$.key[0]'),
           json_extract(pl.plan, '\$.shards[' || c.shard || '].lo')
    FROM run_checkpoints c JOIN plans pl ON pl.run_id = c.run_id AND pl.resource = c.resource
    JOIN runs r ON r.id = c.run_id WHERE r.pipeline = '$name'
      AND json_extract(c.position, '\$.key[0]') IS NOT NULL") || fail "$label: cannot read the state file"
  # no saved checkpoint: nothing can be ahead (the readers are slow: not started for nothing)
  [ -n "$cps" ] || { echo 0; return 0; }
  [ "$fresh" = read ] && read_dest "$kind" "$d"
  while IFS='|' read -r res shard key lo; do
    [ -n "$shard" ] || continue
    n=$((n + 1))
    want=$((key - lo + 1))
    have=$(awk -v lo="$lo" -v hi="$key" '$1 >= lo && $1 <= hi { c++ } END { print c + 0 }' "ids.$res.txt")
    [ "$have" -ge "$want" ] || fail "$label: the state's checkpoint of $res shard $shard says key $key, but the destination made durable only $have of its $want rows"
  done <<< "$cps"
  echo $n
}

# check_complete KIND DEST LABEL ALLOW_DUP: every id of both tables present after the re-run
# (leaves the destination's ids for check_never_ahead ... reuse)
check_complete() {
  local kind=$1 d=$2 label=$3 allow_dup=$4 t all uniq
  read_dest "$kind" "$d"
  for t in orders users; do
    uniq=$(wc -l < "ids.$t.txt")
    all=$(wc -l < "all.$t.txt")
    [ "$uniq" = $ROWS ] || fail "$label ($t): after the re-run the destination holds $uniq distinct ids of $ROWS"
    [ "$(head -n 1 "ids.$t.txt")" = 1 ] && [ "$(tail -n 1 "ids.$t.txt")" = $ROWS ] || fail "$label ($t): ids are not 1..$ROWS"
    [ "$allow_dup" = yes ] || [ "$all" = $ROWS ] || fail "$label ($t): $((all - ROWS)) duplicate rows (this sink commits ferry's checkpoint with the data)"
  done
}

# resume_or_done NAME: resumes the pipeline's interrupted run. A run that completed before the
# kill landed (its run.completed already logged) is not run again: a new full append run would
# rightly copy everything once more. `ferry resume` says which (exit 1, "is completed").
resume_or_done() {
  local run
  run=$(q "$FERRY_STATE" "SELECT max(id) FROM runs WHERE pipeline = '$1'")
  if [ -z "$run" ]; then expect_exit 0 ferry run p.yaml --quiet; return; fi
  set +e
  OUT=$("$FERRY_BIN" resume "$run" --quiet 2>&1)
  local rc=$?
  set -e
  [ $rc = 0 ] || { [ $rc = 1 ] && [[ $OUT == *"run $run is completed and cannot be resumed"* ]]; } || fail "resume run $run of $1: exit $rc: $OUT"
}

# never_ahead_kinds KIND...: every crash point of each sink, checked, then resumed
never_ahead_kinds() {
  total=0 i=0
  for kind in "$@"; do
    # after_checkpoint_save@2: per_apply, right after the state saved a checkpoint mid-run;
    # at_commit sinks have only pending positions then, none may be a run checkpoint yet
    fps="before_sink_commit=crash after_sink_commit=crash after_sink_apply=crash@4 after_checkpoint_save=crash@2"
    case $kind in
      jsonl | csv | parquet) fps="$fps files_before_manifest=crash" ;;
      s3) fps="$fps s3_before_manifest=crash" ;;
      iceberg) fps="$fps iceberg_before_catalog_commit=crash" ;;
    esac
    dup=yes
    case $kind in sqlite | sqlite_at | iceberg) dup=no ;; esac
    for fp in $fps kill9; do
      i=$((i + 1))
      name="na$i-$kind"
      pipeline p.yaml "$name" $kind "d$i"
      if [ $fp = kill9 ]; then
        "$FERRY_BIN" run p.yaml --quiet > run.log 2>&1 &
        pid=$!
        sleep "$(printf '0.%03d' $((50 + RANDOM % 500)))"
        kill -9 $pid 2>/dev/null || true
        set +e; wait $pid 2>/dev/null; rc=$?; set -e
        # 0: the run ended before the kill (a sanitizer report would be another code)
        [ $rc = 137 ] || [ $rc = 0 ] || fail "$kind kill9: exit $rc: $(cat run.log)"
      else
        set +e
        FERRY_FAILPOINTS=$fp "$FERRY_BIN" run p.yaml --quiet > run.log 2>&1
        rc=$?
        set -e
        [ $rc = 137 ] || fail "$kind $fp: exit $rc: $(cat run.log)"
      fi
      n=$(check_never_ahead "$name" $kind "d$i" "$kind $fp")
      total=$((total + n))
      resume_or_done "$name"
      check_complete $kind "d$i" "$kind $fp" $dup
      n2=$(check_never_ahead "$name" $kind "d$i" "$kind $fp (after the re-run)" reuse)
      pass "$kind $fp (exit $rc): $n checkpoints saved at the crash, none ahead of the destination; the re-run is complete ($n2 checkpoints, all covered)"
      rc=
    done
  done
  echo "checkpoints compared at crashes: $total"
}

# never_ahead_serve KIND...: the same checks for runs under `ferry serve` (needs
# tests/serve/lib.sh sourced): the server is started with a crash failpoint in its environment
# (its workers inherit it), the run is requested over the API and fails (worker lost); the
# saved checkpoints are compared with the destination, then a server without the failpoint
# resumes the run over the API and the destination is complete.
never_ahead_serve() {
  local kind fp run n n2 dup i=${SERVE_I:-0} lake_fp
  for kind in "$@"; do
    dup=yes
    case $kind in sqlite | sqlite_at | iceberg) dup=no ;; esac
    case $kind in
      jsonl | csv | parquet) lake_fp=files_before_manifest=crash ;;
      s3) lake_fp=s3_before_manifest=crash ;;
      iceberg) lake_fp=iceberg_before_catalog_commit=crash ;;
      *) lake_fp="" ;;
    esac
    for fp in "after_sink_apply=crash@4" before_sink_commit=crash after_sink_commit=crash $lake_fp; do
      i=$((i + 1))
      name="sv$i-$kind"
      pipeline p.yaml "$name" $kind "s$i"
      FERRY_FAILPOINTS=$fp start_serve --lease 3s --sweep 500ms --workers 1
      api POST /v1/pipelines --data-binary @p.yaml -H 'Content-Type: application/yaml' > /dev/null
      [ "$CODE" = 201 ] || [ "$CODE" = 200 ] || fail "register $name: $CODE $BODY"
      api POST "/v1/pipelines/$name/runs" > req.json
      [ "$CODE" = 202 ] || [ "$CODE" = 201 ] || fail "request a run of $name: $CODE $BODY"
      run=$(jq -r .id req.json)
      wait_state "$run" failed 600
      n=$(check_never_ahead "$name" $kind "s$i" "serve $kind $fp")
      stop_serve
      start_serve --lease 3s --sweep 500ms --workers 1
      api POST "/v1/runs/$run/resume" > /dev/null
      [ "$CODE" = 202 ] || fail "resume run $run: $CODE $BODY"
      wait_state "$run" completed 1200
      worker_exited "$run"
      check_complete $kind "s$i" "serve $kind $fp" $dup
      n2=$(check_never_ahead "$name" $kind "s$i" "serve $kind $fp (after the resume)" reuse)
      stop_serve
      no_sanitizer_reports
      pass "serve, $kind, $fp: the worker died, the run failed; $n checkpoints saved, none ahead of the destination; resumed over the API: complete ($n2 checkpoints, all covered)"
    done
    never_ahead_serve_kill_after_save $kind $dup
  done
}

# never_ahead_serve_kill_after_save KIND DUP: a SIGKILL of the worker once the state holds a
# checkpoint of the run (the trackers pause 1.5 s after each save, so the worker is usually
# still running: the sinks that commit once per run save their checkpoints only after that
# commit, and a crash before it leaves none to compare). The checkpoints seen must be covered
# by the destination; a failed run is resumed by a server without the pause.
never_ahead_serve_kill_after_save() {
  local kind=$1 dup=$2 run pid n n2 st cps=0
  i=$((i + 1))
  name="sv$i-$kind"
  pipeline p.yaml "$name" $kind "s$i"
  FERRY_FAILPOINTS="after_checkpoint_save=sleep(1500)" start_serve --lease 3s --sweep 500ms --workers 1
  api POST /v1/pipelines --data-binary @p.yaml -H 'Content-Type: application/yaml' > /dev/null
  [ "$CODE" = 201 ] || [ "$CODE" = 200 ] || fail "register $name: $CODE $BODY"
  api POST "/v1/pipelines/$name/runs" > req.json
  run=$(jq -r .id req.json)
  for _ in $(seq 1 1200); do
    cps=$(q -cmd ".timeout 5000" "$FERRY_STATE" "SELECT count(*) FROM run_checkpoints WHERE run_id = $run" 2> /dev/null || echo 0)
    [ "${cps:-0}" -ge 1 ] && break
    sleep 0.05
  done
  [ "${cps:-0}" -ge 1 ] || fail "serve $kind kill after save: no checkpoint saved: $(api GET "/v1/runs/$run")"
  pid=$(api GET "/v1/runs/$run" | jq -r .pid)
  [ "${pid:-0}" -gt 0 ] && kill -9 "$pid" 2> /dev/null || true
  for _ in $(seq 1 600); do
    st=$(run_state "$run")
    [ "$st" = failed ] || [ "$st" = completed ] && break
    sleep 0.1
  done
  [ "$st" = failed ] || [ "$st" = completed ] || fail "serve $kind kill after save: run $run is $st"
  n=$(check_never_ahead "$name" $kind "s$i" "serve $kind kill -9 after a checkpoint save")
  [ "$n" -ge 1 ] || fail "serve $kind kill after save: no checkpoint compared"
  stop_serve
  if [ "$st" = failed ]; then
    start_serve --lease 3s --sweep 500ms --workers 1
    api POST "/v1/runs/$run/resume" > /dev/null
    [ "$CODE" = 202 ] || fail "resume run $run: $CODE $BODY"
    wait_state "$run" completed 1200
    worker_exited "$run"
    stop_serve
  fi
  check_complete $kind "s$i" "serve $kind kill after save" $dup
  n2=$(check_never_ahead "$name" $kind "s$i" "serve $kind kill after save (after the resume)" reuse)
  no_sanitizer_reports
  pass "serve, $kind, kill -9 of the worker after a checkpoint save (run $st): $n checkpoints saved, none ahead of the destination; complete ($n2 checkpoints, all covered)"
  SERVE_I=$i
}
