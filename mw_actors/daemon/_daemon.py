"""The daemon: campaigns in the background of one process, per runs directory.

Lifecycle: take ``mw-daemon.lock`` (a second daemon on the same runs
directory is refused) and write ``mw-daemon.pid``; remove a stale socket;
recover: every campaign in the registry that stopped without its terminal
records is acted on by kind (serve-learn resumes; editing, which never
retries, gets ``unknown`` for the trials that were in flight); listen on
``.mw-daemon/control.sock`` (mode 0600 in a 0700 directory; the peer's uid
must be ours). ``Shutdown`` or SIGTERM stops it gracefully: every campaign
is cancelled under its runtime, which writes its terminal records.

Events go to subscribers through a bounded buffer each; a slow reader loses
the oldest events (the next one it gets says how many), and never slows the
daemon down.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import msgspec

from mw_errors import ConfigError, MwError

from .._core import Record, Runtime, get_logger, observe_runtimes, read_journal
from .._tags import check_tag
from ..kinds import KINDS, Context, campaign_records, kind_of
from ._client import DaemonPaths, unix_address
from ._protocol import (
    FRAME_SECONDS,
    PROTOCOL_VERSION,
    Cancel,
    Event,
    Failed,
    Hello,
    ListCampaigns,
    Ok,
    Refused,
    Resume,
    Shutdown,
    Status,
    Submit,
    Tail,
    Welcome,
    encode_frame,
    read_frame,
    write_frame,
)
from ._status import CampaignStatus, campaign_status

__all__ = ["Daemon", "DaemonOptions", "peer_uid"]

log = get_logger("mw.daemon")
EVENT_BUFFER = 256
EVENT_COALESCE_SECONDS = 0.02  # a live view loses nothing by seeing events 20 ms late


@dataclass(frozen=True)
class DaemonOptions:
    """What ``bin/`` decided for the campaigns this daemon runs."""

    # Per campaign kind, what bin/ decided for its campaigns (weight editing: its
    # CampaignOptions; a kind with none here is refused by its own check).
    kinds: Mapping[str, Any] = field(default_factory=dict)
    allowed_uid: int = field(default_factory=os.getuid)
    # A provider key by its variable's name, from the daemon's own environment: used when
    # a submission carries none (and for campaigns the daemon resumes after a restart).
    secret: Callable[[str], str | None] = field(default=lambda name: None, repr=False)
    frame_seconds: float = FRAME_SECONDS  # a frame begun arrives whole within this


def peer_uid(sock: socket.socket) -> int:
    """The uid of the process at the other end of a Unix socket (SO_PEERCRED)."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _, uid, _ = struct.unpack("3i", creds)
    return int(uid)


class _Subscriber:
    """One events reader: a bounded queue of (event, its encoded frame)."""

    def __init__(self) -> None:
        self.send, self.receive = anyio.create_memory_object_stream[tuple[Event, bytes]](
            EVENT_BUFFER
        )
        self.lagged = 0

    def offer(self, event: Event, frame: bytes) -> None:
        try:
            self.send.send_nowait((event, frame))
        except anyio.WouldBlock:  # lagged policy: drop the oldest, count what was lost
            with contextlib.suppress(anyio.WouldBlock):
                self.receive.receive_nowait()
            self.lagged += 1
            self.send.send_nowait((event, frame))

    def take(self, event: Event, frame: bytes) -> bytes:
        """The frame to send: as encoded once for all, or saying how many were lost."""
        if not self.lagged:
            return frame
        lagged, self.lagged = self.lagged, 0
        return encode_frame(msgspec.structs.replace(event, lagged=lagged))


def _record_event(record: Record) -> tuple[str, dict[str, Any]]:
    """A record's kind and small fields, for the event feed (traces stay in the journal)."""
    kind = type(record).__struct_config__.tag
    return str(kind), {
        key: value
        for key, value in msgspec.structs.asdict(record).items()
        if value is None
        or isinstance(value, (bool, int, float))
        or (isinstance(value, str) and len(value) <= 120)
    }


