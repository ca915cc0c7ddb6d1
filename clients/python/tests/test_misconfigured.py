"""A misconfigured cache must not make a call worse off either, and must say what is wrong
without quoting a secret: a token read with its newline, one that cannot go in a header, a
user and password in the cache's URL (dropped, never sent or logged), a token missing a
scope."""

from __future__ import annotations

import logging
import traceback

import httpx
import pytest

from teamcache import ConfigurationError, LocalTier, TeamCache, TeamCacheError, TransportError, _settings
from teamcache._settings import _holds_credentials, without_credentials

from .conftest import eventually, free_port
from .stand_in import StandIn


def test_a_token_read_with_its_newline_works_and_a_broken_one_is_never_quoted(server, token, namespace):
    """A token from a file keeps its newline: trimmed, it works. One with a line break inside
    cannot go in a header (h11 would refuse the request, quoting the header in its error and in
    every traceback): it is not sent, and the refusal says why without it. A caller's own
    client carrying such a header gets an error that does not quote it either."""
    read = TeamCache(server.url, token + "\n")
    read.put(namespace, "newline", b"kept")
    assert read.get(namespace, "newline").body == b"kept"
    read.close()
    secret = "tc_" + "7" * 30 + "\n" + "8" * 30

    def quoted(text: str) -> bool:
        return "7" * 30 in text or "8" * 30 in text

    tier = LocalTier(feed_wait=2)
    broken = TeamCache(server.url, secret, local_tier=tier, max_retries=0, backoff=0.01, timeout=2)
    try:
        with pytest.raises(TeamCacheError) as refused:
            broken.get(namespace, "newline")
        said = "".join(traceback.format_exception(refused.value))
        assert "401" in said and not quoted(said), said
        assert broken.cached(namespace, {"model": "m", "prompt": "broken token"}, lambda: "paid") == "paid"
        health = broken.cache_health
        assert "cannot carry" in (health.misconfiguration or "") and not quoted(repr(health)), health
        assert eventually(lambda: (tier.follower_error(namespace) or "").startswith("ProblemError: 401"), timeout=10)
    finally:
        broken.close()
    own = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {secret}"})
    lent = TeamCache(server.url, None, http_client=own, max_retries=0)
    with pytest.raises(TransportError) as unsent:
        lent.get(namespace, "newline")
    said = "".join(traceback.format_exception(unsent.value))
    assert "LocalProtocolError" in said and not quoted(said), said
    lent.close()
    own.close()
    with_password = TeamCache(f"http://user:hun@ter2@127.0.0.1:{free_port()}", token, max_retries=0)
    with pytest.raises(TransportError) as unreachable:
        with_password.get(namespace, "k")
    said = str(unreachable.value)
    assert "ter2" not in said and "hun@" not in said and "http://127.0.0.1:" in said, said
    with_password.close()


@pytest.mark.parametrize(("url", "shown", "held"), [
    ("http://u:p@h:8080/prefix", "http://h:8080/prefix", True),
    ("HTTPS://u:hun@ter2@h", "HTTPS://h", True),
    ("u:p@h:8080", "h:8080", True),
    ("//u:p@h", "//h", True),
    ("http://u:pa%40ss@[::1]:8080", "http://[::1]:8080", True),
    ("http://@h", "http://h", False),
    ("http://h/proxy//u:p@x", "http://h/proxy//u:p@x", False),
    ("http://h?next=//a@b", "http://h?next=//a@b", False),
    ("http://h#a@b", "http://h#a@b", False),
    ("http://127.0.0.1:8080", "http://127.0.0.1:8080", False),
    ("localhost:8080", "localhost:8080", False),
    ("http:\\\\u:p@h", "http:\\\\u:p@h", False),
])
def test_the_user_and_password_found_in_a_url_are_its_authoritys_only(url, shown, held):
    assert without_credentials(url) == shown
    assert _holds_credentials(url) is held


def test_a_user_and_password_in_the_url_are_dropped_never_sent_or_logged(server, token, namespace, caplog,
                                                                         monkeypatch):
    """httpx would turn a URL's user and password into Basic auth in place of the bearer token
    (every call refused) and log the URL, password and all, with each request. They are
    dropped: the token works, no log line or error holds them, and a 401 names them."""
    monkeypatch.delenv("TEAMCACHE_TOKEN", raising=False)
    monkeypatch.setattr(_settings, "_warned_urls", set())  # warned once a process: this test's first
    caplog.set_level(logging.DEBUG)
    with_user = server.url.replace("//", "//someone:pa%40ss@wo@rd@")
    tier = LocalTier(feed_wait=2)
    cache = TeamCache(with_user + "/", token, local_tier=tier, max_retries=0)
    try:
        cache.put(namespace, "userinfo", b"kept")
        assert cache.get(namespace, "userinfo").body == b"kept"
        feed = tier._feeds[namespace]  # live, or its last call failed (a late call is no failure)
        assert eventually(lambda: tier.live(namespace) or feed.last_error is not None, timeout=10)
        assert feed.last_error is None, tier.follower_error(namespace)
        # The tier's own client was given the URL without them: its 401s would still say so.
        assert tier._client is not None and tier._client._settings.url_problem is not None
    finally:
        cache.close()
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "GET " + server.url in logged or "PUT " + server.url in logged, logged  # httpx logged its requests
    assert "someone" not in logged and "rd@" not in logged, logged
    assert logged.count("user and password are not sent") == 1, logged  # once, by the client (not its tier)
    checked = TeamCache(with_user, None, max_retries=0).check(namespace)
    assert checked.reachable, checked
    assert f"read on {namespace}: the token is missing; the URL's user and password are not sent" \
        in checked.problems[0], checked
    assert checked.problems[1].startswith(f"write on {namespace}: not asked, the cache is stopped: the token is "
                                          "missing; the URL's user"), checked
    anonymous = TeamCache(with_user, None, max_retries=0)
    with pytest.raises(TeamCacheError) as refused:
        anonymous.get(namespace, "userinfo")
    said = "".join(traceback.format_exception(refused.value)) + repr(anonymous.cache_health)
    assert "401" in said and "the token is missing; the URL's user and password are not sent" in said, said
    assert "someone" not in said and "rd@" not in said, said
    anonymous.close()


