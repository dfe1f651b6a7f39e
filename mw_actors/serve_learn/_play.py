"""An episode as the campaign sees it, whichever player plays it: the neutral ground.

A player plays a scenario's episodes: a real scenario in ServeLearnBench's own
package and loop (``._slb``), the synthetic one in mw's own loop
(``._synthetic_play``, ``._acting``). Both import what they share from here, and
neither imports the other: the interface (:class:`Player`), what an episode
gives back (:class:`Played`, a row's fields), the ``wm`` tool offered to the host
(:data:`WM_TOOL`), an episode's budgets (:class:`Budget`) and the link to a
verifier's judge (:class:`JudgeLink`). The score line and the benchmark's
protocol constants live in ``._protocol``.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

import msgspec

from ._protocol import ENGINE_TOOL_BUDGET, MAX_OUTPUT_PER_TASK, MAX_STEPS, MAX_TOKENS
from ._scenario import Task

__all__ = ["WM_TOOL", "Budget", "JudgeLink", "Played", "Player"]

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
    tool_calls: int = ENGINE_TOOL_BUDGET  # finish is exempt
    turns: int = MAX_STEPS
    output_tokens: int = MAX_OUTPUT_PER_TASK


class Played(msgspec.Struct, frozen=True, kw_only=True):
    """One episode as the benchmark's runner records it (its row's fields)."""

    status: str  # finished | budget_exhausted | no_finish | budget_blocked | failed
    reward: float
    trace: list[dict[str, Any]]
    tokens: dict[str, int]  # the agent's usage: input, cache_input, output, reasoning, calls
    judge_tokens: dict[str, int] = {}
    answer_detail: Any = None
    provider_seconds: float = 0.0
    extra: dict[str, Any] = {}  # the method's row_extra


class JudgeLink(msgspec.Struct, frozen=True):
    """Where a Pitch scenario's verifier reaches its LLM judge: the judge's own meter."""

    meter_port: int
    model: str  # as sent upstream
    reasoning_effort: str | None = "high"  # the paper's judge setting


class Player(Protocol):
    name: str
    system_prompt: str
    manual: str  # the documents the host may read: what a learner may read of the policy
    bundle: Any  # the package's bundle of a real scenario; None for the synthetic one

    def connected(
        self,
        meter_port: int,
        model: str,
        reasoning_effort: str | None,
        judge: JudgeLink | None = None,
        max_tokens: int = MAX_TOKENS,
    ) -> AbstractAsyncContextManager[None]:
        """While open, episodes reach ``model`` through the host meter on ``meter_port``.

        A verifier's judge (Pitch) reaches its model through its own meter, ``judge``.
        Each host call asks for at most ``max_tokens`` (the benchmark's per-call limit).
        """
        ...

    def labels(self, task_id: str) -> dict[str, Any]:
        """The row's ``tier``, ``family``, ``slice`` and ``category``, where the player has them."""
        ...

    async def play(
        self, task: Task, extra_system: str, wm: Callable[[str], str] | None
    ) -> Played: ...
