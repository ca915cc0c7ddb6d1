"""The local tier's outbox (issue #31) against a real ``teamcache serve``: writes made while
the service cannot be reached wait in it and reach the service when it answers again; one that
meets a newer write is reported, not lost; a key written twice waits once; the bound counts the
others; rows the Swift client wrote are sent byte for byte."""

from __future__ import annotations

import sqlite3
import time

import pytest

from teamcache import LocalTier, TeamCache
from teamcache._local_feed import _Feed
from teamcache._local_store import Record

from .conftest import eventually
from .test_fail_open import Switch
from .test_local_tier import following


def a_and_b_behind_a_switch(server, token: str, namespace: str) -> tuple[Switch, TeamCache, LocalTier, TeamCache]:
    """A reaches the service directly; B, with a tier following ``namespace``, through a switch."""
    switch = Switch(server.port)
    tier = LocalTier(feed_wait=2, report_interval=0.2)
    b = TeamCache(switch.url, token, local_tier=tier, backoff=0.01)
    following(tier, namespace)
    return switch, TeamCache(server.url, token), tier, b


def test_offline_writes_reach_the_service_when_it_answers_again(server, token, namespace):
    switch, a, tier, b = a_and_b_behind_a_switch(server, token, namespace)
    switch.off()
    try:
        queued = b.upsert(namespace, {"model": "m", "prompt": "made offline"}, "from B", metadata={"input_tokens": 1})
        put = b.put(namespace, "raw-offline", b"from B too", ttl=60)
        assert queued.queued and put.queued and tier.outbox == 2
        # B reads its own writes while offline.
        assert b.lookup(namespace, {"model": "m", "prompt": "made offline"}).response == "from B"
    finally:
        switch.on()
    assert eventually(lambda: tier.outbox == 0, timeout=10)
    assert a.lookup(namespace, {"model": "m", "prompt": "made offline"}).response == "from B"
    assert a.get(namespace, "raw-offline").body == b"from B too"
    assert tier.outbox == 0 and not tier.conflicts
    b.close()
    a.close()


def test_an_offline_write_is_sent_as_it_was_made_whatever_the_caller_does_to_its_descriptor(server, token,
                                                                                            namespace):
    """A chat's history list is appended to after each turn: the queued write of turn 1 must reach
    the service under turn 1's key, not under the key of the history it has grown into."""
    switch, a, tier, b = a_and_b_behind_a_switch(server, token, namespace)
    history = [{"role": "user", "content": "turn 1"}]
    descriptor = {"model": "m", "messages": history, "params": {"temperature": 0}}
    turn_1 = {"model": "m", "messages": [{"role": "user", "content": "turn 1"}], "params": {"temperature": 0}}
    switch.off()
    try:
        assert b.upsert(namespace, descriptor, "answer 1").queued
        history.extend([{"role": "assistant", "content": "answer 1"}, {"role": "user", "content": "turn 2"}])
        descriptor["params"]["temperature"] = 1
    finally:
        switch.on()
    assert eventually(lambda: tier.outbox == 0, timeout=10)
    assert a.lookup(namespace, turn_1).response == "answer 1"
    assert not a.lookup(namespace, descriptor).hit
    assert not tier.conflicts
    b.close()
    a.close()


def test_an_offline_write_that_meets_a_newer_one_is_reported_not_lost(server, token, namespace):
    switch = Switch(server.port)
    a = TeamCache(server.url, token)
    seen = []
    tier = LocalTier(feed_wait=2, report_interval=0.2, on_conflict=seen.append)
    b = TeamCache(switch.url, token, local_tier=tier, backoff=0.01)
    following(tier, namespace)
    a.put(namespace, "older", b"base")
    a.put(namespace, "newer", b"base")
    b.get(namespace, "older")
    b.get(namespace, "newer")
    switch.off()
    try:
        # "older": A writes first, B later (B's wins); "newer": B first, A later (A's wins).
        a.put(namespace, "older", b"A's")
        time.sleep(1.1)  # Last-Modified has whole seconds
        assert b.put(namespace, "older", b"B's").queued
        assert b.put(namespace, "newer", b"B's").queued
        time.sleep(1.1)
        a.put(namespace, "newer", b"A's")
    finally:
        switch.on()
    assert eventually(lambda: tier.outbox == 0, timeout=10)
    outcomes = {conflict.key: conflict.outcome for conflict in tier.conflicts}
    assert outcomes == {"older": "overwrote", "newer": "superseded"}, outcomes
    assert [conflict.key for conflict in seen] == [conflict.key for conflict in tier.conflicts]
    assert a.get(namespace, "older").body == b"B's"
    assert a.get(namespace, "newer").body == b"A's"
    b.close()
    a.close()


def test_a_key_written_twice_offline_is_sent_once_as_its_last_write(server, token, namespace):
    switch, a, tier, b = a_and_b_behind_a_switch(server, token, namespace)
    a.put(namespace, "twice", b"base")
    b.get(namespace, "twice")
    switch.off()
    try:
        assert b.put(namespace, "twice", b"first").queued
        assert b.put(namespace, "twice", b"second").queued
        assert tier.outbox == 1
    finally:
        switch.on()
    assert eventually(lambda: tier.outbox == 0, timeout=10)
    assert a.get(namespace, "twice").body == b"second" and not tier.conflicts
    b.close()
    a.close()


