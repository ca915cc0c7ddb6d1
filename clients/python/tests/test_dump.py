"""Export pages and import of dump lines through the client, against the real server."""

from __future__ import annotations

from teamcache import TeamCache

from .conftest import Server


def test_export_pages_and_import_round_trip(server: Server, token: str, namespace: str) -> None:
    """Pages chained by cursor, then the lines imported into another namespace: the same
    bodies and ETags; importing them again changes nothing."""
    with TeamCache(server.url, token) as client:
        for index in range(12):
            client.put(namespace, f"k{index}", f"value {index}".encode())
        lines, cursor, pages = [], None, 0
        while True:
            page, cursor = client.export_page(namespace, after=cursor, limit=5)
            lines += page
            pages += 1
            if cursor is None or pages > 10:
                break
        assert pages == 3 and len(lines) == 12
        target = namespace + "-copy"
        summary = client.import_lines(target, lines)
        assert summary.imported == 12 and summary.rejected == 0, summary
        for index in range(12):
            original, copy = client.get(namespace, f"k{index}"), client.get(target, f"k{index}")
            assert copy is not None and original is not None
            assert copy.body == original.body and copy.etag == original.etag
        again = client.import_lines(target, lines)
        assert again.unchanged == 12 and again.imported == 0
        mixed = client.import_lines(target, ['{"key":"mine","body":"made here"}', "not json"])
        assert mixed.imported == 1 and mixed.rejected == 1 and mixed.errors[0].line == 2
        assert client.get(target, "mine").body == b"made here"


def test_a_follower_of_the_change_feed_ends_with_the_store(server: Server, token: str, namespace: str) -> None:
    """Writes and deletes, replayed from cursor 0 through the client: the follower's keys and
    ETags are the store's; a long poll is answered by the next write; a bad cursor raises."""
    import threading

    from teamcache.errors import ProblemError

    with TeamCache(server.url, token) as client:
        for index in range(30):
            client.put(namespace, f"k{index % 10}", f"value {index}".encode())
        client.delete(namespace, "k3")
        replica: dict[str, str] = {}
        cursor: str | int = 0
        while True:
            page = client.changes(namespace, since=cursor, limit=7)
            for change in page.changes:
                assert change.key is not None
                if change.kind == "put":
                    assert change.etag is not None
                    replica[change.key] = change.etag
                else:
                    replica.pop(change.key, None)
            cursor = page.next
            if not page.more:
                break
        stored = {f"k{index}": client.get(namespace, f"k{index}") for index in range(10)}
        assert replica == {key: entry.etag for key, entry in stored.items() if entry is not None}
        assert "k3" not in replica and len(replica) == 9

        threading.Timer(0.5, lambda: client.put(namespace, "late", b"late")).start()
        page = client.changes(namespace, since=cursor, wait=10, include_body=True)
        assert [change.key for change in page.changes] == ["late"]
        assert page.changes[0].body_base64 == "bGF0ZQ=="
        try:
            client.changes(namespace, since="9000000000000000000")
        except ProblemError as error:
            assert error.status == 410
        else:
            raise AssertionError("a cursor ahead of the feed was followed")
