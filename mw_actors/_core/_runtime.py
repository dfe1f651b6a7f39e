"""The embedded runtime: ``async with open_runtime(...) as rt``.

The runtime owns the clock, the journal (optional) and the root supervisor,
and runs inside the caller's own asyncio or trio program. It keeps no global
state and installs no signal handlers unless asked to.

Lifecycle: open the journal (recovering it), start the root supervisor and
its children in order, run the caller's block, then stop the tree in reverse
order and close the journal. If the root gives up (restart intensity
exceeded all the way up) or the journal fails, the caller's block is
cancelled and the error is raised from the ``async with``.
"""

from __future__ import annotations

import contextvars
import itertools
import math
import os
import signal
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from typing import Any

import anyio

from mw_errors import (
    JournalError,
    MwError,
    RestartIntensityExceeded,
    RuntimeClosed,
    SupervisorError,
)

from ._actor import ActorContext, ActorRef, Envelope, Exit, _Identity
from ._clock import Clock, SystemClock
from ._journal import Journal, open_journal, rebuild, replay
from ._log import get_logger
from ._mailbox import Mailbox, MailboxStatistics
from ._records import ActorExit, ActorSpawn, ExitError, ExitLost, Record
from ._spec import AutoShutdown, ChildSpec, Restart, SupervisorSpec
from ._supervisor import Supervisor, SupervisorRef
from ._views import SupervisionView

__all__ = ["Runtime", "observe_runtimes", "open_runtime"]

log = get_logger("mw.runtime")


class Runtime:
    """A running actor system. Get one from :func:`open_runtime`."""

    def __init__(self, clock: Clock, journal: Journal | None) -> None:
        self.clock = clock
        self.journal = journal
        self.failure: MwError | None = None
        self._body_scope = anyio.CancelScope()
        self._top_ref: SupervisorRef | None = None
        self._root: SupervisorRef | None = None
        self._top_done = anyio.Event()
        self._identities: dict[str, _Identity] = {}  # every supervised actor, by name
        first_run = 1
        if journal is not None:
            spawns = replay(journal.recovered_entries(), ActorSpawn)
            first_run += max((r.run for r in spawns), default=0)
        self._runs = itertools.count(first_run)

    def register(self, identity: _Identity) -> None:
        self._identities[identity.name] = identity

    def unregister(self, identity: _Identity) -> None:
        if self._identities.get(identity.name) is identity:
            del self._identities[identity.name]

    def mailboxes(self) -> dict[str, MailboxStatistics]:
        """Each supervised actor's mailbox, live: depth, high water, processed, dead letters.

        Actors waiting to be restarted are listed too (their mailbox keeps what was sent).
        """
        return {name: i.mailbox.statistics() for name, i in sorted(self._identities.items())}

    def next_run(self) -> int:
        """A run id unique within the journal, across restarts of the process too."""
        return next(self._runs)

    @property
    def root(self) -> SupervisorRef:
        """The root supervisor."""
        if self._root is None:
            raise RuntimeClosed("the runtime has no root supervisor")
        return self._root

    async def spawn(self, spec: ChildSpec) -> ActorRef[Any]:
        """Start ``spec`` as a child of the root supervisor."""
        return await self.root.start_child(spec)

    def record(self, record: Record) -> None:
        """Append a lifecycle record (no fsync wait). A failed journal fails the runtime."""
        if self.journal is None or self.failure is not None:
            return
        try:
            self.journal.append_nowait(record)
        except JournalError as exc:
            self.fail(exc)

    def fail(self, error: MwError) -> None:
        """Fail the runtime: cancel the caller's block and stop the tree."""
        if self.failure is None:
            self.failure = error
            log.critical("runtime_failed", error=error.render())
        self._body_scope.cancel()

    def _prepare_top(self, root: SupervisorSpec) -> tuple[Supervisor, ActorContext, _Identity]:
        """The top supervisor and its address, made before it runs.

        From then on :meth:`_shutdown` can always ask it to stop, however early.
        """
        top_spec = SupervisorSpec(
            strategy="one_for_one",
            intensity=0,
            auto_shutdown=AutoShutdown.ANY_SIGNIFICANT,
            children=[
                ChildSpec(
                    id="root",
                    start=lambda: Supervisor(root),
                    restart=Restart.TEMPORARY,
                    significant=True,
                    shutdown=math.inf,
                    start_timeout=math.inf,
                )
            ],
        )
        top = Supervisor(top_spec)
        identity = _Identity("", Mailbox[Envelope](64), self.clock)
        self._top_ref = SupervisorRef(ActorRef(identity))
        return top, ActorContext(identity, 0, self, supervisor=""), identity

    async def _run_top(
        self,
        top: Supervisor,
        ctx: ActorContext,
        identity: _Identity,
        started: anyio.Event,
    ) -> None:
        def ready() -> None:
            self._root = SupervisorRef(ActorRef(top._by_id["root"].identity))
            started.set()

        try:
            with anyio.CancelScope(shield=True):
                await top._main(ctx, ready)
        except Exit:
            pass  # the top's own exit; the root's reason is read below
        except MwError as exc:
            self.fail(exc)
        finally:
            self._top_done.set()
            started.set()
            identity.mailbox.close()
        reason = self._root.ref.last_exit if self._root is not None else None
        if isinstance(reason, ExitError):
            gave_up = reason.error_type == RestartIntensityExceeded.__name__
            error = RestartIntensityExceeded if gave_up else SupervisorError
            self.fail(error(f"the root supervisor exited: {reason}"))

    async def _shutdown(self) -> None:
        if self._top_ref is not None and not self._top_done.is_set():
            await self._top_ref.stop("runtime closing")
        await self._top_done.wait()


