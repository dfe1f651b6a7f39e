"""One episode: played once on its version, its one terminal record journaled.

A real scenario plays in the benchmark's own loop (:mod:`._slb`), the
synthetic one in mw's (:mod:`._acting`); the method's hooks give the context,
the ``wm`` tool and the row's extra fields on that version.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import anyio
import anyio.abc
import msgspec

from mw_errors import ProviderRefused

from .._core import Journal, get_logger
from ._acting import score_line
from ._play import Played
from ._scenario import Task
from ._state import Shared
from .records import (
    EpisodeEnded,
    EpisodeStarted,
)

__all__ = ["serve_episode"]


log = get_logger("mw.serve_learn")


async def _play(shared: Shared, task: Task, phase: str, version: int) -> Played:
    """One episode of ``task`` on ``version``: in the benchmark's loop, or in mw's own."""
    version_dir = shared.versions.dir(version)
    method = shared.method

    def hooks() -> tuple[Callable[[str], str] | None, str]:
        return method.wm(version_dir), method.context(version_dir, task.task_id, phase, task.window)

    # A method's hooks read files and search their stores: off the event loop.
    wm, context = await anyio.to_thread.run_sync(hooks)
    played = await shared.player.play(task, context, wm)
    extra = method.row_extra(version_dir, task.task_id, phase, task.window)
    return msgspec.structs.replace(played, extra=extra) if extra else played


async def serve_episode(
    shared: Shared, journal: Journal, task: Task, phase: str, version: int
) -> None:
    """Play one task once, journal its one terminal record, keep its evidence."""
    if task.task_id in shared.ended or shared.blocked.is_set():
        return
    began = time.perf_counter()
    async with shared.slots.hold(phase):
        queued = time.perf_counter() - began
        # Started once it holds its slot: an episode still queued at a kill never began,
        # and simply runs after the resume.
        await journal.append(
            EpisodeStarted(task_id=task.task_id, phase=phase, checkpoint=version)  # type: ignore[arg-type]
        )
        try:
            played = await _play(shared, task, phase, version)
        except ProviderRefused as exc:  # every attempt failed: ended, never scored
            log.warning("episode_failed", task=task.task_id, error=exc.message)
            played = Played(status="failed", reward=0.0, trace=[], tokens={})
        # In flight until its end record is durable: the slot is held through it, so the
        # journal never shows more than ``concurrency`` episodes between start and end.
        await _end(shared, journal, task, phase, version, played)
    shared.overhead.append(time.perf_counter() - began - queued - played.provider_seconds)


async def _end(
    shared: Shared, journal: Journal, task: Task, phase: str, version: int, played: Played
) -> None:
    """Keep an episode's evidence and journal its one terminal record."""
    if played.status == "budget_blocked":
        shared.blocked.set()
    evidence = shared.run.evidence / f"{task.task_id}.json"
    block = task.timestamp - 1 if phase == "serving" else None
    record = {
        "task_id": task.task_id,
        "phase": phase,
        "window": task.window,
        "timestamp": task.timestamp,
        "block": None if block is None else shared.plan.serving_version(block),
        "checkpoint": version,
        "instruction": task.instruction,
        "trace": played.trace,
        "reward": played.reward,
        "feedback": score_line(played.reward) if phase == "serving" else None,
    }
    # A readable copy, replaced whole (a reader never sees half of one); the journal
    # record below is what makes the evidence durable.
    partial_copy = evidence.with_suffix(".json.tmp")
    await anyio.Path(partial_copy).write_bytes(json.dumps(record).encode())
    await anyio.Path(partial_copy).rename(evidence)
    labels = shared.player.labels(task.task_id)
    ended = EpisodeEnded(
        task_id=task.task_id,
        phase=phase,  # type: ignore[arg-type]
        window=task.window,
        timestamp=task.timestamp,
        category=str(labels.pop("category", task.category)),
        checkpoint=version,
        status=played.status,  # type: ignore[arg-type]
        reward=played.reward,
        input_tokens=int(played.tokens.get("input", 0)),
        output_tokens=int(played.tokens.get("output", 0)),
        evidence=str(evidence.relative_to(shared.run.root)),
        trace=played.trace,
        tokens=played.tokens,
        judge_tokens=played.judge_tokens,
        answer_detail=played.answer_detail,
        labels=labels,
        extra=played.extra,
    )
    await journal.append(ended)  # the evidence is durable here: the trace is in the record
    shared.ended[task.task_id] = ended
