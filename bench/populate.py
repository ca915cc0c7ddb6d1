#!/usr/bin/env python3
"""PUTs COUNT entries of ~2 KB compressible JSON (key-0 .. key-N) into a namespace."""
import argparse, http.client, json, os, threading

parser = argparse.ArgumentParser()
parser.add_argument("--port", type=int, required=True)
parser.add_argument("--count", type=int, default=10000)
parser.add_argument("--namespace", default="bench")
parser.add_argument("--threads", type=int, default=8)
args = parser.parse_args()
token = os.environ["TOKEN"]

def body(i):
    items = [{"id": i * 100 + j, "name": f"item {j} of {i}", "score": (i * 7 + j) % 1000,
              "tags": ["alpha", "beta"], "ok": True} for j in range(24)]
    return json.dumps(items).encode()

failures = []
def worker(start):
    connection = http.client.HTTPConnection("127.0.0.1", args.port, timeout=30)
    for i in range(start, args.count, args.threads):
        connection.request("PUT", f"/v1/caches/{args.namespace}/entries/key-{i}", body=body(i),
                           headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
        response = connection.getresponse()
        response.read()
        if response.status not in (200, 201):
            failures.append(response.status)

threads = [threading.Thread(target=worker, args=(t,)) for t in range(args.threads)]
for t in threads: t.start()
for t in threads: t.join()
if failures:
    raise SystemExit(f"{len(failures)} writes failed: {failures[:5]}")
sample = body(0)
print(f"populated {args.count} entries of ~{len(sample)} bytes")
