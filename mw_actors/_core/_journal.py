"""The campaign journal: append-only, checksummed, group-committed.

One line per record::

    {"crc":"1a2b3c4d","seq":7,"t":1700000000.5,"dur":"evidence","rec":{"kind":"actor.exit",...}}

The CRC32 (hex) covers every byte after the ``"crc":"........",`` prefix up to
the newline. Sequence numbers are contiguous across segments. A segment is a
file ``<first seq, 20 digits>.jsonl`` whose first line is a
``journal.header`` record.

Writers append from any task; a single writer task owns the file. Records of
durability ``evidence`` are acknowledged only after the batch holding them is
fsynced; concurrent writers share one fsync (group commit). An fsync or write
error is fatal: the journal refuses every later append and every waiting
writer gets :class:`~mw_errors.JournalFatal`. It is never retried, because
after a failed fsync the kernel may have dropped the dirty pages.
"""

from __future__ import annotations

import os
import typing
import zlib
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final, Protocol, TypeVar

import anyio
import anyio.to_thread
import msgspec

from mw_errors import JournalCorrupt, JournalError, JournalFatal, JournalSchemaError

from ._clock import Clock, SystemClock
from ._fileops import FileOps
from ._log import get_logger
from ._records import CORE_RECORDS, Durability, JournalHeader, Record

__all__ = [
    "SCHEMA_VERSION",
    "Entry",
    "Journal",
    "JournalStatistics",
    "Projection",
    "open_journal",
    "read_journal",
    "rebuild",
]

SCHEMA_VERSION: Final = 1
_PREFIX: Final = b'{"crc":"'
_PREFIX_LEN: Final = len(_PREFIX) + 8 + 2  # prefix, 8 hex digits, '",'
_SUFFIX: Final = ".jsonl"

log = get_logger("mw.journal")

R = TypeVar("R", bound=Record)
S = TypeVar("S")


class Entry(msgspec.Struct, frozen=True):
    """One journal line, decoded."""

    seq: int
    t: float
    dur: Durability
    rec: Record


class _Body(msgspec.Struct, frozen=True):
    seq: int
    t: float
    dur: Durability
    rec: Record


class _RawLine(msgspec.Struct, frozen=True):
    crc: str
    seq: int
    t: float
    dur: Durability
    rec: msgspec.Raw


class JournalStatistics(msgspec.Struct, frozen=True):
    """A snapshot of the journal's counters."""

    path: str
    last_seq: int
    durable_seq: int
    appended: int
    batches: int
    fsyncs: int
    bytes_written: int
    segments: int
    pending: int
    recovered: int
    truncated_bytes: int
    failed: str | None


class _Codec:
    """Encoder and decoders for one set of record types, built once."""

    def __init__(self, record_types: Sequence[type[Record]]) -> None:
        types = tuple(dict.fromkeys((*CORE_RECORDS, *record_types)))
        self.kinds = frozenset(str(t.__struct_config__.tag) for t in types)
        union: Any = typing.Union[types]  # noqa: UP007 - built from a runtime tuple
        self._encoder = msgspec.json.Encoder()
        self._line = msgspec.json.Decoder(_RawLine)
        self._rec = msgspec.json.Decoder(union)

    def encode(self, seq: int, t: float, dur: Durability, rec: Record) -> bytes:
        payload = self._encoder.encode(_Body(seq, t, dur, rec))[1:]
        return b'%s%08x",%s\n' % (_PREFIX, zlib.crc32(payload), payload)

    def check(self, line: bytes) -> _RawLine | None:
        """Decode a line if its frame and CRC hold, else None (a torn or damaged line)."""
        if not line.endswith(b"\n") or not line.startswith(_PREFIX):
            return None
        payload = line[_PREFIX_LEN:-1]
        try:
            crc = int(line[len(_PREFIX) : len(_PREFIX) + 8], 16)
        except ValueError:
            return None
        if zlib.crc32(payload) != crc:
            return None
        try:
            return self._line.decode(line)
        except msgspec.DecodeError:
            return None

    def record(self, raw: _RawLine, where: str) -> Record:
        try:
            rec: Record = self._rec.decode(raw.rec)
        except msgspec.DecodeError as exc:
            kind = msgspec.json.decode(raw.rec, type=dict[str, Any]).get("kind", "?")
            if kind not in self.kinds:
                raise JournalSchemaError(
                    f"{where}: unknown record kind {kind!r}",
                    hint="this journal holds records of a newer mw or another campaign "
                    "kind; open it with the record types that wrote it, or upgrade mw",
                ) from exc
            raise JournalSchemaError(f"{where}: record {kind!r} does not match: {exc}") from exc
        if isinstance(rec, JournalHeader) and rec.schema_version > SCHEMA_VERSION:
            raise JournalSchemaError(
                f"{where}: journal schema {rec.schema_version} is newer than this mw's "
                f"({SCHEMA_VERSION})"
            )
        return rec


