"""Serve-and-learn as a campaign kind (``mw_actors._campaign_kind``): the daemon's view of it."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio

import meters

from .._campaign_kind import Bar, Context, GridKind, Runner, Section, Summary, View
from .._core import Entry, Record
from ._backends import keys_for
from ._campaign import run_campaign
from ._checks import checked
from ._grid import SERVE_LEARN_GRID
from ._run_report import window_scores
from ._spec import CampaignSpec, Submission
from ._synthetic import dataset_for, ensure_synthetic
from .records import (
    SERVE_LEARN_RECORDS,
    AllocationRaised,
    BlockLearned,
    EpisodeEnded,
    ServeLearnEnded,
    ServeLearnStarted,
    WindowTested,
)

__all__ = ["SERVE_LEARN", "ServeLearnKind", "time_left"]


def _ledger_spend(path: Path) -> Decimal:
    if not path.is_file():
        return Decimal(0)
    return Decimal(meters.summarize(meters.read_ledger(path), "host").cost_usd)


class ServeLearnKind:
    name: str = "serve-learn"
    records: Sequence[type[Record]] = SERVE_LEARN_RECORDS
    started: type[Record] = ServeLearnStarted
    resumable: bool = True  # a stopped campaign continues from its journal
    grid: GridKind | None = SERVE_LEARN_GRID  # how its grids name, run and read their cells
    progress_keys: tuple[str, ...] = ("cases_served", "blocks_learned", "windows_tested")
    spend_roles: tuple[str, ...] = ("host", "learner")

    async def prepare(
        self, tag: str, spec: Mapping[str, Any], *, resume: bool, context: Context
    ) -> tuple[Runner, str]:
        """The campaign checked whole (the checks that read files on a worker thread)."""
        submission = Submission.decode(spec)
        settings = submission.settings()  # every field checked before anything is written
        scenario = submission.scenario
        given = None if submission.dataset is None else Path(submission.dataset)
        dataset = dataset_for(scenario, given, context.runs)
        await anyio.to_thread.run_sync(ensure_synthetic, dataset, scenario)
        # Keys come with the submission (memory only), else from the program's own
        # environment (a campaign a daemon resumes after its own restart).
        endpoints = settings.get("endpoints", {})
        settings["secrets"] = keys_for(endpoints.values(), context.secret)
        campaign = CampaignSpec(
            tag=tag, scenario=scenario, dataset=dataset, runs=context.runs, resume=resume,
            **settings,
        )  # fmt: skip
        prepared = await anyio.to_thread.run_sync(checked, campaign)  # run as it was checked
        return (lambda: run_campaign(prepared)), str(campaign.allocation_usd)

    async def abandon(self, run: Path) -> None:
        """Never called: a serve-and-learn run is always continued."""

    def summary(self, run: Path, records: Sequence[Record]) -> Summary:
        start = next(r for r in records if isinstance(r, ServeLearnStarted))
        ended = [r for r in records if isinstance(r, ServeLearnEnded)]
        progress = {
            "cases_served": sum(isinstance(r, EpisodeEnded) and r.phase == "serving"
                                for r in records),
            "blocks_learned": len({r.block for r in records if isinstance(r, BlockLearned)}),
            "windows_tested": len({r.window for r in records if isinstance(r, WindowTested)}),
        }  # fmt: skip
        host = _ledger_spend(run / "ledger.jsonl")
        learner = _ledger_spend(run / "learner" / "ledger.jsonl")
        raised = [r for r in records if isinstance(r, AllocationRaised)]
        return Summary(
            progress=progress,
            spend_usd={"host": meters.usd(host), "learner": meters.usd(learner)},
            allocation_usd=raised[-1].allocation_usd if raised else start.allocation_usd,
            final=ended[-1].state if ended else None,
        )

    def progress_line(self, progress: Mapping[str, int]) -> str:
        return (
            f"{progress.get('cases_served', 0)} cases served, "
            f"{progress.get('blocks_learned', 0)} blocks learned, "
            f"{progress.get('windows_tested', 0)} windows tested"
        )

    def view(self, entries: Sequence[Entry], progress: Mapping[str, int]) -> View:
        """Each window's serving and the blocks learned, the time left, the tests' scores."""
        records = [e.rec for e in entries]
        start = next(r for r in records if isinstance(r, ServeLearnStarted))
        served: dict[int, int] = {}
        for r in records:
            if isinstance(r, EpisodeEnded) and r.phase == "serving":
                served[r.window] = served.get(r.window, 0) + 1
        tested = progress.get("windows_tested", 0)
        bars = [
            Bar(f"window {w}", served.get(int(w), 0), size, "tested" if int(w) < tested else "")
            for w, size in sorted(start.window_sizes.items(), key=lambda kv: int(kv[0]))
        ]
        bars.append(Bar("blocks learned", progress.get("blocks_learned", 0), start.blocks))
        return View(
            bars=bars,
            lines=[("time left", time_left(entries, start))],
            sections=_scores(records),
            milestones=_milestones(entries),
        )


def _mean(rewards: list[float]) -> str:
    return f"{100 * sum(rewards) / len(rewards):.1f}" if rewards else "-"


def _scores(records: list[Any]) -> list[Section]:
    """Each window's test scores as its episodes land, and the scores so far."""
    windows = window_scores(records)
    if not windows:
        return [Section("tests", (), [], "tests: none ended yet")]
    rows = [
        (
            f"window {w.window}",
            "-" if w.version is None else f"v{w.version}",
            str(w.tests),
            "-" if w.hidden is None else f"{w.hidden:.1f}",
            "-" if w.fully_specified is None else f"{w.fully_specified:.1f}",
            "tested" if w.version is not None else "testing",
        )
        for w in windows
    ]
    tests = [r for r in records if isinstance(r, EpisodeEnded) and r.phase == "test"]
    hidden = [r.reward for r in tests if r.category == "hidden"]
    full = [r.reward for r in tests if r.category == "fully_specified"]
    so_far = f"so far: hidden {_mean(hidden)}, fully specified {_mean(full)} ({len(tests)} tests)"
    return [Section("tests", ("window", "version", "tests", "hidden", "full", ""), rows, so_far)]


