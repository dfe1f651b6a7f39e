"""Exit reasons and the runtime's journal records.

Records are frozen, tagged msgspec Structs. The tag (``kind``) is the record's
name in the journal; it never changes once released. New fields get defaults.
See docs/design/actors.md for the evolution rules.
"""

from __future__ import annotations

import traceback
from typing import ClassVar, Literal

import msgspec

__all__ = [
    "ActorExit",
    "ActorSpawn",
    "ExitError",
    "ExitIgnored",
    "ExitKilled",
    "ExitLost",
    "ExitNormal",
    "ExitReason",
    "ExitShutdown",
    "JournalHeader",
    "Record",
    "SupervisorEscalate",
    "SupervisorGiveUp",
    "SupervisorRestart",
    "SupervisorRetryLater",
]


class _Reason(msgspec.Struct, frozen=True, tag_field="type"):
    abnormal: ClassVar[bool] = False

    def __str__(self) -> str:
        return str(self.__struct_config__.tag)


class ExitNormal(_Reason, tag="normal", frozen=True):
    """The actor finished its work and returned."""


class ExitShutdown(_Reason, tag="shutdown", frozen=True):
    """The actor was told to stop (by its supervisor, or by raising ``Exit(shutdown)``)."""

    reason: str | None = None

    def __str__(self) -> str:
        return "shutdown" if self.reason is None else f"shutdown({self.reason})"


class ExitError(_Reason, tag="error", frozen=True):
    """The actor raised."""

    abnormal: ClassVar[bool] = True
    error_type: str
    message: str
    traceback: str = ""

    @classmethod
    def from_exception(cls, exc: BaseException) -> ExitError:
        tb = "".join(traceback.format_exception(exc)[-6:])
        return cls(error_type=type(exc).__qualname__, message=str(exc), traceback=tb)

    def __str__(self) -> str:
        return f"error({self.error_type}: {self.message})"


class ExitKilled(_Reason, tag="killed", frozen=True):
    """The supervisor cancelled the actor outright (brutal_kill, or shutdown timeout)."""

    abnormal: ClassVar[bool] = True


class ExitIgnored(_Reason, tag="ignored", frozen=True):
    """The actor's init answered ``IGNORE``: it was never started."""


class ExitLost(_Reason, tag="lost", frozen=True):
    """The process died while the actor ran; written when the journal is opened again."""

    abnormal: ClassVar[bool] = True


ExitReason = ExitNormal | ExitShutdown | ExitError | ExitKilled | ExitIgnored | ExitLost


class Record(msgspec.Struct, frozen=True, kw_only=True, tag_field="kind"):
    """Base of every journal record. Subclasses set ``tag="area.name"``."""


class JournalHeader(Record, tag="journal.header", frozen=True):
    """First line of every journal segment."""

    schema_version: int
    first_seq: int
    created_wall: float
    writer_pid: int


class ActorSpawn(Record, tag="actor.spawn", frozen=True):
    """A run of an actor begins. Exactly one ``actor.exit`` follows for the same run."""

    actor: str
    run: int
    supervisor: str


class ActorExit(Record, tag="actor.exit", frozen=True):
    """Terminal record of one actor run."""

    actor: str
    run: int
    reason: ExitReason
    uptime: float


class SupervisorRestart(Record, tag="supervisor.restart", frozen=True):
    """The supervisor decided to restart ``children`` after ``trigger`` exited."""

    supervisor: str
    trigger: str
    children: list[str]
    restarts_in_window: int
    delay: float


class SupervisorGiveUp(Record, tag="supervisor.give_up", frozen=True):
    """Restart intensity exceeded: the supervisor stops all its children."""

    supervisor: str
    trigger: str
    intensity: int
    period: float


class SupervisorEscalate(Record, tag="supervisor.escalate", frozen=True):
    """The supervisor exits abnormally, handing the failure to its parent."""

    supervisor: str
    parent: str
    reason: str


class SupervisorRetryLater(Record, tag="supervisor.retry_later", frozen=True):
    """Restart intensity exceeded, but the supervisor waits and tries again."""

    supervisor: str
    trigger: str
    delay: float


Durability = Literal["evidence", "info"]

CORE_RECORDS: tuple[type[Record], ...] = (
    JournalHeader,
    ActorSpawn,
    ActorExit,
    SupervisorRestart,
    SupervisorGiveUp,
    SupervisorEscalate,
    SupervisorRetryLater,
)
