"""mw's own acting loop beside ServeLearnBench's: the same rules, messages, traces and records.

The synthetic scenario plays in mw's loop (it must run where the package cannot
be installed); these tests run it and the package's ``agent.run_turns`` side by
side, on the same scripted provider behind the same meter, and compare every
message sent and every step traced.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio.to_thread
import pytest

from mw_actors.provider import Reply, ScriptedEngine, ToolCall
from mw_actors.serve_learn import _protocol as P
from mw_actors.serve_learn._acting import run_episode
from tests.serve_learn.test_acting import Recording, _decision, host

slb = pytest.importorskip("servelearnbench", reason="the servelearnbench package (Python >= 3.12)")
from servelearnbench import agent, llm, protocol  # noqa: E402

pytestmark = pytest.mark.anyio


def test_the_budgets_and_the_harness_texts_are_the_packages() -> None:
    assert (P.ENGINE_TOOL_BUDGET, P.MAX_STEPS, P.MAX_OUTPUT_PER_TASK, P.MAX_TOKENS) == (
        protocol.ENGINE_TOOL_BUDGET, protocol.MAX_STEPS, protocol.MAX_OUTPUT_PER_TASK,
        protocol.MAX_TOKENS,
    )  # fmt: skip
    for name in ("MSG_NO_ACTION", "MSG_NO_ACTION_LENGTH", "MSG_MULTI", "MSG_SCHEMA",
                 "MSG_UNKNOWN", "FINISH_ACK"):  # fmt: skip
        assert getattr(P, name) == getattr(agent, name), name
    assert P.CUT_OFF_REPLY == protocol.CUT_OFF_REPLY
    assert P.OVERFLOW_WORDS == llm._OVERFLOW_WORDS
    for reward in (0.0, 1.0, 0.5, 0.123456, 1 / 3):
        assert P.score_line(reward) == protocol.score_line(reward)
    for text in ("Current timestamp: 4\n\nDo it.", "Do it.", "Current timestamp: 4\n\na\n\nb"):
        assert P.strip_timestamp(text) == protocol.strip_timestamp(text)
    for raw, reasoning in (("a", ""), ("<think>x</think> y", ""), ("<think>x", ""), ("a", "r"),
                           ("<think>x</think>y", "r"), ("", None), (None, "r")):  # fmt: skip
        assert P.split_reply(raw, reasoning) == protocol.split_reply(raw, reasoning)
    for raw in ("", "  ", "{}", '{"a": 1}', "[1]", "not json", '"s"'):
        assert P.passback_args(raw) == agent._passback_args(raw)


FINISH_CASES: list[dict[str, Any]] = [
    {}, {"answer": "done"}, {"pitch": "x"}, {"pitch": ""}, {"pitch": 3}, {"pitch": "a <tool_call>"},
    {"decision": "refuse"}, {"decision": "refuse", "reason": " "},
    {"decision": "refuse", "reason": "r"}, {"decision": "maybe"}, {"answer": 3},
    {"answer": ["a"]}, {"reason": "x"}, {"other": 1, "pitch": "p"},
    {"answer": "<|im_end|>"},
]  # fmt: skip


@pytest.mark.parametrize("domain", ["banking", "retail", "pitch"])
def test_finish_is_checked_as_the_package_checks_it(domain: str) -> None:
    spec = agent.finish_tool_spec(domain)
    for args in FINISH_CASES:
        assert P.finish_args_error(args, spec) == agent.finish_args_error(args, spec), args


SCRIPT = [
    Reply(tool_calls=[ToolCall("get_case", {"case_id": "A"}), ToolCall("finish", {})]),
    Reply(content="Let me think.", reasoning="hm"),
    Reply(),
    Reply(tool_calls=[ToolCall("get_case", {"case_id": "B"})], truncated=True),
    Reply(content="<think>cut", truncated=True),
    Reply(tool_calls=[ToolCall("lookup", {"case_id": "A"})]),
    Reply(tool_calls=[ToolCall("get_case", {"case_id": "{case}"})], reasoning="Look it up."),
    Reply(tool_calls=[ToolCall("decide", {"case_id": "{case}", "decision": "{right}"})]),
    Reply(tool_calls=[ToolCall("get_case", {"case_id": "{case}"})]),
    Reply(tool_calls=[ToolCall("finish", {"answer": "done"})]),
    Reply(content="Done.", tool_calls=[ToolCall("finish", {})]),
]


def _script(case_id: str, right: str) -> list[Reply]:
    def fill(call: ToolCall) -> ToolCall:
        text = json.dumps(call.arguments).replace("{case}", case_id).replace("{right}", right)
        return ToolCall(call.name, json.loads(text))

    return [
        Reply(r.content, [fill(c) for c in r.tool_calls], r.reasoning, truncated=r.truncated)
        for r in SCRIPT
    ]


async def test_mws_loop_and_the_packages_send_the_same_messages_and_trace_the_same_steps(
    dataset: Path, tmp_path: Path
) -> None:
    task, env, system, case_id, right = _decision(dataset, 7)
    ours_engine = Recording(ScriptedEngine(_script(case_id, right)))
    async with host(tmp_path / "ours", ours_engine) as client:
        ours = await run_episode(
            client, model="local/scripted", system_prompt=system, task=task, env=env
        )
    task, theirs_env, system, _, _ = _decision(dataset, 7)
    theirs_engine = Recording(ScriptedEngine(_script(case_id, right)))
    async with host(tmp_path / "theirs", theirs_engine) as client:
        model = llm.LLM(llm.ModelConfig(model="local/scripted", base_url=str(client.base_url),
                                        reasoning_effort=None))  # fmt: skip
        messages = [{"role": "system", "content": system},
                    {"role": "user", "content": task.instruction}]  # fmt: skip

        def play() -> list[dict[str, Any]]:
            llm.usage_reset()
            names = {t["function"]["name"] for t in theirs_env.tools} - {"finish"}

            def execute(name: str, args: dict[str, Any]) -> str:
                if name not in names:
                    raise agent.UnknownTool(agent.MSG_UNKNOWN.format(name=name))
                return theirs_env.call(name, args)

            return list(
                agent.run_turns(
                    model, messages, theirs_env.tools, execute, on_finish=theirs_env.finish
                )
            )

        theirs = await anyio.to_thread.run_sync(play)
    assert [json.loads(s) for s in ours_engine.seen] == [json.loads(s) for s in theirs_engine.seen]
    assert ours.trace == json.loads(json.dumps(theirs))
    assert ours.reward == theirs_env.reward() == 1.0
    assert P.episode_record(task.instruction, ours.trace, ours.reward) == protocol.episode_record(
        task.instruction, theirs, theirs_env.reward()
    )
    kinds = [s["kind"] for s in ours.trace]
    assert kinds == ["invalid"] * 6 + ["tool"] * 4 + ["finish"]
