#!/usr/bin/env python3
"""Opens COUNT keep-alive connections to the server, sends one request on each, prints
"ready N" once all are answered, then holds them open for HOLD seconds (bounded)."""
import argparse, resource, selectors, socket, sys, time

parser = argparse.ArgumentParser()
parser.add_argument("--port", type=int, required=True)
parser.add_argument("--count", type=int, default=10000)
parser.add_argument("--hold", type=float, default=30)
args = parser.parse_args()
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

request = b"GET /healthz HTTP/1.1\r\nHost: bench\r\n\r\n"
selector = selectors.DefaultSelector()
sockets, pending = [], 0
deadline = time.time() + 120
for _ in range(args.count):
    s = socket.socket()
    s.setblocking(False)
    s.connect_ex(("127.0.0.1", args.port))
    sockets.append(s)
    selector.register(s, selectors.EVENT_WRITE)
    pending += 1
answered = 0
while pending and time.time() < deadline:
    for key, events in selector.select(timeout=1):
        s = key.fileobj
        if events & selectors.EVENT_WRITE:
            s.send(request)
            selector.modify(s, selectors.EVENT_READ)
        else:
            data = s.recv(4096)
            if data.startswith(b"HTTP/1.1 200"):
                answered += 1
            selector.unregister(s)
            pending -= 1
print(f"ready {answered}", flush=True)
time.sleep(args.hold)
