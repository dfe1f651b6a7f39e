"""A child process for the reserver's kill test: a journaled reserver under load.

``python -m tests.metering._grants JOURNAL`` runs a runtime with a
:class:`BudgetReserver` on the journal in JOURNAL, whose fsyncs take 20 ms
(a slow disk, so that batches queue behind them). 32 clients reserve without
end; each prints a grant's id the moment it is answered, then the parent kills
this process with ``kill -9``. Every id printed must be in the journal.
"""

from __future__ import annotations

import sys
import time
from decimal import Decimal
from pathlib import Path

import anyio

import meters
import mw_actors as mw
import mw_actors.metering


class _SlowDisk(mw.journal.FileOps):
    def fsync(self, fd: int) -> None:
        time.sleep(0.02)
        super().fsync(fd)


async def main(directory: Path) -> None:
    async with (
        mw.journal.open_journal(
            directory, record_types=mw.metering.BUDGET_RECORDS, files=_SlowDisk()
        ) as journal,
        mw.open_runtime(journal=journal, record_types=mw.metering.BUDGET_RECORDS) as rt,
    ):
        spec = mw.ChildSpec(
            id="reserver", start=lambda: mw.metering.BudgetReserver(Decimal("1000000"))
        )
        client = mw.metering.ReserverClient(await rt.spawn(spec))

        async def reserve_forever(holder: str) -> None:
            while True:
                granted = await client.reserve(Decimal("0.01"), holder)
                assert isinstance(granted, meters.Granted)
                print(granted.id, flush=True)

        print("ready", flush=True)
        async with anyio.create_task_group() as tg:
            for number in range(32):
                tg.start_soon(reserve_forever, f"meter:{number}")


if __name__ == "__main__":
    anyio.run(main, Path(sys.argv[1]))
