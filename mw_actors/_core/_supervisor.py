"""Supervisors with Erlang/OTP semantics.

A supervisor is an actor whose run starts its children in order, watches them,
and applies its strategy when one exits:

* ``one_for_one``: restart the child that exited;
* ``one_for_all``: stop all the others (reverse order), restart all (start order);
* ``rest_for_one``: stop the children started after it, restart it and them;
* ``simple_one_for_one``: dynamic children from one template, restarted one by one.

Whether a child is restarted depends on its restart type and exit reason.
Restarts are counted in a sliding window on the injected clock; one restart
too many makes the supervisor give up: it stops every child and exits with an
error, escalating to its parent (or, with ``RetryLater``, waits and starts
over).

Each child run is a task whose cancellation is shielded from the
supervisor's own: a child stops only when its supervisor stops it, in
order, with its shutdown policy. Every run ends with exactly one
``actor.exit`` record.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import math
from collections.abc import Callable
from typing import Any

import anyio
import msgspec
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from mw_errors import ActorExited, ConfigError, MwError, RestartIntensityExceeded, StartFailed

from ._actor import (
    IGNORE,
    Actor,
    ActorContext,
    ActorRef,
    Envelope,
    Exit,
    _fail_dead_letter,
    _Identity,
)
from ._clock import move_on_after
from ._log import get_logger
from ._mailbox import Mailbox
from ._records import (
    ActorExit,
    ActorSpawn,
    ExitError,
    ExitIgnored,
    ExitKilled,
    ExitNormal,
    ExitReason,
    ExitShutdown,
    SupervisorEscalate,
    SupervisorGiveUp,
    SupervisorRestart,
    SupervisorRetryLater,
)
from ._spec import (
    BRUTAL_KILL,
    AutoShutdown,
    ChildSpec,
    Restart,
    RetryLater,
    Strategy,
    SupervisorSpec,
)

__all__ = ["ChildInfo", "Supervisor", "SupervisorRef", "SupervisorStatistics", "supervisor"]

log = get_logger("mw.supervisor")

_RESTART_LEVELS = ("info", "warning", "error")


class ChildInfo(msgspec.Struct, frozen=True):
    """One child as its supervisor sees it."""

    id: str
    name: str
    alive: bool
    runs: int
    restart: str
    last_exit: str | None
    mailbox_depth: int


class SupervisorStatistics(msgspec.Struct, frozen=True):
    """A supervisor's counters."""

    name: str
    strategy: str
    children: int
    alive: int
    restarts: int
    restarts_in_window: int


# -- requests (through the supervisor's mailbox) -----------------------------------


class _StartChild(msgspec.Struct, frozen=True):
    spec: ChildSpec | None
    args: tuple[Any, ...]


class _TerminateChild(msgspec.Struct, frozen=True):
    id: str


class _WhichChildren(msgspec.Struct, frozen=True):
    pass


class _ChildRef(msgspec.Struct, frozen=True):
    id: str


class _RestartChild(msgspec.Struct, frozen=True):
    id: str


class _Statistics(msgspec.Struct, frozen=True):
    pass


class _Stop(msgspec.Struct, frozen=True):
    reason: str | None


# -- internal events ----------------------------------------------------------------


class _Run:
    """One run of one child."""

    __slots__ = (
        "done",
        "forced",
        "kill_callbacks",
        "kill_scope",
        "number",
        "ordered",
        "ready",
        "reason",
        "settled",
        "shutdown_scope",
        "started_at",
    )

    def __init__(self, number: int, started_at: float) -> None:
        self.number = number
        self.started_at = started_at
        self.shutdown_scope = anyio.CancelScope()
        # Shielded: only the supervisor stops a run, never a cancellation from outside.
        self.kill_scope = anyio.CancelScope(shield=True)
        self.ready = False
        self.settled = anyio.Event()  # ready, or done
        self.done = anyio.Event()
        self.reason: ExitReason | None = None
        self.ordered = False  # the supervisor ordered this run to stop
        self.forced: ExitReason | None = None  # reason to record if killed
        self.kill_callbacks: list[Callable[[], object]] = []

    def kill(self, reason: ExitReason | None = None) -> None:
        self.forced = self.forced or reason
        self.kill_scope.cancel()
        for callback in self.kill_callbacks:
            callback()


