"""The wire ledger: one JSON line per upstream attempt, and summaries rebuilt from the lines.

``ledger.jsonl`` holds every attempt, whatever became of it. The role's
summary (``wire_ledger.json`` for the host, ``meta_wire_ledger.json`` for
the learner, ``judge_wire_ledger.json`` for a Pitch judge) is a pure
function of the lines, rewritten atomically: temp file, fsync, rename,
directory fsync. Rebuilding it from the lines gives the
same bytes.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

import msgspec

from mw_errors import MeterError

from ._budget import Reservation
from ._money import usd
from ._usage import Usage

__all__ = [
    "LEDGER_SCHEMA_VERSION",
    "STATUSES",
    "Ledger",
    "LedgerLine",
    "LedgerSummary",
    "attempt_holder",
    "encode_summary",
    "lost_attempt",
    "read_ledger",
    "summarize",
    "summary_name",
    "write_atomically",
]

LEDGER_SCHEMA_VERSION = 1
Role = Literal["host", "learner", "judge"]
Status = Literal[
    "ok",  # a response with usage
    "unmetered",  # a response without usage: charged its reservation
    "budget_blocked",  # refused before forwarding: nothing was sent
    "upstream_error",  # the provider answered with an error status
    "upstream_unreachable",  # connect failure, reset, timeout before a response
    "cut",  # the stream broke before its usage arrived: charged its reservation
    "client_disconnected",  # the client left; usage read on for a bounded time
    "refused",  # not forwarded: unpriced model or a body that is not JSON
    "lost",  # the meter died with the attempt in flight: charged its reservation on restart
    "overrun",  # the upstream passed the output reserved: charged in full (a cut stream: reserved)
    "meter_error",  # the meter failed on the request: charged by usage, else reserved if sent
    "usage_invalid",  # the upstream's usage was no usage (a float, a negative, cached > input)
]
STATUSES: tuple[str, ...] = Status.__args__  # type: ignore[attr-defined]


class LedgerLine(msgspec.Struct, frozen=True, kw_only=True):
    """One upstream attempt."""

    id: str  # idempotency id, unique per attempt
    role: Role
    model: str
    endpoint: str
    started: float
    ended: float
    status: Status
    http_status: int | None
    streamed: bool
    usage: dict[str, Any] | None  # the provider's usage block, verbatim
    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    cost_usd: str  # exact decimal
    reservation_id: str | None = None
    reserved_usd: str = "0"
    note: str = ""
    schema_version: int = LEDGER_SCHEMA_VERSION

    @classmethod
    def charge(cls, counts: Usage | None, **fields: Any) -> LedgerLine:
        """A line whose token counts come from ``counts`` (the normalised usage)."""
        tokens = msgspec.structs.asdict(counts) if counts is not None else {}
        return cls(**tokens, **fields)


class ModelTotals(msgspec.Struct, kw_only=True):
    requests: int = 0
    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    cost_usd: str = "0"


class LedgerSummary(msgspec.Struct, kw_only=True):
    """Totals of a role's ledger lines."""

    schema_version: int = LEDGER_SCHEMA_VERSION
    role: str
    requests: int
    statuses: dict[str, int]
    input_tokens: int
    cached_input_tokens: int
    output_tokens: int
    reasoning_tokens: int
    cost_usd: str
    allocation_usd: str | None
    prices_date: str | None
    by_model: dict[str, ModelTotals]


def summary_name(role: str) -> str:
    return {"host": "wire_ledger.json", "judge": "judge_wire_ledger.json"}.get(
        role, "meta_wire_ledger.json"
    )


def _count(totals: ModelTotals, line: LedgerLine) -> None:
    totals.requests += 1
    totals.input_tokens += line.input_tokens
    totals.cached_input_tokens += line.cached_input_tokens
    totals.output_tokens += line.output_tokens
    totals.reasoning_tokens += line.reasoning_tokens


class _Totals:
    """Running totals of ledger lines: what a summary is made of, in constant memory.

    Costs are summed as Decimals and written as strings only in a summary.
    """

    def __init__(self) -> None:
        self.total = ModelTotals()
        self.by_model: dict[str, ModelTotals] = {}
        self.cost = Decimal(0)
        self.model_cost: dict[str, Decimal] = {}
        self.statuses: Counter[str] = Counter({status: 0 for status in STATUSES})

    def add(self, line: LedgerLine) -> None:
        cost = Decimal(line.cost_usd)
        _count(self.total, line)
        model = line.model
        totals = self.by_model.get(model)
        if totals is None:
            totals = self.by_model[model] = ModelTotals()
            self.model_cost[model] = Decimal(0)
        _count(totals, line)
        self.cost += cost
        self.model_cost[model] += cost
        self.statuses[line.status] += 1

    def summary(
        self, role: str, allocation_usd: Decimal | None, prices_date: str | None
    ) -> LedgerSummary:
        total = self.total
        return LedgerSummary(
            role=role,
            requests=total.requests,
            statuses=dict(sorted(self.statuses.items())),
            input_tokens=total.input_tokens,
            cached_input_tokens=total.cached_input_tokens,
            output_tokens=total.output_tokens,
            reasoning_tokens=total.reasoning_tokens,
            cost_usd=usd(self.cost),
            allocation_usd=None if allocation_usd is None else usd(allocation_usd),
            prices_date=prices_date,
            by_model={
                m: msgspec.structs.replace(t, cost_usd=usd(self.model_cost[m]))
                for m, t in sorted(self.by_model.items())
            },
        )