def _segments(directory: Path) -> list[Path]:
    return sorted(p for p in directory.glob(f"*{_SUFFIX}") if p.stem.isdigit())


def _segment_name(first_seq: int) -> str:
    return f"{first_seq:020d}{_SUFFIX}"


class _Scan(msgspec.Struct):
    last_seq: int = 0
    count: int = 0
    torn_at: tuple[Path, int, int] | None = None  # (segment, byte offset, bytes after)


def _split_lines(data: bytes) -> list[bytes]:
    lines = [line + b"\n" for line in data.split(b"\n")]
    lines[-1] = lines[-1][:-1]
    return lines if lines[-1] else lines[:-1]


def _scan(directory: Path, codec: _Codec, entries: list[Entry] | None) -> _Scan:
    """Verify every segment; collect entries if asked. Raises on damage that is not a tail."""
    scan = _Scan()
    segments = _segments(directory)
    for index, segment in enumerate(segments):
        data = segment.read_bytes()
        lines = _split_lines(data)
        offset = 0
        for lineno, line in enumerate(lines, start=1):
            raw = codec.check(line)
            where = f"{segment} line {lineno}"
            if raw is None:
                if index == len(segments) - 1 and not any(map(codec.check, lines[lineno:])):
                    scan.torn_at = (segment, offset, len(data) - offset)
                    return scan
                raise JournalCorrupt(f"{where}: checksum or framing is bad and valid lines follow")
            if raw.seq != scan.last_seq + 1:
                raise JournalCorrupt(
                    f"{where}: sequence number {raw.seq} follows {scan.last_seq}; "
                    "records are missing"
                )
            rec = codec.record(raw, where)
            if lineno == 1 and not isinstance(rec, JournalHeader):
                raise JournalCorrupt(f"{where}: a segment must start with a journal.header record")
            if entries is not None:
                entries.append(Entry(raw.seq, raw.t, raw.dur, rec))
            scan.last_seq = raw.seq
            scan.count += 1
            offset += len(line)
    return scan


def read_journal(
    directory: str | os.PathLike[str],
    record_types: Sequence[type[Record]] = (),
) -> list[Entry]:
    """Read and verify a journal without changing it. A torn tail is left out, not truncated.

    Raises:
        JournalCorrupt: a bad line that valid lines follow, or a gap in sequence numbers.
        JournalSchemaError: a record this build cannot decode.
    """
    path = Path(directory)
    if not path.is_dir():
        raise JournalError(f"{path}: no journal here", hint="pass the campaign's journal directory")
    entries: list[Entry] = []
    _scan(path, _Codec(record_types), entries)
    return entries


def replay(entries: Iterable[Entry], *kinds: type[R]) -> Iterator[R]:
    """The records of the given kinds, in journal order."""
    for entry in entries:
        if isinstance(entry.rec, kinds):
            yield entry.rec


class Projection(Protocol[S]):
    """Rebuilds state from records: ``state = apply(state, record)`` in journal order."""

    def initial(self) -> S: ...

    def apply(self, state: S, entry: Entry) -> S: ...


def rebuild(projection: Projection[S], entries: Iterable[Entry]) -> S:
    """Fold ``entries`` through ``projection``, from its initial state."""
    state = projection.initial()
    for entry in entries:
        state = projection.apply(state, entry)
    return state


class _Batch:
    __slots__ = ("done", "error", "last_seq", "parts", "sync")

    def __init__(self) -> None:
        self.parts: list[bytes | Path] = []  # a Path starts a new segment
        self.sync = False
        self.done = anyio.Event()
        self.error: JournalFatal | None = None
        self.last_seq = 0


