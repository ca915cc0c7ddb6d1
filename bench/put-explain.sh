#!/usr/bin/env bash
# Where a PUT group statement's time goes inside PostgreSQL: auto_explain (ANALYZE, triggers,
# buffers, WAL) of every statement while wrk -c64 (CLIENTS) of bench/lua/put.lua runs, summed over the
# write groups: the statement's plan, each trigger, and the rest (the unread data-modifying CTE
# that writes the access rows runs after the plan's top node; the after-trigger queue), per group
# and per write. Instrumented (timing every plan node costs time): the figures are shares, not
# speeds. The group statement runs inside tc_write_group (migration 0019), so nested statements
# are logged: the triggers' own statements too, which bills the triggers for their logging.
#   BENCH_DURATION (the warm-up and the measured run, default 3 s); BENCH_SQL as in put-cpu.sh.
source "$(dirname "$0")/lib.sh"
DURATION=${BENCH_DURATION:-3}
need_tools
build_release
start_server
put_store_ready
# auto_explain's settings exist only once it is loaded, hence LOAD in the same session. The
# service's connections are ended so that its pool opens new ones, which preload it.
bench_sql -c "LOAD 'auto_explain'" -c "ALTER SYSTEM SET session_preload_libraries = 'auto_explain'" \
    -c "ALTER SYSTEM SET auto_explain.log_min_duration = 0" -c "ALTER SYSTEM SET auto_explain.log_analyze = on" \
    -c "ALTER SYSTEM SET auto_explain.log_triggers = on" -c "ALTER SYSTEM SET auto_explain.log_buffers = on" \
    -c "ALTER SYSTEM SET auto_explain.log_wal = on" -c "ALTER SYSTEM SET auto_explain.log_nested_statements = on" \
    -c "SELECT pg_reload_conf()" >/dev/null
bench_sql -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
        WHERE datname = 'teamcache' AND pid <> pg_backend_pid()" >/dev/null
# The pool's connections were ended: a second of PUTs gets it new ones before the log starts.
wrk -t2 -c"${CLIENTS:-64}" -d1s -s "$BENCH_DIR/lua/put.lua" "http://127.0.0.1:$PORT" >/dev/null
: > "$WORK/data/postgres.log"
out=$(wrk -t2 -c"${CLIENTS:-64}" -d"${DURATION}s" -s "$BENCH_DIR/lua/put.lua" "http://127.0.0.1:$PORT")
echo "$out" | grep -q "Non-2xx" && { echo "$out"; echo "some PUTs failed" >&2; exit 1; }
echo "$out" | awk '/Requests\/sec/ {print "PUTs a second while instrumented: " $2}'
python3 "$BENCH_DIR/explain_groups.py" "$WORK/data/postgres.log"
stop_server