def summarize(
    lines: Iterable[LedgerLine],
    role: str,
    *,
    allocation_usd: Decimal | None = None,
    prices_date: str | None = None,
) -> LedgerSummary:
    """The summary of ``lines``: a pure function, so a rebuild gives the same bytes."""
    totals = _Totals()
    for line in lines:
        totals.add(line)
    return totals.summary(role, allocation_usd, prices_date)


def read_ledger(path: str | Path) -> list[LedgerLine]:
    """Every complete line of a ``ledger.jsonl``; a torn last line is left out.

    Raises:
        MeterError: a damaged line that is not the last.
    """
    decoder = msgspec.json.Decoder(LedgerLine)
    data = Path(path).read_bytes()
    chunks = data.split(b"\n")
    lines = []
    for number, chunk in enumerate(chunks, start=1):
        if not chunk:
            continue
        try:
            lines.append(decoder.decode(chunk))
        except msgspec.DecodeError as exc:
            if number == len(chunks):  # no newline after it: torn by a crash
                break
            raise MeterError(f"{path} line {number}: {exc}") from None
    return lines


def _truncate_torn_tail(path: Path) -> None:
    """Cut a last line that a crash left without its newline, so appends start clean."""
    with open(path, "rb+") as handle:
        data = handle.read()
        if data and not data.endswith(b"\n"):
            handle.truncate(data.rfind(b"\n") + 1)
            handle.flush()
            os.fsync(handle.fileno())


def attempt_holder(role: str, attempt_id: str, endpoint: str, model: str) -> str:
    """The holder a meter names when it reserves for one attempt (see :func:`lost_attempt`)."""
    return f"{role}:{attempt_id}:{endpoint}:{model}"


def lost_attempt(reservation: Reservation, role: Role, *, now: float) -> LedgerLine | None:
    """The ledger line of an attempt whose meter died while it was in flight.

    ``reservation`` is still open after a restart and names one of ``role``'s
    attempts as its holder: the request may have been sent and billed, so it is
    charged its reservation, and it started when it was reserved. None when the
    holder is not such an attempt.
    """
    parts = reservation.holder.split(":", 3)
    if len(parts) != 4 or parts[0] != role:
        return None
    _, attempt_id, endpoint, model = parts
    return LedgerLine(
        id=attempt_id,
        role=role,
        model=model,
        endpoint=endpoint,
        started=reservation.reserved_at,
        ended=now,
        status="lost",
        http_status=None,
        streamed=False,
        usage=None,
        cost_usd=reservation.amount,
        reservation_id=reservation.id,
        reserved_usd=reservation.amount,
        note="the meter process died with this attempt in flight; charged its reservation",
    )


def write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``: temp file, fsync, rename, directory fsync."""
    temp = path.with_name(f".{path.name}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    with open(fd, "wb") as handle:  # private, as every ledger file
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp, path)
    directory = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


class Ledger:
    """A role's ledger in ``directory``: append lines, rebuild the summary."""

    def __init__(
        self,
        directory: str | Path,
        role: Role,
        *,
        allocation_usd: Decimal | None = None,
        prices_date: str | None = None,
    ) -> None:
        self.directory = Path(directory)
        self.role = role
        self.allocation_usd = allocation_usd
        self.prices_date = prices_date
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / "ledger.jsonl"
        self.summary_path = self.directory / summary_name(role)
        self._encoder = msgspec.json.Encoder()
        self._totals = _Totals()  # running totals: memory stays flat however many lines
        if self.path.exists():
            _truncate_torn_tail(self.path)
            for line in read_ledger(self.path):
                self._totals.add(line)
        # Private (0600): a ledger holds every request's model, usage and spend.
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self._handle = open(fd, "ab")  # noqa: SIM115 - held for the ledger's life

    def append(self, line: LedgerLine) -> None:
        """Write one line and push it to the kernel (it survives the process dying)."""
        self._handle.write(self._encoder.encode(line) + b"\n")
        self._handle.flush()
        self._totals.add(line)

    def summary(self) -> LedgerSummary:
        """The summary of every line so far (equal to :func:`summarize` of the file)."""
        return self._totals.summary(self.role, self.allocation_usd, self.prices_date)

    def write_summary(self) -> LedgerSummary:
        """Fsync the lines, then rewrite the summary atomically."""
        os.fsync(self._handle.fileno())
        summary = self.summary()
        write_atomically(self.summary_path, encode_summary(summary))
        return summary

    def close(self) -> None:
        if not self._handle.closed:
            self.write_summary()
            self._handle.close()


def encode_summary(summary: LedgerSummary) -> bytes:
    return msgspec.json.format(msgspec.json.encode(summary), indent=2) + b"\n"
