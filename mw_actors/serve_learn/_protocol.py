"""ServeLearnBench's protocol, for the loop mw runs itself (the synthetic scenario).

A real scenario plays through the package's own loop (:mod:`._slb`). The
synthetic one must run where the package cannot be installed (Python 3.11),
so mw's loop (:mod:`._acting`) follows the same rules with the values and
texts below: the budgets, the harness's corrective messages, the ``finish``
check, the score line and the episode record a learning method reads. Each
is the package's, word for word; ``tests/serve_learn/test_protocol.py`` runs
them beside the package's own (``servelearnbench.protocol`` and ``.agent``)
and fails on any difference.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .._turns import passback_args  # the harness's rule, kept by mw's Chat dialect

__all__ = [
    "CUT_OFF_REPLY",
    "ENGINE_TOOL_BUDGET",
    "FINISH_ACK",
    "MAX_OUTPUT_PER_TASK",
    "MAX_STEPS",
    "MAX_TOKENS",
    "MSG_MULTI",
    "MSG_NO_ACTION",
    "MSG_NO_ACTION_LENGTH",
    "MSG_SCHEMA",
    "MSG_UNKNOWN",
    "OVERFLOW_WORDS",
    "episode_record",
    "finish_args_error",
    "passback_args",
    "score_line",
    "split_reply",
    "strip_timestamp",
    "tool_budget_exhausted",
]

ENGINE_TOOL_BUDGET = 50  # tool calls per episode; finish is exempt
MAX_STEPS = 100  # model turns per episode
MAX_OUTPUT_PER_TASK = 256_000  # output tokens per episode
MAX_TOKENS = 65_536  # max_tokens per model call

MSG_NO_ACTION = (
    "No tool call was received. Act with exactly ONE tool call (call `finish` to end the episode)."
)
MSG_NO_ACTION_LENGTH = (
    "Your reply was cut off by the output limit before a tool call was produced. "
    "Act with exactly ONE tool call."
)
MSG_MULTI = (
    "not executed: {n} tool calls were received in one turn; only ONE call per turn is "
    "allowed. Nothing was executed \u2014 re-issue the calls one per turn."
)
MSG_SCHEMA = (
    "not executed: arguments must be a JSON object that follows the tool's schema ({detail})."
)
MSG_UNKNOWN = "not executed: unknown tool '{name}'."
FINISH_ACK = '{"accepted": true}'
CUT_OFF_REPLY = "(reasoning ran too long and was cut off)"
TIMESTAMP_PREFIX = "Current timestamp: "
# A 4xx naming one of these is a context overflow: the episode ends, scored as it stands.
OVERFLOW_WORDS = ("context length", "context_length", "maximum context", "context window",
                  "too long", "token limit", "maximum length", "max_tokens",
                  "exceeds the maximum")  # fmt: skip

_TEMPLATE_MARKUP = re.compile(r"</?arg_key>|</?arg_value>|</?tool_call>|<\|[a-z_]+\|>")


def tool_budget_exhausted() -> str:
    """The observation of a tool call past the budget (the package's Env answers it)."""
    return (
        f"Error: tool-call budget ({ENGINE_TOOL_BUDGET}) exhausted \u2014 no further tool "
        "calls are possible; submit your final answer with `finish`."
    )


def score_line(reward: float) -> str:
    """The only feedback after a serving task: ``Score: n/100.``."""
    return f"Score: {reward * 100:g}/100."


def strip_timestamp(instruction: str) -> str:
    """The instruction without its ``Current timestamp: t`` line."""
    if instruction.startswith(TIMESTAMP_PREFIX):
        return instruction.split("\n\n", 1)[-1]
    return instruction


def finish_args_error(args: dict[str, Any], spec: dict[str, Any]) -> str | None:
    """Why a ``finish`` call's arguments break its schema, or None; a rejected finish may retry."""
    params = spec["function"]["parameters"]
    props: dict[str, Any] = params.get("properties") or {}
    missing = [k for k in params.get("required") or [] if k not in args]
    if missing:
        named = ", ".join(f"'{k}' ({props[k].get('type', 'value')})" for k in missing)
        return f"not executed: finish requires {named}."
    unknown = sorted(k for k in args if k not in props)
    if unknown:
        allowed = f"; allowed: {', '.join(props)}." if props else "; it takes no arguments."
        return (
            "not executed: finish takes no argument named "
            + ", ".join(f"'{k}'" for k in unknown)
            + allowed
        )
    for k, v in args.items():
        if props[k].get("type") == "string" and (not isinstance(v, str) or not v.strip()):
            return f"not executed: finish argument '{k}' must be a non-empty string."
        if isinstance(v, str) and (markup := _TEMPLATE_MARKUP.search(v)):
            return (
                f"not executed: finish argument '{k}' contains tool-call markup "
                f"({markup.group(0)!r}); re-issue the call with plain values, one argument "
                "per field."
            )
        if "enum" in props[k] and v not in props[k]["enum"]:
            return f"not executed: finish argument '{k}' must be one of {props[k]['enum']}."
    if args.get("decision") == "refuse" and not str(args.get("reason") or "").strip():
        return "not executed: finish(decision=\"refuse\") requires 'reason' (the refusal code)."
    return None


def split_reply(raw: str | None, reasoning: str | None = "") -> tuple[str, str]:
    """(reasoning, visible reply) of a turn: a separate field, or inline ``<think>`` tags."""
    raw, reasoning = raw or "", reasoning or ""
    if "</think>" in raw:
        head, _, tail = raw.partition("</think>")
        return reasoning or head.replace("<think>", "").strip(), tail.strip()
    if "<think>" in raw:
        return reasoning or raw.replace("<think>", "").strip(), CUT_OFF_REPLY
    return reasoning.strip(), raw.strip()


def episode_record(instruction: str, trace: list[dict[str, Any]], reward: float) -> str:
    """The text of one episode a learning method may read: every step, then the score line."""
    lines = [f"INSTRUCTION: {instruction}", ""]
    prev_obs = None
    for n, step in enumerate(trace, 1):
        kind = step.get("kind")
        lines.append(f"[step {n}]")
        got = step.get("input") or ""
        if got and got != instruction and got != f"Observation: {prev_obs}":
            lines.append(f"  received: {got}")
        thought, reply = split_reply(step.get("raw"), step.get("reasoning"))
        if thought:
            lines.append(f"  thought: {thought}")
        if reply:
            lines.append(f"  replied: {reply}")
        if kind in ("tool", "finish"):
            args = json.dumps(step.get("args") or {}, ensure_ascii=False)
            lines.append(f"  action: {step.get('name')}({args})")
        else:
            lines.append(f"  action: NONE [{kind}: {step.get('name')}]")
        obs = step.get("obs")
        if obs:
            lines.append(f"  observation: {obs}")
        prev_obs = obs
        lines.append("")
    lines.append(score_line(reward))
    return "\n".join(lines)
