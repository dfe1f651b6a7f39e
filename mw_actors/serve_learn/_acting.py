"""The acting loop: one episode of the host agent on one task, through the host's wire meter.

The protocol is ServeLearnBench's, rule for rule and word for word (see
:mod:`._protocol`); a real scenario plays in the package's own loop instead
(:mod:`._slb`):
- one tool call per turn: a turn with several calls executes none of them,
  and a turn with none gets the harness's corrective message;
- ``finish`` ends the episode once its arguments fit its schema;
- budgets per episode: 50 tool calls (``finish`` exempt), 100 turns, 256k
  output tokens, 65,536 per call;
- the model's reasoning (``reasoning_content``) is passed back on later turns;
- with MWM, its context is appended to the system prompt and a ``wm`` tool is
  offered beside the environment's tools;
- after a serving task the score line ``Score: n/100.`` is the only feedback.

The environment holds the task's evaluator privately (it is the verifier);
nothing of it is ever put into a message.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, Protocol

import httpx
import msgspec

import meters

from .._turns import Agent, Answer, Call, ChatCompletions, Turn, object_arguments, run_turns
from . import _protocol as P
from ._play import WM_TOOL, Budget
from ._protocol import MAX_TOKENS, score_line
from ._scenario import Task

__all__ = [
    "MAX_TOKENS",
    "Environment",
    "Episode",
    "acting_client",
    "run_episode",
    "score_line",
]


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
    usage: dict[str, int] = {}  # as the benchmark counts it: input, cache_input, output, ...


class Environment(Protocol):
    """A task's tools and its verifier."""

    tools: list[dict[str, Any]]

    def call(self, name: str, arguments: dict[str, Any]) -> str: ...

    def finish(self, arguments: dict[str, Any]) -> None:
        """The model's ``finish`` and its arguments (a structured answer, where graded)."""

    def reward(self) -> float: ...


def acting_client(meter_port: int) -> httpx.AsyncClient:
    """The acting loop's client of its host meter (episodes reach the model through it)."""
    return httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{meter_port}/v1",
        timeout=600.0,
        transport=meters.LeanPool(),  # no pool walk per request
    )


def _counted(usage: meters.Usage) -> dict[str, int]:
    """One call's usage as the benchmark's client counts it."""
    return {
        "input": usage.input_tokens,
        "cache_input": usage.cached_input_tokens,
        "output": usage.output_tokens,
        "reasoning": usage.reasoning_tokens,
        "calls": 1,
    }