class Journal:
    """An open journal. Use :func:`open_journal` to get one."""

    def __init__(
        self,
        directory: Path,
        codec: _Codec,
        clock: Clock,
        files: FileOps,
        segment_bytes: int,
    ) -> None:
        self.directory = directory
        self._codec = codec
        self._clock = clock
        self._files = files
        self._segment_bytes = segment_bytes
        self._fd: int | None = None
        self._segment_size = 0
        self._segments = 0
        self._last_seq = 0
        self._durable_seq = 0
        self._written_seq = 0
        self._pending = _Batch()
        self._wakeup = anyio.Event()
        self._closing = False
        self._unsynced = False  # bytes written since the last fsync (writer thread only)
        self._failed: JournalFatal | None = None
        self._appended = 0
        self._batches = 0
        self._fsyncs = 0
        self._bytes = 0
        self._recovered = 0
        self._truncated = 0
        self._entries_at_open: list[Entry] = []
        self._watchers: list[Callable[[int, Record], None]] = []

    # -- appending -------------------------------------------------------------

    def watch(self, callback: Callable[[int, Record], None]) -> Callable[[], None]:
        """Call ``callback(seq, record)`` for each record appended from now on.

        It is called as the record is accepted, before it is durable: for live
        views (the daemon's event feed), never as an acknowledgement. It must
        not block or raise. Returns a function that stops the calls.
        """
        self._watchers.append(callback)

        def unwatch() -> None:
            if callback in self._watchers:
                self._watchers.remove(callback)

        return unwatch

    def _enqueue(self, rec: Record, dur: Durability) -> tuple[_Batch, int]:
        if self._failed is not None:
            raise JournalFatal(f"{self.directory}: journal failed earlier: {self._failed.message}")
        if self._closing:
            raise JournalError(f"{self.directory}: journal is closed", hint="append before closing")
        self._last_seq += 1
        seq = self._last_seq
        line = self._codec.encode(seq, self._clock.wall(), dur, rec)
        batch = self._pending
        batch.parts.append(line)
        batch.last_seq = seq
        self._segment_size += len(line)
        self._appended += 1
        if dur == "evidence":
            batch.sync = True
        if self._segment_size >= self._segment_bytes:
            self._start_segment(batch)
        self._wakeup.set()
        for watcher in self._watchers:
            try:
                watcher(seq, rec)
            except Exception:  # a broken view must never cost the journal a record
                log.exception("journal_watcher_failed", journal=str(self.directory))
        return batch, seq

    def _start_segment(self, batch: _Batch) -> None:
        first = self._last_seq + 1
        batch.parts.append(self.directory / _segment_name(first))
        self._segment_size = 0
        header = JournalHeader(
            schema_version=SCHEMA_VERSION,
            first_seq=first,
            created_wall=self._clock.wall(),
            writer_pid=os.getpid(),
        )
        self._last_seq += 1
        line = self._codec.encode(first, self._clock.wall(), "info", header)
        batch.parts.append(line)
        batch.last_seq = first
        batch.sync = True
        self._segment_size += len(line)

    async def append(self, rec: Record, *, durability: Durability = "evidence") -> int:
        """Append ``rec``; for ``evidence``, return only once it is on disk.

        Returns its sequence number. Cancelling the wait does not withdraw the
        record: it is written with its batch, just not acknowledged.

        Raises:
            JournalFatal: the journal failed; nothing more is acknowledged.
        """
        batch, seq = self._enqueue(rec, durability)
        if durability == "evidence":
            await batch.done.wait()
            if batch.error is not None:
                raise batch.error
        return seq

    def append_nowait(self, rec: Record, *, durability: Durability = "info") -> int:
        """Append ``rec`` without waiting; it is written with the next batch.

        An ``evidence`` record appended so is durable once :meth:`sync` returns (a
        writer that answers many requests with one fsync: group commit).
        """
        return self._enqueue(rec, durability)[1]

    async def sync(self) -> None:
        """Wait until everything appended so far is written and fsynced.

        That includes a batch the writer is busy with: the writer takes batches in
        order, so waiting for the pending one waits for it too.
        """
        await self._commit()

    async def _commit(self, *, closing: bool = False) -> None:
        batch = self._pending
        batch.sync = True
        self._closing = self._closing or closing
        self._wakeup.set()
        await batch.done.wait()
        if batch.error is not None:
            raise batch.error

    # -- the writer --------------------------------------------------------------

    def _write_batch(self, parts: list[bytes | Path], sync: bool) -> int:
        fsyncs = 0
        chunk: list[bytes] = []
        for part in parts:
            if isinstance(part, Path):
                fsyncs += self._flush(chunk, sync=True)
                chunk = []
                self._open_segment(part)
                fsyncs += 1
            else:
                chunk.append(part)
        return fsyncs + self._flush(chunk, sync=sync)

    def _flush(self, chunk: list[bytes], *, sync: bool) -> int:
        if chunk:
            assert self._fd is not None
            data = b"".join(chunk)
            self._files.write(self._fd, data)
            self._bytes += len(data)
            self._unsynced = True
        if sync and self._unsynced:  # also what earlier info-only batches wrote
            assert self._fd is not None
            self._files.fsync(self._fd)
            self._unsynced = False
            return 1
        return 0

    def _open_segment(self, path: Path) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            self._files.close(fd)
        self._fd = self._files.open_append(path)
        self._files.fsync_dir(self.directory)
        self._segments += 1

    async def _writer(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup = anyio.Event()
            # Once closing, nothing more is enqueued: the batch taken now is the last.
            closing = self._closing
            batch, self._pending = self._pending, _Batch()
            if batch.parts or (batch.sync and self._unsynced):
                try:
                    fsyncs = await anyio.to_thread.run_sync(
                        self._write_batch, batch.parts, batch.sync
                    )
                except OSError as exc:
                    self._fail(exc, batch)
                    return
                self._fsyncs += fsyncs
                if batch.parts:
                    self._batches += 1
                    self._written_seq = batch.last_seq
            if batch.sync:
                self._durable_seq = self._written_seq
            batch.done.set()
            if closing:
                return

    def _fail(self, exc: OSError, batch: _Batch) -> None:
        self._failed = JournalFatal(f"{self.directory}: write or fsync failed: {exc}")
        self._failed.__cause__ = exc
        log.critical("journal_failed", directory=str(self.directory), error=str(exc))
        for failed in (batch, self._pending):
            failed.error = self._failed
            failed.done.set()

    # -- lifecycle ---------------------------------------------------------------

    def _recover(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        scan = _scan(self.directory, self._codec, self._entries_at_open)
        if scan.torn_at is not None:
            segment, offset, size = scan.torn_at
            self._files.truncate(segment, offset)
            self._truncated = size
            log.warning("journal_torn_tail_truncated", segment=str(segment), bytes=size)
        self._last_seq = self._durable_seq = self._written_seq = scan.last_seq
        self._recovered = scan.count
        segments = _segments(self.directory)
        if segments and segments[-1].stat().st_size == 0:
            # The torn line was the segment's header: the segment holds nothing.
            segments.pop().unlink()
            self._files.fsync_dir(self.directory)
        if segments:
            self._fd = self._files.open_append(segments[-1])
            self._segment_size = segments[-1].stat().st_size
            self._segments = len(segments)
        else:
            self._start_segment(self._pending)
            self._wakeup.set()

    async def _close(self) -> None:
        if self._failed is None:
            await self._commit(closing=True)

    @property
    def failed(self) -> JournalFatal | None:
        """The fatal error, once the journal has failed."""
        return self._failed

    @property
    def last_seq(self) -> int:
        return self._last_seq

    def recovered_entries(self) -> list[Entry]:
        """The entries found on open, before this process appended anything."""
        return list(self._entries_at_open)

    async def replay(self, *kinds: type[R]) -> list[R]:
        """Every record of the given kinds so far, in order, read back from disk.

        What was appended before the call is written first, so an actor that
        restarts can rebuild its state from its own acknowledged records.
        """
        await self.sync()
        entries = await anyio.to_thread.run_sync(self._read_all)
        return list(replay(entries, *kinds))

    def _read_all(self) -> list[Entry]:
        entries: list[Entry] = []
        _scan(self.directory, self._codec, entries)
        return entries

    def statistics(self) -> JournalStatistics:
        return JournalStatistics(
            path=str(self.directory),
            last_seq=self._last_seq,
            durable_seq=self._durable_seq,
            appended=self._appended,
            batches=self._batches,
            fsyncs=self._fsyncs,
            bytes_written=self._bytes,
            segments=self._segments,
            pending=len(self._pending.parts),
            recovered=self._recovered,
            truncated_bytes=self._truncated,
            failed=None if self._failed is None else self._failed.message,
        )


@asynccontextmanager
async def open_journal(
    directory: str | os.PathLike[str],
    *,
    record_types: Sequence[type[Record]] = (),
    clock: Clock | None = None,
    files: FileOps | None = None,
    segment_bytes: int = 64 * 1024 * 1024,
) -> AsyncIterator[Journal]:
    """Open (creating or recovering) the journal in ``directory`` and run its writer.

    On open, every segment is verified: sequence numbers contiguous, every CRC
    valid. A torn last line is truncated; damage anywhere else is refused.
    On exit, everything appended is written and fsynced.

    Raises:
        JournalCorrupt: damage that is not a torn tail.
        JournalSchemaError: a record kind or schema version this build cannot read.
        JournalFatal: a write or fsync failed (on exit, or raised from ``append``).
    """
    if segment_bytes < 4096:
        raise JournalError(f"segment_bytes={segment_bytes} is too small", hint="use at least 4096")
    journal = Journal(
        Path(directory),
        _Codec(record_types),
        clock or SystemClock(),
        files or FileOps(),
        segment_bytes,
    )
    await anyio.to_thread.run_sync(journal._recover)
    # The writer is shielded: an outer cancellation must not stop it before the
    # last batch is on disk. It is stopped by closing, below.
    writer_scope = anyio.CancelScope(shield=True)

    async def writer() -> None:
        with writer_scope:
            await journal._writer()

    body_error: BaseException | None = None
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(writer)
            try:
                yield journal
            except BaseException as exc:  # re-raised below, outside the task group
                body_error = exc
            finally:
                with anyio.CancelScope(shield=True):
                    await journal._close()
                writer_scope.cancel()
    finally:
        if journal._fd is not None:
            journal._files.close(journal._fd)
            journal._fd = None
    if body_error is not None:
        raise body_error
    if journal._failed is not None:
        raise journal._failed
