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

import json
import time
from collections.abc import Callable
from typing import Any, Literal, Protocol

import httpx
import msgspec

import meters
from mw_errors import ProviderRefused

from . import _protocol as P
from ._protocol import MAX_TOKENS, score_line
from ._scenario import Task

__all__ = [
    "MAX_TOKENS",
    "WM_TOOL",
    "Budget",
    "Environment",
    "Episode",
    "acting_client",
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
    tool_calls: int = P.ENGINE_TOOL_BUDGET  # finish is exempt
    turns: int = P.MAX_STEPS
    output_tokens: int = P.MAX_OUTPUT_PER_TASK


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


def _error_code(response: httpx.Response) -> str | None:
    """The ``code`` of an OpenAI-format error body, if it has one."""
    try:
        error = response.json().get("error")
    except (ValueError, AttributeError):
        return None
    code = error.get("code") if isinstance(error, dict) else None
    return code if isinstance(code, str) else None


def _calls(message: dict[str, Any]) -> list[dict[str, Any]]:
    """The turn's tool calls as ``{id, name, arguments}`` (arguments: the raw JSON text)."""
    calls = []
    for index, call in enumerate(message.get("tool_calls") or []):
        if not isinstance(call, dict):
            continue
        function = call.get("function")
        function = function if isinstance(function, dict) else {}
        arguments = function.get("arguments")
        calls.append(
            {
                "id": str(call.get("id") or f"call_{index}"),
                "name": str(function.get("name") or ""),
                "arguments": arguments if isinstance(arguments, str) else "",
            }
        )
    return calls


def _assistant(message: dict[str, Any], calls: list[dict[str, Any]]) -> dict[str, Any]:
    """The assistant turn as returned, reasoning included, back into history."""
    content = message.get("content") or ""
    turn: dict[str, Any] = {
        "role": "assistant",
        "content": content if (content or not calls) else None,
    }
    if message.get("reasoning_content"):
        turn["reasoning_content"] = message["reasoning_content"]
    if calls:
        turn["tool_calls"] = [
            {
                "id": c["id"],
                "type": "function",
                "function": {"name": c["name"], "arguments": P.passback_args(c["arguments"])},
            }
            for c in calls
        ]
    return turn


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

    Raises:
        ProviderRefused: the meter or the provider answered with another error.
    """
    budget = budget or Budget()
    system = system_prompt if mwm_context is None else f"{system_prompt}\n\n{mwm_context}"
    tools = [*env.tools, WM_TOOL] if wm is not None else list(env.tools)
    names = {t["function"]["name"] for t in env.tools} - {"finish"}
    finish_spec = next((t for t in env.tools if t["function"]["name"] == "finish"), None)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": system},
        {"role": "user", "content": task.instruction},
    ]
    trace: list[dict[str, Any]] = []
    usage = dict.fromkeys(("input", "cache_input", "output", "reasoning", "calls"), 0)
    tool_calls = 0
    provider_seconds = 0.0
    turn_input = task.instruction
    for _ in range(budget.turns):
        if usage["output"] >= budget.output_tokens:
            trace.append({"kind": "capped", "name": "(token_cap)", "args": {},
                          "obs": f"task exceeded {budget.output_tokens} output tokens",
                          "input": turn_input, "raw": "", "reasoning": ""})  # fmt: skip
            break
        body: dict[str, Any] = {"model": model, "messages": messages, "tools": tools,
                                "max_tokens": max_tokens, "parallel_tool_calls": False}  # fmt: skip
        if reasoning_effort:
            body["reasoning_effort"] = reasoning_effort
        sent = time.perf_counter()
        response = await client.post("/chat/completions", json=body)
        provider_seconds += time.perf_counter() - sent
        if response.status_code != 200:
            text = response.text[:300]
            if 400 <= response.status_code < 500 and _overflow(text):
                trace.append({"kind": "error", "name": "(context_overflow)", "args": {},
                              "obs": text, "input": turn_input, "raw": "",
                              "reasoning": ""})  # fmt: skip
                break
            raise ProviderRefused(
                f"{task.task_id}: HTTP {response.status_code} {text[:200]}",
                status=response.status_code,
                kind=_error_code(response),
            )
        data = response.json()
        counted = _usage(data.get("usage") or {})
        for key, value in counted.items():
            usage[key] += value
        choice = data["choices"][0]
        message = dict(choice.get("message") or {})
        reason = choice.get("finish_reason")
        calls = _calls(message)
        messages.append(_assistant(message, calls))
        step = {"input": turn_input, "raw": message.get("content") or "",
                "reasoning": message.get("reasoning_content") or "", "tool_calls": calls,
                "finish_reason": reason, "usage": counted}  # fmt: skip
        if reason == "length" and calls:
            err = "not executed: " + P.MSG_NO_ACTION_LENGTH
            for c in calls:
                messages.append({"role": "tool", "tool_call_id": c["id"], "content": err})
            trace.append({"kind": "invalid", "name": "(no_action)",
                          "args": {"calls": [c["name"] for c in calls]}, "obs": err,
                          "invalid_reason": "length", **step})  # fmt: skip
            turn_input = f"Observation: {err}"
            continue
        if not calls:
            why = "length" if reason == "length" else "no_action"
            trace.append({"kind": "invalid", "name": "(no_action)", "args": {}, "obs": "",
                          "invalid_reason": why, **step})  # fmt: skip
            turn_input = P.MSG_NO_ACTION_LENGTH if reason == "length" else P.MSG_NO_ACTION
            messages.append({"role": "user", "content": turn_input})
            continue
        if len(calls) > 1:
            called = [c["name"] for c in calls]
            why = "finish_with_tool" if "finish" in called else "multi_action"
            err = P.MSG_MULTI.format(n=len(calls))
            for c in calls:
                messages.append({"role": "tool", "tool_call_id": c["id"], "content": err})
            trace.append({"kind": "invalid", "name": f"({why})", "args": {"calls": called},
                          "obs": err, "invalid_reason": why, **step})  # fmt: skip
            turn_input = f"Observation: {err}"
            continue
        call = calls[0]
        name, raw = call["name"], call["arguments"]
        try:
            args = json.loads(raw) if raw.strip() else {}
            bad = None if isinstance(args, dict) else f"got {type(args).__name__}, not an object"
        except ValueError as exc:
            args, bad = None, f"invalid JSON: {str(exc)[:80]}"
        if bad:
            err = P.MSG_SCHEMA.format(detail=bad)
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": err})
            trace.append({"kind": "invalid", "name": "(schema_invalid)",
                          "args": {"tool": name, "arguments": raw[:500]}, "obs": err,
                          "invalid_reason": "schema_invalid", "call_id": call["id"],
                          **step})  # fmt: skip
            turn_input = f"Observation: {err}"
            continue
        assert isinstance(args, dict)
        if name == "finish" and finish_spec is not None:
            rejected = P.finish_args_error(args, finish_spec)
            if rejected:
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": rejected})
                trace.append({"kind": "tool", "name": "finish", "args": args, "obs": rejected,
                              "call_id": call["id"], "rejected": True, **step})  # fmt: skip
                turn_input = f"Observation: {rejected}"
                continue
            env.finish(args)
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": P.FINISH_ACK})
            trace.append({"kind": "finish", "name": "finish", "args": args, "obs": "",
                          "call_id": call["id"], **step})  # fmt: skip
            break
        if name == WM_TOOL["function"]["name"] and wm is not None:
            obs = wm(str(args.get("query", "")))
        elif name not in names:
            err = P.MSG_UNKNOWN.format(name=name)
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": err})
            trace.append({"kind": "invalid", "name": "(unknown_tool)",
                          "args": {"tool": name, "arguments": args}, "obs": err,
                          "invalid_reason": "unknown_tool", "call_id": call["id"],
                          **step})  # fmt: skip
            turn_input = f"Observation: {err}"
            continue
        elif tool_calls >= budget.tool_calls:  # the Env's rule: finish is exempt
            obs = P.tool_budget_exhausted()
        else:
            tool_calls += 1
            obs = env.call(name, args)
        messages.append({"role": "tool", "tool_call_id": call["id"], "content": obs})
        trace.append({"kind": "tool", "name": name, "args": args, "obs": obs,
                      "call_id": call["id"], **step})  # fmt: skip
        turn_input = f"Observation: {obs}"
    else:
        trace.append({"kind": "capped", "name": "(step_cap)", "args": {},
                      "obs": f"episode reached the step cap ({budget.turns} turns) without finish",
                      "input": turn_input, "raw": "", "reasoning": ""})  # fmt: skip
    last = trace[-1]["kind"] if trace else None
    status: Literal["finished", "budget_exhausted", "no_finish"] = (
        "finished" if last == "finish" else "budget_exhausted" if last == "capped" else "no_finish"
    )
    return Episode(
        task_id=task.task_id,
        status=status,
        reward=env.reward(),
        turns=len(trace),
        tool_calls=tool_calls,
        input_tokens=usage["input"],
        output_tokens=usage["output"],
        trace=trace,
        provider_seconds=provider_seconds,
        usage=usage,
    )


def _overflow(text: str) -> bool:
    """A 4xx that names the context limit: the model's own doing, scored as it stands."""
    lowered = text.lower()
    return any(word in lowered for word in P.OVERFLOW_WORDS)


def _usage(usage: dict[str, Any]) -> dict[str, int]:
    """One call's usage as the benchmark's client counts it."""
    prompt = usage.get("prompt_tokens_details") or {}
    completion = usage.get("completion_tokens_details") or {}
    return {
        "input": int(usage.get("prompt_tokens") or 0),
        "cache_input": int((prompt.get("cached_tokens") if isinstance(prompt, dict) else 0) or 0),
        "output": int(usage.get("completion_tokens") or 0),
        "reasoning": int(
            (completion.get("reasoning_tokens") if isinstance(completion, dict) else 0) or 0
        ),
        "calls": 1,
    }
