#!/usr/bin/env python3
"""A burst: CLIENTS callers ask the same new prompt at once, split over the replicas, each
doing the lookup → call the model → upsert dance. The "model" is a stub HTTP server here
that sleeps 500 ms and counts its calls. With --leases the lookups carry `lease` and `wait`
(single-flight); without, they are plain lookups. Prints one line per round:
"calls P50_MS P99_MS MAX_MS ERRORS"."""
import argparse, http.client, http.server, json, sys, threading, time, uuid

parser = argparse.ArgumentParser()
parser.add_argument("--ports", required=True, help="comma-separated replica ports")
parser.add_argument("--token", required=True)
parser.add_argument("--clients", type=int, default=64)
parser.add_argument("--rounds", type=int, default=3)
parser.add_argument("--leases", action="store_true")
parser.add_argument("--model-seconds", type=float, default=0.5)
args = parser.parse_args()
ports = [int(p) for p in args.ports.split(",")]

calls = 0
calls_lock = threading.Lock()


class Model(http.server.BaseHTTPRequestHandler):
    """The paid call: counted, and slow."""

    def do_POST(self):
        global calls
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        with calls_lock:
            calls += 1
        time.sleep(args.model_seconds)
        body = b'{"text":"the answer"}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_):
        pass


class ModelServer(http.server.ThreadingHTTPServer):
    request_queue_size = 1024  # a burst connects all at once; the default backlog of 5 refuses


model = ModelServer(("127.0.0.1", 0), Model)
model.daemon_threads = True
threading.Thread(target=model.serve_forever, daemon=True).start()


def post(connection, path, document):
    body = json.dumps(document)
    connection.request("POST", path, body, {"Content-Type": "application/json",
                                             "Authorization": f"Bearer {args.token}"})
    response = connection.getresponse()
    return response.status, json.loads(response.read() or b"{}")


def call_model():
    connection = http.client.HTTPConnection("127.0.0.1", model.server_address[1], timeout=30)
    connection.request("POST", "/v1/chat/completions", b"{}")
    answer = json.loads(connection.getresponse().read())["text"]
    connection.close()
    return answer


def caller(port, prompt, barrier, times, errors):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=90)
    descriptor = {"model": "stub", "prompt": prompt}
    try:
        connection.connect()
        barrier.wait()
        started = time.monotonic()
        lookup = dict(descriptor, **({"lease": 30, "wait": 30} if args.leases else {}))
        status, answer = post(connection, "/v1/caches/burst/lookup", lookup)
        if status != 200:
            raise RuntimeError(f"lookup {status}")
        if not answer.get("hit"):
            # The filler (lease), a caller whose wait ran out, or every caller without leases.
            text = call_model()
            upsert = dict(descriptor, response=text)
            if "lease" in answer:
                upsert["lease"] = answer["lease"]["id"]
            status, _ = post(connection, "/v1/caches/burst/upsert", upsert)
            if status not in (200, 201):
                raise RuntimeError(f"upsert {status}")
        times.append(time.monotonic() - started)
    except Exception as error:  # noqa: BLE001 - counted, reported
        errors.append(repr(error))
    finally:
        connection.close()


for _ in range(args.rounds):
    calls = 0
    prompt = f"burst {uuid.uuid4()}"
    barrier = threading.Barrier(args.clients)
    times, errors = [], []
    threads = [threading.Thread(target=caller, args=(ports[i % len(ports)], prompt, barrier, times, errors))
               for i in range(args.clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ordered = sorted(times) or [0]
    p50 = ordered[len(ordered) // 2] * 1000
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000
    print(f"{calls} {p50:.0f} {p99:.0f} {ordered[-1] * 1000:.0f} {len(errors)}", flush=True)
    if errors:
        print(f"errors: {sorted(set(errors))[:3]}", file=sys.stderr)
