"""The OpenAI transport's cost per call (issue 29), beside the same call straight to the
upstream in the same run: on a hit, on a miss, with TeamCache frozen (a socket that accepts
and never answers) behind the circuit breaker, and the same frozen cache without a breaker
(what every call paid before). Prints one markdown table."""

from __future__ import annotations

import argparse
import pathlib
import socket
import statistics
import sys
import threading
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "clients" / "python"))

import openai  # noqa: E402

from teamcache import CircuitBreaker, TeamCache  # noqa: E402
from teamcache.openai import http_client  # noqa: E402
from tests.fake_upstream import Upstream  # noqa: E402

MESSAGES = [{"role": "user", "content": "Say hello"}]


def frozen() -> str:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(512)
    held = []
    threading.Thread(target=lambda: [held.append(listener.accept()) for _ in iter(int, 1)], daemon=True).start()
    return f"http://127.0.0.1:{listener.getsockname()[1]}"


def timings(call, count: int) -> list[float]:
    out = []
    for _ in range(count):
        started = time.perf_counter()
        call()
        out.append((time.perf_counter() - started) * 1000)
    return out


def row(name: str, samples: list[float], direct: float) -> str:
    p50 = statistics.median(samples)
    return f"| {name} | {len(samples)} | {p50:.2f} | {max(samples):.1f} | {p50 - direct:+.2f} |"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    upstream = Upstream()
    plain = openai.OpenAI(base_url=upstream.url, api_key="sk-bench", max_retries=0)
    direct = timings(lambda: plain.chat.completions.create(model="gpt-x", messages=MESSAGES), args.calls)
    base = statistics.median(direct)
    cache = TeamCache(args.url, args.token)
    cached = openai.OpenAI(base_url=upstream.url, api_key="sk-bench", max_retries=0,
                           http_client=http_client("bench-transport", cache))
    prompts = iter(range(10**9))
    misses = timings(lambda: cached.chat.completions.create(
        model="gpt-x", messages=[{"role": "user", "content": f"miss {next(prompts)}"}]), args.calls)
    cached.chat.completions.create(model="gpt-x", messages=MESSAGES)
    hits = timings(lambda: cached.chat.completions.create(model="gpt-x", messages=MESSAGES), args.calls)
    down = frozen()
    broken = openai.OpenAI(base_url=upstream.url, api_key="sk-bench", max_retries=0,
                           http_client=http_client("bench-transport", TeamCache(down, args.token,
                                                                                circuit_breaker=CircuitBreaker(cooldown=3600))))
    first_frozen = timings(lambda: broken.chat.completions.create(model="gpt-x", messages=MESSAGES), 1)
    open_frozen = timings(lambda: broken.chat.completions.create(model="gpt-x", messages=MESSAGES), args.calls)
    # Before: no breaker and the old deadline (5 s a lookup), as every call paid it.
    before = openai.OpenAI(base_url=upstream.url, api_key="sk-bench", max_retries=0,
                           http_client=http_client("bench-transport", TeamCache(down, args.token, circuit_breaker=False,
                                                                                lookup_timeout=5.0)))
    before_frozen = timings(lambda: before.chat.completions.create(model="gpt-x", messages=MESSAGES), 3)
    print("| chat completion, non-streamed | calls | p50 ms | max ms | added p50 ms vs direct |")
    print("| --- | --- | --- | --- | --- |")
    print(row("straight to the upstream (anchor)", direct, base))
    print(row("through the transport, hit", hits, base))
    print(row("through the transport, miss (lookup + call + upsert)", misses, base))
    print(row("TeamCache frozen: the first call (lookup deadline 0.5 s)", first_frozen, base))
    print(row("TeamCache frozen: every later call (breaker open)", open_frozen, base))
    print(row("TeamCache frozen, before: no breaker, 5 s deadline, every call", before_frozen, base))
    upstream.close()


if __name__ == "__main__":
    main()
