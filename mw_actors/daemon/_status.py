"""A campaign's status, read from its run directory alone (no daemon needed).

The journal says what was done; the campaign lock says whether a process is
still at it. ``completed`` needs the campaign's end record and a terminal
record for every actor run; a campaign that stopped without them reads
``failed`` (resumable), never ``completed``.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Literal

import msgspec

import meters
from mw_errors import CampaignStarting, ConfigError

from .._core import Entry, SupervisionView, read_journal, rebuild
from .._lock import is_locked
from .._reserver import BUDGET_RECORDS
from ..editing.records import EDITING_RECORDS, EditingEnded, EditingStarted, TrialEnded
from ..serve_learn.records import (
    SERVE_LEARN_RECORDS,
    AllocationRaised,
    BlockLearned,
    EpisodeEnded,
    ServeLearnEnded,
    ServeLearnStarted,
    WindowTested,
)

__all__ = ["CAMPAIGN_RECORDS", "ActorState", "CampaignStatus", "Progress", "campaign_status"]

State = Literal["running", "completed", "failed", "cancelled", "budget_blocked"]


class Progress(msgspec.Struct, frozen=True):
    cases_served: int = 0
    blocks_learned: int = 0
    windows_tested: int = 0
    trials_done: int = 0


class ActorState(msgspec.Struct, frozen=True):
    runs: int
    restarts: int
    last_exit: str | None
    alive: bool
    mailbox_depth: int | None = None  # live, from the daemon running it; None from the journal


class CampaignStatus(msgspec.Struct, frozen=True):
    tag: str
    kind: Literal["serve-learn", "editing"]
    state: State
    progress: Progress
    spend_usd: dict[str, str]
    allocation_usd: str
    open_actor_runs: int
    actors: dict[str, ActorState] = {}  # the supervision tree as the journal tells it
    heartbeat: float | None = None  # wall time of the campaign's last journal record


def _ledger_spend(path: Path) -> Decimal:
    if not path.is_file():
        return Decimal(0)
    return Decimal(meters.summarize(meters.read_ledger(path), "host").cost_usd)


CAMPAIGN_RECORDS = [*BUDGET_RECORDS, *SERVE_LEARN_RECORDS, *EDITING_RECORDS]


def campaign_status(run_dir: Path, entries: list[Entry] | None = None) -> CampaignStatus:
    """The status of the campaign whose run directory is ``run_dir``.

    ``entries`` are its journal's, when the caller has read them already.

    Raises:
        CampaignStarting: it runs, and has not journaled its start yet.
        ConfigError: ``run_dir`` holds no campaign journal, or one that never started.
    """
    journal = run_dir / "journal"
    if not journal.is_dir():
        raise ConfigError(
            f"{run_dir} holds no campaign (no journal/)",
            hint="pass the campaign's tag and --runs (or $MW_RUNS)",
        )
    if entries is None:
        entries = read_journal(journal, CAMPAIGN_RECORDS)
    records = [e.rec for e in entries]
    views = rebuild(SupervisionView(), entries)
    open_runs = sum(len(v.open_runs) for v in views.values())
    running = is_locked(run_dir)
    serve = next((r for r in records if isinstance(r, ServeLearnStarted)), None)
    edit = next((r for r in records if isinstance(r, EditingStarted)), None)
    state: State
    if serve is not None:
        ended = [r for r in records if isinstance(r, ServeLearnEnded)]
        progress = Progress(
            cases_served=sum(isinstance(r, EpisodeEnded) and r.phase == "serving" for r in records),
            blocks_learned=len({r.block for r in records if isinstance(r, BlockLearned)}),
            windows_tested=len({r.window for r in records if isinstance(r, WindowTested)}),
        )
        host = _ledger_spend(run_dir / "ledger.jsonl")
        learner = _ledger_spend(run_dir / "learner" / "ledger.jsonl")
        spend = {"host": meters.usd(host), "learner": meters.usd(learner)}
        raised = [r for r in records if isinstance(r, AllocationRaised)]
        allocation = raised[-1].allocation_usd if raised else serve.allocation_usd
        final: State | None = ended[-1].state if ended else None
        kind: Literal["serve-learn", "editing"] = "serve-learn"
    elif edit is not None:
        trials = [r for r in records if isinstance(r, TrialEnded)]
        progress = Progress(trials_done=len({t.trial_id for t in trials}))
        spent = sum((Decimal(t.spent_usd) for t in trials), Decimal(0))
        spend = {"host": meters.usd(spent), "learner": "0"}
        allocation = edit.allocation_usd
        final = None
        if any(isinstance(r, EditingEnded) for r in records):
            outcomes = {t.outcome for t in trials}
            all_ended = {t.trial_id for t in trials} == set(edit.trials)
            final = (
                "cancelled"
                if "cancelled" in outcomes
                else "budget_blocked"
                if "budget_blocked" in outcomes
                else "completed"
                if all_ended
                else "failed"
            )
        kind = "editing"
    elif running:
        raise CampaignStarting(f"{run_dir}: the campaign is starting (no start record yet)")
    else:
        raise ConfigError(f"{run_dir}: the journal never recorded a campaign's start")
    if running:
        state = "running"
    elif final is not None and open_runs == 0:
        state = final
    else:
        state = "failed"  # stopped without its terminal records: resume it
    return CampaignStatus(
        tag=run_dir.name,
        kind=kind,
        state=state,
        progress=progress,
        spend_usd=spend,
        allocation_usd=allocation,
        open_actor_runs=open_runs,
        actors={
            name: ActorState(v.runs, v.restarts, v.last_exit, bool(v.open_runs) and running)
            for name, v in sorted(views.items())
        },
        heartbeat=entries[-1].t if entries else None,
    )
