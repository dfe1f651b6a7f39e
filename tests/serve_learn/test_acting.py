"""The acting loop, through a real host meter, against the local provider on loopback."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

import meters
from mw_actors.provider import (
    LOCAL_PRICES,
    FaultPlan,
    Provider,
    Reply,
    ScriptedEngine,
    SyntheticHost,
    ToolCall,
    Turn,
    serve_provider,
)
from mw_actors.serve_learn import read_evaluators, read_scenario
from mw_actors.serve_learn._acting import Budget, SyntheticEnvironment, run_episode, score_line
from mw_actors.serve_learn._synthetic import MANUAL, hidden_policy

pytestmark = pytest.mark.anyio


class Recording:
    """Wraps an engine and keeps every conversation it was asked to answer."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.name = engine.name
        self.blocking = engine.blocking
        self.seen: list[str] = []

    def respond(self, turn: Turn) -> Reply:
        self.seen.append(json.dumps(turn.conversation))
        reply: Reply = self.engine.respond(turn)
        return reply


@asynccontextmanager
async def host(tmp_path: Path, engine: Any) -> AsyncIterator[httpx.AsyncClient]:
    async with anyio.create_task_group() as tg:
        port = await tg.start(serve_provider, Provider(engine, FaultPlan()))
        config = meters.MeterConfig(
            role="host",
            upstream=f"http://127.0.0.1:{port}/v1",
            prices=meters.load_prices(LOCAL_PRICES),
            ledger_dir=tmp_path / "ledger",
        )
        meter = await tg.start(partial(meters.serve_meter, config))
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{meter}/v1") as client:
            yield client
        tg.cancel_scope.cancel()


def _episode_parts(dataset: Path, index: int) -> tuple[Any, SyntheticEnvironment, str]:
    scenario = read_scenario(dataset, "synthetic_l1")
    env_dir = dataset / "environments" / "synthetic_l1"
    world = json.loads((env_dir / "world.json").read_text())["cases"]
    tools = json.loads((env_dir / "tools.json").read_text())
    system = (env_dir / "system_prompt.txt").read_text() + (env_dir / "policy.md").read_text()
    task = scenario.serving[index]
    env = SyntheticEnvironment(tools, world, read_evaluators(dataset, "synthetic_l1")[task.task_id])
    return task, env, system


async def test_the_host_follows_the_world_model_and_reasoning_rides_along(
    dataset: Path, tmp_path: Path
) -> None:
    task, env, system = _episode_parts(dataset, 0)
    engine = Recording(SyntheticHost())
    asked: list[str] = []

    def wm(query: str) -> str:
        asked.append(query)
        return "best: deny"

    async with host(tmp_path, engine) as client:
        episode = await run_episode(
            client,
            model="local/scripted",
            system_prompt=system,
            task=task,
            env=env,
            wm=wm,
            mwm_context="World model: ask the wm tool before deciding.",
        )
    assert episode.status == "finished"
    assert [step["tool"] for step in episode.trace] == ["get_case", "wm", "decide", "finish"]
    assert env.decisions[0][1] == "deny"
    assert asked and "Candidates" in asked[0]
    # The reasoning of turn 1 is in the conversation of turn 2 and later.
    assert "First I look up" not in engine.seen[0]
    assert all("First I look up" in seen for seen in engine.seen[1:])
    assert episode.output_tokens > 0 and episode.input_tokens > 0


async def test_without_a_world_model_the_host_follows_the_manual(
    dataset: Path, tmp_path: Path
) -> None:
    scenario = read_scenario(dataset, "synthetic_l1")
    index = next(i for i, t in enumerate(scenario.serving) if t.category == "hidden")
    task, env, system = _episode_parts(dataset, index)
    async with host(tmp_path, SyntheticHost()) as client:
        episode = await run_episode(
            client, model="local/scripted", system_prompt=system, task=task, env=env
        )
    kind = json.loads(episode.trace[0]["result"])["kind"]
    assert env.decisions[0][1] == MANUAL[kind] != hidden_policy(task.window)[kind]
    assert episode.reward == 0.0 and score_line(episode.reward) == "Score: 0/100."


async def test_one_call_per_turn_and_a_corrective_message(dataset: Path, tmp_path: Path) -> None:
    task, env, system = _episode_parts(dataset, 1)
    script = [
        Reply(tool_calls=[ToolCall("get_case", {"case_id": "x"}), ToolCall("finish", {})]),
        Reply(content="hmm"),
        Reply(tool_calls=[ToolCall("finish", {})]),
    ]
    engine = Recording(ScriptedEngine(script))
    async with host(tmp_path, engine) as client:
        episode = await run_episode(
            client, model="local/scripted", system_prompt=system, task=task, env=env
        )
    # Turns: 2 calls (none ran), then no call (a corrective message), then finish.
    assert episode.status == "finished" and episode.turns == 3 and episode.tool_calls == 1
    assert episode.trace[0] == {"turn": 1, "rejected": 2}
    assert episode.trace[1] == {"turn": 2, "rejected": 0}
    assert "none ran" in engine.seen[1] and "not executed" in engine.seen[1]
    assert "Your turn had no tool call" in engine.seen[2]
    assert env.decisions == []


async def test_the_tool_call_budget_ends_an_episode(dataset: Path, tmp_path: Path) -> None:
    task, env, system = _episode_parts(dataset, 2)
    engine = ScriptedEngine([Reply(tool_calls=[ToolCall("get_case", {"case_id": "x"})])])
    async with host(tmp_path, engine) as client:
        episode = await run_episode(
            client,
            model="local/scripted",
            system_prompt=system,
            task=task,
            env=env,
            budget=Budget(tool_calls=3),
        )
    assert episode.status == "budget_exhausted" and episode.tool_calls == 3


async def test_no_evaluator_or_bulletin_text_reaches_the_model(
    dataset: Path, tmp_path: Path
) -> None:
    engine = Recording(SyntheticHost())
    async with host(tmp_path, engine) as client:
        for index in range(6):
            task, env, system = _episode_parts(dataset, index)
            await run_episode(
                client,
                model="local/scripted",
                system_prompt=system,
                task=task,
                env=env,
                wm=lambda q: "no knowledge yet",
                mwm_context="World model: the wm tool answers from past serving.",
            )
    seen = "\n".join(engine.seen)
    assert "ACTUAL POLICY" not in seen and "window_policy" not in seen and "evaluator" not in seen
    assert "oracle" not in seen
