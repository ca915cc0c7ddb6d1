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
        assert summary["imported"] == 12 and summary["rejected"] == 0, summary
        for index in range(12):
            original, copy = client.get(namespace, f"k{index}"), client.get(target, f"k{index}")
            assert copy is not None and original is not None
            assert copy.body == original.body and copy.etag == original.etag
        again = client.import_lines(target, lines)
        assert again["unchanged"] == 12 and again["imported"] == 0
        mixed = client.import_lines(target, ['{"key":"mine","body":"made here"}', "not json"])
        assert mixed["imported"] == 1 and mixed["rejected"] == 1 and mixed["errors"][0]["line"] == 2
        assert client.get(target, "mine").body == b"made here"
