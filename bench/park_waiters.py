#!/usr/bin/env python3
"""Parks COUNT waiters: one connection each, a GET with `wait=60` on an absent key of its
own (a waiter for the key to appear). Prints "sent N" once every request is written, then
holds the connections open for HOLD seconds (bounded) and closes them (the server drops
waiters whose client hangs up)."""
import argparse, resource, selectors, socket, time

parser = argparse.ArgumentParser()
parser.add_argument("--port", type=int, required=True)
parser.add_argument("--token", required=True)
parser.add_argument("--count", type=int, default=10000)
parser.add_argument("--hold", type=float, default=40)
args = parser.parse_args()
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

selector = selectors.DefaultSelector()
sockets = []
for index in range(args.count):
    s = socket.socket()
    s.setblocking(False)
    s.connect_ex(("127.0.0.1", args.port))
    sockets.append(s)
    selector.register(s, selectors.EVENT_WRITE, index)
unsent, deadline = args.count, time.time() + 60
while unsent and time.time() < deadline:
    for key, _ in selector.select(timeout=1):
        request = (f"GET /v1/caches/park/entries/waiter-{key.data}?wait=60 HTTP/1.1\r\nHost: bench\r\n"
                   f"Authorization: Bearer {args.token}\r\n\r\n").encode()
        key.fileobj.send(request)
        selector.unregister(key.fileobj)
        unsent -= 1
print(f"sent {args.count - unsent}", flush=True)
time.sleep(args.hold)
for s in sockets:
    s.close()
