"""The ``ray`` executor: each cell a Ray task on a cluster, all under the driver's one budget.

::

    driver (mw grid run)                          Ray cluster
     ├─ grid runtime: reserver (journaled)         ├─ BudgetRelay   a named async actor
     ├─ pump: takes the relay's requests,          │                the driver owns
     │        answers them from the reserver  <────┤
     └─ cells: N Ray tasks at a time ─────────────>└─ _cell tasks   the cell's runner, its
                                                                    budget CellBudget(relay)

The budget stays in the driver: one reserver, one journal, the same records and
the same resume as the local executor. A cell's meters reserve through the
relay, a named actor the driver owns, and the driver's pump answers each
request from the grid's reserver. So no cell, on any node, can spend past the
grid's allocation.

Cells write to their run directories, which must be on storage every node
shares (the grid file's ``runs``). A worker that dies mid-cell leaves the
cell's campaign journal without its end, as ``kill -9`` does. Ray runs the task
again (``max_retries``), and the new run resumes the campaign by the journal's
rules. The cell's host meter writes off, as ``lost``, what the dead one left in
flight. A driver that dies takes its relay and its tasks with it: the next
``mw grid run`` resumes the grid.

The cell's runner (its kind's: a campaign spec) travels to the worker as Ray
ships arguments, the provider keys with it (in the cluster's object store).
Ray is an optional extra (``pip install 'mw[ray]'``).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import itertools
from functools import partial
from typing import Any

import anyio

import meters
from mw_errors import ConfigError, MwError

from .._cells import ENDED
from .._core import get_logger
from ._budget import CellBudget
from ._run import CellJob, GridRun, in_grid_order, outcome_of, run_job
from .records import CellEnded, CellStarted

__all__ = ["BudgetRelay", "RayExecutor", "RelayBudget", "import_ray"]

log = get_logger("mw.grid")

STOP_WAIT = 30.0  # seconds a stopped grid waits for each running cell's worker to die


def import_ray() -> Any:
    """The ``ray`` module.

    Raises:
        ConfigError: Ray is not installed here.
    """
    try:
        return importlib.import_module("ray")
    except ImportError:
        raise ConfigError(
            "--executor ray needs Ray, and it is not installed",
            hint="pip install 'mw[ray]' (or ray>=2.60), or use --executor local",
        ) from None


class BudgetRelay:
    """The Ray actor that carries cells' budget calls to the driver (an async actor)."""

    def __init__(self) -> None:
        import asyncio

        self.waiting: dict[int, asyncio.Future[Any]] = {}
        self.queue: asyncio.Queue[tuple[int, tuple[Any, ...]]] = asyncio.Queue()
        self.numbers = itertools.count()

    async def ask(self, request: tuple[Any, ...]) -> Any:
        """A cell's call (``("reserve", amount, holder)``, ...): waits for the driver's answer."""
        import asyncio

        number = next(self.numbers)
        self.waiting[number] = asyncio.get_running_loop().create_future()
        await self.queue.put((number, request))
        return await self.waiting[number]

    async def take(self) -> list[tuple[int, tuple[Any, ...]]]:
        """The requests waiting (at least one): what the driver's pump answers next."""
        batch = [await self.queue.get()]
        while not self.queue.empty():
            batch.append(self.queue.get_nowait())
        return batch

    async def answer(self, number: int, value: Any, error: str | None = None) -> None:
        future = self.waiting.pop(number)
        if error is None:
            future.set_result(value)
        else:
            future.set_exception(meters.MeterError(error))


class RelayBudget:
    """A :class:`meters.Reserver` in a Ray worker: each call through the relay actor."""

    def __init__(self, relay: Any) -> None:
        self.relay = relay

    async def _ask(self, *request: Any) -> Any:
        ref = self.relay.ask.remote(request)
        if _on_asyncio():
            return await ref  # Ray's own wait, on this event loop: no thread per call
        return await anyio.to_thread.run_sync(import_ray().get, ref)

    async def reserve(self, amount: Any, holder: str) -> Any:
        return await self._ask("reserve", amount, holder)

    async def settle(self, reservation_id: str, actual: Any) -> None:
        await self._ask("settle", reservation_id, actual)

    async def release(self, reservation_id: str) -> None:
        await self._ask("release", reservation_id)

    async def open_reservations(self) -> Any:
        return await self._ask("open_reservations")


def _on_asyncio() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # trio's
        return False
    return True


def _run_cell(job: CellJob, relay: Any) -> None:
    """One cell's campaign, in a Ray worker (the driver reads how it ended from its files).

    A retry after a dead worker finds the cell's run directory, and its runner resumes
    it (a serve-and-learn cell) or sets the interrupted attempt aside and runs a new
    one (an editing cell).
    """
    anyio.run(run_job, job, CellBudget(RelayBudget(relay), job.cell.tag))


