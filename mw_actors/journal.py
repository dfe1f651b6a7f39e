"""The journal: append-only, fsynced records that survive ``kill -9``, and what reads them.

``open_journal`` appends (each record fsynced before ``append`` returns);
``read_journal`` and ``replay`` read a journal back, of the record types named;
``Projection`` and ``rebuild`` fold entries into views such as
``SupervisionView``. The runtime's own lifecycle records (``ActorSpawn``,
``ActorExit``, the supervisors' decisions) are here; campaigns add their own
``Record`` subclasses. See docs/design/actors.md.
"""

from __future__ import annotations

from ._core import (
    SCHEMA_VERSION,
    ActorExit,
    ActorSpawn,
    ActorView,
    Entry,
    FileOps,
    Journal,
    JournalHeader,
    JournalStatistics,
    Projection,
    Record,
    SupervisionView,
    SupervisorEscalate,
    SupervisorGiveUp,
    SupervisorRestart,
    SupervisorRetryLater,
    journal_summary,
    open_journal,
    read_journal,
    rebuild,
    replay,
)
from ._public import public_module as _public_module

__all__ = [
    "SCHEMA_VERSION",
    "ActorExit",
    "ActorSpawn",
    "ActorView",
    "Entry",
    "FileOps",
    "Journal",
    "JournalHeader",
    "JournalStatistics",
    "Projection",
    "Record",
    "SupervisionView",
    "SupervisorEscalate",
    "SupervisorGiveUp",
    "SupervisorRestart",
    "SupervisorRetryLater",
    "journal_summary",
    "open_journal",
    "read_journal",
    "rebuild",
    "replay",
]

_public_module(globals(), __all__, __name__)