class _Child:
    __slots__ = ("failures", "identity", "run", "spec")

    def __init__(self, spec: ChildSpec, identity: _Identity) -> None:
        self.spec = spec
        self.identity = identity
        self.run: _Run | None = None
        self.failures = 0  # consecutive, for backoff

    @property
    def alive(self) -> bool:
        return self.run is not None and not self.run.done.is_set()


class _Down(msgspec.Struct, frozen=True):
    child: _Child
    run: _Run


class _RestartDue(msgspec.Struct, frozen=True):
    children: list[_Child]
    generation: int


class _GiveUp(Exception):
    pass


class Supervisor(Actor[Any]):
    """The supervisor actor. Build one with :func:`supervisor` or as the runtime's root."""

    def __init__(self, spec: SupervisorSpec) -> None:
        self.spec = spec
        self._by_id: dict[str, _Child] = {}  # in start order
        self._events_send: MemoryObjectSendStream[Any]
        self._events_recv: MemoryObjectReceiveStream[Any]
        self._events_send, self._events_recv = anyio.create_memory_object_stream[Any](math.inf)
        self._restart_times: collections.deque[float] = collections.deque()
        self._restarts = 0
        self._retry_at = -math.inf
        self._generation = 0
        self._dynamic = itertools.count()
        self._timers: set[anyio.CancelScope] = set()
        self._stopping: ExitReason | None = None
        self._tg: TaskGroup | None = None
        self._ctx: ActorContext | None = None
        self._teardown_killed = False

    # -- the run ---------------------------------------------------------------------

    async def _main(self, ctx: ActorContext, ready: Callable[[], None]) -> object:
        self._ctx = ctx
        ctx._on_kill(self._kill_all)
        error: BaseException | None = None
        async with anyio.create_task_group() as tg:
            self._tg = tg
            tg.start_soon(self._forward_requests, ctx)
            try:
                if self.spec.strategy_kind is not Strategy.SIMPLE_ONE_FOR_ONE:
                    for spec in self.spec.children:
                        await self._start_initial(spec)
                ready()
                await self._loop()
            except _GiveUp:
                self._stopping = ExitError(
                    error_type=RestartIntensityExceeded.__name__,
                    message=f"more than {self.spec.intensity} restarts in {self.spec.period} s",
                )
            except BaseException as exc:  # re-raised below, outside the task group
                error = exc
            finally:
                with anyio.CancelScope(shield=True) as teardown:
                    ctx._on_kill(teardown.cancel)
                    await self._terminate_all()
                for child in self._children_list():  # this run's children end with it
                    ctx.host.unregister(child.identity)
                tg.cancel_scope.cancel()
        if error is not None:
            raise error
        reason = self._stopping
        if isinstance(reason, ExitError):
            parent = ctx._supervisor_name
            self._record(SupervisorEscalate(supervisor=ctx.name, parent=parent, reason=str(reason)))
            log.error("supervisor_escalated", supervisor=ctx.name, parent=parent)
            raise Exit(reason)
        if isinstance(reason, ExitShutdown):
            raise Exit(reason)
        return None

    async def _forward_requests(self, ctx: ActorContext) -> None:
        while True:
            try:
                envelope = await ctx.receive()
            except anyio.EndOfStream:
                return
            try:
                self._events_send.send_nowait(envelope)
            except anyio.ClosedResourceError:
                if envelope.reply is not None:
                    envelope.reply.fail(ActorExited(ctx.name, "stopping"))
                return

    async def _loop(self) -> None:
        while self._stopping is None:
            event = await self._events_recv.receive()
            if isinstance(event, _Down):
                await self._on_down(event.child, event.run)
            elif isinstance(event, _RestartDue):
                if event.generation == self._generation and self._stopping is None:
                    await self._restart_now(event.children)
            else:
                assert isinstance(event, Envelope)
                await self._on_request(event)

    def _children_list(self) -> list[_Child]:
        return list(self._by_id.values())

    # -- starting ---------------------------------------------------------------------

    def _new_child(self, spec: ChildSpec) -> _Child:
        assert self._ctx is not None
        identity = _Identity(
            f"{self._ctx.name}/{spec.id}" if self._ctx.name else spec.id,
            Mailbox[Envelope](spec.mailbox_capacity),
            self._ctx.clock,
        )
        identity.mailbox._on_dead_letter = _fail_dead_letter(identity)
        self._ctx.host.register(identity)
        return _Child(spec, identity)

    async def _start_initial(self, spec: ChildSpec) -> None:
        child = self._new_child(spec)
        self._by_id[spec.id] = child
        reason = await self._start(child)
        if reason is not None and not isinstance(reason, ExitIgnored):
            raise StartFailed(f"child {child.identity.name} failed to start: {reason}")

    async def _start(self, child: _Child) -> ExitReason | None:
        """Start one run and wait for its readiness. Returns None when ready, else its exit."""
        ctx = self._ctx
        assert ctx is not None
        assert self._tg is not None
        identity = child.identity
        identity.runs += 1
        identity.alive = True
        run = _Run(ctx.host.next_run(), ctx.clock.monotonic())
        child.run = run
        self._record(ActorSpawn(actor=identity.name, run=run.number, supervisor=ctx.name))
        self._tg.start_soon(self._run_child, child, run)
        with move_on_after(ctx.clock, child.spec.start_timeout):
            await run.settled.wait()
        if run.ready:
            return None
        if not run.done.is_set():
            run.kill(
                ExitError(
                    error_type=StartFailed.__name__,
                    message=f"not ready within {child.spec.start_timeout} s",
                )
            )
            await run.done.wait()
        return run.reason

    async def _run_child(self, child: _Child, run: _Run) -> None:
        assert self._ctx is not None
        identity = child.identity
        ctx = ActorContext(identity, run.number, self._ctx.host, supervisor=self._ctx.name)
        ctx._kill_callbacks = run.kill_callbacks
        reason: ExitReason | None = None
        actor: Actor[Any] | None = None

        def ready() -> None:
            run.ready = True
            run.settled.set()

        try:
            with run.kill_scope:
                try:
                    with run.shutdown_scope:
                        actor = child.spec.start(*child.spec.args)
                        outcome = await actor._main(ctx, ready)
                        reason = ExitIgnored() if outcome is IGNORE else ExitNormal()
                    if reason is None:
                        reason = ExitShutdown()
                except Exit as exc:
                    reason = exc.reason
                except Exception as exc:
                    reason = ExitError.from_exception(exc)
                if actor is not None and not isinstance(reason, ExitIgnored):
                    try:
                        await actor.terminate(ctx, reason, run.ordered)
                    except Exception as exc:
                        log.error("terminate_failed", actor=identity.name, error=repr(exc))
                        if not reason.abnormal:
                            reason = ExitError.from_exception(exc)
            if run.kill_scope.cancelled_caught or reason is None:
                reason = run.forced or ExitKilled()
        finally:
            self._finish_run(child, run, ctx, reason or run.forced or ExitKilled())

    def _finish_run(self, child: _Child, run: _Run, ctx: ActorContext, reason: ExitReason) -> None:
        identity = child.identity
        run.reason = reason
        identity.alive = False
        identity.last_exit = reason
        for envelope in ctx.held:
            if envelope.reply is not None:
                envelope.reply.fail(ActorExited(identity.name, reason))
        uptime = ctx.clock.monotonic() - run.started_at
        self._record(ActorExit(actor=identity.name, run=run.number, reason=reason, uptime=uptime))
        run.done.set()
        run.settled.set()
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._events_send.send_nowait(_Down(child, run))

    # -- stopping ---------------------------------------------------------------------

    def _order_stop(self, child: _Child) -> _Run | None:
        """Tell a child's run to stop by its policy; return the run to wait for."""
        run = child.run
        if run is None or run.done.is_set():
            return None
        run.ordered = True
        if child.spec.shutdown == BRUTAL_KILL or self._teardown_killed:
            run.kill(ExitKilled())
        else:
            run.shutdown_scope.cancel()
        return run

    async def _await_stop(self, child: _Child, run: _Run, deadline: float) -> None:
        """Wait for an ordered stop until ``deadline``, then kill the run outright."""
        assert self._ctx is not None
        if not run.done.is_set():
            with self._ctx.clock.cancel_scope_at(deadline):
                await run.done.wait()
        if not run.done.is_set():
            log.warning("shutdown_timeout", actor=child.identity.name, timeout=child.spec.shutdown)
            run.kill()
            await run.done.wait()

    def _deadline(self, child: _Child) -> float:
        assert self._ctx is not None
        if child.spec.shutdown == BRUTAL_KILL:
            return math.inf
        return self._ctx.clock.monotonic() + float(child.spec.shutdown)

    async def _terminate(self, child: _Child) -> None:
        """Stop a child by its shutdown policy and wait until its run has ended."""
        run = self._order_stop(child)
        if run is not None:
            await self._await_stop(child, run, self._deadline(child))

    async def _terminate_group(self, children: list[_Child]) -> None:
        """Stop children in reverse start order; dynamic children all at once.

        Dynamic children are all told at the same moment, so each still gets
        its full shutdown timeout while we wait for them one after another.
        """
        if self.spec.strategy_kind is Strategy.SIMPLE_ONE_FOR_ONE:
            stopping = [
                (c, run, self._deadline(c)) for c in children if (run := self._order_stop(c))
            ]
            for child, run, deadline in stopping:
                await self._await_stop(child, run, deadline)
        else:
            for child in reversed(children):
                await self._terminate(child)

    async def _terminate_all(self) -> None:
        for scope in self._timers:
            scope.cancel()
        self._generation += 1
        await self._terminate_group(self._children_list())
        for child in self._children_list():
            child.identity.mailbox.close()
        self._events_send.close()
        assert self._ctx is not None
        while True:
            try:
                event = self._events_recv.receive_nowait()
            except (anyio.WouldBlock, anyio.EndOfStream):
                break
            if isinstance(event, Envelope) and event.reply is not None:
                event.reply.fail(ActorExited(self._ctx.name, self._stopping or "stopping"))
        self._events_recv.close()

    def _kill_all(self) -> None:
        self._teardown_killed = True
        for child in self._children_list():
            if child.run is not None:
                child.run.kill()

    def _remove(self, child: _Child) -> None:
        if self._by_id.get(child.spec.id) is child:
            del self._by_id[child.spec.id]
        child.identity.mailbox.close()
        if self._ctx is not None:
            self._ctx.host.unregister(child.identity)

    # -- restarting ------------------------------------------------------------------

    def _should_restart(self, child: _Child, reason: ExitReason) -> bool:
        kind = child.spec.restart_type
        if kind is Restart.PERMANENT:
            return not isinstance(reason, ExitIgnored)
        if kind is Restart.TRANSIENT:
            return reason.abnormal
        return False

    async def _on_down(self, child: _Child, run: _Run) -> None:
        if child.run is not run or run.ordered or self._stopping is not None:
            return
        reason = run.reason
        assert reason is not None
        if not self._should_restart(child, reason):
            if child.spec.restart_type is Restart.TEMPORARY or self._dynamic_strategy:
                self._remove(child)
            else:
                child.identity.mailbox.close()
            if child.spec.significant:
                self._check_auto_shutdown(child)
            return
        if run.ready and run.started_at + self._reset_after <= self._now:
            child.failures = 0
        child.failures += 1
        self._note_restart(child)
        group = self._group(child)
        await self._terminate_group([c for c in group if c is not child])
        group = [c for c in group if c is child or c.spec.restart_type is not Restart.TEMPORARY]
        for other in self._children_list():
            if (
                other not in group
                and other.spec.restart_type is Restart.TEMPORARY
                and not other.alive
            ):
                self._remove(other)
        delay = self.spec.backoff.delay(child.failures) if self.spec.backoff else 0.0
        delay = max(delay, self._retry_at - self._now)
        assert self._ctx is not None
        self._record(
            SupervisorRestart(
                supervisor=self._ctx.name,
                trigger=child.identity.name,
                children=[c.spec.id for c in group],
                restarts_in_window=len(self._restart_times),
                delay=delay,
            )
        )
        n = len(self._restart_times)
        getattr(log, _RESTART_LEVELS[min(n, 3) - 1])(
            "child_restarting",
            supervisor=self._ctx.name,
            child=child.identity.name,
            reason=str(reason),
            restarts_in_window=n,
            delay=delay,
        )
        if delay > 0:
            self._schedule(delay, group)
        else:
            await self._restart_now(group)

    @property
    def _dynamic_strategy(self) -> bool:
        return self.spec.strategy_kind is Strategy.SIMPLE_ONE_FOR_ONE

    @property
    def _now(self) -> float:
        assert self._ctx is not None
        return self._ctx.clock.monotonic()

    @property
    def _reset_after(self) -> float:
        return self.spec.backoff.reset_after if self.spec.backoff else math.inf

    def _note_restart(self, child: _Child) -> None:
        now = self._now
        window = self._restart_times
        window.append(now)
        while window and window[0] <= now - self.spec.period:
            window.popleft()
        self._restarts += 1
        if len(window) <= self.spec.intensity:
            return
        assert self._ctx is not None
        policy = self.spec.on_exhausted
        if isinstance(policy, RetryLater):
            self._record(
                SupervisorRetryLater(
                    supervisor=self._ctx.name, trigger=child.identity.name, delay=policy.delay
                )
            )
            log.error(
                "supervisor_retry_later",
                supervisor=self._ctx.name,
                child=child.identity.name,
                delay=policy.delay,
            )
            window.clear()
            self._retry_at = now + policy.delay
            return
        self._record(
            SupervisorGiveUp(
                supervisor=self._ctx.name,
                trigger=child.identity.name,
                intensity=self.spec.intensity,
                period=self.spec.period,
            )
        )
        log.critical(
            "supervisor_gave_up",
            supervisor=self._ctx.name,
            child=child.identity.name,
            intensity=self.spec.intensity,
            period=self.spec.period,
        )
        raise _GiveUp

    def _group(self, child: _Child) -> list[_Child]:
        strategy = self.spec.strategy_kind
        if strategy is Strategy.ONE_FOR_ALL:
            return self._children_list()
        if strategy is Strategy.REST_FOR_ONE:
            children = self._children_list()
            return children[children.index(child) :]
        return [child]

    def _schedule(self, delay: float, group: list[_Child]) -> None:
        assert self._ctx is not None
        assert self._tg is not None
        scope = anyio.CancelScope()
        self._timers.add(scope)
        clock = self._ctx.clock
        due = _RestartDue(group, self._generation)

        async def timer() -> None:
            with scope:
                await clock.sleep_until(clock.monotonic() + delay)
                self._events_send.send_nowait(due)
            self._timers.discard(scope)

        self._tg.start_soon(timer)

    async def _restart_now(self, group: list[_Child]) -> None:
        for child in group:
            if self._by_id.get(child.spec.id) is not child or child.alive:
                continue
            reason = await self._start(child)
            if reason is not None and not isinstance(reason, ExitIgnored):
                # Its _Down event comes next and drives the strategy again.
                return

    def _check_auto_shutdown(self, child: _Child) -> None:
        mode = self.spec.auto_shutdown_kind
        if mode is AutoShutdown.NEVER:
            return
        if mode is AutoShutdown.ALL_SIGNIFICANT and any(
            c.alive for c in self._children_list() if c.spec.significant
        ):
            return
        assert self._ctx is not None
        log.info("supervisor_auto_shutdown", supervisor=self._ctx.name, trigger=child.identity.name)
        self._stopping = ExitShutdown()

    # -- requests ----------------------------------------------------------------------

    async def _on_request(self, envelope: Envelope) -> None:
        request, reply = envelope.message, envelope.reply
        try:
            result = await self._answer(request)
        except (MwError, KeyError) as exc:
            if reply is not None:
                reply.fail(exc)
            return
        if reply is not None:
            reply.set(result)

    async def _answer(self, request: object) -> object:
        if isinstance(request, _StartChild):
            return await self._start_child(request)
        if isinstance(request, _TerminateChild):
            child = self._find(request.id)
            await self._terminate(child)
            if child.spec.restart_type is Restart.TEMPORARY or self._dynamic_strategy:
                self._remove(child)
            return None
        if isinstance(request, _RestartChild):
            child = self._find(request.id)
            if child.alive:
                raise ConfigError(f"child {request.id!r} is running; terminate it first")
            if child.identity.mailbox.closed:
                raise ConfigError(f"child {request.id!r} has stopped for good")
            reason = await self._start(child)
            if reason is not None and not isinstance(reason, ExitIgnored):
                raise StartFailed(f"child {child.identity.name} failed to start: {reason}")
            return ActorRef(child.identity)
        if isinstance(request, _ChildRef):
            return ActorRef(self._find(request.id).identity)
        if isinstance(request, _WhichChildren):
            return [self._info(c) for c in self._children_list()]
        if isinstance(request, _Statistics):
            return self.statistics()
        if isinstance(request, _Stop):
            self._stopping = ExitShutdown(request.reason)
            return None
        raise ConfigError(f"supervisor does not understand {request!r}")

    async def _start_child(self, request: _StartChild) -> ActorRef[Any]:
        if self._dynamic_strategy:
            if request.spec is not None:
                raise ConfigError("simple_one_for_one children come from the template; pass args")
            template = self.spec.children[0]
            spec = ChildSpec(
                id=f"{template.id}.{next(self._dynamic)}",
                start=template.start,
                args=(*template.args, *request.args),
                restart=template.restart,
                shutdown=template.shutdown,
                significant=template.significant,
                start_timeout=template.start_timeout,
                mailbox_capacity=template.mailbox_capacity,
            )
        else:
            if request.spec is None:
                raise ConfigError("start_child needs a ChildSpec for this strategy")
            spec = request.spec
            if spec.id in self._by_id:
                raise ConfigError(f"a child with id {spec.id!r} already exists")
        child = self._new_child(spec)
        self._by_id[spec.id] = child
        reason = await self._start(child)
        if reason is not None and not isinstance(reason, ExitIgnored):
            self._remove(child)
            raise StartFailed(f"child {child.identity.name} failed to start: {reason}")
        return ActorRef(child.identity)

    def _find(self, child_id: str) -> _Child:
        try:
            return self._by_id[child_id]
        except KeyError:
            raise KeyError(f"no child {child_id!r}") from None

    def _info(self, child: _Child) -> ChildInfo:
        identity = child.identity
        return ChildInfo(
            id=child.spec.id,
            name=identity.name,
            alive=child.alive,
            runs=identity.runs,
            restart=child.spec.restart_type.value,
            last_exit=None if identity.last_exit is None else str(identity.last_exit),
            mailbox_depth=identity.mailbox.statistics().depth,
        )

    def statistics(self) -> SupervisorStatistics:
        assert self._ctx is not None
        return SupervisorStatistics(
            name=self._ctx.name,
            strategy=self.spec.strategy_kind.value,
            children=len(self._by_id),
            alive=sum(c.alive for c in self._children_list()),
            restarts=self._restarts,
            restarts_in_window=len(self._restart_times),
        )

    def _record(self, record: Any) -> None:
        assert self._ctx is not None
        self._ctx.host.record(record)