class RayExecutor:
    """Cells as Ray tasks, N at a time, on the cluster ``ray.init`` reaches."""

    name = "ray"

    def __init__(
        self, max_parallel: int = 1, *, address: str | None = None, max_retries: int = 2
    ) -> None:
        if max_parallel < 1:
            raise ConfigError(f"--max-parallel {max_parallel}", hint="run 1 or more cells at once")
        self.max_parallel = max_parallel
        self.address = address
        self.max_retries = max_retries
        self.ray = import_ray()
        self.started_here = False

    def connect(self) -> None:
        """Join the cluster at ``address`` (or start a local one), unless Ray is already up.

        Call it from the main thread, before the event loop: Ray installs signal handlers.
        """
        if not self.ray.is_initialized():
            self.ray.init(address=self.address, log_to_driver=False, include_dashboard=False)
            self.started_here = True

    def close(self) -> None:
        """Leave the cluster, if :meth:`connect` joined it."""
        if self.started_here:
            self.ray.shutdown()
            self.started_here = False

    async def run_cells(self, run: GridRun) -> None:
        if not self.ray.is_initialized():
            raise ConfigError(
                "Ray is not connected", hint="call RayExecutor.connect() (or ray.init) first"
            )
        relay_class = self.ray.remote(BudgetRelay)
        # Named, so a cell (or an operator) can find the grid's budget on the cluster by it.
        name = f"mw-grid-budget.{run.grid.tag}"
        relay = relay_class.options(name=name, namespace="mw", max_concurrency=1000).remote()
        cell_task = self.ray.remote(max_retries=self.max_retries, num_cpus=1)(_run_cell)
        try:
            async with anyio.create_task_group() as pump:
                pump.start_soon(self._pump, relay, run.budget)
                cell = partial(self._cell, run, cell_task=cell_task, relay=relay)
                await in_grid_order(run.jobs, self.max_parallel, cell)
                pump.cancel_scope.cancel()
        finally:
            # Also when the grid is stopped: its name is free for the run that resumes it.
            self.ray.kill(relay)

    async def _pump(self, relay: Any, budget: meters.Reserver) -> None:
        """Answer the cells' budget calls from the grid's reserver, a batch at a time.

        The calls that came together are asked of the reserver together, so one fsync
        makes them all durable: its group commit. Asked one after another, each waited
        for its own. They are from different callers (each waits for its answer before
        its next), so the order the reserver takes them in says nothing more than the
        order they reached the relay in.
        """
        while True:
            batch = await anyio.to_thread.run_sync(
                self.ray.get, relay.take.remote(), abandon_on_cancel=True
            )
            await self._answer_batch(relay, budget, batch)

    async def _answer_batch(
        self, relay: Any, budget: meters.Reserver, batch: list[tuple[int, tuple[Any, ...]]]
    ) -> None:
        """The calls that came together, asked of the reserver together."""
        async with anyio.create_task_group() as answering:
            for number, request in batch:
                answering.start_soon(self._answer, relay, budget, number, request)

    @staticmethod
    async def _answer(
        relay: Any, budget: meters.Reserver, number: int, request: tuple[Any, ...]
    ) -> None:
        """One cell's budget call, asked of the grid's reserver; its answer to the relay."""
        operation, *arguments = request
        try:
            value = await getattr(budget, operation)(*arguments)
            error = None
        except MwError as exc:
            value, error = None, exc.render()
        relay.answer.remote(number, value, error)

    def _stopped(self, ref: Any) -> None:
        """Wait for a cancelled cell's task to end (its worker is gone once it has)."""
        with contextlib.suppress(self.ray.exceptions.RayError):
            self.ray.get(ref)

    async def _cell(self, run: GridRun, job: CellJob, *, cell_task: Any, relay: Any) -> None:
        tag = job.cell.tag
        await run.journal.append(CellStarted(cell=tag, resume=job.resume))
        ref = cell_task.remote(job, relay)
        reason: str | None = None
        state: Any
        try:
            await anyio.to_thread.run_sync(self.ray.get, ref, abandon_on_cancel=True)
            outcome = await anyio.to_thread.run_sync(outcome_of, run.grid, run.place, job.cell)
            state = outcome.state
        except self.ray.exceptions.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            reason = cause.render() if isinstance(cause, MwError) else str(exc).splitlines()[0]
            state = "failed"
        except self.ray.exceptions.RayError as exc:  # its worker died, retries spent
            reason = f"its Ray task was lost: {type(exc).__name__}"
            state = "failed"
        except anyio.get_cancelled_exc_class():
            self.ray.cancel(ref, force=True)
            with anyio.CancelScope(shield=True):
                # Its worker is killed, not yet dead: until it is, it holds the cell's run
                # directory, and a resume at once would find the cell running elsewhere.
                with anyio.move_on_after(STOP_WAIT):
                    await anyio.to_thread.run_sync(self._stopped, ref, abandon_on_cancel=True)
                ended = CellEnded(cell=tag, state="cancelled", reason="the grid was stopped")
                await run.journal.append(ended)
            raise
        if state not in ENDED:
            state = "failed"
        if reason is not None:
            log.warning("grid_cell_failed", cell=tag, error=reason)
        await run.journal.append(CellEnded(cell=tag, state=state, reason=reason))