def test_a_full_outbox_still_takes_a_key_already_waiting():
    """A key written again while offline replaces its waiting write, so a full outbox takes it
    (the bound counts the others); a new key is still refused."""
    tier = LocalTier(outbox_max=2)
    tier._feeds["ns"] = _Feed(allowed=True, floor=0)
    record = Record(kind="raw", etag=None, body=b"v", content_type="x", metadata=None,
                    expires_at=time.time() + 60, updated_at=time.time())
    try:
        for key in ("a", "b", "a"):
            assert tier.queue("ns", "put", key, {"body": key}, record) is not None, key
        assert tier.outbox == 2
        assert tier.queue("ns", "put", "c", {"body": "c"}, record) is None
    finally:
        tier.close()


def test_the_outbox_sends_rows_the_swift_client_wrote(server, token, namespace, tmp_path):
    """A row as the Swift client writes it (its JSON: raw UTF-8 above 0x1F, the Python table)
    is sent by a Python tier byte for byte."""
    path = tmp_path / "tier.sqlite"
    LocalTier(path=path).close()  # the schema
    body = bytes(range(256))
    text = body.decode("latin-1")
    escaped = "".join(
        {'"': '\\"', "\\": "\\\\"}.get(c, f"\\u{ord(c):04x}" if ord(c) < 0x20 else c) for c in text)
    payload = ('{"body":"' + escaped + '","content_type":"application/x-kept","ttl":60,"tags":["t"],'
               '"stale_while_revalidate":null}')
    with sqlite3.connect(path) as db:
        db.execute("INSERT INTO outbox (namespace, kind, key, payload, base_etag, written_at, size) "
                   "VALUES (?, 'put', 'raw', ?, NULL, ?, 300)", (namespace, payload, time.time()))
    db.close()
    tier = LocalTier(path=path, report_interval=60)
    assert len(tier._outbox) == 1
    b = TeamCache(server.url, token, local_tier=tier)
    tier.flush()
    assert not tier._outbox and not tier.conflicts, list(tier.conflicts)
    b.close()
    stored = TeamCache(server.url, token).get(namespace, "raw")
    assert stored is not None and stored.body == body and stored.content_type == "application/x-kept"


def test_a_file_that_fails_is_set_aside_and_a_dropped_copy_never_comes_back(tmp_path):
    """The file refuses a delete (a trigger another connection added; a read-only or corrupt
    file fails the same way): the tier goes on in memory, the dropped copy does not come back
    from the file, and the file is removed, since its outbox rows could no longer be deleted as
    they are sent (a restart would send them again)."""
    path = tmp_path / "tier.sqlite"
    tier = LocalTier(path=path)
    copies = tier._copies
    copies.put("ns", "k", Record(kind="raw", etag='"v1"', body=b"old", content_type="x", metadata=None,
                                 expires_at=time.time() + 300, updated_at=time.time()))
    with sqlite3.connect(path) as other:
        other.execute("CREATE TRIGGER refuse BEFORE DELETE ON entries BEGIN SELECT RAISE(ABORT, 'refused'); END")
    other.close()
    copies.drop("ns", "k")  # a change to the key arrived
    assert copies.get("ns", "k") is None and copies.db is None
    assert not path.exists()
    tier.close()


class _CrashingFile:
    """A tier file's connection that dies (as a killed process would) at the outbox's delete."""

    def __init__(self, db: sqlite3.Connection):
        self.db = db

    def execute(self, sql: str, *args: object) -> object:
        if sql.startswith("DELETE FROM outbox"):
            raise KeyboardInterrupt("the process dies here")
        return self.db.execute(sql, *args)

    @property
    def in_transaction(self) -> bool:
        return self.db.in_transaction

    def close(self) -> None:
        self.db.close()


def _sent(server, token: str, namespace: str, path) -> bytes | None:
    """What the service holds for "k" once a tier reopened on ``path`` has sent its outbox."""
    tier = LocalTier(path=path, report_interval=60)
    client = TeamCache(server.url, token, local_tier=tier)
    tier.flush()
    assert not tier._outbox and not tier.conflicts, (tier._outbox, list(tier.conflicts))
    client.close()
    with TeamCache(server.url, token) as reader:
        stored = reader.get(namespace, "k")
    return stored.body if stored is not None else None


