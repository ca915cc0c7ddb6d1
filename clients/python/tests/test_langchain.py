"""The LangChain cache: langchain-tests' standard suites, and real fake chat models."""

from __future__ import annotations

import uuid

import pytest
from langchain_core.globals import set_llm_cache
from langchain_core.language_models.fake_chat_models import FakeListChatModel, GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_tests.integration_tests import AsyncCacheTestSuite, SyncCacheTestSuite

from teamcache import AsyncTeamCache, TeamCache, TokenCounts
from teamcache.langchain import TeamCacheLLMCache, descriptor

from .conftest import eventually


class TestSyncCache(SyncCacheTestSuite):
    @pytest.fixture
    def cache(self, server, token):
        return TeamCacheLLMCache(f"lc-{uuid.uuid4().hex[:12]}", TeamCache(server.url, token))


class TestAsyncCache(AsyncCacheTestSuite):
    @pytest.fixture
    async def cache(self, server, token):
        return TeamCacheLLMCache(f"lc-{uuid.uuid4().hex[:12]}", TeamCache(server.url, token),
                                 AsyncTeamCache(server.url, token))


@pytest.fixture
def llm_cache(server, token, namespace):
    cache = TeamCacheLLMCache(namespace, TeamCache(server.url, token), AsyncTeamCache(server.url, token))
    set_llm_cache(cache)
    yield cache
    set_llm_cache(None)


def test_a_fake_chat_model_answers_the_second_time_from_teamcache(llm_cache, namespace):
    model = FakeListChatModel(responses=["first answer", "second answer"])
    assert model.invoke("hello").content == "first answer"
    assert model.invoke("hello").content == "first answer", "answered from the cache, not the model's next reply"
    stats = llm_cache._cache.stats(namespace)
    assert stats.entries == 1
    assert eventually(lambda: llm_cache._cache.stats(namespace).lookups.hit == 1)


async def test_a_generic_fake_chat_model_async(llm_cache, namespace):
    model = GenericFakeChatModel(messages=iter([AIMessage(content="one", usage_metadata={
        "input_tokens": 4, "output_tokens": 2, "total_tokens": 6}), AIMessage(content="two")]))
    assert (await model.ainvoke("question")).content == "one"
    again = await model.ainvoke("question")
    assert again.content == "one"
    assert eventually(lambda: llm_cache._cache.stats(namespace).tokens_saved == TokenCounts(input=4, output=2))


def test_a_stale_answer_is_refreshed_by_one_caller(server, token, namespace):
    import time
    cache = TeamCacheLLMCache(namespace, TeamCache(server.url, token), ttl=1, stale_while_revalidate=60)
    set_llm_cache(cache)
    try:
        model = FakeListChatModel(responses=["old", "new", "never"])
        assert model.invoke("q").content == "old"
        time.sleep(1.3)
        assert model.invoke("q").content == "new", "the caller handed the refresh lease calls the model"
        assert model.invoke("q").content == "new", "and its answer is fresh for the next"
    finally:
        set_llm_cache(None)


def test_unusable_descriptors_are_misses(server, token, namespace):
    cache = TeamCacheLLMCache(namespace, TeamCache(server.url, token))
    huge_model = "[('model', '" + "m" * 300 + "')]"
    assert cache.lookup("p", huge_model) is None
    cache.update("p", huge_model, [])
    assert cache.cache_failures == 0


def test_secrets_and_base_urls_do_not_split_entries():
    serialised = ('{"lc": 1, "type": "constructor", "id": ["langchain", "chat_models", "openai", "ChatOpenAI"], '
                  '"kwargs": {"model_name": "gpt-4o", "temperature": 0.1, "openai_api_key": {"lc": 1, '
                  '"type": "secret", "id": ["OPENAI_API_KEY"]}, "openai_api_base": "%s"}}')
    params = "---[('stop', None)]"
    one = descriptor("hi", serialised % "https://gateway-a/v1" + params)
    two = descriptor("hi", serialised.replace("0.1", "0.1") % "https://gateway-b/v1" + params)
    assert one == two and one["model"] == "gpt-4o"
    hotter = descriptor("hi", serialised.replace("0.1", "0.9") % "https://gateway-a/v1" + params)
    assert hotter != one
    assert descriptor("hi", "[('_type', 'fake'), ('model', 'm1'), ('openai_api_key', 'sk-1')]")["model"] == "m1"
    assert "sk-1" not in str(descriptor("hi", "[('_type', 'fake'), ('openai_api_key', 'sk-1')]"))
    # Tokens that change the answer stay in the key.
    assert descriptor("hi", "[('eos_token', 'a')]") != descriptor("hi", "[('eos_token', 'b')]")


def test_a_dead_cache_is_a_miss():
    cache = TeamCacheLLMCache("n", TeamCache("http://127.0.0.1:9", "t", max_retries=0))
    assert cache.lookup("p", "llm") is None
    cache.update("p", "llm", [])
    assert cache.cache_failures == 2
