"""A campaign's status, read from its run directory alone (no daemon needed).

The journal says what was done; the campaign lock says whether a process is
still at it. ``completed`` needs the campaign's end record and a terminal
record for every actor run; a campaign that stopped without them reads
``failed`` (resumable), never ``completed``.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from mw_errors import CampaignStarting, ConfigError

from .._core import Entry, SupervisionView, read_journal, rebuild
from .._lock import is_locked
from ..kinds import KINDS, State, campaign_records

__all__ = ["CAMPAIGN_RECORDS", "ActorState", "CampaignStatus", "campaign_status"]


class ActorState(msgspec.Struct, frozen=True):
    runs: int
    restarts: int
    last_exit: str | None
    alive: bool
    mailbox_depth: int | None = None  # live, from the daemon running it; None from the journal


class CampaignStatus(msgspec.Struct, frozen=True):
    tag: str
    kind: str  # a registered kind's name (mw_actors.kinds)
    state: State
    progress: dict[str, int]  # the kind's counts, by name
    spend_usd: dict[str, str]
    allocation_usd: str
    open_actor_runs: int
    actors: dict[str, ActorState] = {}  # the supervision tree as the journal tells it
    heartbeat: float | None = None  # wall time of the campaign's last journal record


# The built-in kinds' records, as registered at import (campaign_status reads every
# kind registered when it runs: campaign_records()).
CAMPAIGN_RECORDS = campaign_records()


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
        entries = read_journal(journal, campaign_records())
    records = [e.rec for e in entries]
    views = rebuild(SupervisionView(), entries)
    open_runs = sum(len(v.open_runs) for v in views.values())
    running = is_locked(run_dir)
    kind = next((k for r in records for k in KINDS.values() if isinstance(r, k.started)), None)
    if kind is None and running:
        raise CampaignStarting(f"{run_dir}: the campaign is starting (no start record yet)")
    if kind is None:
        raise ConfigError(f"{run_dir}: the journal never recorded a campaign's start")
    summary = kind.summary(run_dir, records)
    final = summary.final
    state: State
    if running:
        state = "running"
    elif final is not None and open_runs == 0:
        state = final
    else:
        state = "failed"  # stopped without its terminal records: resume it
    return CampaignStatus(
        tag=run_dir.name,
        kind=kind.name,
        state=state,
        progress=summary.progress,
        spend_usd=summary.spend_usd,
        allocation_usd=summary.allocation_usd,
        open_actor_runs=open_runs,
        actors={
            name: ActorState(v.runs, v.restarts, v.last_exit, bool(v.open_runs) and running)
            for name, v in sorted(views.items())
        },
        heartbeat=entries[-1].t if entries else None,
    )
