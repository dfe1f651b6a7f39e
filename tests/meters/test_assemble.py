"""A whole answer fetched as a stream, put back together: the answer the upstream gives whole."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest

from mw_actors.provider import Reply, ScriptedEngine, ToolCall

from .conftest import open_wire

pytestmark = pytest.mark.anyio

ENGINE = ScriptedEngine(
    [
        Reply(content="The balance of A-1 is forty-two.", reasoning="look it up first"),
        Reply(tool_calls=[ToolCall("lookup", {"account": "A-1"}), ToolCall("note", {"x": 1})]),
    ]
)
ASKS: dict[str, dict[str, Any]] = {
    "chat text": {"messages": [{"role": "user", "content": "balance?"}]},
    "chat tools": {
        "messages": [
            {"role": "user", "content": "balance?"},
            {"role": "assistant", "content": "let me see"},
            {"role": "user", "content": "go on"},
        ]
    },
    "chat cut at its limit": {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3},
    "responses text": {"input": "balance?"},
}


def comparable(answer: dict[str, Any]) -> Any:
    """What must match: everything but the ids and clocks the provider numbers anew."""
    if answer.get("object") == "chat.completion":
        return [c["message"] | {"finish": c["finish_reason"]} for c in answer["choices"]], answer[
            "usage"
        ]
    output = [{k: v for k, v in item.items() if k != "id"} for item in answer["output"]]
    for item in output:
        item.pop("call_id", None)
    return output, answer["usage"], answer["status"]


@pytest.mark.parametrize("ask", ASKS, ids=list(ASKS))
async def test_an_answer_asked_whole_is_the_upstreams_whole_answer(
    tmp_path: Path, ask: str
) -> None:
    body = {"model": "local/scripted", **ASKS[ask]}
    endpoint = "responses" if ask.startswith("responses") else "chat/completions"
    async with (
        open_wire(tmp_path, engine=ENGINE, allocation=Decimal(10)) as wire,  # a capped meter
        httpx.AsyncClient(timeout=20) as c,
    ):
        through = await c.post(f"{wire.meter_url}/{endpoint}", json=body)
        direct = await c.post(f"{wire.provider_url}/{endpoint}", json=body)
    assert through.status_code == direct.status_code == 200
    assert through.headers["content-type"] == "application/json"
    assert comparable(through.json()) == comparable(direct.json())
    if endpoint != "responses":  # assembled, not relayed: the provider's own has no logprobs
        assert "logprobs" in through.json()["choices"][0]
        assert "logprobs" not in direct.json()["choices"][0]
