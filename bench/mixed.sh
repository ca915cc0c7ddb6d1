#!/usr/bin/env bash
# 90% lookups / 10% upserts over 100,000 Zipf-distributed keys, half the lookups gzip, against
# pgbench running the same mix of the service's SQL on the same table.
source "$(dirname "$0")/lib.sh"
need_tools
build_release
start_server
python3 "$BENCH_DIR/populate.py" --port "$PORT" --count 100000 --threads 16 >&2
python3 "$BENCH_DIR/pgbench_sql.py" "$WORK"
python3 - "$WORK" <<'PY'
import re, sys
folder = sys.argv[1]
select = open(f"{folder}/select.sql").read().split("\n", 1)[1]
upsert = open(f"{folder}/upsert.sql").read().split("\n", 1)[1].replace("'pgup-' || :k", "'key-' || :k")
open(f"{folder}/mixed.sql", "w").write(
    "\\set k random_zipfian(0, 99999, 1.01)\n\\set r random(1, 100)\n\\if :r <= 90\n" + select
    + "\\else\n" + upsert + "\\endif\n")
PY
read -r tps tps99 <<<"$(pgbench_run 16 "$WORK/mixed.sql")"
read -r rps p50 p99 _ <<<"$(KEYS=100000 wrk_run 64 "http://127.0.0.1:$PORT" -s "$BENCH_DIR/lua/mixed.lua")"
echo "| workload | teamcache req/s | p50 ms | p99 ms | pgbench same mix TPS | p99 ms | ratio |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
echo "| 90% lookup / 10% upsert, Zipf over 100k, half gzip | $rps | $p50 | $p99 | $tps | $tps99 | $(ratio "$rps" "$tps") |"
