"""The MWM learner session: an LLM, through the learner meter, turns a block into a checkpoint.

The built-in learner loop speaks the Responses API as Codex CLI does: the
whole history every turn, ``store: false``, function tools, one tool call per
turn (a turn with several executes none; a turn with none gets a corrective
message), at most ``MAX_TURNS`` turns and ``MAX_OUTPUT_TOKENS`` output
tokens. Its tools work on the new version's directory only:

- ``fit_adapter``: train the world model's adapter (:mod:`._worldmodel`) on
  every served episode's evidence so far, recent blocks weighing more;
- ``read_card`` / ``write_card(text)``: the world-model card;
- ``finish``: the version is done.

The session sees the block's served episodes as their records (what the agent
received, did and observed, and the score line); never an evaluator, never a
serving task. It
runs on a worker thread (blocking HTTP to the meter on loopback), so the
event loop keeps serving.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import msgspec

import meters
from mw_errors import ProviderRefused

from ._worldmodel import Served

__all__ = [
    "MAX_OUTPUT_TOKENS",
    "MAX_TURNS",
    "LearnerEndpoint",
    "LearnerUsage",
    "ensure_card",
    "evidence_text",
    "run_learner_session",
]

MAX_TURNS = 12  # per session
MAX_OUTPUT_TOKENS = 32_768  # per session: a turn past it is not taken

INSTRUCTIONS = """\
You maintain the world model of a deployment: an adapter that answers the \
agent's wm queries, and a card that describes what has been learned; the agent \
reads the card in its system prompt. After each block of served cases you get \
the records of the block's episodes: what the agent received, did and observed, \
and the score it got. Update the world model with your tools, one call \
per turn: fit_adapter trains the adapter on all evidence so far; read_card and \
write_card edit the card. Call finish when the world model is up to date."""

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "name": "fit_adapter",
        "description": "Train the adapter on all evidence so far; recent blocks count more.",
        "parameters": {"type": "object", "properties": {}, "additionalProperties": False},
    },
    {
        "type": "function",
        "name": "read_card",
        "description": "The current world-model card (markdown).",
        "parameters": {"type": "object", "properties": {}, "additionalProperties": False},
    },
    {
        "type": "function",
        "name": "write_card",
        "description": "Replace the world-model card.",
        "parameters": {
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
            "additionalProperties": False,
        },
    },
    {
        "type": "function",
        "name": "finish",
        "description": "The world model is up to date.",
        "parameters": {"type": "object", "properties": {}, "additionalProperties": False},
    },
]


class LearnerEndpoint(msgspec.Struct, frozen=True):
    """Where the learner meter listens, the learner model, and its prices."""

    base_url: str
    model: str
    prices: meters.PriceTable


class LearnerUsage(msgspec.Struct, frozen=True):
    turns: int
    input_tokens: int
    output_tokens: int
    cost_usd: str
    finished: bool


def evidence_text(served: list[Served], block: int) -> str:
    """What the learner is shown of block ``block``: each of its episodes' records.

    A record is what ServeLearnBench gives a learning method: the instruction, every
    step's action and observation, and the score line; never an evaluator, a category
    or a window. Earlier blocks reach the learner through the adapter it fits on all
    of them.
    """
    mine = [s for s in served if s.block == block]
    lines = [
        f"Evidence of block {block}: the records of its {len(mine)} served episodes "
        f"({len(served)} served so far; fit_adapter trains on all of them).",
    ]
    for item in mine:
        lines += ["", f"## block {item.block}, stream position {item.timestamp}", item.record]
    return "\n".join(lines)


def _execute(
    name: str, arguments: dict[str, Any], served: list[Served], block: int, out: Path
) -> str:
    from ._worldmodel import fit

    out.mkdir(parents=True, exist_ok=True)
    card = out / "card.md"
    if name == "fit_adapter":
        fit(served, now=block).save(out, block + 1)
        return f"adapter trained on {len(served)} episodes; card rewritten"
    if name == "read_card":
        return card.read_text() if card.exists() else "(no card yet)"
    if name == "write_card":
        text = arguments.get("text")
        if not isinstance(text, str) or not text.strip():
            return "write_card needs a non-empty text"
        card.write_text(text if text.endswith("\n") else text + "\n")
        return f"card written ({len(text)} characters)"
    return f"unknown tool {name!r}; use fit_adapter, read_card, write_card or finish"


def ensure_card(out: Path, block: int) -> None:
    """A session that wrote no card still leaves a version (with a card saying so)."""
    if not (out / "card.md").exists():
        out.mkdir(parents=True, exist_ok=True)
        (out / "card.md").write_text(f"# World model v{block + 1}\n\nThe learner wrote nothing.\n")


def run_learner_session(
    endpoint: LearnerEndpoint, served: list[Served], block: int, out: Path
) -> LearnerUsage:
    """Learn version ``block + 1`` into ``out``; return the session's usage.

    Raises:
        ProviderRefused: the learner meter or the provider refused a turn.
    """
    items: list[dict[str, Any]] = [
        {"type": "message", "role": "user", "content": evidence_text(served, block)}
    ]
    usage = meters.Usage(input_tokens=0, cached_input_tokens=0, output_tokens=0)
    cost = Decimal(0)
    finished = False
    turns = 0
    with httpx.Client(base_url=endpoint.base_url, timeout=600.0) as client:
        while turns < MAX_TURNS and usage.output_tokens < MAX_OUTPUT_TOKENS and not finished:
            turns += 1
            body = {
                "model": endpoint.model,
                "instructions": INSTRUCTIONS,
                "input": items,
                "tools": TOOLS,
                "store": False,
                "max_output_tokens": min(4096, MAX_OUTPUT_TOKENS - usage.output_tokens),
            }
            response = client.post("/responses", json=body)
            if response.status_code != 200:
                raise ProviderRefused(
                    f"learner turn {turns}: HTTP {response.status_code}: {response.text[:300]}"
                )
            answer = response.json()
            turn_usage = meters.responses_usage(answer.get("usage"))
            if turn_usage is not None:
                usage = meters.Usage(
                    input_tokens=usage.input_tokens + turn_usage.input_tokens,
                    cached_input_tokens=usage.cached_input_tokens + turn_usage.cached_input_tokens,
                    output_tokens=usage.output_tokens + turn_usage.output_tokens,
                )
                cost += endpoint.prices.cost(endpoint.model, turn_usage)
            output = [item for item in answer.get("output", []) if isinstance(item, dict)]
            items.extend(output)
            calls = [item for item in output if item.get("type") == "function_call"]
            if not calls:
                items.append(
                    {"type": "message", "role": "user",
                     "content": "Use one tool per turn; call finish when the world model is done."}
                )  # fmt: skip
                continue
            for call in calls:
                if len(calls) > 1:
                    result = "not executed: call one tool per turn"
                elif call.get("name") == "finish":
                    finished, result = True, "done"
                else:
                    try:
                        arguments = json.loads(call.get("arguments") or "{}")
                    except ValueError:
                        arguments = None
                    if not isinstance(arguments, dict):
                        result = "the arguments are not a JSON object"
                    else:
                        result = _execute(str(call.get("name")), arguments, served, block, out)
                items.append(
                    {
                        "type": "function_call_output",
                        "call_id": call.get("call_id"),
                        "output": result,
                    }
                )
    ensure_card(out, block)
    return LearnerUsage(
        turns=turns,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cost_usd=meters.usd(cost),
        finished=finished,
    )
