"""A standalone wire meter whose budget survives ``kill -9``.

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

import meters

from ._core._runtime import open_runtime
from ._core._spec import ChildSpec
from ._reserver import BUDGET_RECORDS, BudgetReserver, ReserverClient

__all__ = ["serve_journaled_meter"]


async def serve_journaled_meter(
    config: meters.MeterConfig,
    *,
    journal: Path,
    port: int = 0,
    lease_seconds: float = 900.0,
    task_status: anyio.abc.TaskStatus[Any] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``config``'s meter until cancelled, its budget journaled in ``journal``.

    Raises:
        ValueError: ``config`` has no allocation (there is no budget to keep).
    """
    allocation = config.allocation_usd
    if allocation is None:
        raise ValueError("a journaled meter needs an allocation")
    ledger_path = config.ledger_dir / "ledger.jsonl"
    lines = meters.read_ledger(ledger_path) if ledger_path.exists() else []
    async with open_runtime(journal=journal, record_types=BUDGET_RECORDS) as runtime:
        reserver = await runtime.spawn(
            ChildSpec(
                id="reserver",
                start=lambda: BudgetReserver(allocation, lease_seconds=lease_seconds, ledger=lines),
            )
        )
        serve = partial(meters.serve_meter, config, port=port, reserver=ReserverClient(reserver))
        async with anyio.create_task_group() as tg:
            task_status.started(await tg.start(serve))
