"""A real ``teamcache serve`` on a real PostgreSQL for the whole session: the binary's embedded
cluster under a fresh data folder (as scripts/contract-check.sh starts one), and a token."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from .fake_upstream import Upstream

REPO = pathlib.Path(__file__).resolve().parents[3]


def _binary() -> str:
    explicit = os.environ.get("TEAMCACHE_BINARY")
    if explicit:
        return explicit
    for build in ("release", "debug"):
        candidate = REPO / ".build" / build / "teamcache"
        if candidate.exists():
            return str(candidate)
    pytest.exit("no teamcache binary: run `swift build -c release --product teamcache` or set TEAMCACHE_BINARY")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Server:
    """A running ``teamcache serve`` with its own data folder."""

    def __init__(self, binary: str, data: pathlib.Path, port: int, env: dict[str, str] | None = None):
        self.binary, self.data, self.port = binary, data, port
        self.url = f"http://127.0.0.1:{port}"
        self.log = open(data / "serve.log", "wb")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            [binary, "serve", "--listen", f"127.0.0.1:{port}", "--data-dir", str(data / "pg"), "--log-level", "warn"],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self.log, env={**os.environ, **(env or {})})
        self._wait_listening()

    def _wait_listening(self) -> None:
        deadline = time.monotonic() + 120
        assert self.process.stdout is not None
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if b"listening on" in line:
                return
            if not line and self.process.poll() is not None:
                break
        raise RuntimeError(f"teamcache serve did not start; see {self.data / 'serve.log'}")

    def token(self, scopes: str = "read,write,admin", namespaces: str = "*") -> str:
        out = subprocess.run([self.binary, "tokens", "create", "--name", f"py-{uuid.uuid4().hex[:8]}",
                              "--namespaces", namespaces, "--scopes", scopes, "--data-dir", str(self.data / "pg")],
                             check=True, capture_output=True, stdin=subprocess.DEVNULL)
        return out.stdout.decode().strip().splitlines()[-1]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.log.close()


@pytest.fixture(scope="session")
def gateway_upstream() -> Iterator[Upstream]:
    """The fake model upstream the session server's gateway forwards to."""
    fake = Upstream()
    yield fake
    fake.close()


SERVER_HELD_KEY = "sk-server-held-python-0123"


def _upstreams_file(folder: pathlib.Path, upstream: Upstream) -> pathlib.Path:
    """``fake`` (OpenAI-shaped), ``fakeclaude`` (Anthropic-shaped), ``keyed`` and ``keyedclaude``
    (the same, with a server-held key) at the fake upstream."""
    key = folder / "upstream.key"
    key.write_text(SERVER_HELD_KEY + "\n")
    root = f"http://127.0.0.1:{upstream.port}"
    path = folder / "upstreams.json"
    path.write_text(json.dumps({
        "fake": {"url": root + "/v1", "kind": "openai"},
        "fakeclaude": {"url": root, "kind": "anthropic"},
        "keyed": {"url": root + "/v1", "kind": "openai", "key_file": str(key)},
        "keyedclaude": {"url": root, "kind": "anthropic", "key_file": str(key)},
    }))
    return path


@pytest.fixture(scope="session")
def server(gateway_upstream: Upstream) -> Iterator[Server]:
    data = pathlib.Path(tempfile.mkdtemp(prefix="teamcache-py-"))
    data.chmod(0o755)  # the embedded cluster runs as the postgres user
    upstreams = _upstreams_file(data, gateway_upstream)
    running = Server(_binary(), data, free_port(), env={"TEAMCACHE_UPSTREAMS_FILE": str(upstreams)})
    try:
        yield running
    finally:
        running.stop()
        shutil.rmtree(data, ignore_errors=True)


def eventually(probe, timeout: float = 15.0, every: float = 0.2):
    """Polls `probe` until it returns a truthy value (stats lag the access flush, 2 s)."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(every)


@pytest.fixture(scope="session")
def token(server: Server) -> str:
    return server.token()


@pytest.fixture
def namespace() -> str:
    """A namespace of the test's own: tests share the server and keep apart by namespace."""
    return f"py-{uuid.uuid4().hex[:12]}"


# Names the ``resolver`` fixture answers for: one whose lookup hangs, one not found, one slower
# than a lookup deadline, one answered within it, one whose first address is 127.0.0.2.
HUNG = "hung.teamcache.test"
MISSING = "missing.teamcache.test"
SLOW = "slow.teamcache.test"
DELAYED = "delayed.teamcache.test"
TWO_ADDRESSES = "two-addresses.teamcache.test"


@pytest.fixture
def resolver(monkeypatch):
    """``socket.getaddrinfo`` with HUNG hanging (until released, at most 20 s), MISSING not
    found, SLOW and DELAYED naming 127.0.0.1 after 0.8 s and 0.15 s, TWO_ADDRESSES naming
    127.0.0.2 then 127.0.0.1; the lookups of HUNG, SLOW and DELAYED are counted."""
    real = socket.getaddrinfo
    release = threading.Event()
    asked: list[str] = []

    def getaddrinfo(host, *args, **kwargs):
        if isinstance(host, bytes):  # asyncio's lookup, through anyio, asks with the name encoded
            host = host.decode("ascii")
        if host == HUNG:
            asked.append(host)
            release.wait(20)
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        if host == MISSING:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        if host == SLOW:
            asked.append(host)
            time.sleep(0.8)  # slower than the lookup deadline, then an answer
            return real("127.0.0.1", *args, **kwargs)
        if host == DELAYED:
            asked.append(host)
            time.sleep(0.15)
            return real("127.0.0.1", *args, **kwargs)
        if host == TWO_ADDRESSES:
            return real("127.0.0.2", *args, **kwargs) + real("127.0.0.1", *args, **kwargs)
        return real(host, *args, **kwargs)

    from teamcache import _resolve

    _resolve._resolver.forget()  # no lookup of another test's
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    yield asked
    release.set()
    _resolve._resolver.forget()
