"""The descriptor keys of model API requests, against the vectors the gateway's Swift tests pin
too (tests/vectors/gateway_keys.json): a call through the transport and the same call through
the gateway share one entry."""

from __future__ import annotations

import json
import pathlib

import pytest

from teamcache import anthropic, openai

VECTORS = json.loads((pathlib.Path(__file__).parent / "vectors" / "gateway_keys.json").read_text())["vectors"]


@pytest.mark.parametrize("vector", VECTORS, ids=lambda v: f"{v['kind']}:{v['path']}:{v['body'][:40]}")
def test_vector(vector: dict) -> None:
    if vector["kind"] == "openai":
        plan = openai.plan("POST", "/v1/" + vector["path"], vector["body"].encode())
    else:
        plan = anthropic.plan("POST", "/" + vector["path"], vector["body"].encode())
        if vector["path"] != "v1/messages":
            plan = None  # the gateway caches exact endpoints; the transport matches by suffix
    assert (plan.key if plan else None) == vector["key"]
    if plan:
        assert plan.stream == vector["stream"]
        assert (plan.upstream_body is not None) == vector["asks_usage"]


def test_the_vectors_cover_both_kinds_and_refusals() -> None:
    assert {v["kind"] for v in VECTORS if v["key"]} == {"openai", "anthropic"}
    assert any(v["key"] is None for v in VECTORS)