def time_left(entries: Sequence[Entry], serve: ServeLearnStarted) -> str:
    """An estimate of the serving time left, from the blocks served so far."""
    start = next(e.t for e in entries if isinstance(e.rec, ServeLearnStarted))
    ends = [e.t for e in entries if isinstance(e.rec, EpisodeEnded) and e.rec.phase == "serving"]
    if any(isinstance(e.rec, ServeLearnEnded) for e in entries):
        return "ended"
    if len(ends) >= serve.serving_total:
        return "serving done; the last tests run"
    blocks = len(ends) // 12
    if blocks == 0:
        return "- (after the first block)"
    per_block = (ends[blocks * 12 - 1] - start) / blocks
    left = per_block * (serve.serving_total - len(ends)) / 12
    minutes, seconds = divmod(int(left), 60)
    finished = f"{blocks} finished block" + ("s" if blocks > 1 else "")
    return f"about {minutes}m {seconds:02d}s of serving (from {finished})"


def _milestones(entries: Sequence[Entry], n: int = 8) -> list[str]:
    """The journal's last milestones, as event lines: learns, tests, odd ends, the end."""
    lines = []
    for e in entries:
        r, at = e.rec, time.strftime("%H:%M:%S", time.localtime(e.t))
        if isinstance(r, BlockLearned):
            lines.append(f"{at} block {r.block} learned: v{r.version} ({r.cases} cases)")
        elif isinstance(r, WindowTested):
            lines.append(f"{at} window {r.window} tested on v{r.version} ({r.episodes} tests)")
        elif isinstance(r, EpisodeEnded) and r.status in ("unknown", "budget_blocked"):
            lines.append(f"{at} {r.phase} episode {r.task_id} ended {r.status}")
        elif isinstance(r, ServeLearnEnded):
            lines.append(f"{at} campaign ended: {r.state}")
    return lines[-n:]


SERVE_LEARN = ServeLearnKind()
