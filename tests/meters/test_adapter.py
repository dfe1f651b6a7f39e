"""The learner's Responses traffic, translated for a Chat-only upstream, answered as Responses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pytest

import meters
from meters._adapter import chat_request
from mw_actors.provider import FaultPlan

from .conftest import open_wire

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings(  # see test_wire.py: the SDK's own iterators on trio
        "ignore:Exception ignored in. <async_generator object"
        ":pytest.PytestUnraisableExceptionWarning"
    ),
]

# A turn as Codex CLI sends it: whole history, store false, function and custom tools,
# a reasoning item whose encrypted content a Chat endpoint cannot use.
CODEX_TURN: dict[str, Any] = {
    "model": "local/scripted",
    "instructions": "You are the learner. Use the tools.",
    "store": False,
    "include": ["reasoning.encrypted_content"],
    "reasoning": {"effort": "medium"},
    "tool_choice": "auto",
    "parallel_tool_calls": False,
    "tools": [
        {
            "type": "function",
            "name": "read_evidence",
            "description": "read a block of evidence",
            "parameters": {"type": "object", "properties": {"block": {"type": "integer"}}},
            "strict": False,
        },
        {"type": "custom", "name": "apply_patch", "description": "apply a patch to the card"},
    ],
    "input": [
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "Learn block 3."}],
        },
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [],
            "encrypted_content": "gAAAAB-opaque-ciphertext",
        },
        {
            "type": "function_call",
            "call_id": "call_a",
            "name": "read_evidence",
            "arguments": '{"block": 3}',
        },
        {"type": "function_call_output", "call_id": "call_a", "output": "12 cases, 7 passed"},
        {
            "type": "custom_tool_call",
            "call_id": "call_b",
            "name": "apply_patch",
            "input": "*** Begin Patch",
        },
        {"type": "custom_tool_call_output", "call_id": "call_b", "output": "Done!"},
    ],
}


def test_translation_of_a_codex_turn() -> None:
    chat, custom = chat_request(CODEX_TURN)
    assert custom == {"apply_patch"}
    roles = [m["role"] for m in chat["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "tool"]
    assert "opaque-ciphertext" not in json.dumps(chat)  # reasoning items are dropped
    patch_call = chat["messages"][4]["tool_calls"][0]["function"]
    assert json.loads(patch_call["arguments"]) == {"input": "*** Begin Patch"}
    names = [t["function"]["name"] for t in chat["tools"]]
    assert names == ["read_evidence", "apply_patch"]
    assert chat["parallel_tool_calls"] is False and chat["tool_choice"] == "auto"


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_the_sdk_gets_responses_from_a_chat_upstream(tmp_path: Path, stream: bool) -> None:
    seen: list[dict[str, Any]] = []
    async with open_wire(tmp_path, adapt_responses=True) as wire:
        original = wire.provider.__class__.__call__

        async def spy(self: Any, request: Any) -> Any:
            seen.append({"path": request.path, "body": json.loads(request.body)})
            return await original(self, request)

        wire.provider.__class__.__call__ = spy  # type: ignore[method-assign]
        try:
            async with openai.AsyncOpenAI(base_url=wire.meter_url, api_key="x") as client:
                turns = [CODEX_TURN, {**CODEX_TURN, "input": CODEX_TURN["input"][:1]}]
                results = []
                for turn in turns:
                    if stream:
                        events = await client.responses.create(**turn, stream=True)
                        kinds = [event.type async for event in events]
                        assert kinds[0] == "response.created"
                        assert kinds[-1] == "response.completed"
                        results.append(kinds)
                    else:
                        results.append(await client.responses.create(**turn))
        finally:
            wire.provider.__class__.__call__ = original  # type: ignore[method-assign]
        stats = wire.provider.statistics()
    assert [s["path"] for s in seen] == ["/v1/chat/completions"] * 2
    assert all("opaque-ciphertext" not in json.dumps(s["body"]) for s in seen)
    if not stream:
        # history holds 2 earlier tool calls -> script entry 2 % 2 = text; fresh turn -> text too
        first = results[0]
        assert first.output_text == "Hello there, friend. The answer is forty-two."
        assert first.usage.input_tokens > 0
    else:
        assert "response.output_text.delta" in results[0]
    lines = meters.read_ledger(wire.ledger_dir / "ledger.jsonl")
    assert [line.status for line in lines] == ["ok", "ok"]
    assert sum(line.output_tokens for line in lines) == stats.output_tokens
    assert (wire.ledger_dir / "meta_wire_ledger.json").exists()


async def test_tool_calls_come_back_as_response_items(tmp_path: Path) -> None:
    turn = {**CODEX_TURN, "input": CODEX_TURN["input"][:3]}  # one earlier call: script entry 1
    async with (
        open_wire(tmp_path, adapt_responses=True) as wire,
        openai.AsyncOpenAI(base_url=wire.meter_url, api_key="x") as client,
    ):
        whole = await client.responses.create(**turn)
        async with client.responses.stream(**turn) as events:
            async for _ in events:
                pass
            streamed = await events.get_final_response()
    for response in (whole, streamed):
        (call,) = response.output
        assert call.type == "function_call" and call.name == "lookup"
        assert json.loads(call.arguments) == {"account": "A-1", "field": "balance"}


async def test_a_cut_upstream_ends_in_response_failed(tmp_path: Path) -> None:
    async with (
        open_wire(
            tmp_path, adapt_responses=True, faults=FaultPlan(plan=["reset_mid_stream"])
        ) as wire,
        openai.AsyncOpenAI(base_url=wire.meter_url, api_key="x", max_retries=0) as client,
    ):
        events = await client.responses.create(model="local/scripted", input="hello", stream=True)
        kinds = [event.type async for event in events]
    assert kinds[-1] == "response.failed"
    (line,) = meters.read_ledger(wire.ledger_dir / "ledger.jsonl")
    assert line.status == "cut" and line.cost_usd == line.reserved_usd
