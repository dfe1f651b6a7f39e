"""One lifecycle for every campaign kind: :func:`run_kind` drives a kind's :class:`Lifecycle`.

::

    lock            <root>/campaign.lock, held to the end (one process per campaign)
    services        life.serve(services): what outlives the tree (a local provider)
    tree            open_campaign_tree(journal, records, allocation, ledger, campaign)
    resume or start life.started(stage): end what a kill left in flight; the start record
    run             life.run(stage) -> result: meters, the campaign supervisor, waiting
    stop meters     every meter writes and settles its attempts in flight
    end record      life.ended(stage, result)
    (tree closed, services stopped)
    outputs         life.write_outputs(result), on a worker thread, still under the lock

Only ``run`` is the kind's own to write; every other step has a default that does
nothing. A step that raises (or a cancel) skips the steps after it: a run without
its end record is one that stopped, and the kind says whether it continues. The
order is the promise: nothing ends before its meters have settled, and no output
is written for a campaign whose end was not recorded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Generic, TypeVar

import anyio
import anyio.abc

from ._campaign_tree import CampaignTree, open_campaign_tree
from ._core import Record, SupervisorSpec
from ._lock import campaign_lock

if TYPE_CHECKING:
    import meters

__all__ = ["Lifecycle", "Stage", "run_kind"]

R = TypeVar("R")


@dataclass(frozen=True)
class Stage:
    """What a step runs on: the open tree, and the task group of services outliving it."""

    tree: CampaignTree
    services: anyio.abc.TaskGroup


class Lifecycle(Generic[R]):
    """One run of a kind, as :func:`run_kind` drives it (see the module's docstring).

    A kind subclasses it: the attributes say where its run lives and what its tree
    holds; ``run`` is required, every other step is optional.
    """

    root: Path  # the run directory: locked for the run; it exists before run_kind
    journal: Path
    records: Sequence[type[Record]]  # every record the journal holds, the budget's included
    allocation: Decimal
    ledger: Path | None = None  # the host meter's ledger a resumed budget is rebuilt from
    campaign: SupervisorSpec | None = None  # the kind's supervisor, if it starts with the root

    async def serve(self, services: anyio.abc.TaskGroup) -> None:
        """Start what must outlive the tree's meters (they stop first); default: nothing."""

    async def started(self, stage: Stage) -> None:
        """Resume or start: end what was in flight, write the start record; default: nothing."""

    async def run(self, stage: Stage) -> R:
        """The campaign itself, to its end; its result goes to ``ended`` and the outputs."""
        raise NotImplementedError

    async def ended(self, stage: Stage, result: R) -> None:
        """The end record, once every meter has stopped; default: nothing."""

    def write_outputs(self, result: R) -> None:
        """Files made from the finished run (a worker thread); default: nothing."""


async def run_kind(life: Lifecycle[R], *, budget: meters.Reserver | None = None) -> R:
    """Run ``life`` to its end, step by step (see the module's docstring); its result.

    ``budget``: what the tree's meters reserve from, when a grid shares one budget
    among its cells; else the tree's own reserver, holding ``life.allocation``.

    Raises:
        ConfigError: another process runs this campaign (its lock is held).
        Exception: what a step raised, as itself (not in a group) when it is the only one.
        StartFailed: the tree could not start.
        JournalFatal: the journal failed.
    """
    with campaign_lock(life.root):
        try:
            result = await _run_tree(life, budget)
        except BaseExceptionGroup as group:  # the services' task group's: one error, as itself
            if len(group.exceptions) == 1 and not isinstance(
                group.exceptions[0], BaseExceptionGroup
            ):
                raise group.exceptions[0] from None
            raise
        await anyio.to_thread.run_sync(life.write_outputs, result)
    return result


async def _run_tree(life: Lifecycle[R], budget: meters.Reserver | None) -> R:
    async with anyio.create_task_group() as services:
        await life.serve(services)
        async with open_campaign_tree(
            life.journal,
            life.records,
            life.allocation,
            ledger=life.ledger,
            campaign=life.campaign,
            budget=budget,
        ) as tree:
            stage = Stage(tree, services)
            await life.started(stage)
            result = await life.run(stage)
            await tree.stop_meters()
            await life.ended(stage, result)
        services.cancel_scope.cancel()
    return result
