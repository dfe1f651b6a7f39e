"""The official openai SDK through a meter to the local provider: same objects, exact ledger."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import httpx
import openai
import pytest

import meters

from .conftest import SECRET, open_wire

pytestmark = [
    pytest.mark.anyio,
    # The openai SDK stops reading a stream at [DONE] and closes the response without
    # closing its own byte iterator; on trio that iterator is then finalized by the GC.
    # That is the client library's hygiene, not the meter's: ignore exactly that warning.
    pytest.mark.filterwarnings(
        "ignore:Exception ignored in. <async_generator object"
        ":pytest.PytestUnraisableExceptionWarning"
    ),
]

MESSAGES: list[Any] = [{"role": "user", "content": "What is the balance of account A-1?"}]


def strip_ids(value: Any) -> Any:
    """Objects from the two paths differ only in generated ids and timestamps."""
    if isinstance(value, dict):
        return {
            k: strip_ids(v)
            for k, v in value.items()
            if k not in ("id", "created", "created_at", "call_id", "item_id", "sequence_number")
        }
    if isinstance(value, list):
        return [strip_ids(v) for v in value]
    return value


async def chat(client: openai.AsyncOpenAI, stream: bool) -> Any:
    if not stream:
        completion = await client.chat.completions.create(model="local/scripted", messages=MESSAGES)
        return completion.model_dump()
    chunks = await client.chat.completions.create(
        model="local/scripted", messages=MESSAGES, stream=True
    )
    return [chunk.model_dump() async for chunk in chunks]


async def responses(client: openai.AsyncOpenAI, stream: bool) -> Any:
    if not stream:
        response = await client.responses.create(model="local/scripted", input="balance of A-1?")
        return response.model_dump()
    events = await client.responses.create(model="local/scripted", input="balance?", stream=True)
    return [event.model_dump() async for event in events]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("call", [chat, responses], ids=["chat", "responses"])
async def test_async_client_sees_what_a_direct_connection_sees(
    tmp_path: Path, call: Any, stream: bool
) -> None:
    async with open_wire(tmp_path) as wire:
        async with openai.AsyncOpenAI(base_url=wire.provider_url, api_key="x") as client:
            direct = await call(client, stream)
        async with openai.AsyncOpenAI(base_url=wire.meter_url, api_key="x") as client:
            metered = await call(client, stream)
        assert strip_ids(metered) == strip_ids(direct)
        stats = wire.provider.statistics()
    lines = meters.read_ledger(wire.ledger_dir / "ledger.jsonl")
    assert [line.status for line in lines] == ["ok"]
    # the provider served two identical requests: the metered one is exactly half
    assert lines[0].input_tokens == stats.input_tokens // 2
    assert lines[0].output_tokens == stats.output_tokens // 2


async def test_sync_client_and_ledger_totals_equal_provider_usage(
    tmp_path: Path, prices: Any
) -> None:
    async with open_wire(tmp_path) as wire:

        def use_sync_client() -> None:
            with openai.OpenAI(base_url=wire.meter_url, api_key="placeholder") as client:
                for _ in range(3):
                    client.chat.completions.create(model="local/scripted", messages=MESSAGES)
                    for _ in client.chat.completions.create(
                        model="local/scripted", messages=MESSAGES, stream=True
                    ):
                        pass
                client.responses.create(model="local/scripted", input="hi")

        await anyio.to_thread.run_sync(use_sync_client)
        stats = wire.provider.statistics()
    lines = meters.read_ledger(wire.ledger_dir / "ledger.jsonl")
    assert len(lines) == 7 and {line.status for line in lines} == {"ok"}
    assert sum(line.input_tokens for line in lines) == stats.input_tokens
    assert sum(line.output_tokens for line in lines) == stats.output_tokens
    summary = json.loads((wire.ledger_dir / "wire_ledger.json").read_text())
    recomputed = sum(
        (prices.cost("local/scripted", meters.Usage(input_tokens=x.input_tokens,
                                                    output_tokens=x.output_tokens))
         for x in lines),
        Decimal(0),
    )  # fmt: skip
    assert Decimal(summary["cost_usd"]) == recomputed
    assert summary["requests"] == 7 and summary["statuses"]["ok"] == 7


async def test_the_upstream_sees_one_idempotency_key_the_meters(tmp_path: Path) -> None:
    """A client's own key went ahead of the meter's: the upstream saw two."""
    seen: list[list[bytes]] = []
    async with open_wire(tmp_path) as wire:
        original = wire.provider.__class__.__call__

        async def spy(self: Any, request: Any) -> Any:
            seen.append([v for k, v in request.headers if k.lower() == b"idempotency-key"])
            return await original(self, request)

        wire.provider.__class__.__call__ = spy  # type: ignore[method-assign]
        try:
            async with httpx.AsyncClient() as client:
                await client.post(
                    f"{wire.meter_url}/chat/completions",
                    json={"model": "local/scripted", "messages": MESSAGES},
                    headers={"Idempotency-Key": "the-clients-own"},
                )
        finally:
            wire.provider.__class__.__call__ = original  # type: ignore[method-assign]
    (line,) = meters.read_ledger(wire.ledger_dir / "ledger.jsonl")
    assert seen == [[line.id.encode()]]


async def test_the_key_is_injected_and_written_nowhere(tmp_path: Path) -> None:
    seen: list[str | None] = []
    async with open_wire(tmp_path) as wire:
        original = wire.provider.__class__.__call__

        async def spy(self: Any, request: Any) -> Any:
            seen.append(request.header("authorization"))
            return await original(self, request)

        wire.provider.__class__.__call__ = spy  # type: ignore[method-assign]
        try:
            async with openai.AsyncOpenAI(base_url=wire.meter_url, api_key="placeholder") as c:
                await c.chat.completions.create(model="local/scripted", messages=MESSAGES)
        finally:
            wire.provider.__class__.__call__ = original  # type: ignore[method-assign]
    assert seen == [f"Bearer {SECRET}"]
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), f"the key leaked into {path}"