class _Host(Agent):
    """The host agent's tools and the harness's words, and the episode's trace."""

    def __init__(
        self,
        env: Environment,
        task: Task,
        wm: Callable[[str], str] | None,
        budget: Budget,
        max_tokens: int,
    ) -> None:
        self.env, self.wm, self.budget, self._max_tokens = env, wm, budget, max_tokens
        self.names = {t["function"]["name"] for t in env.tools} - {"finish"}
        self.finish_spec = next((t for t in env.tools if t["function"]["name"] == "finish"), None)
        self.trace: list[dict[str, Any]] = []
        self.tool_calls = 0
        self.turn_input = task.instruction

    def max_tokens(self, used_output: int) -> int:
        return self._max_tokens

    def refused(self, response: httpx.Response) -> bool:
        """A 4xx that names the context limit: the model's own doing, scored as it stands."""
        text = response.text[:300]
        if not (400 <= response.status_code < 500 and _overflow(text)):
            return False
        self.end("error", "(context_overflow)", text)
        return True

    def end(self, kind: str, name: str, obs: str) -> None:
        self.trace.append({"kind": kind, "name": name, "args": {}, "obs": obs,
                           "input": self.turn_input, "raw": "", "reasoning": ""})  # fmt: skip

    def _step(self, turn: Turn) -> dict[str, Any]:
        calls = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in turn.calls]
        return {"input": self.turn_input, "raw": turn.text, "reasoning": turn.reasoning,
                "tool_calls": calls, "finish_reason": turn.finish_reason,
                "usage": _counted(turn.usage)}  # fmt: skip

    def _observe(self, text: str) -> None:
        self.turn_input = f"Observation: {text}"

    async def turn(self, turn: Turn) -> Answer:
        if turn.finish_reason == "length" and turn.calls:  # a cut reply executes nothing
            err = "not executed: " + P.MSG_NO_ACTION_LENGTH
            self.trace.append({"kind": "invalid", "name": "(no_action)",
                               "args": {"calls": [c.name for c in turn.calls]}, "obs": err,
                               "invalid_reason": "length", **self._step(turn)})  # fmt: skip
            self._observe(err)
            return Answer(results=[(c.id, err) for c in turn.calls])
        return await super().turn(turn)

    async def none(self, turn: Turn) -> Answer:
        why = "length" if turn.finish_reason == "length" else "no_action"
        self.trace.append({"kind": "invalid", "name": "(no_action)", "args": {}, "obs": "",
                           "invalid_reason": why, **self._step(turn)})  # fmt: skip
        self.turn_input = P.MSG_NO_ACTION_LENGTH if why == "length" else P.MSG_NO_ACTION
        return Answer(user=self.turn_input)

    async def several(self, turn: Turn) -> Answer:
        called = [c.name for c in turn.calls]
        why = "finish_with_tool" if "finish" in called else "multi_action"
        err = P.MSG_MULTI.format(n=len(called))
        self.trace.append({"kind": "invalid", "name": f"({why})", "args": {"calls": called},
                           "obs": err, "invalid_reason": why, **self._step(turn)})  # fmt: skip
        self._observe(err)
        return Answer(results=[(c.id, err) for c in turn.calls])

    def _invalid(self, turn: Turn, call: Call, why: str, args: Any, err: str) -> Answer:
        self.trace.append({"kind": "invalid", "name": f"({why})",
                           "args": {"tool": call.name, "arguments": args}, "obs": err,
                           "invalid_reason": why, "call_id": call.id,
                           **self._step(turn)})  # fmt: skip
        self._observe(err)
        return Answer(results=[(call.id, err)])

    async def one(self, turn: Turn, call: Call) -> Answer:
        args = object_arguments(call)
        if isinstance(args, str):
            err = P.MSG_SCHEMA.format(detail=args)
            return self._invalid(turn, call, "schema_invalid", call.arguments[:500], err)
        if call.name == "finish" and self.finish_spec is not None:
            rejected = P.finish_args_error(args, self.finish_spec)
            if rejected:
                self.trace.append({"kind": "tool", "name": "finish", "args": args,
                                   "obs": rejected, "call_id": call.id, "rejected": True,
                                   **self._step(turn)})  # fmt: skip
                self._observe(rejected)
                return Answer(results=[(call.id, rejected)])
            self.env.finish(args)
            self.trace.append({"kind": "finish", "name": "finish", "args": args, "obs": "",
                               "call_id": call.id, **self._step(turn)})  # fmt: skip
            return Answer(results=[(call.id, P.FINISH_ACK)], done=True)
        if call.name == WM_TOOL["function"]["name"] and self.wm is not None:
            obs = self.wm(str(args.get("query", "")))
        elif call.name not in self.names:
            err = P.MSG_UNKNOWN.format(name=call.name)
            return self._invalid(turn, call, "unknown_tool", args, err)
        elif self.tool_calls >= self.budget.tool_calls:  # the Env's rule: finish is exempt
            obs = P.tool_budget_exhausted()
        else:
            self.tool_calls += 1
            obs = self.env.call(call.name, args)
        self.trace.append({"kind": "tool", "name": call.name, "args": args, "obs": obs,
                           "call_id": call.id, **self._step(turn)})  # fmt: skip
        self._observe(obs)
        return Answer(results=[(call.id, obs)])


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
    max_tokens: int = MAX_TOKENS,
    reasoning_effort: str | None = None,
) -> Episode:
    """Play one episode; ``client`` points at the host meter's ``/v1``.

    The rules, the messages and the trace are ServeLearnBench's ``agent.run_turns``'
    (see :mod:`._protocol`): ``finish`` is exempt from the tool budget and checked
    against its schema (a rejected finish may finish again); a turn with no call or
    several gets the harness's corrective message; a reply cut by the length limit
    executes nothing; a context overflow (a 4xx naming the context) ends the episode.
    The turns themselves are mw's one loop (:func:`~mw_actors._turns.run_turns`).

    Raises:
        ProviderRefused: the meter or the provider answered with another error.
    """
    budget = budget or Budget()
    system = system_prompt if mwm_context is None else f"{system_prompt}\n\n{mwm_context}"
    host = _Host(env, task, wm, budget, max_tokens)
    extra: dict[str, Any] = {"parallel_tool_calls": False}
    if reasoning_effort:
        extra["reasoning_effort"] = reasoning_effort
    tally = await run_turns(
        client,
        ChatCompletions(),
        host,
        label=task.task_id,
        model=model,
        history=[
            {"role": "system", "content": system},
            {"role": "user", "content": task.instruction},
        ],
        tools=[*env.tools, WM_TOOL] if wm is not None else list(env.tools),
        turns=budget.turns,
        output_tokens=budget.output_tokens,
        extra=extra,
    )
    if tally.ended == "output_tokens":
        host.end("capped", "(token_cap)", f"task exceeded {budget.output_tokens} output tokens")
    elif tally.ended == "turns":
        cap = f"episode reached the step cap ({budget.turns} turns) without finish"
        host.end("capped", "(step_cap)", cap)
    trace = host.trace
    last = trace[-1]["kind"] if trace else None
    status: Literal["finished", "budget_exhausted", "no_finish"] = (
        "finished" if last == "finish" else "budget_exhausted" if last == "capped" else "no_finish"
    )
    usage = _counted(tally.usage) | {"calls": tally.turns}
    return Episode(
        task_id=task.task_id,
        status=status,
        reward=env.reward(),
        turns=len(trace),
        tool_calls=host.tool_calls,
        input_tokens=usage["input"],
        output_tokens=usage["output"],
        trace=trace,
        provider_seconds=tally.provider_seconds,
        usage=usage,
    )


def _overflow(text: str) -> bool:
    """A 4xx that names the context limit: the model's own doing, scored as it stands."""
    lowered = text.lower()
    return any(word in lowered for word in P.OVERFLOW_WORDS)
