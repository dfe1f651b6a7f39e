"""The serve-and-learn campaign's journal records (kinds ``serve_learn.*``).

Every episode ends with exactly one :class:`EpisodeEnded`. An episode that
was started but never ended (the process died) is ended as ``unknown`` on
resume and never re-run: the protocol attempts every task once.
"""

from __future__ import annotations

from typing import Any, Literal

from .._core import Record

__all__ = [
    "SERVE_LEARN_RECORDS",
    "AllocationRaised",
    "BlockLearned",
    "EpisodeEnded",
    "EpisodeStarted",
    "ServeLearnEnded",
    "ServeLearnStarted",
    "WindowTested",
]

Phase = Literal["serving", "test"]
Status = Literal["finished", "budget_exhausted", "no_finish", "budget_blocked", "failed", "unknown"]


class ServeLearnStarted(Record, tag="serve_learn.campaign_started", frozen=True):
    tag: str
    scenario: str
    method: str
    model: str
    serving_total: int
    blocks: int
    test_versions: dict[str, int]  # window -> version
    allocation_usd: str
    window_sizes: dict[str, int] = {}  # window -> serving cases
    # Every setting the campaign runs with, as a daemon's Submission (never a key): a
    # resume takes them from here. {} in journals written before it.
    settings: dict[str, Any] = {}


class AllocationRaised(Record, tag="serve_learn.allocation_raised", frozen=True):
    """A resume raised the allocation (``--allocation-add``); it holds from here on."""

    added_usd: str
    allocation_usd: str


class EpisodeStarted(Record, tag="serve_learn.episode_started", frozen=True):
    task_id: str
    phase: Phase
    checkpoint: int


class EpisodeEnded(Record, tag="serve_learn.episode_ended", frozen=True):
    task_id: str
    phase: Phase
    window: int
    timestamp: int
    category: str
    checkpoint: int
    status: Status
    reward: float
    input_tokens: int = 0
    output_tokens: int = 0
    evidence: str | None = None  # a readable copy, relative to the run directory
    trace: list[dict[str, Any]] = []  # tool calls and results: the evidence itself
    # The benchmark runner's row fields ({} / None in journals written before them):
    tokens: dict[str, int] = {}  # the agent's usage: input, cache_input, output, reasoning, calls
    judge_tokens: dict[str, int] = {}  # the Pitch judge's usage for this episode
    answer_detail: Any = None  # the verifier's
    labels: dict[str, Any] = {}  # tier, family, slice (a real scenario's)
    extra: dict[str, Any] = {}  # a benchmark method's row_extra


class BlockLearned(Record, tag="serve_learn.block_learned", frozen=True):
    block: int
    version: int
    cases: int
    digest: str  # the content address of the version's adapter
    duration: float


class WindowTested(Record, tag="serve_learn.window_tested", frozen=True):
    window: int
    version: int
    episodes: int


class ServeLearnEnded(Record, tag="serve_learn.campaign_ended", frozen=True):
    state: Literal["completed", "budget_blocked", "failed"]


SERVE_LEARN_RECORDS: tuple[type[Record], ...] = (
    ServeLearnStarted,
    AllocationRaised,
    EpisodeStarted,
    EpisodeEnded,
    BlockLearned,
    WindowTested,
    ServeLearnEnded,
)
