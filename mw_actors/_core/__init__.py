"""The engine room: actors, mailboxes, supervisors, clock, journal, processes.

The rest of mw imports the engine from here, never from its private files.
Users import it from ``mw_actors`` (the actor vocabulary) and its namespaces.
"""

from ._actor import (
    IGNORE,
    Actor,
    ActorContext,
    ActorRef,
    Exit,
    Host,
    ReplySlot,
)
from ._clock import (
    Clock,
    SystemClock,
    VirtualClock,
    fail_after,
    move_on_after,
    sleep,
)
from ._fileops import (
    FileOps,
)
from ._journal import (
    SCHEMA_VERSION,
    Entry,
    Journal,
    JournalStatistics,
    Projection,
    open_journal,
    read_journal,
    rebuild,
    replay,
)
from ._log import (
    get_logger,
)
from ._mailbox import (
    Mailbox,
    MailboxStatistics,
    Overflow,
)
from ._process import (
    ProcessActor,
)
from ._records import (
    ActorExit,
    ActorSpawn,
    ExitError,
    ExitIgnored,
    ExitKilled,
    ExitLost,
    ExitNormal,
    ExitReason,
    ExitShutdown,
    JournalHeader,
    Record,
    SupervisorEscalate,
    SupervisorGiveUp,
    SupervisorRestart,
    SupervisorRetryLater,
)
from ._runtime import (
    Runtime,
    observe_runtimes,
    open_runtime,
)
from ._spec import (
    BRUTAL_KILL,
    AutoShutdown,
    Backoff,
    ChildSpec,
    Restart,
    RetryLater,
    Strategy,
    SupervisorSpec,
)
from ._supervisor import (
    ChildInfo,
    Supervisor,
    SupervisorRef,
    SupervisorStatistics,
    supervisor,
)
from ._views import (
    ActorView,
    SupervisionView,
    journal_summary,
)

__all__ = [
    "BRUTAL_KILL",
    "IGNORE",
    "SCHEMA_VERSION",
    "Actor",
    "ActorContext",
    "ActorExit",
    "ActorRef",
    "ActorSpawn",
    "ActorView",
    "AutoShutdown",
    "Backoff",
    "ChildInfo",
    "ChildSpec",
    "Clock",
    "Entry",
    "Exit",
    "ExitError",
    "ExitIgnored",
    "ExitKilled",
    "ExitLost",
    "ExitNormal",
    "ExitReason",
    "ExitShutdown",
    "FileOps",
    "Host",
    "Journal",
    "JournalHeader",
    "JournalStatistics",
    "Mailbox",
    "MailboxStatistics",
    "Overflow",
    "ProcessActor",
    "Projection",
    "Record",
    "ReplySlot",
    "Restart",
    "RetryLater",
    "Runtime",
    "Strategy",
    "SupervisionView",
    "Supervisor",
    "SupervisorEscalate",
    "SupervisorGiveUp",
    "SupervisorRef",
    "SupervisorRestart",
    "SupervisorRetryLater",
    "SupervisorSpec",
    "SupervisorStatistics",
    "SystemClock",
    "VirtualClock",
    "fail_after",
    "get_logger",
    "journal_summary",
    "move_on_after",
    "observe_runtimes",
    "open_journal",
    "open_runtime",
    "read_journal",
    "rebuild",
    "replay",
    "sleep",
    "supervisor",
]
