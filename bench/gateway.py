"""The gateway's measurements that wrk cannot make (bench/gateway.sh runs them):

- ``latency``: what a miss through the gateway adds to a call straight to the upstream
  (each call a new prompt, so a real miss that is stored), whole and streamed (time to the
  first event), interleaved so both see the same machine;
- ``burst``: CLIENTS identical new calls at once over the given ports; how many reached the
  upstream (read from the fake upstream's ``/_test/calls``);
- ``inflight``: COUNT streamed calls held open at once through the gateway (the upstream
  holds each for a few seconds); the service's threads and RSS before and while they are.

Only the standard library: the numbers are the service's, not a client library's."""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import statistics
import threading
import time
import urllib.parse
import urllib.request
import uuid


def body(prompt: str, stream: bool = False, model: str = "gpt-4o-mini") -> bytes:
    document = {"model": model, "messages": [{"role": "user", "content": prompt}]}
    if stream:
        document["stream"] = True
    return json.dumps(document).encode()


class Caller:
    """One kept-alive connection to a base URL (`http://host:port/prefix`)."""

    def __init__(self, base: str, headers: dict[str, str]) -> None:
        url = urllib.parse.urlsplit(base)
        self.prefix = url.path.rstrip("/")
        self.connection = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
        self.headers = {"Content-Type": "application/json", **headers}

    def call(self, path: str, data: bytes) -> tuple[float, float, int, str]:
        """Seconds to the first body byte and to the end, the status, and X-TeamCache."""
        started = time.perf_counter()
        self.connection.request("POST", self.prefix + path, body=data, headers=self.headers)
        response = self.connection.getresponse()
        response.read1(1) if hasattr(response, "read1") else response.read(1)
        first = time.perf_counter() - started
        response.read()
        return first, time.perf_counter() - started, response.status, response.getheader("X-TeamCache", "")


def latency(args: argparse.Namespace) -> None:
    gateway = Caller(args.gateway, {"TeamCache-Authorization": f"Bearer {args.token}"})
    direct = Caller(args.direct, {"Authorization": "Bearer sk-bench"})
    rows = []
    for stream in (False, True):
        through, straight = [], []
        for index in range(args.calls):
            prompt = f"bench {uuid.uuid4().hex}"
            # Alternate which goes first, so neither always meets a warmer machine.
            pair = [(gateway, through), (direct, straight)]
            for caller, times in pair if index % 2 == 0 else reversed(pair):
                first, whole, status, mark = caller.call("/chat/completions", body(prompt + str(id(caller)), stream))
                assert status == 200, status
                if caller is gateway:
                    assert mark == "miss", mark
                times.append(first if stream else whole)
        p50_through, p50_straight = statistics.median(through) * 1e3, statistics.median(straight) * 1e3
        rows.append((stream, p50_straight, p50_through))
    for stream, straight, through in rows:
        what = "streamed miss, time to first event" if stream else "miss, whole answer"
        print(f"| {what} | {straight:.2f} | {through:.2f} | {through - straight:+.2f} |")


def burst(args: argparse.Namespace) -> None:
    ports = [int(port) for port in args.ports.split(",")]
    prompt = f"slow burst {uuid.uuid4().hex}"
    data = body(prompt, stream=args.stream)
    ready, go = threading.Barrier(args.clients + 1), threading.Event()
    statuses: list[int] = []
    lock = threading.Lock()

    def one(index: int) -> None:
        caller = Caller(f"http://127.0.0.1:{ports[index % len(ports)]}{args.prefix}", args.header_map)
        try:
            caller.connection.connect()
        except OSError:
            pass  # counted as failed below; the others must not wait for it
        ready.wait()
        go.wait()
        try:
            status = caller.call(args.path, data)[2]
        except Exception:  # noqa: BLE001 - a failed caller is counted, not raised
            status = 0
        with lock:
            statuses.append(status)

    threads = [threading.Thread(target=one, args=(index,)) for index in range(args.clients)]
    for thread in threads:
        thread.start()
    ready.wait()
    go.set()
    for thread in threads:
        thread.join()
    calls = json.load(urllib.request.urlopen(f"{args.upstream}/_test/calls"))
    made = sum(prompt in (call.get("text") or "") for call in calls)
    failed = sum(status != 200 for status in statuses)
    print(f"{made} {failed}")


async def hold_one(port: int, path: str, token: str, opened: asyncio.Event, release: asyncio.Event,
                   heads: list[int]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
    data = body(f"hold {uuid.uuid4().hex}", stream=True)
    writer.write(f"POST {path} HTTP/1.1\r\nHost: bench\r\nTeamCache-Authorization: Bearer {token}\r\n"
                 f"Content-Type: application/json\r\nCache-Control: no-store\r\n"
                 f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    heads.append(int(head.split(b" ", 2)[1]))
    await reader.read(1)  # the first event: the call is streaming
    opened.set()
    await release.wait()
    writer.close()


def process_status(pid: int) -> tuple[int, float]:
    fields = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            fields[name] = value.strip()
    return int(fields["Threads"]), int(fields["VmRSS"].split()[0]) / 1024


async def inflight_async(args: argparse.Namespace) -> None:
    threads_before, rss_before = process_status(args.pid)
    release = asyncio.Event()
    heads: list[int] = []
    events = [asyncio.Event() for _ in range(args.count)]
    tasks = []
    for index in range(args.count):
        tasks.append(asyncio.create_task(hold_one(args.port, args.path, args.token, events[index], release, heads)))
        if index % 100 == 99:
            await asyncio.sleep(0.05)  # the listen backlog: connect in waves
    await asyncio.wait_for(asyncio.gather(*(event.wait() for event in events)), timeout=60)
    threads_during, rss_during = process_status(args.pid)
    release.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    ok = sum(status == 200 for status in heads)
    print(f"{threads_before} {rss_before:.1f} {threads_during} {rss_during:.1f} {ok}")


def main() -> None:
    parser = argparse.ArgumentParser()
    commands = parser.add_subparsers(dest="command", required=True)
    one = commands.add_parser("latency")
    one.add_argument("--gateway", required=True)
    one.add_argument("--direct", required=True)
    one.add_argument("--token", required=True)
    one.add_argument("--calls", type=int, default=200)
    two = commands.add_parser("burst")
    two.add_argument("--ports", required=True)
    two.add_argument("--prefix", default="")
    two.add_argument("--path", default="/chat/completions")
    two.add_argument("--header", action="append", default=[])
    two.add_argument("--clients", type=int, default=64)
    two.add_argument("--stream", action="store_true")
    two.add_argument("--upstream", required=True)
    three = commands.add_parser("inflight")
    three.add_argument("--port", type=int, required=True)
    three.add_argument("--path", required=True)
    three.add_argument("--token", required=True)
    three.add_argument("--pid", type=int, required=True)
    three.add_argument("--count", type=int, default=2000)
    args = parser.parse_args()
    if args.command == "latency":
        latency(args)
    elif args.command == "burst":
        args.header_map = dict(header.split(": ", 1) for header in args.header)
        burst(args)
    else:
        asyncio.run(inflight_async(args))


if __name__ == "__main__":
    main()