class SupervisorRef:
    """A handle to a supervisor: start, stop and inspect its children."""

    def __init__(self, ref: ActorRef[Any]) -> None:
        self.ref = ref

    @property
    def name(self) -> str:
        return self.ref.name

    async def start_child(
        self, spec: ChildSpec | None = None, *args: Any, timeout: float | None = None
    ) -> ActorRef[Any]:
        """Start a child: a ``ChildSpec``, or for ``simple_one_for_one`` the template's ``args``.

        Raises:
            ConfigError: a bad spec or a duplicate id.
            StartFailed: the child's init raised, or it was not ready in time.
        """
        result: ActorRef[Any] = await self.ref.ask(_StartChild(spec, args), timeout=timeout)
        return result

    async def terminate_child(self, child_id: str) -> None:
        """Stop a child by its shutdown policy. It is not restarted until :meth:`restart_child`.

        A temporary or dynamic child is removed, and its mailbox closed.
        """
        await self.ref.ask(_TerminateChild(child_id))

    async def restart_child(self, child_id: str) -> ActorRef[Any]:
        """Start again a child stopped by :meth:`terminate_child`; its mailbox kept what was sent.

        Raises:
            KeyError: no such child.
            ConfigError: it is running, or has stopped for good.
            StartFailed: its start failed.
        """
        result: ActorRef[Any] = await self.ref.ask(_RestartChild(child_id))
        return result

    async def child(self, child_id: str) -> ActorRef[Any]:
        """The reference of a child by id; valid across its restarts.

        Raises:
            KeyError: no such child.
        """
        result: ActorRef[Any] = await self.ref.ask(_ChildRef(child_id))
        return result

    async def child_supervisor(self, child_id: str) -> SupervisorRef:
        """The reference of a nested supervisor by id."""
        return SupervisorRef(await self.child(child_id))

    async def which_children(self) -> list[ChildInfo]:
        result: list[ChildInfo] = await self.ref.ask(_WhichChildren())
        return result

    async def statistics(self) -> SupervisorStatistics:
        result: SupervisorStatistics = await self.ref.ask(_Statistics())
        return result

    async def stop(self, reason: str | None = None) -> None:
        """Stop the supervisor and all its children (reverse start order)."""
        with contextlib.suppress(ActorExited):  # already stopped
            await self.ref.ask(_Stop(reason))


def supervisor(
    id: str,
    spec: SupervisorSpec,
    *,
    restart: Restart | str = Restart.PERMANENT,
    significant: bool = False,
) -> ChildSpec:
    """A child spec for a nested supervisor. Its shutdown waits for its whole subtree."""
    return ChildSpec(
        id=id,
        start=lambda: Supervisor(spec),
        restart=restart,
        shutdown=math.inf,
        significant=significant,
        start_timeout=math.inf,
    )