class _Campaign:
    def __init__(self, kind: str, tag: str, spec: dict[str, Any]) -> None:
        self.kind = kind
        self.tag = tag
        self.spec = spec
        self.scope: anyio.CancelScope | None = None
        self.cancelled = False
        self.done = anyio.Event()
        self.error: str | None = None
        self.runtime: Runtime | None = None  # the campaign's, once it opened one
        self.on_record: Callable[[int, Record], None] | None = None  # feeds the events
        self.allocation_usd = ""  # known once the runner is built

    def starting(self) -> dict[str, Any]:
        """The status of a campaign whose journal does not exist yet.

        Running, nothing done; or failed with its error, if it ended before it wrote one.
        """
        status = CampaignStatus(
            tag=self.tag,
            kind=self.kind,
            state="failed" if self.done.is_set() else "running",
            progress=dict.fromkeys(getattr(KINDS.get(self.kind), "progress_keys", ()), 0),
            spend_usd=dict.fromkeys(getattr(KINDS.get(self.kind), "spend_roles", ()), "0"),
            allocation_usd=self.allocation_usd,
            open_actor_runs=0,
        )
        result: dict[str, Any] = msgspec.to_builtins(status)
        if self.done.is_set():
            result["error"] = self.error or "it ended before it wrote its journal"
        return result

    def attach_runtime(self, runtime: Runtime) -> None:
        """The campaign opened its runtime: watch its mailboxes, feed its records out."""
        self.runtime = runtime
        if runtime.journal is not None and self.on_record is not None:
            runtime.journal.watch(self.on_record)


