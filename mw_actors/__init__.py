"""mw_actors: a supervised actor runtime for long LLM-agent campaigns.

Embed it in an asyncio or trio program::

    async with mw_actors.open_runtime(journal="runs/x/journal") as rt:
        ref = await rt.spawn(mw_actors.ChildSpec(id="worker", start=Worker))
        await ref.ask("ping")
"""

from mw_errors import (
    ActorExited,
    AskTimeout,
    ConfigError,
    JournalCorrupt,
    JournalError,
    JournalFatal,
    JournalSchemaError,
    MailboxClosed,
    MailboxFull,
    MwError,
    RestartIntensityExceeded,
    RuntimeClosed,
    StartFailed,
    SupervisorError,
)

from ._core._actor import IGNORE, Actor, ActorContext, ActorRef, Exit
from ._core._clock import Clock, SystemClock, VirtualClock, fail_after, move_on_after, sleep
from ._core._fileops import FileOps
from ._core._journal import (
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
from ._core._mailbox import Mailbox, MailboxStatistics, Overflow
from ._core._process import ProcessActor
from ._core._records import (
    ActorExit,
    ActorSpawn,
    ExitError,
    ExitIgnored,
    ExitKilled,
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
from ._core._runtime import Runtime, open_runtime
from ._core._spec import (
    BRUTAL_KILL,
    AutoShutdown,
    Backoff,
    ChildSpec,
    Restart,
    RetryLater,
    Strategy,
    SupervisorSpec,
)
from ._core._supervisor import (
    ChildInfo,
    Supervisor,
    SupervisorRef,
    SupervisorStatistics,
    supervisor,
)
from ._core._views import ActorView, SupervisionView

__all__ = [
    "BRUTAL_KILL",
    "IGNORE",
    "SCHEMA_VERSION",
    "Actor",
    "ActorContext",
    "ActorExit",
    "ActorExited",
    "ActorRef",
    "ActorSpawn",
    "ActorView",
    "AskTimeout",
    "AutoShutdown",
    "Backoff",
    "ChildInfo",
    "ChildSpec",
    "Clock",
    "ConfigError",
    "Entry",
    "Exit",
    "ExitError",
    "ExitIgnored",
    "ExitKilled",
    "ExitNormal",
    "ExitReason",
    "ExitShutdown",
    "FileOps",
    "Journal",
    "JournalCorrupt",
    "JournalError",
    "JournalFatal",
    "JournalHeader",
    "JournalSchemaError",
    "JournalStatistics",
    "Mailbox",
    "MailboxClosed",
    "MailboxFull",
    "MailboxStatistics",
    "MwError",
    "Overflow",
    "ProcessActor",
    "Projection",
    "Record",
    "Restart",
    "RestartIntensityExceeded",
    "RetryLater",
    "Runtime",
    "RuntimeClosed",
    "StartFailed",
    "Strategy",
    "SupervisionView",
    "Supervisor",
    "SupervisorError",
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
    "move_on_after",
    "open_journal",
    "open_runtime",
    "read_journal",
    "rebuild",
    "replay",
    "sleep",
    "supervisor",
]
