"""``mw_actors.testing``: the local provider serves real HTTP for the block, and only then."""

from __future__ import annotations

import httpx
import pytest

from mw_actors.provider import Reply, ScriptedEngine
from mw_actors.testing import local_provider

pytestmark = pytest.mark.anyio

BODY = {"model": "local/scripted", "messages": [{"role": "user", "content": "hi"}]}


async def test_the_provider_answers_in_the_block_and_is_gone_after_it() -> None:
    async with local_provider(ScriptedEngine([Reply(content="hello")])) as served:
        async with httpx.AsyncClient(base_url=served.url) as client:
            response = await client.post("/chat/completions", json=BODY)
        assert response.status_code == 200
        assert response.json()["choices"][0]["message"]["content"] == "hello"
        assert served.provider.statistics().requests == 1
    async with httpx.AsyncClient(base_url=served.url) as client:
        with pytest.raises(httpx.ConnectError):
            await client.post("/chat/completions", json=BODY)


async def test_a_keyed_provider_refuses_a_request_without_its_key() -> None:
    async with (
        local_provider(api_key="sk-test") as served,
        httpx.AsyncClient(base_url=served.url) as client,
    ):
        refused = await client.post("/chat/completions", json=BODY)
        keyed = await client.post(
            "/chat/completions", json=BODY, headers={"Authorization": "Bearer sk-test"}
        )
    assert refused.status_code == 401
    assert keyed.status_code == 200
