"""The acting loop: one episode of the host agent on one task, through the host's wire meter.

The protocol (ServeLearnBench's):
- one tool call per turn: a turn with several calls executes none of them,
  and a turn with none gets a corrective message;
- ``finish`` ends the episode;
- budgets per episode: 50 tool calls, 100 turns, 256k output tokens;
- the model's reasoning (``reasoning_content``) is passed back on later turns;
- with MWM, its context is appended to the system prompt and a ``wm`` tool is
  offered beside the environment's tools;
- after a serving task the score line ``Score: n/100.`` is the only feedback.

The environment holds the task's evaluator privately (it is the verifier);
nothing of it is ever put into a message.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any, Literal, Protocol

import httpx
import msgspec

from mw_errors import ProviderRefused

from ._scenario import Task
from ._synthetic import SyntheticCase, verify

__all__ = [
    "WM_TOOL",
    "Budget",
    "Environment",
    "Episode",
    "SyntheticEnvironment",
    "run_episode",
    "score_line",
]

WM_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "wm",
        "description": "Ask the world model learned from past serving what it knows.",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}},
            "required": ["query"],
        },
    },
}


class Budget(msgspec.Struct, frozen=True):
    tool_calls: int = 50
    turns: int = 100
    output_tokens: int = 256_000


class Episode(msgspec.Struct, frozen=True, kw_only=True):
    task_id: str
    status: Literal["finished", "budget_exhausted", "no_finish"]
    reward: float
    turns: int
    tool_calls: int
    input_tokens: int
    output_tokens: int
    trace: list[dict[str, Any]]
    provider_seconds: float = 0.0  # time spent waiting on the meter and provider


class Environment(Protocol):
    """A task's tools and its verifier."""

    tools: list[dict[str, Any]]

    def call(self, name: str, arguments: dict[str, Any]) -> str: ...

    def finish(self, arguments: dict[str, Any]) -> None:
        """The model's ``finish`` and its arguments (a structured answer, where graded)."""

    def reward(self) -> float: ...


class SyntheticEnvironment:
    """The synthetic scenario's tools for one task; its evaluator stays inside."""

    def __init__(
        self, tools: list[dict[str, Any]], world: dict[str, Any], evaluator: dict[str, Any]
    ) -> None:
        self.tools = tools
        self._world = world
        self._evaluator = evaluator
        self.decisions: list[tuple[str, str]] = []

    def call(self, name: str, arguments: dict[str, Any]) -> str:
        case_id = str(arguments.get("case_id", ""))
        if name == "get_case":
            case = self._world.get(case_id)
            if case is None:
                return json.dumps({"error": f"no case {case_id}"})
            return json.dumps(SyntheticCase(case_id, case["kind"], case["amount"]).describe())
        if name == "decide":
            if any(c == case_id for c, _ in self.decisions):
                return "error: the case already has its final decision"
            decision = str(arguments.get("decision", ""))
            if decision not in ("approve", "deny", "escalate"):
                return "error: decide needs approve, deny or escalate"
            self.decisions.append((case_id, decision))
            return "decision recorded"
        return f"error: there is no tool {name!r}"

    def finish(self, arguments: dict[str, Any]) -> None:
        """Nothing to submit: the synthetic verifier grades the decisions."""

    def reward(self) -> float:
        return verify(self._evaluator, self.decisions)


def score_line(reward: float) -> str:
    """The only feedback after a serving task, as ServeLearnBench writes it."""
    return f"Score: {100 * reward:g}/100."


def _calls(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in message.get("tool_calls") or [] if isinstance(c, dict)]


async def run_episode(
    client: httpx.AsyncClient,
    *,
    model: str,
    system_prompt: str,
    task: Task,
    env: Environment,
    wm: Callable[[str], str] | None = None,
    mwm_context: str | None = None,
    budget: Budget | None = None,
    max_tokens: int = 1024,
) -> Episode:
    """Play one episode; ``client`` points at the host meter's ``/v1``.

    Raises:
        ProviderRefused: the meter or the provider answered with an error.
    """
    budget = budget or Budget()
    system = system_prompt if mwm_context is None else f"{system_prompt}\n\n{mwm_context}"
    tools = [*env.tools, WM_TOOL] if wm is not None else list(env.tools)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": system},
        {"role": "user", "content": task.instruction},
    ]
    trace: list[dict[str, Any]] = []
    turns = calls = input_tokens = output_tokens = 0
    provider_seconds = 0.0
    status: Literal["finished", "budget_exhausted", "no_finish"] = "no_finish"
    while True:
        if turns >= budget.turns or calls >= budget.tool_calls:
            status = "budget_exhausted"
            break
        if output_tokens >= budget.output_tokens:
            status = "budget_exhausted"
            break
        turns += 1
        remaining = budget.output_tokens - output_tokens
        body = {
            "model": model,
            "messages": messages,
            "tools": tools,
            "max_tokens": min(max_tokens, remaining),
        }
        sent = time.perf_counter()
        response = await client.post("/chat/completions", json=body)
        provider_seconds += time.perf_counter() - sent
        if response.status_code != 200:
            raise ProviderRefused(
                f"turn {turns} of {task.task_id}: HTTP {response.status_code} {response.text[:200]}"
            )
        data = response.json()
        usage = data.get("usage") or {}
        input_tokens += int(usage.get("prompt_tokens") or 0)
        output_tokens += int(usage.get("completion_tokens") or 0)
        message = dict(data["choices"][0]["message"])
        message.setdefault("content", None)
        messages.append(message)  # reasoning_content rides along to later turns
        requested = _calls(message)
        if len(requested) != 1:
            for call in requested:
                messages.append(
                    {
                        "role": "tool",
                        "tool_call_id": call.get("id"),
                        "name": call.get("function", {}).get("name"),
                        "content": "not executed: call exactly one tool per turn",
                    }
                )
            why = "no tool call" if not requested else f"{len(requested)} tool calls; none ran"
            messages.append(
                {"role": "user", "content": f"Your turn had {why}. Call exactly one tool."}
            )
            trace.append({"turn": turns, "rejected": len(requested)})
            continue
        call = requested[0]
        calls += 1
        function = call.get("function") or {}
        name = str(function.get("name", ""))
        try:
            arguments = json.loads(function.get("arguments") or "{}")
        except ValueError:
            arguments = None
        if not isinstance(arguments, dict):
            result = "error: the arguments are not a JSON object"
        elif name == "finish":
            env.finish(arguments)
            result = "finished"
        elif name == "wm" and wm is not None:
            result = wm(str(arguments.get("query", "")))
        else:
            result = env.call(name, arguments)
        trace.append({"turn": turns, "tool": name, "arguments": arguments, "result": result})
        messages.append(
            {"role": "tool", "tool_call_id": call.get("id"), "name": name, "content": result}
        )
        if name == "finish":
            status = "finished"
            break
    return Episode(
        task_id=task.task_id,
        status=status,
        reward=env.reward(),
        turns=turns,
        tool_calls=calls,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        trace=trace,
        provider_seconds=provider_seconds,
    )
