"""The typed answers read from the server's documents: every member, and a document that is
not what the contract says refused (the client reports it as a malformed answer)."""

from __future__ import annotations

import pytest

from teamcache import ChangePage, ImportResult, NamespaceSettings, RejectedLine, Stats, TokenCounts
from teamcache import _operations as op

STATS = {
    "entries": 3, "bytes": {"identity": 900, "stored": 300},
    "lookups": {"hit": 10, "miss": 4, "stale": 1, "bypass": 2, "collapsed": 5}, "hit_ratio": 0.7143,
    "tokens_saved": {"input": 50, "output": 120},
    "top": [{"namespace": "a", "key": "k", "model": None, "hit_count": 7, "last_accessed_at": "2026-12-03T10:00:00Z",
             "prompt_digest": "Hi", "writer_token_id": 4}],
    "added_later": True,
}


def test_stats_keep_every_member():
    stats = Stats.from_json(STATS)
    assert (stats.entries, stats.identity_bytes, stats.stored_bytes) == (3, 900, 300)
    assert (stats.lookups.hit, stats.lookups.miss, stats.lookups.stale, stats.lookups.bypass,
            stats.lookups.collapsed) == (10, 4, 1, 2, 5)
    assert stats.hit_ratio == 0.7143 and stats.tokens_saved == TokenCounts(input=50, output=120)
    top = stats.top[0]
    assert (top.namespace, top.key, top.model, top.hit_count, top.prompt_digest, top.writer_token_id) == \
        ("a", "k", None, 7, "Hi", 4)
    assert stats.document["added_later"] is True and "added_later" not in repr(stats)


@pytest.mark.parametrize("broken", [
    {**STATS, "entries": "3"},
    {**STATS, "entries": True},
    {**STATS, "lookups": {"hit": "1"}},
    {**STATS, "hit_ratio": None},
    {**STATS, "top": [{"key": "k"}]},
    {key: value for key, value in STATS.items() if key != "bytes"},
])
def test_stats_not_as_the_contract_says_are_refused(broken):
    with pytest.raises(ValueError):
        Stats.from_json(broken)


def test_a_change_page_and_its_changes():
    page = ChangePage.from_json({"changes": [
        {"cursor": "7", "kind": "put", "key": "k", "etag": '"e"', "size": 5, "stored_size": 5,
         "content_type": "text/plain", "expires_at": "2026-12-03T10:00:00.000000Z", "body_base64": "aGVsbG8=",
         "encoding": "identity"},
        {"cursor": "8", "kind": "delete", "key_base64": "/w=="},
    ], "next": "8", "more": False})
    put, delete = page.changes
    assert (put.cursor, put.kind, put.key, put.etag, put.size, put.body_base64) == \
        ("7", "put", "k", '"e"', 5, "aGVsbG8=")
    assert (delete.kind, delete.key, delete.key_base64) == ("delete", None, "/w==")
    assert page.next == "8" and page.more is False and "aGVsbG8=" not in repr(put)
    for broken in ({"changes": [], "next": 8}, {"changes": [{"cursor": "1", "kind": "move"}], "next": "1"}):
        with pytest.raises(ValueError):
            ChangePage.from_json(broken)


def test_an_import_result_and_settings():
    result = ImportResult.from_json({"imported": 1, "unchanged": 2, "skipped": 3, "expired": 4, "store_full": 5,
                                     "rejected": 6, "errors": [{"line": 9, "reason": "not JSON"}]})
    assert result == ImportResult(1, 2, 3, 4, 5, 6, (RejectedLine(9, "not JSON"),))
    # A server older than a count leaves it out: 0. A count of the wrong type is refused.
    assert ImportResult.from_json({"imported": 1}) == ImportResult(1, 0, 0, 0, 0, 0)
    assert Stats.from_json({**STATS, "lookups": {"hit": 2, "miss": 1}}).lookups.collapsed == 0
    with pytest.raises(ValueError):
        ImportResult.from_json({"imported": "1"})
    assert NamespaceSettings.from_json({"namespace": "a", "default_ttl": None, "max_bytes": 10}) == \
        NamespaceSettings("a", None, 10)


def test_evict_takes_the_namespace_by_name_too():
    call = op.evict(namespace="team", tag="t")
    assert call.path == "/v1/caches/team/evict" and call.content == b'{"tag":"t"}'


def test_an_answer_that_is_not_an_object_is_malformed():
    call = op.stats("team")
    with pytest.raises(ValueError):
        call.parse(200, {}, b"[1, 2]")
