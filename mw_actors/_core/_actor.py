"""Actors, their references, and request/reply.

An actor is a class with up to four lifecycle hooks:

``init(ctx)``
    Runs before readiness. Returning :data:`IGNORE` tells the supervisor not
    to start this actor at all (OTP's ``ignore``); raising fails the start.
``run(ctx)``
    The actor's life. The default takes messages from the mailbox and passes
    each to ``handle``; returning ends the run with reason ``normal``.
``handle(message)``
    One message; its return value is the reply to an ``ask``.
``terminate(ctx, reason, interrupted)``
    Cleanup, on every exit. ``interrupted`` is true when the supervisor (or
    the runtime) stopped the actor, so cleanup is the same for a cancelled
    campaign and a finished one.

The identity of an actor (its name and mailbox) outlives each run, so an
:class:`ActorRef` stays valid across restarts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, Generic, NamedTuple, Protocol, TypeVar

import anyio
import anyio.lowlevel

from mw_errors import ActorExited, AskTimeout, MailboxClosed, MailboxFull

from ._clock import Clock
from ._log import get_logger
from ._mailbox import Mailbox, MailboxStatistics, Overflow
from ._records import ExitReason, ExitShutdown

if TYPE_CHECKING:
    from ._journal import Journal
    from ._records import Record

__all__ = [
    "IGNORE",
    "Actor",
    "ActorContext",
    "ActorRef",
    "Exit",
    "ReplySlot",
]

M = TypeVar("M")


class _Ignore:
    def __repr__(self) -> str:
        return "IGNORE"


IGNORE: Final = _Ignore()
"""Return this from ``Actor.init`` to leave the child unstarted (OTP ``ignore``)."""


class Exit(BaseException):
    """Raise inside an actor to end its run with a chosen reason.

    For example ``raise Exit(ExitShutdown("done"))``.

    A BaseException, so that an actor's own ``except Exception`` does not swallow it.
    """

    def __init__(self, reason: ExitReason | None = None) -> None:
        super().__init__(reason)
        self.reason: ExitReason = reason if reason is not None else ExitShutdown()


class ReplySlot:
    """A one-shot reply: set once with a value or an error."""

    __slots__ = ("_error", "_event", "_value")

    def __init__(self) -> None:
        self._event = anyio.Event()
        self._value: Any = None
        self._error: BaseException | None = None

    @property
    def answered(self) -> bool:
        return self._event.is_set()

    def set(self, value: object) -> None:
        if not self._event.is_set():
            self._value = value
            self._event.set()

    def fail(self, error: BaseException) -> None:
        if not self._event.is_set():
            self._error = error
            self._event.set()

    async def wait(self) -> Any:
        await self._event.wait()
        if self._error is not None:
            raise self._error
        return self._value


class Envelope(NamedTuple):
    message: Any
    reply: ReplySlot | None


class _Identity:
    """What outlives a run: the name, the mailbox, and the last exit."""

    def __init__(self, name: str, mailbox: Mailbox[Envelope], clock: Clock) -> None:
        self.name = name
        self.mailbox = mailbox
        self.clock = clock
        self.last_exit: ExitReason | None = None
        self.runs = 0
        self.alive = False


def _fail_dead_letter(identity: _Identity) -> Any:
    def fail(envelope: Envelope) -> None:
        if envelope.reply is not None:
            envelope.reply.fail(ActorExited(identity.name, identity.last_exit or "stopped"))

    return fail


class ActorRef(Generic[M]):
    """A handle for sending to an actor; valid across its restarts."""

    __slots__ = ("_id",)

    def __init__(self, identity: _Identity) -> None:
        self._id = identity

    @property
    def name(self) -> str:
        return self._id.name

    @property
    def alive(self) -> bool:
        return self._id.alive

    @property
    def last_exit(self) -> ExitReason | None:
        return self._id.last_exit

    def _exited(self) -> ActorExited:
        return ActorExited(self._id.name, self._id.last_exit or "stopped")

    async def tell(self, message: M) -> None:
        """Send ``message``, waiting while the mailbox is full.

        Raises:
            ActorExited: the actor has stopped for good.
        """
        await self._put(Envelope(message, None))

    def tell_nowait(self, message: M, overflow: Overflow = Overflow.FAIL) -> None:
        """Send ``message`` now; when the mailbox is full, apply ``overflow``.

        Raises:
            MailboxFull: the mailbox is full and ``overflow`` is ``FAIL``.
            ActorExited: the actor has stopped for good.
        """
        try:
            self._id.mailbox.put_nowait(Envelope(message, None), overflow)
        except MailboxClosed:
            raise self._exited() from None

    async def ask(self, message: M, *, timeout: float | None = None) -> Any:
        """Send ``message`` and wait for the actor's reply.

        Raises:
            AskTimeout: no reply within ``timeout`` seconds on the runtime's clock.
            ActorExited: the actor died before replying, or has stopped for good.
        """
        # A caller cancelled already sends nothing (the mailbox's put would not have): a
        # reservation asked for by a request that was cancelled would be held for nobody.
        await anyio.lowlevel.checkpoint_if_cancelled()
        slot = ReplySlot()
        envelope = Envelope(message, slot)
        sent = self._put_now(envelope)  # else it waits for room, within the timeout
        if timeout is None:
            if not sent:
                await self._put(envelope)
            return await slot.wait()
        clock = self._id.clock
        deadline = clock.monotonic() + timeout
        # Asked per request (a meter's reservations): once the mailbox has it, where the
        # clock lends a timer, the wait is timed by the timer, cheaper than a cancel scope.
        timer = getattr(clock, "call_at", None) if sent else None
        cancel = timer(deadline, lambda: slot.fail(self._late(timeout))) if timer else None
        if cancel is not None:
            try:
                return await slot.wait()
            finally:
                cancel()
        with clock.cancel_scope_at(deadline) as scope:
            if not sent:
                await self._put(envelope)
            result = await slot.wait()
        if scope.cancelled_caught:
            raise self._late(timeout)
        return result

    async def _put(self, envelope: Envelope) -> None:
        try:
            await self._id.mailbox.put(envelope)
        except MailboxClosed:
            raise self._exited() from None

    def _put_now(self, envelope: Envelope) -> bool:
        """Put ``envelope`` if there is room; False if the mailbox is full."""
        try:
            self._id.mailbox.put_nowait(envelope)
        except MailboxClosed:
            raise self._exited() from None
        except MailboxFull:
            return False
        return True

    def _late(self, timeout: float) -> AskTimeout:
        return AskTimeout(f"{self._id.name} did not answer within {timeout} s")

    def statistics(self) -> MailboxStatistics:
        return self._id.mailbox.statistics()

    def __repr__(self) -> str:
        return f"<ActorRef {self._id.name}>"


class Host(Protocol):
    """What an actor's context reaches of its runtime, and nothing more.

    The journal and the record sink, run numbers, and the registry of live
    identities that supervisors keep (``Runtime`` is the one host).
    """

    @property
    def journal(self) -> Journal | None: ...

    def record(self, record: Record) -> None:
        """Append a lifecycle record (no fsync wait)."""

    def next_run(self) -> int:
        """A run id unique within the journal, across restarts of the process too."""
        ...

    def register(self, identity: _Identity) -> None: ...

    def unregister(self, identity: _Identity) -> None: ...


class ActorContext:
    """What a running actor knows about itself, and its host's narrow interface."""

    def __init__(self, identity: _Identity, run: int, host: Host, *, supervisor: str) -> None:
        self._id = identity
        self.run = run  # unique within the journal
        self.attempt = identity.runs  # 1 for the first run of this identity, 2 after a restart...
        self.host = host
        self.current: Envelope | None = None
        self.held: list[Envelope] = []  # taken, not yet processed: failed if the run ends
        self._supervisor_name = supervisor
        self._kill_callbacks: list[Callable[[], object]] = []

    @property
    def journal(self) -> Journal | None:
        """The runtime's journal (None: a runtime without one)."""
        return self.host.journal

    def _on_kill(self, callback: Callable[[], object]) -> None:
        """Call ``callback`` if the supervisor kills this run outright."""
        self._kill_callbacks.append(callback)

    @property
    def name(self) -> str:
        return self._id.name

    @property
    def log(self) -> Any:
        """A structlog logger bound to this actor and run."""
        return get_logger("mw.actor").bind(actor=self._id.name, run=self.run)

    @property
    def clock(self) -> Clock:
        return self._id.clock

    @property
    def ref(self) -> ActorRef[Any]:
        return ActorRef(self._id)

    async def receive(self) -> Envelope:
        """The next envelope. The previous one is counted as processed.

        Raises:
            anyio.EndOfStream: the mailbox was closed.
        """
        self._processed()
        self.current = await self._id.mailbox.get()
        self.held = [self.current]
        return self.current

    async def receive_waiting(self, most: int) -> list[Envelope]:
        """The next envelope and those waiting behind it, up to ``most``.

        For an actor that answers a batch at once (one fsync for all of it, see
        :class:`~mw_actors.BudgetReserver`). The previous ones are counted as
        processed; if the run ends before it answers them, each asker gets
        :class:`~mw_errors.ActorExited`.

        Raises:
            anyio.EndOfStream: the mailbox was closed.
        """
        self._processed()
        batch = [await self._id.mailbox.get()]
        while len(batch) < most:
            try:
                batch.append(self._id.mailbox.get_nowait())
            except (anyio.WouldBlock, anyio.EndOfStream):
                break
        self.held = batch
        return batch

    def _processed(self) -> None:
        for _ in self.held:
            self._id.mailbox.done()
        self.held, self.current = [], None


class Actor(Generic[M]):
    """Base class of actors. Override ``handle``, or ``run`` for a work loop."""

    async def _main(self, ctx: ActorContext, ready: Callable[[], None]) -> object:
        if await self.init(ctx) is IGNORE:
            return IGNORE
        ready()
        await self.run(ctx)
        return None

    async def init(self, ctx: ActorContext) -> object:
        """Prepare; return :data:`IGNORE` to not start. Readiness follows its return."""
        return None

    async def run(self, ctx: ActorContext) -> None:
        """The actor's life. By default, a loop over the mailbox calling :meth:`handle`."""
        while True:
            try:
                envelope = await ctx.receive()
            except anyio.EndOfStream:
                return
            result = await self.handle(envelope.message)
            if envelope.reply is not None:
                envelope.reply.set(result)

    async def handle(self, message: M) -> object:
        """Handle one message; the return value answers an ``ask``."""
        raise NotImplementedError(f"{type(self).__name__} takes no messages")

    async def terminate(self, ctx: ActorContext, reason: ExitReason, interrupted: bool) -> None:
        """Clean up after the run, whatever ended it."""
