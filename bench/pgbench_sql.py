#!/usr/bin/env python3
"""Writes the pgbench scripts that run the service's own SQL on the same table: the point
select of a hit (the EntryStore statement) and the upsert (the tc_put_entry call with a
body gzip-compressed like the service would store it); and the plain anchor a user would
write without a cache service: one `INSERT … ON CONFLICT DO UPDATE` of the ~2 KB JSON into
a simple keyed table, one per transaction (plain.sql creates the table)."""
import gzip, json, sys
folder = sys.argv[1]
select = """\\set k random(0, 9999)
SELECT id, namespace, key, body, encoding, content_type, identity_size, etag, model, metadata::text AS metadata,
       input_tokens, output_tokens, updated_at, expires_at
FROM entries WHERE namespace = 'bench' AND key = convert_to('key-' || :k, 'UTF8');
"""
open(f"{folder}/select.sql", "w").write(select)
open(f"{folder}/miss.sql", "w").write(select.replace("'key-'", "'absent-'"))
items = [{"id": j, "name": f"item {j}", "score": j * 7 % 1000, "tags": ["alpha", "beta"], "ok": True} for j in range(24)]
identity = json.dumps(items).encode()
stored = gzip.compress(identity, 6)
upsert = f"""\\set k random(0, 99999)
SELECT outcome FROM tc_put_entry('bench', convert_to('pgup-' || :k, 'UTF8'), '\\x{stored.hex()}'::bytea, 'gzip',
    'application/json', {len(identity)}, '"etag"', NULL, NULL, NULL, '{{}}'::text[], NULL, 0, 0, now(), NULL, 604800, NULL,
    'none', '{{}}'::text[], 0, 1.1);
"""
open(f"{folder}/upsert.sql", "w").write(upsert)
open(f"{folder}/plain_table.sql", "w").write(
    "CREATE TABLE IF NOT EXISTS plain_entries (key text PRIMARY KEY, body bytea NOT NULL, "
    "updated_at timestamptz NOT NULL);\n")
plain = f"""\\set k random(0, 99999)
INSERT INTO plain_entries (key, body, updated_at) VALUES ('up-' || :k, '\\x{identity.hex()}'::bytea, now())
ON CONFLICT (key) DO UPDATE SET body = excluded.body, updated_at = excluded.updated_at;
"""
open(f"{folder}/plain_upsert.sql", "w").write(plain)
