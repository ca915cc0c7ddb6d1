"""The dashboard at /ui/ in a real Chromium (Debian's, driven by Playwright) against a real
``teamcache serve`` on its embedded PostgreSQL, with history seeded two ways: live traffic
through the API (counted by the service as it happens) and rollup rows three days back (as
the counter fold writes them). Every figure checked is read back from the page's DOM/SVG
and compared with a count made here, by hand.

Screenshots of each page go to $DASHBOARD_SCREENSHOTS (default: build/dashboard-screenshots)."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, sync_playwright

REPO = pathlib.Path(__file__).resolve().parents[2]
SHOTS = pathlib.Path(os.environ.get("DASHBOARD_SCREENSHOTS", REPO / "build" / "dashboard-screenshots"))

# What the seeding does, counted by hand.
LIVE_HITS, LIVE_MISSES = 7, 3
LOCAL_HITS = 3  # of the live hits: answered by a client's local tier and reported (POST /hits)
TOKENS_IN, TOKENS_OUT = 1000, 200  # per entry, so per hit
PRICE_IN, PRICE_OUT = 1.0, 2.0  # per million tokens (the prices file below)
LIVE_COST = LIVE_HITS * (TOKENS_IN * PRICE_IN + TOKENS_OUT * PRICE_OUT) / 1e6
PAST = {"hits": 100, "misses": 20, "input": 5000, "output": 1000, "cost_nanos": 250_000_000}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def binary() -> str:
    explicit = os.environ.get("TEAMCACHE_BINARY")
    if explicit:
        return explicit
    for build in ("release", "debug"):
        candidate = REPO / ".build" / build / "teamcache"
        if candidate.exists():
            return str(candidate)
    pytest.exit("no teamcache binary: build one or set TEAMCACHE_BINARY")


class Service:
    def __init__(self) -> None:
        self.binary = binary()
        self.root = pathlib.Path(tempfile.mkdtemp(prefix="tc-ui-", dir="/tmp"))
        self.root.chmod(0o755)  # run as root, the cluster runs as postgres: it must reach its folder
        self.data = self.root / "pg"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        prices = self.root / "prices.json"
        prices.write_text(json.dumps({"currency": "USD", "prices": [
            {"model": "shop-model", "input": PRICE_IN, "output": PRICE_OUT}]}))
        self.log = open(self.root / "serve.log", "wb")  # noqa: SIM115 - closed in stop()
        env = {**os.environ, "TEAMCACHE_PRICES_FILE": str(prices), "TEAMCACHE_ACCESS_FLUSH_INTERVAL": "200ms"}
        self.process = subprocess.Popen(
            [self.binary, "serve", "--listen", f"127.0.0.1:{self.port}", "--data-dir", str(self.data),
             "--log-level", "warn"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self.log, env=env)
        assert self.process.stdout is not None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if b"listening on" in line:
                return
            if not line and self.process.poll() is not None:
                break
        raise RuntimeError(f"teamcache serve did not start; see {self.root / 'serve.log'}")

    def token(self, scopes: str, namespaces: str = "*") -> str:
        out = subprocess.run([self.binary, "tokens", "create", "--name", f"ui-{uuid.uuid4().hex[:8]}",
                              "--namespaces", namespaces, "--scopes", scopes, "--data-dir", str(self.data)],
                             check=True, capture_output=True, stdin=subprocess.DEVNULL)
        return out.stdout.decode().strip().splitlines()[-1]

    def sql(self, statement: str) -> None:
        """Runs SQL on the embedded cluster through its private socket (this test runs as root or its owner)."""
        subprocess.run(["psql", "-q", "-v", "ON_ERROR_STOP=1", "-h", str(self.data / "run"), "-U", "postgres",
                        "-d", "teamcache", "-c", statement], check=True, capture_output=True, stdin=subprocess.DEVNULL)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()
        shutil.rmtree(self.root, ignore_errors=True)


class Seeded:
    def __init__(self, service: Service) -> None:
        self.service = service
        self.admin = service.token("read,write,admin")
        self.reader = service.token("read", "shop")
        self.metrics = service.token("metrics")
        headers = {"Authorization": f"Bearer {self.admin}"}
        with httpx.Client(base_url=service.url, headers=headers, timeout=10) as client:
            for index, prompt in enumerate(["refund policy", "opening hours", "shipping"]):
                answer = client.post("/v1/caches/shop/upsert", json={
                    "model": "shop-model", "prompt": prompt, "response": f"answer {index}", "tags": ["faq"],
                    "metadata": {"input_tokens": TOKENS_IN, "output_tokens": TOKENS_OUT}})
                assert answer.status_code == 201, answer.text
            order = {"order": 42, "items": [{"sku": "A-1", "qty": 2}], "status": "shipped"}
            answer = client.put("/v1/caches/shop/entries/order-42", content=json.dumps(order).encode(),
                                headers={"Content-Type": "application/json", "Cache-Tag": "orders"})
            assert answer.status_code == 201, answer.text
            etag = ""
            for _ in range(LIVE_HITS - LOCAL_HITS):
                found = client.post("/v1/caches/shop/lookup", json={"model": "shop-model", "prompt": "refund policy"})
                assert found.json()["hit"]
                etag = found.json()["etag"]
                key = found.json()["key"]
            # The rest as a client's tier reports them (on the version it holds: priced).
            reported = client.post("/v1/caches/shop/hits", json={"hits": [{"key": key, "etag": etag,
                                                                             "count": LOCAL_HITS}]})
            assert reported.json() == {"counted": LOCAL_HITS, "priced": LOCAL_HITS}, reported.text
            for index in range(LIVE_MISSES):
                assert not client.post("/v1/caches/shop/lookup", json={"model": "shop-model",
                                                                        "prompt": f"absent {index}"}).json()["hit"]
            assert client.put("/v1/caches/docs/entries/readme", content=b"hello").status_code == 201
            for _ in range(2):
                assert client.get("/v1/caches/docs/entries/readme").status_code == 200
            # Written, never looked up: no hit ratio to show.
            assert client.put("/v1/caches/quiet/entries/k", content=b"q").status_code == 201
        # Three days back, as the fold writes an hour's rollup.
        service.sql(f"""
            INSERT INTO stats_history (namespace, step, t, hits, misses, input_tokens_saved, output_tokens_saved,
                                       cost_saved_nanos, stored_bytes, entries)
            VALUES ('shop', 3600, date_bin('1 hour', now() - interval '3 days', timestamptz 'epoch'), {PAST['hits']},
                    {PAST['misses']}, {PAST['input']}, {PAST['output']}, {PAST['cost_nanos']}, 0, 0)""")
        # Wait for the access flush: the live hits are counted on the service's side.
        deadline = time.monotonic() + 10
        with httpx.Client(base_url=service.url, headers=headers, timeout=10) as client:
            while time.monotonic() < deadline:
                stats = client.get("/v1/caches/shop/stats").json()
                lookups = stats["lookups"]
                if (lookups["hit"], lookups["miss"], lookups["local"]) == (LIVE_HITS, LIVE_MISSES, LOCAL_HITS):
                    break
                time.sleep(0.1)
            else:
                raise AssertionError(f"the live lookups were not counted: {stats}")


@pytest.fixture(scope="module")
def seeded() -> Iterator[Seeded]:
    service = Service()
    try:
        yield Seeded(service)
    finally:
        service.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    executable = os.environ.get("CHROMIUM", shutil.which("chromium") or "/usr/bin/chromium")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        yield launched
        launched.close()


class Watched:
    """A fresh page (its own context: own sessionStorage, no cookies) whose console errors and
    uncaught exceptions are collected; a test names the ones it expects."""

    def __init__(self, browser: Browser, base: str, viewport: dict[str, int] | None = None) -> None:
        self.context = browser.new_context(viewport=viewport or {"width": 1280, "height": 900})
        self.page: Page = self.context.new_page()
        self.base = base
        self.errors: list[str] = []
        self.page.on("console", self._console)
        self.page.on("pageerror", lambda error: self.errors.append(f"uncaught: {error}"))

    def _console(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.errors.append(message.text)

    def open(self, hash_: str = "#/") -> None:
        self.page.goto(f"{self.base}/ui/{hash_}")

    def sign_in(self, token: str) -> None:
        self.open()
        self.page.get_by_label("API token").fill(token)
        self.page.get_by_role("button", name="Sign in").click()
        self.ready("#/")

    def go(self, hash_: str) -> None:
        self.page.evaluate("hash => { location.hash = hash }", hash_)
        self.ready(hash_)

    def ready(self, hash_: str) -> None:
        self.page.wait_for_selector(f"#page[data-ready='{hash_}']", state="attached", timeout=15_000)

    def shot(self, name: str) -> None:
        SHOTS.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)

    def values(self, selector: str) -> list[float]:
        return [float(v) for v in self.page.eval_on_selector_all(selector, "els => els.map(e => e.dataset.value)")]

    def close(self, expected: tuple[str, ...] = ()) -> None:
        unexpected = [e for e in self.errors if not any(x in e for x in expected)]
        self.context.close()
        assert unexpected == [], unexpected


def chart(title: str) -> str:
    return f"figure.chart:has(figcaption:text-is('{title}'))"


def test_the_page_carries_the_policy_and_an_inline_script_is_blocked(seeded: Seeded, browser: Browser) -> None:
    watched = Watched(browser, seeded.service.url)
    response = watched.page.goto(f"{seeded.service.url}/ui/")
    assert response is not None and response.headers["content-security-policy"] == "default-src 'self'"
    for name in ("app.js", "style.css", "charts.js"):
        answer = httpx.get(f"{seeded.service.url}/ui/{name}")
        assert answer.status_code == 200 and answer.headers["content-security-policy"] == "default-src 'self'"
    verdict = watched.page.evaluate("""() => new Promise(resolve => {
        document.addEventListener('securitypolicyviolation', e => resolve('blocked: ' + e.violatedDirective),
                                  { once: true });
        const script = document.createElement('script');
        script.textContent = 'window.inlineRan = true';
        document.body.append(script);
        setTimeout(() => resolve(window.inlineRan ? 'ran' : 'neither'), 3000);
    })""")
    assert verdict.startswith("blocked: script-src"), verdict
    assert watched.page.evaluate("() => window.inlineRan === undefined")
    watched.close(expected=("Content Security Policy",))


def test_a_token_that_may_read_nothing_or_is_unknown_says_so(seeded: Seeded, browser: Browser) -> None:
    watched = Watched(browser, seeded.service.url)
    watched.open()
    field = watched.page.get_by_label("API token")
    watched.shot("sign-in")
    # By keyboard: focus is on the field, Enter submits.
    field.focus()
    watched.page.keyboard.type(seeded.metrics)
    watched.page.keyboard.press("Enter")
    watched.page.wait_for_selector("#message.error")
    assert "may read no namespace" in watched.page.inner_text("#message")
    field.fill("tc_" + "0" * 64)
    watched.page.get_by_role("button", name="Sign in").click()
    watched.page.wait_for_function("() => document.getElementById('message').textContent.includes('unknown')")
    assert watched.page.evaluate("() => sessionStorage.length") == 0
    assert watched.context.cookies() == []
    watched.close(expected=("status of 401", "status of 403"))


def test_a_teamcache_that_refuses_or_never_answers_is_said_to_and_the_page_goes_on(seeded: Seeded,
                                                                                    browser: Browser) -> None:
    watched = Watched(browser, seeded.service.url)
    watched.sign_in(seeded.reader)
    # Refused: every API call fails to connect (the page itself is loaded already).
    watched.page.route("**/v1/**", lambda route: route.abort("connectionrefused"))
    started = time.monotonic()
    watched.go("#/ns/shop?range=1h")
    assert "could not be reached" in watched.page.inner_text("#message")
    assert time.monotonic() - started < 5
    watched.page.unroute("**/v1/**")
    # Frozen: the process stops answering mid-session; the page says so at its deadline (8 s).
    os.kill(seeded.service.process.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        watched.page.evaluate("hash => { location.hash = hash }", "#/ns/shop?range=24h")
        watched.page.wait_for_selector("#page[data-ready='#/ns/shop?range=24h']", state="attached", timeout=20_000)
        waited = time.monotonic() - started
        assert "did not answer within 8 s" in watched.page.inner_text("#message")
        assert 7 < waited < 15, waited
        assert watched.page.evaluate("() => sessionStorage.getItem('teamcache.token')") == seeded.reader
    finally:
        os.kill(seeded.service.process.pid, signal.SIGCONT)
    # Answering again: the next view works, signed in still.
    watched.go("#/")
    assert watched.page.inner_text("#message") == ""
    watched.close(expected=("ERR_CONNECTION_REFUSED", "Failed to load resource", "signal timed out"))


def test_the_overview_lists_every_namespace_with_its_savings(seeded: Seeded, browser: Browser) -> None:
    watched = Watched(browser, seeded.service.url)
    watched.sign_in(seeded.admin)
    assert watched.page.evaluate("() => sessionStorage.getItem('teamcache.token')") == seeded.admin
    assert watched.context.cookies() == []
    rows = watched.page.eval_on_selector_all(
        "#namespaces tbody tr", "rows => rows.map(r => [...r.children].map(c => c.querySelector('[data-value]')"
        "?.dataset.value ?? c.textContent))")
    by_name = {row[0]: row for row in rows}
    assert set(by_name) == {"shop", "docs", "quiet"}
    assert by_name["quiet"][2] == "–"  # nothing looked up: not "0.0 %"
    shop = by_name["shop"]
    assert int(shop[1]) == 4  # entries
    assert abs(float(shop[2]) - LIVE_HITS / (LIVE_HITS + LIVE_MISSES)) < 1e-4
    live_tokens = LIVE_HITS * (TOKENS_IN + TOKENS_OUT)
    assert int(shop[3]) == live_tokens  # 24 h: the live hits only
    assert int(shop[4]) == live_tokens + PAST["input"] + PAST["output"]  # 30 d: and three days back
    assert abs(float(shop[5]) - LIVE_COST) < 1e-6
    assert abs(float(shop[6]) - (LIVE_COST + PAST["cost_nanos"] / 1e9)) < 1e-6
    watched.shot("overview")
    watched.close()


def test_a_namespace_draws_its_history_with_the_seeded_numbers(seeded: Seeded, browser: Browser) -> None:
    watched = Watched(browser, seeded.service.url)
    watched.sign_in(seeded.reader)
    watched.go("#/ns/shop?range=1h")
    outcomes = chart("Requests by outcome")
    hits = sum(watched.values(f"{outcomes} rect[data-series='hit']"))
    hits += sum(watched.values(f"{outcomes} rect[data-series='collapsed']"))
    local = sum(watched.values(f"{outcomes} rect[data-series='local']"))
    assert (hits, local) == (LIVE_HITS - LOCAL_HITS, LOCAL_HITS)
    figures = dict(watched.page.eval_on_selector_all(
        "#totals .figure", "els => els.map(e => [e.querySelector('dt').textContent, e.querySelector('dd').dataset.value])"))
    assert int(figures["Hits"]) == LIVE_HITS and int(figures["Answered by client tiers"]) == LOCAL_HITS
    assert sum(watched.values(f"{outcomes} rect[data-series='miss']")) == LIVE_MISSES
    tokens = chart("Tokens saved")
    assert sum(watched.values(f"{tokens} rect[data-series='input']")) == LIVE_HITS * TOKENS_IN
    assert abs(sum(watched.values(f"{chart('Cost saved (USD)')} rect")) - LIVE_COST) < 1e-6
    # The bars are drawn to scale: the tallest bar is the largest value.
    bars = watched.page.eval_on_selector_all(
        f"{outcomes} rect", "els => els.map(e => [Number(e.dataset.value), Number(e.getAttribute('height'))])")
    largest = max(bars)
    assert all(abs(height * largest[0] - value * largest[1]) < 1e-3 * largest[1] * largest[0] + 1e-6
               for value, height in bars if largest[0] > 0)
    ratio = watched.values(f"{chart('Hit ratio')} circle[data-series='hit_ratio']")
    assert ratio and abs(ratio[-1] - LIVE_HITS / (LIVE_HITS + LIVE_MISSES)) < 1e-9
    assert watched.values(f"{chart('Stored bytes')} circle[data-series='bytes']")[-1] > 0
    top = watched.page.eval_on_selector_all("#top-entries tbody tr", "rows => rows.map(r => r.textContent)")
    assert top and "refund policy" not in top[0]  # a key is shown, not the prompt
    assert watched.values("#top-entries tbody tr:first-child [data-value]") == [LIVE_HITS]
    watched.shot("namespace-1h")
    # Thirty days: the rollup three days back is there too, in its own day.
    watched.go("#/ns/shop?range=30d")
    daily = watched.values(f"{chart('Requests by outcome')} rect[data-series='hit']")
    assert len(daily) == 30  # thirty days, as the overview's "30 d" sums (not 31)
    assert sum(daily) == LIVE_HITS - LOCAL_HITS + PAST["hits"]
    assert sum(watched.values(f"{chart('Requests by outcome')} rect[data-series='local']")) == LOCAL_HITS
    assert sorted(v for v in daily if v)[-1] >= PAST["hits"]
    watched.shot("namespace-30d")
    # A phone: nothing wider than the screen.
    phone = Watched(browser, seeded.service.url, viewport={"width": 390, "height": 844})
    phone.sign_in(seeded.reader)
    phone.go("#/ns/shop?range=24h")
    assert phone.page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
    phone.shot("namespace-phone")
    phone.close()
    watched.close()


def test_the_entry_browser_finds_shows_and_deletes_with_write_scope_only(seeded: Seeded, browser: Browser) -> None:
    headers = {"Authorization": f"Bearer {seeded.admin}"}

    def exists() -> bool:
        # Through the listing, which counts no lookup (a GET of the entry would count a hit).
        listed = httpx.get(f"{seeded.service.url}/v1/caches/shop/entries", params={"prefix": "order-42"},
                           headers=headers).json()["entries"]
        return [entry["key"] for entry in listed] == ["order-42"]

    reader = Watched(browser, seeded.service.url)
    reader.sign_in(seeded.reader)
    reader.go("#/ns/shop/entries")
    reader.page.get_by_label("Key prefix").fill("order")
    reader.page.get_by_role("button", name="Find").click()
    reader.ready("#/ns/shop/entries?prefix=order")
    keys = reader.page.eval_on_selector_all("#entries tbody th", "cells => cells.map(c => c.textContent)")
    assert keys == ["order-42"]
    reader.page.get_by_role("link", name="order-42").click()
    reader.ready("#/ns/shop/entry/order-42")
    body = reader.page.inner_text("#entry-body")
    assert json.loads(body)["items"][0]["sku"] == "A-1" and '\n  "order": 42' in body  # pretty-printed
    reader.shot("entry")
    # Without write scope the delete is refused, and the entry stays.
    reader.page.get_by_role("button", name="Delete this entry").click()
    reader.page.get_by_role("dialog").get_by_role("button", name="Delete").click()
    reader.page.wait_for_selector("#message.error")
    assert "may not write" in reader.page.inner_text("#message")
    assert exists()
    reader.close(expected=("status of 403",))
    # Looking (the listing, the entry's page) counts no lookup.
    before = httpx.get(f"{seeded.service.url}/v1/caches/shop/stats", headers=headers).json()["lookups"]
    # With write scope, after the confirmation, it goes; cancelling first keeps it.
    writer = Watched(browser, seeded.service.url)
    writer.sign_in(seeded.admin)
    writer.go("#/ns/shop/entries?tag=orders")
    writer.page.get_by_role("link", name="order-42").click()
    writer.ready("#/ns/shop/entry/order-42")
    writer.page.get_by_role("button", name="Delete this entry").click()
    writer.page.get_by_role("dialog").get_by_role("button", name="Cancel").click()
    assert exists()
    writer.page.get_by_role("button", name="Delete this entry").click()
    writer.page.get_by_role("dialog").get_by_role("button", name="Delete").click()
    writer.ready("#/ns/shop/entries")
    assert not exists()
    time.sleep(0.5)  # one access flush
    after = httpx.get(f"{seeded.service.url}/v1/caches/shop/stats", headers=headers).json()["lookups"]
    assert after == before
    writer.shot("entries")
    writer.close()


def test_every_field_is_labelled_and_every_chart_described(seeded: Seeded, browser: Browser) -> None:
    watched = Watched(browser, seeded.service.url)
    watched.sign_in(seeded.admin)
    for hash_ in ("#/", "#/ns/shop?range=24h", "#/ns/shop/entries"):
        watched.go(hash_)
        unlabelled: list[Any] = watched.page.evaluate("""() => [...document.querySelectorAll('input')]
            .filter(i => !i.labels || i.labels.length === 0).map(i => i.id)""")
        assert unlabelled == [], (hash_, unlabelled)
        undescribed = watched.page.evaluate("""() => [...document.querySelectorAll('svg')]
            .filter(s => !s.getAttribute('aria-label')).length""")
        assert undescribed == 0, hash_
        nameless = watched.page.evaluate("""() => [...document.querySelectorAll('button, a')]
            .filter(b => !b.hidden && b.offsetParent !== null && !b.textContent.trim()).length""")
        assert nameless == 0, hash_
    watched.close()
