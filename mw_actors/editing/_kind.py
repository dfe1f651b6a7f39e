"""Weight editing as a campaign kind (``mw_actors._campaign_kind``): the daemon's view of it."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import msgspec

import meters
from mw_errors import ConfigError

from .._campaign_kind import Bar, Context, GridKind, Runner, State, Summary, View
from .._convert import convert
from .._core import Entry, Record, open_journal, read_journal
from .._reserver import BUDGET_RECORDS
from ._campaign import run_campaign
from ._config import load_config
from ._grid import EDITING_GRID
from .records import EDITING_RECORDS, EditingEnded, EditingStarted, TrialEnded, TrialStarted

__all__ = ["EDITING", "EditingKind", "EditingSubmission"]


class EditingSubmission(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A weight-editing campaign as a daemon receives it: its config file, and how it runs."""

    config: str
    local_trusted: bool = False

    @classmethod
    def decode(cls, spec: Mapping[str, Any]) -> EditingSubmission:
        """The submitted spec, checked.

        Raises:
            ConfigError: a field is unknown, missing or of the wrong type.
        """
        hint = 'send {"config": "CONFIG.json", "local_trusted": false}'
        return convert(spec, cls, "editing campaign spec", hint)


class EditingKind:
    name: str = "editing"
    records: Sequence[type[Record]] = EDITING_RECORDS
    started: type[Record] = EditingStarted
    resumable: bool = False  # a trial is never retried: regrade it, or start a new run
    grid: GridKind | None = EDITING_GRID  # how its grids name, run and read their cells
    progress_keys: tuple[str, ...] = ("trials_done",)
    spend_roles: tuple[str, ...] = ("host", "learner")  # the policy's meter; the learner's is 0

    async def prepare(
        self, tag: str, spec: Mapping[str, Any], *, resume: bool, context: Context
    ) -> tuple[Runner, str]:
        """``context.settings``: the CampaignOptions the program runs edits with."""
        if context.settings is None:
            raise ConfigError("this daemon runs no weight-editing campaigns")
        if resume:
            raise ConfigError(
                f"campaign {tag!r} is weight editing, which never continues",
                hint="start a new run; regrade a trial with `wsm benchmark regrade`",
            )
        submitted = EditingSubmission.decode(spec)
        loaded = load_config(Path(submitted.config))
        options = dataclasses.replace(context.settings, local_trusted=submitted.local_trusted)
        return (lambda: run_campaign(loaded, context.runs / tag, options)), str(loaded.allocation)

    async def abandon(self, run: Path) -> None:
        """A trial that was in flight ends as ``unknown``."""
        records = [*BUDGET_RECORDS, *EDITING_RECORDS]
        entries = read_journal(run / "journal", records)
        started = {e.rec.trial_id for e in entries if isinstance(e.rec, TrialStarted)}
        ended = {e.rec.trial_id for e in entries if isinstance(e.rec, TrialEnded)}
        async with open_journal(run / "journal", record_types=records) as journal:
            for trial_id in sorted(started - ended):
                await journal.append(
                    TrialEnded(
                        trial_id=trial_id, outcome="unknown", reason="the daemon died mid-trial"
                    )
                )

    def summary(self, run: Path, records: Sequence[Record]) -> Summary:
        start = next(r for r in records if isinstance(r, EditingStarted))
        trials = [r for r in records if isinstance(r, TrialEnded)]
        spent = sum((Decimal(t.spent_usd) for t in trials), Decimal(0))
        final: State | None = None
        if any(isinstance(r, EditingEnded) for r in records):
            outcomes = {t.outcome for t in trials}
            all_ended = {t.trial_id for t in trials} == set(start.trials)
            final = (
                "cancelled"
                if "cancelled" in outcomes
                else "budget_blocked"
                if "budget_blocked" in outcomes
                else "completed"
                if all_ended
                else "failed"
            )
        return Summary(
            progress={"trials_done": len({t.trial_id for t in trials})},
            spend_usd={"host": meters.usd(spent), "learner": "0"},
            allocation_usd=start.allocation_usd,
            final=final,
        )

    def progress_line(self, progress: Mapping[str, int]) -> str:
        return f"{progress.get('trials_done', 0)} trials done"

    def view(self, entries: Sequence[Entry], progress: Mapping[str, int]) -> View:
        start = next(e.rec for e in entries if isinstance(e.rec, EditingStarted))
        return View(bars=[Bar("trials", progress.get("trials_done", 0), len(start.trials))])


EDITING = EditingKind()
