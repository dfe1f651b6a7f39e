"""Where a scenario's episodes are played: one interface, for real scenarios and the synthetic.

- a real scenario (banking_l1, retail_l3, ...) in ServeLearnBench's own
  package and acting loop (:class:`~._slb.SlbScenario`);
- the synthetic scenario (``synthetic_*``) in mw's own loop, from its export
  (:class:`~._synthetic_play.SyntheticScenario`).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, Protocol

import msgspec

from ._protocol import MAX_TOKENS
from ._scenario import Task
from ._slb import Played
from ._synthetic import is_synthetic

__all__ = ["Engine", "JudgeLink", "is_synthetic", "make_engine"]


class JudgeLink(msgspec.Struct, frozen=True):
    """Where a Pitch scenario's verifier reaches its LLM judge: the judge's own meter."""

    meter_port: int
    model: str  # as sent upstream
    reasoning_effort: str | None = "high"  # the paper's judge setting


class Engine(Protocol):
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
        """The row's ``tier``, ``family``, ``slice`` and ``category``, where the engine has them."""
        ...

    async def play(
        self, task: Task, extra_system: str, wm: Callable[[str], str] | None
    ) -> Played: ...


def make_engine(dataset: Path, scenario: str) -> Engine:
    """The engine that plays ``scenario``.

    Raises:
        ConfigError: a real scenario without the package, or one it does not have.
    """
    if is_synthetic(scenario):
        from ._synthetic_play import SyntheticScenario

        return SyntheticScenario(dataset, scenario)
    from ._slb import SlbScenario

    return SlbScenario(scenario)