def test_a_crash_while_a_key_is_rewritten_offline_leaves_one_write(server, token, namespace, tmp_path):
    """A key written again offline replaces its row in one transaction: a crash in between (the
    later write never acknowledged) leaves the earlier write alone in the file, which a restart
    sends; never both (sent in order, the earlier would win and the later be reported
    superseded) and never neither."""
    path = tmp_path / "tier.sqlite"
    tier = LocalTier(path=path)
    tier._feeds[namespace] = _Feed(allowed=True, floor=0)
    record = Record(kind="raw", etag=None, body=b"v", content_type="x", metadata=None,
                    expires_at=time.time() + 60, updated_at=time.time())
    assert tier.queue(namespace, "put", "k", {"body": "first", "ttl": 60}, record) is not None
    real = tier._copies.db
    tier._copies.db = _CrashingFile(real)  # type: ignore[assignment]
    with pytest.raises(KeyboardInterrupt):
        tier.queue(namespace, "put", "k", {"body": "second", "ttl": 60}, record)
    # Interrupted, not killed: no transaction is left open for the file's next statements to join.
    tier._copies.db = real
    assert tier.queue(namespace, "put", "other", {"body": "later", "ttl": 60}, record) is not None
    with sqlite3.connect(path) as db:
        assert [row[0] for row in db.execute("SELECT key FROM outbox ORDER BY id")] == ["k", "other"]
    db.close()
    tier.close()
    assert _sent(server, token, namespace, path) == b"first"


def test_a_file_holding_two_rows_of_a_key_sends_the_last(server, token, namespace, tmp_path):
    """A file an earlier version left with a key's earlier row beside its last (it replaced them
    in two steps, and crashed between): the last, made over the same base, is the one sent."""
    path = tmp_path / "tier.sqlite"
    LocalTier(path=path).close()  # the schema
    with sqlite3.connect(path) as db:
        for body in ("first", "second"):
            db.execute("INSERT INTO outbox (namespace, kind, key, payload, base_etag, written_at, size) "
                       "VALUES (?, 'put', 'k', ?, NULL, ?, 40)", (namespace, f'{{"body": "{body}", "ttl": 60}}',
                                                                   time.time()))
    db.close()
    assert _sent(server, token, namespace, path) == b"second"


def test_the_files_trim_takes_the_oldest_copies_only(tmp_path):
    """Past its bound, the file gives up its least recently used copies until it is within it,
    not a whole batch: with fewer than 64 rows a batch took every copy, the one just written too."""
    path = tmp_path / "tier.sqlite"
    tier = LocalTier(path=path, max_bytes=65_536)
    record = Record(kind="raw", etag=None, body=b"b" * 7_000, content_type="x", metadata=None,
                    expires_at=time.time() + 60, updated_at=time.time())
    try:
        for n in range(30):
            assert tier._copies.put("ns", f"k{n}", record)
            with sqlite3.connect(path) as db:
                keys = [row[0] for row in db.execute("SELECT key FROM entries ORDER BY used_at")]
            db.close()
            assert keys[-1] == f"k{n}" and len(keys) >= min(n + 1, 8), keys
            assert tier._copies.disk_bytes <= 65_536
    finally:
        tier.close()


def test_a_file_whose_sizes_no_tier_wrote_opens_and_trims(tmp_path):
    """Sizes outside any bound in the file (another client's bug, a corruption: 64-bit extremes
    whose sum overflows SQLite's integers) neither raise at open nor stop the trim."""
    path = tmp_path / "tier.sqlite"
    LocalTier(path=path).close()  # the schema
    with sqlite3.connect(path) as db:
        for key, size in (("big", 2**63 - 1), ("also-big", 2**63 - 1), ("negative", -2**63)):
            db.execute("INSERT INTO entries VALUES ('ns', ?, 'raw', NULL, x'00', 'x', NULL, ?, ?, 0, ?, ?)",
                       (key, time.time() + 60, time.time(), size, time.time()))
    db.close()
    tier = LocalTier(path=path, max_bytes=1_000_000)
    try:
        assert tier._copies.disk_bytes <= 2 * 1_000_000
        tier._copies.drop("ns", "negative")
        assert 0 <= tier._copies.disk_bytes <= 2 * 1_000_000
        tier._copies.put("ns", "new", Record(kind="raw", etag=None, body=b"n" * 100, content_type="x", metadata=None,
                                             expires_at=time.time() + 60, updated_at=time.time()))
        assert tier._copies.disk_bytes <= 1_000_000
    finally:
        tier.close()
    reopened = LocalTier(path=path, max_bytes=1_000_000)
    try:
        assert reopened._copies.get("ns", "new") is not None  # from the file: the trim left it
    finally:
        reopened.close()


def test_the_copies_of_own_writes_keep_their_stale_while_revalidate(server, token, namespace):
    """A committed write's copy, and a queued one's, keep the write's stale-while-revalidate
    window (as Swift's tier does for its upserts): a copy answers as the service would have."""
    switch, a, tier, b = a_and_b_behind_a_switch(server, token, namespace)
    descriptor = {"model": "m", "prompt": "own write's window"}
    b.put(namespace, "committed", b"v", ttl=60, stale_while_revalidate=30)
    looked = b.upsert(namespace, descriptor, "answer", ttl=60, stale_while_revalidate=20)
    assert tier._copies.get(namespace, "committed").swr == 30
    assert tier._copies.get(namespace, looked.key).swr == 20
    switch.off()
    try:
        assert b.put(namespace, "queued", b"q", ttl=60, stale_while_revalidate=40).queued
        # Read before the service is back: the queued write's own copy, not the one its sending keeps.
        assert tier._copies.get(namespace, "queued").swr == 40
    finally:
        switch.on()
    b.close()
    a.close()