async def _watch_signals(rt: Runtime) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            log.warning("runtime_signal", signal=signal.Signals(signum).name)
            rt._body_scope.cancel()
            return


async def _close_lost_runs(journal: Journal) -> None:
    """Give every actor run the dead process left open its terminal record (``lost``)."""
    views = rebuild(SupervisionView(), journal.recovered_entries())
    for name, view in sorted(views.items()):
        for run in view.open_runs:
            await journal.append(ActorExit(actor=name, run=run, reason=ExitLost(), uptime=0.0))


_observer: contextvars.ContextVar[Callable[[Runtime], None] | None] = contextvars.ContextVar(
    "mw_runtime_observer", default=None
)


@contextmanager
def observe_runtimes(callback: Callable[[Runtime], None]) -> Iterator[None]:
    """Call ``callback`` with each runtime that code in this context opens.

    A host that runs someone else's campaign (the daemon) sees its actors live
    this way, without the campaign's API taking the host in: the observer is a
    context variable, so it follows the host's task and the tasks it starts.
    """
    token = _observer.set(callback)
    try:
        yield
    finally:
        _observer.reset(token)


@asynccontextmanager
async def open_runtime(
    *,
    journal: Journal | str | os.PathLike[str] | None = None,
    clock: Clock | None = None,
    root: SupervisorSpec | None = None,
    record_types: Sequence[type[Record]] = (),
    handle_signals: bool = False,
) -> AsyncIterator[Runtime]:
    """Run an actor system inside the caller's async program.

    ``journal`` is an open :class:`Journal`, a directory to open one in, or
    None (lifecycle records are then only logged). ``root`` is the root
    supervisor's spec (default: ``one_for_one`` with no children). With
    ``handle_signals``, SIGTERM and SIGINT stop the runtime gracefully.

    Raises:
        StartFailed: a root child failed to start.
        RestartIntensityExceeded: the root supervisor gave up.
        JournalFatal: the journal failed.
    """
    clock = clock or SystemClock()
    async with AsyncExitStack() as stack:
        if journal is not None and not isinstance(journal, Journal):
            journal = await stack.enter_async_context(
                open_journal(journal, clock=clock, record_types=record_types)
            )
        if journal is not None:
            await _close_lost_runs(journal)
        rt = Runtime(clock, journal)
        observer = _observer.get()
        if observer is not None:
            observer(rt)
        body_error: BaseException | None = None
        async with anyio.create_task_group() as tg:
            started = anyio.Event()
            tg.start_soon(rt._run_top, *rt._prepare_top(root or SupervisorSpec()), started)
            if handle_signals:
                tg.start_soon(_watch_signals, rt)
            try:
                # Inside the try: a caller cancelled while the tree starts still stops it
                # (the tree runs shielded, and stops only when asked).
                await started.wait()
                if rt.failure is None:
                    with rt._body_scope:
                        yield rt
            except BaseException as exc:  # re-raised below, outside the task group
                body_error = exc
            finally:
                with anyio.CancelScope(shield=True):
                    await rt._shutdown()
                tg.cancel_scope.cancel()
        if body_error is not None:
            raise body_error
        if rt.failure is not None:
            raise rt.failure