def test_dropped_credentials_are_warned_of_once_a_url(caplog, monkeypatch):
    """A process making a client per request (a serverless handler) logs the warning once for
    its cache's URL, whatever the password; another URL is warned of in its turn, and every
    client still says why in its own 401s."""
    monkeypatch.setattr(_settings, "_warned_urls", set())
    caplog.set_level(logging.WARNING)
    clients = [TeamCache(f"http://user:secret{n}@cache.invalid:8080", "tc_x", max_retries=0) for n in range(3)]
    other = TeamCache("http://user:secret@other.invalid:8080", "tc_x", max_retries=0)
    warned = [record.getMessage() for record in caplog.records
              if "user and password are not sent" in record.getMessage()]
    assert [message.split(":8080")[0] for message in warned] == [
        "TeamCache at http://cache.invalid", "TeamCache at http://other.invalid"], warned
    assert all(client._settings.url_problem is not None for client in [*clients, other])
    assert all("secret" not in message for message in warned), warned
    for client in [*clients, other]:
        client.close()


def test_check_reports_each_missing_scope(server, namespace):
    reader = TeamCache(server.url, server.token(scopes="read", namespaces=namespace))
    result = reader.check(namespace)
    assert result.reachable and result.ready and result.read and not result.write
    assert any("write" in problem for problem in result.problems)
    full = TeamCache(server.url, server.token(scopes="read,write", namespaces=namespace))
    assert full.check(namespace).ok
    with pytest.raises(ConfigurationError):
        TeamCache(server.url, server.token(scopes="read", namespaces=namespace), strict=True).check(namespace)
    down = TeamCache(f"http://127.0.0.1:{free_port()}", "t").check(namespace)
    assert not down.reachable and not down.ok


@pytest.mark.parametrize("document", [b'{"hit":true,"response":123}', b'{"hit":true}',
                                      b'{"hit":true,"response":"x","metadata":[1]}',
                                      b'{"hit":false,"retry_after":"soon"}', b'{"hit":true,"response":"x","age":true}'])
def test_a_hit_of_the_wrong_shape_is_the_caches_failure_not_the_callers(document):
    """A proxy or another service at the URL answering a lookup with the wrong types: the call
    is made and its answer returned (the hit was not handed on, to fail in the caller's code),
    and the breaker opens at once: the calls after it do not ask that service again."""
    asked: list[str] = []
    wrong = StandIn(lambda _method, path: asked.append(path) or (200, {}, document))
    cache = TeamCache(wrong.url, "tc_x")
    try:
        with pytest.raises(TransportError, match="malformed"):
            cache.lookup("ns", {"model": "m", "prompt": "q"})
        assert cache.cache_health.state == "open" and len(asked) == 1
        assert cache.cached("ns", {"model": "m", "prompt": "p"}, lambda: "paid") == "paid"
        assert len(asked) == 1, "the open breaker asked the wrong service again"
    finally:
        cache.close()
        wrong.close()


def test_a_result_the_write_cannot_carry_is_returned_not_raised(server, token, namespace, caplog):
    """The model was paid: a result with a lone surrogate (no UTF-8 for it), or usage numbers
    JSON has no form for, is returned and warned of, and its lease let go (the next caller
    is not held waiting for a fill that will never come)."""
    cache = TeamCache(server.url, token)
    odd = "half a pair \ud800"
    with caplog.at_level(logging.WARNING, logger="teamcache"):
        assert cache.cached(namespace, {"model": "m", "prompt": "surrogate"}, lambda: odd) == odd
        assert cache.cached(namespace, {"model": "m", "prompt": "nan"}, lambda: "fine",
                            usage=lambda _result: {"input_tokens": float("nan")}) == "fine"
    assert "could not store a result" in caplog.text
    found = cache.lookup(namespace, {"model": "m", "prompt": "surrogate"}, lease=30)
    assert not found.hit and found.lease is not None, "the lease was let go"
    cache.close()


def test_a_local_tier_serves_one_service_and_one_token(server, token, namespace):
    """Its copies are what one token may read, and its queued writes go out with that token: a
    client with another token (or service) is refused the tier at once, not served through it."""
    tier = LocalTier()
    first = TeamCache(server.url, token, local_tier=tier)
    again = TeamCache(server.url, token, local_tier=tier)  # the same service and token: shared
    try:
        with pytest.raises(ValueError, match="one token"):
            TeamCache(server.url, "tc_" + "9" * 40, local_tier=tier)
        with pytest.raises(ValueError, match="one token"):
            TeamCache(f"http://127.0.0.1:{free_port()}", token, local_tier=tier)
    finally:
        again.close()
        first.close()
