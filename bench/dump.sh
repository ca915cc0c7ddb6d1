#!/usr/bin/env bash
# Export and import beside pg_dump / COPY of the same tables, in one run: 20,000 entries of
# ~2 KB JSON (SCALING_ENTRIES to change), `teamcache export` against `pg_dump --data-only`,
# and `teamcache import` into the wiped namespace against `COPY` of that dump back into the
# emptied tables (triggers fire in both). Prints markdown; reports ratios.
#
# Two anchors. The store's anchor dumps and restores what a dump line carries and an import
# writes: `entries` and `entry_access` (an entry's hit count and last access). The older
# anchor, `entries` alone, is kept beside it for comparison with earlier results; what it
# restores is not a working store: no writer leaves an entry without its access row, and such
# an entry has no hit count, is never found idle or least recently used, and counts no hits.
#
# BENCH_ROUNDS rounds (default 3), each import beside both COPYs, each export beside both
# pg_dumps: one import of 20,000 entries is under a second, and a single pair moved between
# 0.44 and 0.52 here (once to 0.05, an import that took 6.3 s), so each round's ratios and
# their medians are reported. PostgreSQL's CPU an entry (every process of the cluster,
# autovacuum included) says whether a gap is the database's work or waiting.
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
# Its access rows go with it (the DELETE's trigger).
wipe() { psql_ "DELETE FROM entries WHERE namespace = 'dump'" >/dev/null; }
# Before each timed step: the rows just deleted vacuumed (each import and each COPY starts from
# a vacuumed table; they are otherwise dead until autovacuum runs, at no fixed time), the
# statistics of what just changed, and the dirty pages written, so that neither autoanalyze nor
# a checkpoint lands in the step measured.
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
# pg_dump_of NAME TABLE... → $WORK/NAME.sql. pg_dump empties search_path, and the schema's
# trigger functions name their tables unqualified, so that line is dropped after the timing.
pg_dump_of() {
  local file="$WORK/$1.sql" tables="" table
  shift
  for table in "$@"; do tables="$tables --table=$table"; done
  as_postgres sh -c "pg_dump -h '$(pg_socket)' -U postgres --data-only $tables teamcache > '$file'" 2>"$WORK/step.err"
}
run_pg_dump() { pg_dump_of entries entries; }
run_pg_dump_store() { pg_dump_of store entries entry_access; }
run_import() { "$BIN" import --database-url "$url" < "$WORK/dump.ndjson" >/dev/null 2>"$WORK/step.err"; }
restore() { as_postgres sh -c "psql -h '$(pg_socket)' -U postgres -d teamcache -q -v ON_ERROR_STOP=1 < '$WORK/$1.sql' >/dev/null" 2>"$WORK/step.err"; }
run_copy() { restore entries; }
run_copy_store() { restore store; }
# The access rows of the namespace's entries: as many as entries when the store is whole.
accessed() { psql_ "SELECT count(*) FROM entry_access WHERE namespace = 'dump'"; }
[ "$ROUNDS" -ge 1 ] || { echo "BENCH_ROUNDS must be at least 1" >&2; exit 2; }
check() { # check WHAT COUNT: a step that restored fewer rows than the namespace has fails the run
  [ "$2" = "$COUNT" ] || { echo "round $round: $1: $2 of $COUNT"; failed=1; }
}
rows=() export_ratios=() export_store_ratios=() import_ratios=() import_store_ratios=()
for round in $(seq "$ROUNDS"); do
  timed export run_export
  timed pgdump run_pg_dump
  timed pgdumpstore run_pg_dump_store
  sed -i "/set_config('search_path'/d" "$WORK/entries.sql" "$WORK/store.sql"
  wipe
  timed import run_import
  check "entries imported" "$(count)"; check "access rows imported" "$(accessed)"
  # The same dump again over what it just stored: every entry unchanged (idempotence's cost).
  timed reimport run_import
  wipe
  timed copy run_copy
  check "entries copied" "$(count)"
  wipe
  # The next round exports what this restore leaves: a whole store, as the import's.
  timed copystore run_copy_store
  check "entries copied with their access rows" "$(count)"; check "access rows copied" "$(accessed)"
  export_ratios+=("$(ratio "$pgdump_s" "$export_s")") export_store_ratios+=("$(ratio "$pgdumpstore_s" "$export_s")")
  import_ratios+=("$(ratio "$copy_s" "$import_s")") import_store_ratios+=("$(ratio "$copystore_s" "$import_s")")
  rows+=("| $round | export | $export_s | $(echo "$COUNT / $export_s" | bc) | $export_pg | $pgdumpstore_s / $pgdumpstore_pg | ${export_store_ratios[-1]} | $pgdump_s / $pgdump_pg | ${export_ratios[-1]} |")
  rows+=("| $round | import | $import_s | $(echo "$COUNT / $import_s" | bc) | $import_pg | $copystore_s / $copystore_pg | ${import_store_ratios[-1]} | $copy_s / $copy_pg | ${import_ratios[-1]} |")
  rows+=("| $round | re-import (every entry unchanged) | $reimport_s | $(echo "$COUNT / $reimport_s" | bc) | $reimport_pg | | | | |")
done
echo "| round | $COUNT entries of ~2 KB JSON | teamcache s | entries/s | PostgreSQL CPU µs an entry | anchor, the store (entries + entry_access): s / PostgreSQL µs an entry | ratio | anchor, entries alone: s / PostgreSQL µs an entry | ratio |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
printf '%s\n' "${rows[@]}"
echo
echo "anchors: export beside pg_dump --data-only, import beside psql's COPY of that dump; ratio = anchor time / teamcache time"
echo "median ratio over $ROUNDS rounds, the store's anchor: export $(median "${export_store_ratios[@]}"), import $(median "${import_store_ratios[@]}")"
echo "median ratio over $ROUNDS rounds, entries alone: export $(median "${export_ratios[@]}"), import $(median "${import_ratios[@]}")"
echo "dump size: $(du -h "$WORK/dump.ndjson" | cut -f1) (teamcache), $(du -h "$WORK/store.sql" | cut -f1) (pg_dump of the store), $(du -h "$WORK/entries.sql" | cut -f1) (entries alone)"
exit "$failed"
