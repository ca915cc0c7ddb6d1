#!/usr/bin/env bash
# Export and import beside pg_dump / COPY of the same table, in one run: 20,000 entries of
# ~2 KB JSON (SCALING_ENTRIES to change), `teamcache export` against `pg_dump --data-only`
# of `entries`, and `teamcache import` into the wiped namespace against `COPY` of that
# dump back into the emptied table (triggers fire in both). Prints markdown; reports ratios.
#
# BENCH_ROUNDS rounds (default 3), each import beside a COPY, each export beside a pg_dump:
# one import of 20,000 entries is under a second, and a single pair moved between 0.44 and
# 0.52 here (once to 0.05, an import that took 6.3 s), so each round's ratio and their median
# are reported. PostgreSQL's CPU an entry (every process of the cluster, autovacuum
# included) says whether a gap is the database's work or waiting.
source "$(dirname "$0")/lib.sh"
COUNT=${SCALING_ENTRIES:-20000}
ROUNDS=${BENCH_ROUNDS:-3}
[ -x "$BIN" ] || build_release
start_server
python3 "$BENCH_DIR/populate.py" --port "$PORT" --count "$COUNT" --namespace dump >/dev/null
as_postgres() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
now() { date +%s.%N; }
url="postgresql://postgres@$(python3 -c "import urllib.parse,sys; print(urllib.parse.quote(sys.argv[1], safe=''))" "$(pg_socket)"):5432/teamcache"
chmod 777 "$WORK"
psql_() { as_postgres psql -h "$(pg_socket)" -U postgres -d teamcache -qAtc "$1"; }
count() { psql_ "SELECT count(*) FROM entries WHERE namespace = 'dump'"; }
# Each import starts from a vacuumed table, as COPY does: the rows just deleted are otherwise
# dead until autovacuum runs, which it does at no fixed time.
vacuum() { psql_ "VACUUM entries, entry_access, entry_changes"; }
wipe() { psql_ "DELETE FROM entries WHERE namespace = 'dump'" >/dev/null; vacuum; }
# Before each timed step: the statistics of what just changed, and the dirty pages written, so
# that neither autoanalyze nor a checkpoint lands in the step measured.
quiet() { psql_ "VACUUM (ANALYZE) entries, entry_access, entry_changes"; psql_ "CHECKPOINT"; }
failed=0
# timed NAME COMMAND...: runs it; sets NAME_s (seconds) and NAME_pg (PostgreSQL's CPU µs an
# entry). A step that fails is reported on standard output (bench/run keeps only that) and
# fails the script at its end, after the rounds.
timed() {
  local name=$1 start end before after
  shift
  quiet
  before=$(postgres_ticks)
  start=$(now)
  if ! "$@"; then
    echo "round $round: $name failed: $(tail -n 3 "$WORK/step.err" 2>/dev/null | tr '\n' ' ')"
    failed=1
  fi
  end=$(now)
  after=$(postgres_ticks)
  printf -v "${name}_s" '%s' "$(echo "$end - $start" | bc)"
  printf -v "${name}_pg" '%s' "$(cpu_per_request "$before" "$after" "$COUNT" | awk '{ printf "%.0f", $1 + $2 }')"
}
run_export() { "$BIN" export --namespace dump --database-url "$url" > "$WORK/dump.ndjson" 2>"$WORK/step.err"; }
run_pg_dump() { as_postgres sh -c "pg_dump -h '$(pg_socket)' -U postgres --data-only --table=entries teamcache > '$WORK/entries.sql'" 2>"$WORK/step.err"; }
run_import() { "$BIN" import --database-url "$url" < "$WORK/dump.ndjson" >/dev/null 2>"$WORK/step.err"; }
run_copy() { as_postgres sh -c "psql -h '$(pg_socket)' -U postgres -d teamcache -q -v ON_ERROR_STOP=1 < '$WORK/entries.sql' >/dev/null" 2>"$WORK/step.err"; }
[ "$ROUNDS" -ge 1 ] || { echo "BENCH_ROUNDS must be at least 1" >&2; exit 2; }
export_rows=() import_rows=() reimport_rows=() export_ratios=() import_ratios=()
for round in $(seq "$ROUNDS"); do
  timed export run_export
  timed pgdump run_pg_dump
  # pg_dump empties search_path; the schema's trigger functions name their tables unqualified.
  sed -i "/set_config('search_path'/d" "$WORK/entries.sql"
  wipe
  timed import run_import
  imported=$(count)
  # The same dump again over what it just stored: every entry unchanged (idempotence's cost).
  timed reimport run_import
  wipe
  timed copy run_copy
  copied=$(count)
  # COPY of `entries` alone leaves its rows without access rows, which no writer does (and
  # which a predicate eviction never finds): the next round starts from an import's rows.
  if [ "$round" -lt "$ROUNDS" ]; then
    wipe
    run_import || { echo "round $round: the import between rounds failed"; failed=1; }
  fi
  if [ "$imported" != "$COUNT" ] || [ "$copied" != "$COUNT" ]; then
    echo "round $round: $imported imported, $copied copied of $COUNT"
    failed=1
  fi
  export_ratios+=("$(ratio "$pgdump_s" "$export_s")") import_ratios+=("$(ratio "$copy_s" "$import_s")")
  export_rows+=("| export, round $round | $export_s | $(echo "$COUNT / $export_s" | bc) | $export_pg | pg_dump --data-only -t entries | $pgdump_s | $pgdump_pg | ${export_ratios[-1]} |")
  import_rows+=("| import, round $round | $import_s | $(echo "$COUNT / $import_s" | bc) | $import_pg | psql COPY of that dump | $copy_s | $copy_pg | ${import_ratios[-1]} |")
  reimport_rows+=("| re-import over itself (every entry unchanged), round $round | $reimport_s | $(echo "$COUNT / $reimport_s" | bc) | $reimport_pg | | | | |")
done
echo "| $COUNT entries of ~2 KB JSON | teamcache s | entries/s | PostgreSQL CPU µs an entry | anchor | anchor s | anchor's PostgreSQL CPU µs an entry | ratio (anchor time / teamcache time) |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
printf '%s\n' "${export_rows[@]}" "${import_rows[@]}" "${reimport_rows[@]}"
echo
echo "median ratio over $ROUNDS rounds: export $(median "${export_ratios[@]}"), import $(median "${import_ratios[@]}")"
echo "dump size: $(du -h "$WORK/dump.ndjson" | cut -f1) (teamcache), $(du -h "$WORK/entries.sql" | cut -f1) (pg_dump)"
exit "$failed"