class Daemon:
    def __init__(self, runs: Path, options: DaemonOptions) -> None:
        self.runs = runs
        self.paths = DaemonPaths(runs)
        self.options = options
        self.campaigns: dict[str, _Campaign] = {}
        self._checking: set[str] = set()  # tags whose Submit is being checked
        self.subscribers: list[_Subscriber] = []
        self.stopping = anyio.Event()
        self._lock_fd: int | None = None

    # -- lifecycle ----------------------------------------------------------------

    def _take_lock(self) -> None:
        self.runs.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.paths.lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            owner = self.paths.pid.read_text().strip() if self.paths.pid.exists() else "?"
            raise ConfigError(
                f"a daemon already runs for {self.runs} (pid {owner})",
                hint=f"use it, or stop it with `mw daemon stop --runs {self.runs}`",
            ) from None
        self._lock_fd = fd
        self.paths.pid.write_text(f"{os.getpid()}\n")

    def _prepare_socket(self) -> None:
        self.paths.home.mkdir(mode=0o700, exist_ok=True)
        os.chmod(self.paths.home, 0o700)
        self.paths.registry.mkdir(exist_ok=True)
        if self.paths.socket.exists() or self.paths.socket.is_symlink():
            self.paths.socket.unlink()  # stale: we hold the lock, so nobody serves on it
            log.info("stale_socket_removed", path=str(self.paths.socket))

    async def serve(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Run until :meth:`stop`; report readiness once the socket listens."""
        self._take_lock()
        try:
            self._prepare_socket()
            async with anyio.create_task_group() as tg:
                self.tg = tg
                old = os.umask(0o177)
                try:
                    with unix_address(self.paths.socket) as address:
                        listener = await anyio.create_unix_listener(address)
                finally:
                    os.umask(old)
                os.chmod(self.paths.socket, 0o600)
                await self._recover()
                tg.start_soon(self._listen, listener)
                log.info("daemon_ready", pid=os.getpid(), socket=str(self.paths.socket))
                task_status.started()
                await self.stopping.wait()
                await self._stop_campaigns()
                tg.cancel_scope.cancel()
        finally:
            self.paths.socket.unlink(missing_ok=True)
            self.paths.pid.unlink(missing_ok=True)
            if self._lock_fd is not None:
                os.close(self._lock_fd)

    def stop(self) -> None:
        self.stopping.set()

    async def _stop_campaigns(self) -> None:
        for campaign in self.campaigns.values():
            if campaign.scope is not None:
                campaign.scope.cancel()
        with anyio.move_on_after(60):
            for campaign in self.campaigns.values():
                if campaign.scope is not None:
                    await campaign.done.wait()

    async def _listen(self, listener: anyio.abc.Listener[anyio.abc.SocketStream]) -> None:
        async with listener:
            await listener.serve(self._connection, task_group=self.tg)

    # -- events -------------------------------------------------------------------

    def publish(self, tag: str, what: str, **detail: Any) -> None:
        self.broadcast(Event(tag=tag, what=what, detail=detail))

    def broadcast(self, event: Event) -> None:
        """Offer ``event`` to every subscriber; never waits (a full buffer drops its oldest).

        It is encoded once, whatever the number of subscribers.
        """
        if not self.subscribers:
            return
        frame = encode_frame(event)
        for subscriber in list(self.subscribers):
            subscriber.offer(event, frame)

    # -- connections ----------------------------------------------------------------

    async def _connection(self, stream: anyio.abc.SocketStream) -> None:
        try:
            async with stream:
                raw = stream.extra(anyio.abc.SocketAttribute.raw_socket)
                uid = peer_uid(raw)
                if uid != self.options.allowed_uid:
                    log.warning("peer_refused", uid=uid)
                    await write_frame(stream, Refused(reason=f"uid {uid} may not use this daemon"))
                    return
                with anyio.fail_after(self.options.frame_seconds):
                    hello = await read_frame(stream, frame_seconds=self.options.frame_seconds)
                if not isinstance(hello, Hello) or hello.version != PROTOCOL_VERSION:
                    await write_frame(
                        stream, Refused(reason=f"speak protocol version {PROTOCOL_VERSION}")
                    )
                    return
                await write_frame(stream, Welcome(version=PROTOCOL_VERSION, pid=os.getpid()))
                if hello.role == "events":
                    await self._events(stream)
                else:
                    await self._control(stream)
        except (
            anyio.EndOfStream,
            anyio.BrokenResourceError,
            anyio.ClosedResourceError,
            ConnectionError,
            TimeoutError,
        ):
            return  # a client that leaves, abruptly or not, never disturbs the daemon
        except MwError as exc:
            log.warning("bad_client", error=exc.render())
        except Exception:  # no connection, whatever it sends, may end the daemon
            log.error("connection_failed", exc_info=True)

    async def _events(self, stream: anyio.abc.SocketStream) -> None:
        subscriber = _Subscriber()
        self.subscribers.append(subscriber)
        try:
            async with subscriber.receive:
                async for event, frame in subscriber.receive:
                    # Events come in bursts (a block of episodes ending): wait a moment so
                    # the burst goes out in one write, not one wake-up and send per event.
                    await anyio.sleep(EVENT_COALESCE_SECONDS)
                    frames = [subscriber.take(event, frame)]
                    while len(frames) < EVENT_BUFFER:
                        try:
                            frames.append(subscriber.take(*subscriber.receive.receive_nowait()))
                        except anyio.WouldBlock:
                            break
                    await stream.send(b"".join(frames))
        finally:
            self.subscribers.remove(subscriber)
            subscriber.send.close()

    async def _control(self, stream: anyio.abc.SocketStream) -> None:
        while True:
            try:
                request = await read_frame(stream, frame_seconds=self.options.frame_seconds)
            except ConfigError as exc:  # a frame that is no request: say so, then hang up
                await write_frame(stream, Failed(code=exc.code, message=exc.message))
                return
            try:
                result = await self._handle(request)
                reply: Ok | Failed = Ok(result=result)
            except MwError as exc:
                reply = Failed(code=exc.code, message=exc.message, hint=exc.hint)
            except Exception as exc:  # a bug on one request answers it; the daemon goes on
                log.error("request_failed", request=type(request).__name__, exc_info=True)
                reply = Failed(
                    code="daemon_bug",
                    message=f"the daemon failed on {type(request).__name__}: {type(exc).__name__}",
                    hint=f"its log ({self.paths.log}) has the traceback; campaigns go on",
                )
            await write_frame(stream, reply)
            if isinstance(request, Shutdown):
                self.stop()
                return

    async def _handle(self, request: Any) -> Any:
        if hasattr(request, "tag"):  # before the tag names any file
            check_tag(request.tag)
        if isinstance(request, Submit):
            return await self._submit(
                request.kind, request.tag, request.spec, resume=False, secrets=request.secrets
            )
        if isinstance(request, ListCampaigns):
            return [await self._listed(tag) for tag in sorted(self._known())]
        if isinstance(request, Status):
            return await self._status(request.tag)
        if isinstance(request, Cancel):
            campaign = self.campaigns.get(request.tag)
            if campaign is None or campaign.scope is None or campaign.done.is_set():
                raise ConfigError(f"campaign {request.tag!r} is not running here")
            campaign.cancelled = True
            campaign.scope.cancel()
            await campaign.done.wait()
            return await self._status(request.tag)
        if isinstance(request, Resume):
            entry = self.paths.registry / f"{request.tag}.json"
            if not entry.is_file():
                raise ConfigError(f"no campaign {request.tag!r} was submitted here")
            data = json.loads(entry.read_text())
            if not kind_of(data["kind"]).resumable:
                raise ConfigError(
                    f"campaign {request.tag!r} is {data['kind']}, which never continues",
                    hint="start a new run",
                )
            known = self.campaigns.get(request.tag)
            stopped = campaign_status(self.runs / request.tag).state == "failed"
            if not stopped and not (known is not None and known.cancelled):
                raise ConfigError(f"campaign {request.tag!r} has nothing to resume")
            return await self._submit(data["kind"], request.tag, data["spec"], resume=True)
        if isinstance(request, Tail):
            journal = self.runs / request.tag / "journal"
            if not journal.is_dir():
                raise ConfigError(f"no campaign {request.tag!r} under {self.runs}")
            entries = read_journal(journal, campaign_records())
            return [msgspec.to_builtins(e) for e in entries[-request.records :]]
        if isinstance(request, Shutdown):
            return "stopping"
        raise ConfigError(f"unknown request {type(request).__name__}")

    def _known(self) -> set[str]:
        registered = {p.stem for p in self.paths.registry.glob("*.json")}
        return registered | set(self.campaigns)

    async def _listed(self, tag: str) -> dict[str, Any]:
        """``tag``'s status; one that cannot be read is listed as failed, with why."""
        try:
            return await self._status(tag)
        except (MwError, OSError) as exc:
            try:
                kind = str(_read_entry(self.paths.registry / f"{tag}.json")["kind"])
            except (OSError, ValueError, KeyError):
                kind = "unknown"  # its registry entry cannot be read either
            campaign = _Campaign(kind, tag, {})
            campaign.done.set()
            campaign.error = exc.render() if isinstance(exc, MwError) else repr(exc)
            return campaign.starting()

    async def _status(self, tag: str) -> dict[str, Any]:
        """``tag``'s status; its journal is read on a worker thread (campaigns share the loop)."""
        run = self.runs / tag
        campaign = self.campaigns.get(tag)
        if not (run / "journal").is_dir():
            if campaign is not None:
                return campaign.starting()
            raise ConfigError(f"no campaign {tag!r} under {self.runs}")
        try:
            read = await anyio.to_thread.run_sync(campaign_status, run)
            status = msgspec.to_builtins(read)
        except ConfigError:
            if campaign is None or campaign.done.is_set():
                raise
            return campaign.starting()
        if campaign is not None:
            if not campaign.done.is_set():
                status["state"] = "running"
                if campaign.runtime is not None:
                    mailboxes = campaign.runtime.mailboxes()
                    for name, actor in status.get("actors", {}).items():
                        if name in mailboxes:
                            actor["mailbox_depth"] = mailboxes[name].depth
            elif campaign.cancelled:
                status["state"] = "cancelled"
            if campaign.error:
                status["error"] = campaign.error
        return dict(status)

    # -- campaigns ----------------------------------------------------------------

    async def _submit(
        self,
        kind: str,
        tag: str,
        spec: dict[str, Any],
        *,
        resume: bool,
        secrets: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """Check ``spec`` whole, then register and start it; a refused one leaves no trace."""
        running = tag in self.campaigns and not self.campaigns[tag].done.is_set()
        if running or tag in self._checking:
            raise ConfigError(f"campaign {tag!r} is already running")
        if not resume and (self.runs / tag).exists():
            raise ConfigError(
                f"run directory {self.runs / tag} already exists", hint="pick another tag"
            )
        self._checking.add(tag)  # a second Submit of the tag while this one is checked
        try:
            runner, allocation = await self._runner(kind, tag, spec, resume, secrets or {})
        finally:
            self._checking.discard(tag)
        entry = self.paths.registry / f"{tag}.json"
        entry.write_text(json.dumps({"kind": kind, "tag": tag, "spec": spec}, indent=1))
        campaign = _Campaign(kind, tag, spec)
        campaign.allocation_usd = allocation

        def on_record(seq: int, record: Record) -> None:
            what, detail = _record_event(record)
            self.broadcast(Event(tag=tag, what=what, detail=detail))

        campaign.on_record = on_record
        self.campaigns[tag] = campaign
        self.tg.start_soon(self._run, campaign, runner)
        self.publish(tag, "resumed" if resume else "submitted", kind=kind)
        return campaign.starting()

    async def _runner(
        self, kind: str, tag: str, spec: dict[str, Any], resume: bool, secrets: Mapping[str, str]
    ) -> tuple[Callable[[], Any], str]:
        """What runs the campaign, and its allocation in USD: the kind's, every check made.

        Keys come with the submission (memory only), else from the daemon's own
        environment (a campaign it resumes after its own restart).
        """
        context = Context(
            runs=self.runs,
            secret=lambda name: secrets.get(name) or self.options.secret(name),
            settings=self.options.kinds.get(kind),
        )
        return await kind_of(kind).prepare(tag, spec, resume=resume, context=context)

    async def _run(self, campaign: _Campaign, runner: Callable[[], Any]) -> None:
        try:
            with anyio.CancelScope() as scope, observe_runtimes(campaign.attach_runtime):
                campaign.scope = scope
                await runner()
        except MwError as exc:
            campaign.error = exc.render()
            log.warning("campaign_failed", tag=campaign.tag, error=campaign.error)
        except Exception as exc:  # a bug in a campaign must not take the daemon down
            campaign.error = f"{type(exc).__name__}: {exc}"
            log.exception("campaign_crashed", tag=campaign.tag)
        finally:
            campaign.done.set()
            state = "cancelled" if campaign.cancelled else "failed" if campaign.error else "done"
            self.publish(campaign.tag, "finished", state=state)

    async def _recover(self) -> None:
        """Act on every registered campaign that stopped without its terminal records.

        An entry the daemon cannot act on (unreadable, or refused now) is logged and
        left alone: one campaign never keeps the daemon, or the others, from starting.
        """
        for entry in sorted(self.paths.registry.glob("*.json")):
            try:
                await self._recover_one(_read_entry(entry))
            except (MwError, OSError, ValueError, KeyError, TypeError) as exc:
                log.warning("campaign_not_recovered", entry=entry.name, error=repr(exc))

    async def _recover_one(self, data: dict[str, Any]) -> None:
        tag = check_tag(data["tag"])
        run = self.runs / tag
        journaled = (run / "journal").is_dir() and _journal_holds_records(run / "journal")
        if journaled and campaign_status(run).state != "failed":
            return
        kind = kind_of(data["kind"])
        if kind.resumable:
            # Stopped without its terminal records, or killed before its journal held its
            # start (a campaign's checks take seconds): the resume starts that one afresh,
            # and refuses one whose journal is gone while its spend or evidence is not.
            log.info("campaign_resumed", tag=tag, started=journaled)
            await self._submit(kind.name, tag, data["spec"], resume=run.exists())
        elif journaled:
            await kind.abandon(run)


def _journal_holds_records(journal: Path) -> bool:
    """Whether a journal directory holds any bytes (a campaign wrote to it)."""
    return any(path.is_file() and path.stat().st_size > 0 for path in journal.iterdir())


def _read_entry(entry: Path) -> dict[str, Any]:
    data = json.loads(entry.read_text())
    if not isinstance(data, dict):
        raise ValueError("a registry entry is a JSON object")
    return data
