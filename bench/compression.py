#!/usr/bin/env python3
"""What TEAMCACHE_COMPRESSION_LEVEL trades: stored bytes against deflate time, level by level.

Not a ratio against an anchor: a table for choosing a level. Two bodies, compressed with the
service's stream settings for an uploaded body (gzip wrapper, zlib memory level 5 for bodies
up to 64 KiB; a new stream each, where the service resets a kept one, which gives the same
output):
- LLM-shaped answers: English prose (this machine's license texts, 80-1,200 words) in an
  OpenAI chat.completion envelope, 400 of them (~3.4 KB);
- the PUT benches' body (bench/lua/put.lua: ~1.7 KB of repetitive JSON).
Python's zlib module is the system's libz, the one the service links (the version is printed);
the cost a call of an empty body (Python's, and a new stream's set-up) is measured and taken off.
Run: python3 bench/compression.py
"""
import glob
import json
import random
import time
import zlib

LEVELS = (1, 2, 3, 4, 5, 6, 9)


def deflate(body: bytes, level: int) -> bytes:
    stream = zlib.compressobj(level, zlib.DEFLATED, 31, 5)
    return stream.compress(body) + stream.flush()


def llm_answers(count: int) -> list[bytes]:
    rng = random.Random(7)
    words: list[str] = []
    for path in sorted(glob.glob("/usr/share/common-licenses/*")):
        if "GPL" in path or "Apache" in path:
            with open(path, errors="ignore") as text:
                words += text.read().split()
    if len(words) < 2000:
        raise SystemExit("no English prose to build answers from: /usr/share/common-licenses (Debian's base-files)")
    answers = []
    for n in range(count):
        length = rng.choice([80, 200, 400, 800, 1200])
        start = rng.randrange(len(words) - length)
        answer = {
            "id": f"chatcmpl-{rng.getrandbits(96):024x}", "object": "chat.completion", "created": 1765000000 + n,
            "model": "gpt-4o-mini-2024-07-18",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": " ".join(words[start:start + length]),
                                                 "refusal": None}, "logprobs": None, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": rng.randint(10, 900), "completion_tokens": length * 4 // 3},
            "system_fingerprint": f"fp_{rng.getrandbits(40):010x}"}
        answers.append(json.dumps(answer).encode())
    return answers


def bench_body() -> bytes:
    rng = random.Random(7)
    items = [f'{{"id":{i},"name":"item {i}","score":{rng.randint(1, 1000)},"tags":["alpha","beta"],"ok":true}}'
             for i in range(1, 25)]
    return ("[" + ",".join(items) + "]").encode()


def seconds_a_body(bodies: list[bytes], level: int, calls: int) -> float:
    rounds = max(1, calls // len(bodies))
    best = float("inf")
    for _ in range(3):  # the best of three: this machine is shared and noisy
        started = time.perf_counter()
        for _ in range(rounds):
            for body in bodies:
                deflate(body, level)
        best = min(best, (time.perf_counter() - started) / (rounds * len(bodies)))
    return best


def main() -> None:
    overhead = seconds_a_body([b""], 6, 20000)
    print(f"zlib {zlib.ZLIB_RUNTIME_VERSION}; an empty body's cost a call, taken off: {overhead * 1e6:.1f} µs")
    for name, bodies in (("LLM-shaped answers", llm_answers(400)), ("the PUT benches' body", [bench_body()])):
        raw = sum(map(len, bodies)) / len(bodies)
        print(f"\n{name}: {len(bodies)} bodies, {raw:,.0f} bytes each\n")
        print("| level | stored bytes a body | of level 6's | deflate µs a body | of level 6's |")
        print("| --- | --- | --- | --- | --- |")
        rows = {}
        for level in LEVELS:
            stored = sum(len(deflate(body, level)) for body in bodies) / len(bodies)
            rows[level] = (stored, max(0.0, seconds_a_body(bodies, level, 8000) - overhead) * 1e6)
        for level, (stored, micros) in rows.items():
            print(f"| {level} | {stored:,.0f} | {stored / rows[6][0]:.3f} | {micros:.1f} | {micros / rows[6][1]:.2f} |")


if __name__ == "__main__":
    main()
