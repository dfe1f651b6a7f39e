"""Serve-and-learn as a campaign kind (``mw_actors._campaign_kind``): the daemon's view of it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio

import meters

from .._campaign_kind import Context, Runner, Summary
from .._core import Record
from ._backends import keys_for
from ._campaign import run_campaign
from ._checks import check_campaign
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

__all__ = ["SERVE_LEARN", "ServeLearnKind"]


def _ledger_spend(path: Path) -> Decimal:
    if not path.is_file():
        return Decimal(0)
    return Decimal(meters.summarize(meters.read_ledger(path), "host").cost_usd)


class ServeLearnKind:
    name: str = "serve-learn"
    records: Sequence[type[Record]] = SERVE_LEARN_RECORDS
    started: type[Record] = ServeLearnStarted
    resumable: bool = True  # a stopped campaign continues from its journal
    progress_keys: tuple[str, ...] = ("cases_served", "blocks_learned", "windows_tested")

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
        await anyio.to_thread.run_sync(check_campaign, campaign)
        return (lambda: run_campaign(campaign)), str(campaign.allocation_usd)

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


SERVE_LEARN = ServeLearnKind()
