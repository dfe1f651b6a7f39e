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
from mw_actors.serve_learn import _protocol as P
from mw_actors.serve_learn import read_evaluators, read_scenario
from mw_actors.serve_learn._acting import run_episode, score_line
from mw_actors.serve_learn._play import Budget
from mw_actors.serve_learn._synthetic import MANUAL, hidden_policy
from mw_actors.serve_learn._synthetic_play import SyntheticEnvironment

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
    assert [step["name"] for step in episode.trace] == ["get_case", "wm", "decide", "finish"]
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
    kind = json.loads(episode.trace[0]["obs"])["kind"]
    assert env.decisions[0][1] == MANUAL[kind] != hidden_policy(task.window)[kind]
    assert episode.reward == 0.0 and score_line(episode.reward) == "Score: 0/100."


async def test_one_call_per_turn_and_the_harness_messages(dataset: Path, tmp_path: Path) -> None:
    task, env, system = _episode_parts(dataset, 1)
    script = [
        Reply(tool_calls=[ToolCall("get_case", {"case_id": "x"}), ToolCall("finish", {})]),
        Reply(content="hmm"),
        Reply(tool_calls=[ToolCall("lookup", {"case_id": "x"})]),
        Reply(tool_calls=[ToolCall("finish", {})]),
    ]
    engine = Recording(ScriptedEngine(script))
    async with host(tmp_path, engine) as client:
        episode = await run_episode(
            client, model="local/scripted", system_prompt=system, task=task, env=env
        )
    # Two calls (none ran), no call (the corrective message), an unknown tool, then finish.
    assert episode.status == "finished" and episode.turns == 4 and episode.tool_calls == 0
    kinds = [(s["kind"], s["name"]) for s in episode.trace]
    assert kinds == [("invalid", "(finish_with_tool)"), ("invalid", "(no_action)"),
                     ("invalid", "(unknown_tool)"), ("finish", "finish")]  # fmt: skip
    assert P.MSG_MULTI.format(n=2) in json.loads(engine.seen[1])[-1]["content"]
    assert json.loads(engine.seen[2])[-1] == {"role": "user", "content": P.MSG_NO_ACTION}
    assert P.MSG_UNKNOWN.format(name="lookup") in engine.seen[3]
    assert env.decisions == []


def _decision(dataset: Path, index: int) -> tuple[Any, SyntheticEnvironment, str, str, str]:
    task, env, system = _episode_parts(dataset, index)
    expected = read_evaluators(dataset, "synthetic_l1")[task.task_id]["actions"][0]["kwargs"]
    return task, env, system, expected["case_id"], expected["decision"]


async def test_finish_is_exempt_from_the_tool_budget(dataset: Path, tmp_path: Path) -> None:
    # 49 look-ups, the right decision and finish: 50 tool calls, then finish. The benchmark
    # scores it; a loop that counted finish against the budget would cut it at 50.
    task, env, system, case_id, right = _decision(dataset, 3)
    script = [Reply(tool_calls=[ToolCall("get_case", {"case_id": case_id})])] * 49 + [
        Reply(tool_calls=[ToolCall("decide", {"case_id": case_id, "decision": right})]),
        Reply(tool_calls=[ToolCall("finish", {})]),
    ]
    async with host(tmp_path, ScriptedEngine(script)) as client:
        episode = await run_episode(
            client, model="local/scripted", system_prompt=system, task=task, env=env
        )
    assert episode.status == "finished" and episode.tool_calls == 50
    assert episode.reward == 1.0


async def test_a_finish_that_breaks_its_schema_is_rejected_and_may_finish_again(
    dataset: Path, tmp_path: Path
) -> None:
    task, env, system, case_id, right = _decision(dataset, 4)
    script = [
        Reply(tool_calls=[ToolCall("decide", {"case_id": case_id, "decision": right})]),
        Reply(tool_calls=[ToolCall("finish", {"answer": "done"})]),
        Reply(tool_calls=[ToolCall("finish", {})]),
    ]
    finished = []

    class Finishing(SyntheticEnvironment):
        def finish(self, arguments: dict[str, Any]) -> None:
            finished.append(arguments)

    env = Finishing(env.tools, env._world, env._evaluator)
    async with host(tmp_path, ScriptedEngine(script)) as client:
        episode = await run_episode(
            client, model="local/scripted", system_prompt=system, task=task, env=env
        )
    rejected = episode.trace[1]
    assert rejected["kind"] == "tool" and rejected["rejected"] is True
    assert rejected["obs"] == (
        "not executed: finish takes no argument named 'answer'; it takes no arguments."
    )
    assert finished == [{}] and episode.status == "finished" and episode.turns == 3


async def test_the_tool_call_budget_answers_and_the_step_cap_ends(
    dataset: Path, tmp_path: Path
) -> None:
    task, env, system = _episode_parts(dataset, 2)
    engine = ScriptedEngine([Reply(tool_calls=[ToolCall("get_case", {"case_id": "x"})])])
    async with host(tmp_path, engine) as client:
        episode = await run_episode(
            client,
            model="local/scripted",
            system_prompt=system,
            task=task,
            env=env,
            budget=Budget(tool_calls=3, turns=5),
        )
    assert episode.status == "budget_exhausted" and episode.tool_calls == 3
    assert [s["obs"] == P.tool_budget_exhausted() for s in episode.trace[:5]] == [
        False, False, False, True, True]  # fmt: skip
    assert episode.trace[-1]["name"] == "(step_cap)"


async def test_a_reply_cut_by_the_length_limit_executes_nothing(
    dataset: Path, tmp_path: Path
) -> None:
    task, env, system = _episode_parts(dataset, 5)
    script = [
        Reply(tool_calls=[ToolCall("get_case", {"case_id": "x"})], truncated=True),
        Reply(content="thinking...", truncated=True),
        Reply(tool_calls=[ToolCall("finish", {})]),
    ]
    engine = Recording(ScriptedEngine(script))
    async with host(tmp_path, engine) as client:
        episode = await run_episode(
            client, model="local/scripted", system_prompt=system, task=task, env=env
        )
    assert [s.get("invalid_reason") for s in episode.trace] == ["length", "length", None]
    assert episode.tool_calls == 0 and episode.status == "finished"
    assert json.loads(engine.seen[2])[-1] == {"role": "user", "content": P.MSG_NO_ACTION_LENGTH}
    requests = [json.loads(seen) for seen in engine.seen]
    assert len(requests) == 3


async def test_every_call_asks_for_the_benchmarks_max_tokens(dataset: Path, tmp_path: Path) -> None:
    task, env, system = _episode_parts(dataset, 6)

    class Limits(ScriptedEngine):
        asked: list[int | None] = []

        def respond(self, turn: Turn) -> Reply:
            self.asked.append(turn.max_tokens)
            return Reply(tool_calls=[ToolCall("finish", {})])

    engine = Limits()
    async with host(tmp_path, engine) as client:
        await run_episode(client, model="local/scripted", system_prompt=system, task=task, env=env)
    assert engine.asked == [P.MAX_TOKENS] == [65_536]


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
