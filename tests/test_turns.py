"""mw's one agent turn loop, in both dialects, against the local provider on loopback."""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from mw_actors._turns import (
    Agent,
    Answer,
    Call,
    ChatCompletions,
    Dialect,
    Responses,
    Turn,
    run_turns,
)
from mw_actors.provider import FaultPlan, Reply, ScriptedEngine, ToolCall
from mw_actors.testing import local_provider
from mw_errors import ProviderRefused

pytestmark = pytest.mark.anyio

TOOL = {"name": "echo", "parameters": {"type": "object", "properties": {}}}
TOOLS: dict[str, list[Any]] = {
    "chat": [{"type": "function", "function": TOOL}],
    "responses": [{"type": "function", **TOOL}],
}
DIALECTS: dict[str, Dialect] = {"chat": ChatCompletions(), "responses": Responses()}


class Recorder(Agent):
    """Answers every turn by its sort; ``echo`` runs, ``finish`` ends the session."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, int]] = []
        self.sent: list[bytes] = []

    def max_tokens(self, used_output: int) -> int:
        return 64

    async def sending(self, number: int, data: bytes) -> None:
        self.sent.append(data)

    async def none(self, turn: Turn) -> Answer:
        self.seen.append(("none", turn.number))
        return Answer(user="call one tool")

    async def several(self, turn: Turn) -> Answer:
        self.seen.append(("several", turn.number))
        return Answer(results=[(c.id, "not run") for c in turn.calls])

    async def one(self, turn: Turn, call: Call) -> Answer:
        self.seen.append((call.name, turn.number))
        return Answer(results=[(call.id, "ok")], done=call.name == "finish")


@asynccontextmanager
async def provider(script: list[Reply], faults: FaultPlan | None = None) -> AsyncIterator[str]:
    async with local_provider(ScriptedEngine(script), faults) as served:
        yield served.url


@pytest.mark.parametrize("dialect", ["chat", "responses"])
async def test_a_session_sorts_each_turn_and_keeps_the_whole_history(dialect: str) -> None:
    script = [
        Reply(content="thinking"),
        Reply(tool_calls=[ToolCall("echo", {}), ToolCall("finish", {})]),
        # The scripted engine counts the assistant items so far: two calls are two Responses
        # items but one Chat message.
        *([Reply(content="unused")] if dialect == "responses" else []),
        Reply(tool_calls=[ToolCall("echo", {})]),
        Reply(tool_calls=[ToolCall("finish", {})]),
    ]
    agent = Recorder()
    history: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    async with provider(script) as url, httpx.AsyncClient(base_url=url) as client:
        tally = await run_turns(
            client, DIALECTS[dialect], agent, label="t", model="local/scripted",
            history=history, tools=TOOLS[dialect], turns=10, extra={"store": False},
        )  # fmt: skip
    assert agent.seen == [("none", 1), ("several", 2), ("echo", 3), ("finish", 4)]
    assert tally.ended == "done" and tally.turns == tally.requests == 4
    assert tally.usage.output_tokens > 0
    bodies = [json.loads(data) for data in agent.sent]
    assert all(b["store"] is False for b in bodies)
    key = "messages" if dialect == "chat" else "input"
    # Every turn sends the whole history so far: each body extends the one before.
    for before, after in itertools.pairwise(bodies):
        assert after[key][: len(before[key])] == before[key]
    assert history[: len(bodies[-1][key])] == bodies[-1][key]


@pytest.mark.parametrize("dialect", ["chat", "responses"])
async def test_the_budgets_end_a_session(dialect: str) -> None:
    echo = Reply(tool_calls=[ToolCall("echo", {})])
    async with provider([echo]) as url, httpx.AsyncClient(base_url=url) as client:
        by_turns = await run_turns(
            client, DIALECTS[dialect], Recorder(), label="t", model="local/scripted",
            history=[{"role": "user", "content": "go"}], tools=TOOLS[dialect], turns=3,
        )  # fmt: skip
        by_tokens = await run_turns(
            client, DIALECTS[dialect], Recorder(), label="t", model="local/scripted",
            history=[{"role": "user", "content": "go"}], tools=TOOLS[dialect], turns=30,
            output_tokens=1,
        )  # fmt: skip
    assert (by_turns.ended, by_turns.turns) == ("turns", 3)
    assert (by_tokens.ended, by_tokens.turns) == ("output_tokens", 1)


@pytest.mark.parametrize("dialect", ["chat", "responses"])
async def test_a_refusal_carries_its_status_and_code_and_a_broken_answer_is_refused(
    dialect: str,
) -> None:
    echo = Reply(tool_calls=[ToolCall("echo", {})])
    for fault, status, words in [
        ("rate_limited", 429, "HTTP 429"),
        ("malformed_json", 200, "is not a"),
    ]:
        plan = FaultPlan(plan=[fault])  # type: ignore[list-item]
        async with provider([echo], plan) as url, httpx.AsyncClient(base_url=url) as client:
            with pytest.raises(ProviderRefused) as refused:
                await run_turns(
                    client, DIALECTS[dialect], Recorder(), label="session x",
                    model="local/scripted", history=[{"role": "user", "content": "go"}],
                    tools=TOOLS[dialect], turns=3,
                )  # fmt: skip
        assert refused.value.status == status
        assert refused.value.message.startswith("session x, turn 1: ") and words in str(
            refused.value
        )
        if fault == "rate_limited":
            assert refused.value.kind == "rate_limited"  # the error body's code


async def test_an_agent_may_end_the_session_on_a_refusal() -> None:
    class Lenient(Recorder):
        def refused(self, response: httpx.Response) -> bool:
            return response.status_code == 500

    echo = Reply(tool_calls=[ToolCall("echo", {})])
    plan = FaultPlan(plan=["none", "server_error"])
    async with provider([echo], plan) as url, httpx.AsyncClient(base_url=url) as client:
        tally = await run_turns(
            client, ChatCompletions(), Lenient(), label="t", model="local/scripted",
            history=[{"role": "user", "content": "go"}], tools=TOOLS["chat"], turns=5,
        )  # fmt: skip
    assert (tally.ended, tally.turns, tally.requests) == ("refused", 1, 2)
