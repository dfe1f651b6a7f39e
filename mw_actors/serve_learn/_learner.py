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
serving task. Its turns
are mw's one agent loop (:func:`~mw_actors._turns.run_turns`); its tools' work
(fitting, the card's files) runs on worker threads, so the event loop keeps
serving.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import httpx
import msgspec

import meters

from .._turns import Agent, Answer, Call, Responses, Turn, object_arguments, run_turns
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


FACT_CHARS = 600  # of one case's facts in the learner's table


def evidence_text(served: list[Served], block: int, manual: str = "") -> str:
    """What the learner is shown of block ``block``: its cases' facts, the rules, the records.

    A record is what ServeLearnBench gives a learning method: the instruction, every
    step's action and observation, and the score line; never an evaluator, a category
    or a window. Before the records: the block's cases as the world model reads them
    (each one's outcome, score and typed facts, one line each), and the rules fitted on
    every block so far (the card ``fit_adapter`` writes), so the learner reasons over
    the same facts and rules the adapter holds. It fits the rules: call it on a worker
    thread.
    """
    from . import _rules as rules
    from ._worldmodel import case_of, fit

    mine = [s for s in served if s.block == block]
    lines = [
        f"Evidence of block {block}: the records of its {len(mine)} served episodes "
        f"({len(served)} served so far; fit_adapter trains on all of them).",
        "",
        f"## The facts of block {block}'s cases (what the tools returned, typed)",
        "",
        "| stream position | outcome | score | facts |",
        "|---:|---|---:|---|",
    ]
    for item in mine:
        case = case_of(item)
        if case is None:
            continue
        facts = rules.facts_of(case.text)
        shown = "; ".join(
            f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
            for k, v in facts.items()
            if not k.startswith("word:") and not k.endswith(".shape")
        )
        shown = shown[:FACT_CHARS].replace("|", "/")
        lines.append(f"| {item.timestamp} | `{case.signature}` | {case.reward * 100:g} | {shown} |")
    card = fit(served, now=block, manual=manual).card(block + 1) if served else ""
    lines += [
        "",
        "## The rules fitted on every block so far (the card fit_adapter writes)",
        "",
        card.split("\n", 1)[-1].strip(),
    ]
    for item in mine:
        lines += ["", f"## block {item.block}, stream position {item.timestamp}", item.record]
    return "\n".join(lines)


def _execute(
    name: str,
    arguments: dict[str, Any],
    served: list[Served],
    block: int,
    out: Path,
    manual: str = "",
) -> str:
    from ._worldmodel import fit

    out.mkdir(parents=True, exist_ok=True)
    card = out / "card.md"
    if name == "fit_adapter":
        fit(served, now=block, manual=manual).save(out, block + 1)
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


class _Session(Agent):
    """The learner's tools on the new version's directory, and its words."""

    def __init__(
        self, endpoint: LearnerEndpoint, served: list[Served], block: int, out: Path, manual: str
    ) -> None:
        self.endpoint, self.served, self.block, self.out = endpoint, served, block, out
        self.manual = manual
        self.cost = Decimal(0)

    async def turn(self, turn: Turn) -> Answer:
        self.cost += self.endpoint.prices.cost(self.endpoint.model, turn.usage)  # as the meter
        return await super().turn(turn)

    def max_tokens(self, used_output: int) -> int:
        return min(4096, MAX_OUTPUT_TOKENS - used_output)

    async def none(self, turn: Turn) -> Answer:
        return Answer(user="Use one tool per turn; call finish when the world model is done.")

    async def several(self, turn: Turn) -> Answer:
        return Answer(results=[(c.id, "not executed: call one tool per turn") for c in turn.calls])

    async def one(self, turn: Turn, call: Call) -> Answer:
        if call.name == "finish":
            return Answer(results=[(call.id, "done")], done=True)
        arguments = object_arguments(call)
        if isinstance(arguments, str):
            return Answer(results=[(call.id, f"not executed: {arguments}")])
        result = await anyio.to_thread.run_sync(  # fitting is CPU work: off the event loop
            _execute, call.name, arguments, self.served, self.block, self.out, self.manual
        )
        return Answer(results=[(call.id, result)])


async def run_learner_session(
    endpoint: LearnerEndpoint, served: list[Served], block: int, out: Path, manual: str = ""
) -> LearnerUsage:
    """Learn version ``block + 1`` into ``out``; return the session's usage.

    Raises:
        ProviderRefused: the learner meter or the provider refused a turn.
    """
    evidence = await anyio.to_thread.run_sync(evidence_text, served, block, manual)  # it fits
    history: list[dict[str, Any]] = [{"type": "message", "role": "user", "content": evidence}]
    async with httpx.AsyncClient(base_url=endpoint.base_url, timeout=600.0) as client:
        tally = await run_turns(
            client,
            Responses(),
            session := _Session(endpoint, served, block, out, manual),
            label=f"learner of block {block}",
            model=endpoint.model,
            history=history,
            tools=TOOLS,
            turns=MAX_TURNS,
            output_tokens=MAX_OUTPUT_TOKENS,
            extra={"instructions": INSTRUCTIONS, "store": False},
        )
    await anyio.to_thread.run_sync(ensure_card, out, block)
    return LearnerUsage(
        turns=tally.turns,
        input_tokens=tally.usage.input_tokens,
        output_tokens=tally.usage.output_tokens,
        cost_usd=meters.usd(session.cost),
        finished=tally.ended == "done",
    )
