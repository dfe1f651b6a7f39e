"""Wire meters as supervised actors, and a standalone meter whose budget survives ``kill -9``.

:class:`MeterActor` serves one meter (``meters.Meter``) from inside a
runtime: it listens in ``init`` (so its port is known when it is ready),
serves and rewrites its summary in ``run``, answers :class:`MeterStats`
asks from its mailbox, and closes the meter (its final summary) in
``terminate``. Its :class:`MeterPlace` outlives its runs: a restarted meter
listens on the port its clients already use. Stopping it cancels the
requests in flight, each of which still writes its ledger line and settles.

Every meter mw runs starts through :func:`start_meter`, as a child of a
supervisor: a campaign's host, learner and judge meters, a weight-editing
trial's policy meter, manual test mode's, and ``mw meter``'s
(:func:`run_meter`).

``mw meter --allocation`` runs the meter in front of the runtime's
:class:`BudgetReserver`, which journals every reservation (as evidence, before
the meter forwards) under ``<ledger-dir>/journal``. A restarted meter rebuilds
the budget from that journal and the ledger, then writes a ``lost`` line,
charged its reservation, for each attempt the dead process left in flight, so
the allocation is never spent twice.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import msgspec

import meters

from ._core import Actor, ActorContext, ChildSpec, ExitReason, Restart, SupervisorRef, open_runtime
from ._reserver import BUDGET_RECORDS, BudgetReserver, ReserverClient

__all__ = ["MeterActor", "MeterPlace", "MeterStats", "ledger_lines", "run_meter", "start_meter"]


def ledger_lines(path: Path) -> list[meters.LedgerLine]:
    """A meter's ledger lines so far (none before its first request)."""
    return meters.read_ledger(path) if path.exists() else []


class MeterStats(msgspec.Struct, frozen=True):
    """Ask a :class:`MeterActor` for its ``meters.MeterStatistics``."""


class MeterPlace:
    """Where a meter listens, kept across its restarts (0 until it first binds)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        self.port = port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"


# A meter's start asks its reserver for the reservations left open: in a grid's cell on
# Ray, through the relay to the driver. A cell's first meter on a busy machine (its worker
# just started beside the suite) took 17 s; the supervisor's 5 s failed the cell.
METER_START_SECONDS = 60.0


class MeterActor(Actor[Any]):
    """A wire meter under a supervisor; see the module's docstring."""

    def __init__(
        self,
        config: meters.MeterConfig,
        place: MeterPlace,
        reserver: meters.Reserver | None = None,
        *,
        summary_every: float = 1.0,
    ) -> None:
        self.config = config
        self.place = place
        self.reserver = reserver
        self.summary_every = summary_every
        self.meter: meters.Meter | None = None
        self.listeners: list[meters.Listener] = []

    async def init(self, ctx: ActorContext) -> object:
        self.meter = meters.Meter(self.config, self.reserver)
        await self.meter.recover()
        self.listeners = meters.bind_http(self.place.host, self.place.port)
        self.place.port = self.listeners[0].port
        return None

    async def run(self, ctx: ActorContext) -> None:
        assert self.meter is not None
        async with anyio.create_task_group() as tg:
            tg.start_soon(
                partial(self.meter.serve, self.listeners, summary_every=self.summary_every)
            )
            await super().run(ctx)  # the mailbox, until it is closed
            tg.cancel_scope.cancel()

    async def handle(self, message: Any) -> object:
        if isinstance(message, MeterStats):
            assert self.meter is not None
            return self.meter.statistics()
        raise TypeError(f"a meter takes MeterStats asks, not {type(message).__name__}")

    async def terminate(self, ctx: ActorContext, reason: ExitReason, interrupted: bool) -> None:
        for listener in self.listeners:  # closed by serve already, unless it never ran
            listener.close()
        if self.meter is not None:
            with anyio.CancelScope(shield=True):
                await self.meter.aclose()


async def start_meter(
    supervisor: SupervisorRef,
    child_id: str,
    config: meters.MeterConfig,
    reserver: meters.Reserver | None = None,
    *,
    port: int = 0,
    restart: Restart | str = Restart.PERMANENT,
) -> MeterPlace:
    """``config``'s meter as child ``child_id`` of ``supervisor``; where it listens.

    ``port`` 0 takes any free one; a restarted meter listens where it did. Without
    ``reserver`` the meter keeps its own budget of ``config.allocation_usd``.

    Raises:
        StartFailed: it could not listen (the port is taken) or recover its ledger.
    """
    place = MeterPlace(port=port)
    await supervisor.start_child(
        ChildSpec(
            id=child_id,
            start=lambda: MeterActor(config, place, reserver),
            restart=restart,
            start_timeout=METER_START_SECONDS,
        )
    )
    return place


async def run_meter(
    config: meters.MeterConfig,
    *,
    journal: Path | None = None,
    port: int = 0,
    lease_seconds: float = 900.0,
    task_status: anyio.abc.TaskStatus[Any] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``config``'s meter in a runtime of its own until cancelled (``mw meter``).

    With an allocation its budget is kept by a :class:`BudgetReserver` journaled
    in ``journal``, so a restart spends nothing twice.

    Raises:
        ValueError: an allocation without a journal to keep its budget in.
    """
    allocation = config.allocation_usd
    if allocation is not None and journal is None:
        raise ValueError("a meter with an allocation needs a journal for its budget")
    lines = ledger_lines(config.ledger_dir / "ledger.jsonl")
    async with open_runtime(journal=journal, record_types=BUDGET_RECORDS) as runtime:
        reserver = None
        if allocation is not None:
            budget = await runtime.spawn(
                ChildSpec(
                    id="reserver",
                    start=lambda: BudgetReserver(
                        allocation, lease_seconds=lease_seconds, ledger=lines
                    ),
                )
            )
            reserver = ReserverClient(budget)
        place = await start_meter(runtime.root, f"{config.role}-meter", config, reserver, port=port)
        task_status.started(place.port)
        await anyio.sleep_forever()
