#!/usr/bin/env bash
# Export and import beside pg_dump / COPY of the same table, in one run: 20,000 entries of
# ~2 KB JSON (SCALING_ENTRIES to change), `teamcache export` against `pg_dump --data-only`
# of `entries`, and `teamcache import` into the wiped namespace against `COPY` of that
# dump back into the emptied table (triggers fire in both). Prints markdown; reports ratios.
source "$(dirname "$0")/lib.sh"
COUNT=${SCALING_ENTRIES:-20000}
[ -x "$BIN" ] || build_release
start_server
python3 "$BENCH_DIR/populate.py" --port "$PORT" --count "$COUNT" --namespace dump >/dev/null
as_postgres() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
seconds() { local start=$(date +%s.%N); "$@"; echo "$(date +%s.%N) - $start" | bc; }
url="postgresql://postgres@$(python3 -c "import urllib.parse,sys; print(urllib.parse.quote(sys.argv[1], safe=''))" "$(pg_socket)"):5432/teamcache"
chmod 777 "$WORK"
export_s=$(seconds sh -c "'$BIN' export --namespace dump --database-url '$url' > '$WORK/dump.ndjson' 2>/dev/null")
pgdump_s=$(seconds as_postgres sh -c "pg_dump -h '$(pg_socket)' -U postgres --data-only --table=entries teamcache > '$WORK/entries.sql'")
# pg_dump empties search_path; the schema's trigger functions name their tables unqualified.
sed -i "/set_config('search_path'/d" "$WORK/entries.sql"
count() { as_postgres psql -h "$(pg_socket)" -U postgres -d teamcache -Atc "SELECT count(*) FROM entries WHERE namespace = 'dump'"; }
curl -s -X POST -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' -d '{"all":true}' \
  "http://127.0.0.1:$PORT/v1/caches/dump/evict" >/dev/null
# Each import starts from a vacuumed table, as COPY does below: the rows just evicted or
# deleted are otherwise dead until autovacuum runs, which it does at no fixed time.
vacuum() { as_postgres psql -h "$(pg_socket)" -U postgres -d teamcache -qc "VACUUM entries, entry_access, entry_changes"; }
vacuum
import_s=$(seconds sh -c "'$BIN' import --database-url '$url' < '$WORK/dump.ndjson' 2>/dev/null")
imported=$(count)
# The same dump again over what it just stored: every entry unchanged (idempotence's cost).
reimport_s=$(seconds sh -c "'$BIN' import --database-url '$url' < '$WORK/dump.ndjson' 2>/dev/null")
as_postgres psql -h "$(pg_socket)" -U postgres -d teamcache -qc "DELETE FROM entries WHERE namespace = 'dump'" >/dev/null
vacuum
copy_s=$(seconds as_postgres sh -c "psql -h '$(pg_socket)' -U postgres -d teamcache -q -v ON_ERROR_STOP=1 < '$WORK/entries.sql' >/dev/null")
copied=$(count)
ratio() { echo "scale=2; $2 / $1" | bc; }
echo "| $COUNT entries of ~2 KB JSON | teamcache s | entries/s | anchor | anchor s | ratio (anchor time / teamcache time) |"
echo "| --- | --- | --- | --- | --- | --- |"
echo "| export | $export_s | $(echo "$COUNT / $export_s" | bc) | pg_dump --data-only -t entries | $pgdump_s | $(ratio "$export_s" "$pgdump_s") |"
echo "| import | $import_s | $(echo "$COUNT / $import_s" | bc) | psql COPY of that dump | $copy_s | $(ratio "$import_s" "$copy_s") |"
echo "| re-import over itself (every entry unchanged) | $reimport_s | $(echo "$COUNT / $reimport_s" | bc) | | | |"
echo
echo "entries after each import: teamcache $imported, COPY $copied"
echo "dump size: $(du -h "$WORK/dump.ndjson" | cut -f1) (teamcache), $(du -h "$WORK/entries.sql" | cut -f1) (pg_dump)"
