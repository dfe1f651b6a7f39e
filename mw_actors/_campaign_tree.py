"""The tree every campaign kind shares: its journal, one budget, its meters, its supervisor.

::

    root (one_for_one, 3 restarts in 60 s)
     ├─ reserver    BudgetReserver(allocation, ledger): the campaign's one budget,
     │              every reservation journaled before a meter forwards
     ├─ <meters>    tree.meter(...): wire meters reserving from it (start_meter)
     └─ campaign    the kind's own supervisor, declared by the kind; started with
                    tree.start_campaign(spec) once what it needs is up

A campaign kind provides its records, its allocation, the ledger file a
resumed budget is rebuilt from, and its campaign supervisor's spec; it starts
its meters and its supervisor when its own order needs them (serve-and-learn
connects its episode engine to the host meter first). Manual test mode uses
the tree without a campaign supervisor.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio

import meters

from ._core import (
    ActorRef,
    ChildSpec,
    Journal,
    Record,
    Restart,
    Runtime,
    SupervisorRef,
    SupervisorSpec,
    open_runtime,
    supervisor,
)
from ._metering import MeterPlace, ledger_lines, start_meter
from ._reserver import BudgetReserver, ReserverClient

__all__ = ["CampaignTree", "open_campaign_tree"]

CAMPAIGN = "campaign"  # the kind's supervisor's id under the root


@dataclass(frozen=True)
class CampaignTree:
    """An open campaign tree: its runtime, journal and budget (see the module's docstring)."""

    runtime: Runtime
    journal: Journal
    reserver: ActorRef[Any]
    budget: meters.Reserver  # what a meter reserves through
    meter_ids: list[str] = field(default_factory=list)  # the meters started, in order

    async def meter(
        self,
        child_id: str,
        config: meters.MeterConfig,
        *,
        port: int = 0,
        reserver: meters.Reserver | None = None,
        restart: Restart | str = Restart.PERMANENT,
    ) -> MeterPlace:
        """A wire meter under the root, reserving from the campaign's budget (or ``reserver``)."""
        place = await start_meter(
            self.runtime.root,
            child_id,
            config,
            reserver or self.budget,
            port=port,
            restart=restart,
        )
        self.meter_ids.append(child_id)
        return place

    async def start_campaign(self, spec: SupervisorSpec) -> SupervisorRef:
        """Start the kind's campaign supervisor under the root; its reference."""
        await self.runtime.root.start_child(supervisor(CAMPAIGN, spec))
        return await self.campaign()

    async def campaign(self) -> SupervisorRef:
        """The campaign supervisor, once started."""
        return await self.runtime.root.child_supervisor(CAMPAIGN)

    async def stop_meters(self) -> None:
        """Stop every meter, the last started first (before the campaign's end record).

        Each writes and settles its attempts in flight as it stops.
        """
        while self.meter_ids:
            await self.runtime.root.terminate_child(self.meter_ids.pop())


@asynccontextmanager
async def open_campaign_tree(
    journal: Path,
    records: Sequence[type[Record]],
    allocation: Decimal,
    *,
    ledger: Path | None = None,
    campaign: SupervisorSpec | None = None,
    budget: meters.Reserver | None = None,
) -> AsyncIterator[CampaignTree]:
    """Open the runtime over ``journal`` with the root above; close it on the way out.

    ``ledger`` is the host meter's ledger file: the reserver settles what its lines
    so far record and its journal left open (a resume after ``kill -9``). ``campaign``,
    if given, starts with the root, after the reserver. ``budget``, if given, is what
    the tree's meters reserve from instead of its own reserver: a grid's one budget,
    shared by its cells (the reserver then holds nothing).

    Raises:
        StartFailed: the reserver or the campaign supervisor could not start.
        JournalFatal: the journal failed.
    """
    lines = [] if ledger is None else await anyio.to_thread.run_sync(ledger_lines, ledger)
    children: list[Any] = [
        ChildSpec(id="reserver", start=lambda: BudgetReserver(allocation, ledger=lines))
    ]
    if campaign is not None:
        children.append(supervisor(CAMPAIGN, campaign))
    root = SupervisorSpec(strategy="one_for_one", intensity=3, period=60, children=children)
    async with open_runtime(journal=journal, record_types=records, root=root) as runtime:
        assert runtime.journal is not None
        reserver = await runtime.root.child("reserver")
        budget = budget or ReserverClient(reserver)
        yield CampaignTree(runtime, runtime.journal, reserver, budget)
