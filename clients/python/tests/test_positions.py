"""Reading one's own writes (``read_your_writes=True``) against a real server that has a read
database configured, so its writes answer ``TeamCache-Position``."""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator

import httpx
import pytest

from teamcache import TeamCache
from teamcache._positions import parse

from .conftest import Server, free_port


@pytest.fixture(scope="module")
def positioned(server: Server) -> Iterator[Server]:
    """A second ``serve`` on the session server's embedded cluster, naming that same cluster as
    its read database: not a standby (its probe says so, and it is never read from), but the
    setting makes every write answer its WAL position."""
    socket_folder = urllib.parse.quote(str(server.data / "pg" / "run"), safe="")
    url = f"postgresql://postgres@{socket_folder}:5432/teamcache"
    second = Server(server.binary, server.data, free_port(), env={"TEAMCACHE_READ_DATABASE_URL": url})
    try:
        yield second
    finally:
        second.stop()


def recording_client(base_url: str, token: str, sent: list[httpx.Request]) -> httpx.Client:
    return httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {token}"},
                        event_hooks={"request": [sent.append]})


def test_reads_name_the_last_writes_position(positioned: Server, token: str, namespace: str) -> None:
    sent: list[httpx.Request] = []
    with TeamCache(positioned.url, token, read_your_writes=True,
                   http_client=recording_client(positioned.url, token, sent)) as client:
        assert client.last_position is None
        client.put(namespace, "k", b"v1")
        first = client.last_position
        assert first is not None and parse(first) is not None, first
        entry = client.get(namespace, "k")
        assert entry is not None and entry.body == b"v1"
        assert sent[-1].headers.get("TeamCache-Min-Position") == first
        client.upsert(namespace, {"model": "m", "prompt": "p"}, "answer")
        second = client.last_position
        assert second is not None and parse(second) >= parse(first)
        assert client.lookup(namespace, {"model": "m", "prompt": "p"}).hit
        assert sent[-1].headers.get("TeamCache-Min-Position") == second
        # Writes themselves do not name a position; a DELETE answers one too.
        assert "TeamCache-Min-Position" not in sent[-2].headers
        assert client.delete(namespace, "k") is True
        assert parse(client.last_position) >= parse(second)


def test_without_the_option_nothing_is_sent(positioned: Server, token: str, namespace: str) -> None:
    sent: list[httpx.Request] = []
    with TeamCache(positioned.url, token, http_client=recording_client(positioned.url, token, sent)) as client:
        client.put(namespace, "k", b"v")
        assert client.get(namespace, "k") is not None
        assert client.last_position is None
        assert all("TeamCache-Min-Position" not in request.headers for request in sent)


def test_a_server_without_a_read_database_answers_no_position(server: Server, token: str, namespace: str) -> None:
    with TeamCache(server.url, token, read_your_writes=True) as client:
        client.put(namespace, "k", b"v")
        assert client.last_position is None
        assert client.get(namespace, "k") is not None


def test_positions_parse_only_postgresql_form() -> None:
    assert parse("16/B374D848") == 0x16_B374_D848
    for bad in (None, "", "/", "1/", "/1", "1/2/3", "123456789/0", "g/0", "0x1/0"):
        assert parse(bad) is None, bad

