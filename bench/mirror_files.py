#!/usr/bin/env python3
"""Writes what populate.py stored as files for nginx: the same bytes under the same paths
(ROOT/v1/caches/NS/entries/key-N), with a .gz beside each for gzip_static, so nginx and
TeamCache answer the same requests with the same bodies."""
import argparse, gzip, json, os

parser = argparse.ArgumentParser()
parser.add_argument("--root", required=True)
parser.add_argument("--count", type=int, default=10000)
parser.add_argument("--namespace", default="bench")
args = parser.parse_args()

def body(i):  # the same as populate.py's
    items = [{"id": i * 100 + j, "name": f"item {j} of {i}", "score": (i * 7 + j) % 1000,
              "tags": ["alpha", "beta"], "ok": True} for j in range(24)]
    return json.dumps(items).encode()

folder = os.path.join(args.root, "v1", "caches", args.namespace, "entries")
os.makedirs(folder, exist_ok=True)
for i in range(args.count):
    data = body(i)
    with open(os.path.join(folder, f"key-{i}"), "wb") as out:
        out.write(data)
    with open(os.path.join(folder, f"key-{i}.gz"), "wb") as out:
        out.write(gzip.compress(data, 6))
print(f"mirrored {args.count} entries to {folder}")
