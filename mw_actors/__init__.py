"""mw_actors: a supervised actor runtime for long LLM-agent campaigns.

Embed it in an asyncio or trio program::

    async with mw_actors.open_runtime(journal="runs/x/journal") as rt:
        ref = await rt.spawn(mw_actors.ChildSpec(id="worker", start=Worker))
        await ref.ask("ping")

This namespace holds the actor vocabulary: the runtime, actors and their
references, supervisors and their specs, exits, clocks and errors. The rest
lives in namespaces of its own:

- ``mw_actors.journal``: the journal, its records and the views rebuilt from it;
- ``mw_actors.metering``: wire meters as actors and the budget they reserve from
  (it loads the HTTP stack; ``import mw_actors`` does not);
- ``mw_actors.serve_learn``, ``mw_actors.editing``, ``mw_actors.daemon`` and
  ``mw_actors.provider``: the campaigns, the daemon and the local provider.
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

from . import journal as journal  # the namespace, loaded with the package
from ._core import (
    BRUTAL_KILL,
    IGNORE,
    Actor,
    ActorContext,
    ActorRef,
    AutoShutdown,
    Backoff,
    ChildInfo,
    ChildSpec,
    Clock,
    Exit,
    ExitError,
    ExitIgnored,
    ExitKilled,
    ExitLost,
    ExitNormal,
    ExitReason,
    ExitShutdown,
    Host,
    Mailbox,
    MailboxStatistics,
    Overflow,
    ProcessActor,
    Restart,
    RetryLater,
    Runtime,
    Strategy,
    Supervisor,
    SupervisorRef,
    SupervisorSpec,
    SupervisorStatistics,
    SystemClock,
    VirtualClock,
    fail_after,
    move_on_after,
    observe_runtimes,
    open_runtime,
    sleep,
    supervisor,
)
from ._public import public_module as _public_module
from ._tags import TAG_PATTERN, check_scenario, check_tag

__all__ = [
    "BRUTAL_KILL",
    "IGNORE",
    "TAG_PATTERN",
    "Actor",
    "ActorContext",
    "ActorExited",
    "ActorRef",
    "AskTimeout",
    "AutoShutdown",
    "Backoff",
    "ChildInfo",
    "ChildSpec",
    "Clock",
    "ConfigError",
    "Exit",
    "ExitError",
    "ExitIgnored",
    "ExitKilled",
    "ExitLost",
    "ExitNormal",
    "ExitReason",
    "ExitShutdown",
    "Host",
    "JournalCorrupt",
    "JournalError",
    "JournalFatal",
    "JournalSchemaError",
    "Mailbox",
    "MailboxClosed",
    "MailboxFull",
    "MailboxStatistics",
    "MwError",
    "Overflow",
    "ProcessActor",
    "Restart",
    "RestartIntensityExceeded",
    "RetryLater",
    "Runtime",
    "RuntimeClosed",
    "StartFailed",
    "Strategy",
    "Supervisor",
    "SupervisorError",
    "SupervisorRef",
    "SupervisorSpec",
    "SupervisorStatistics",
    "SystemClock",
    "VirtualClock",
    "check_scenario",
    "check_tag",
    "fail_after",
    "move_on_after",
    "observe_runtimes",
    "open_runtime",
    "sleep",
    "supervisor",
]

_public_module(globals(), __all__, __name__)

# Where each name that left this namespace lives now.
_MOVED = {
    "ActorExit": "journal",
    "ActorSpawn": "journal",
    "ActorView": "journal",
    "Entry": "journal",
    "FileOps": "journal",
    "Journal": "journal",
    "JournalHeader": "journal",
    "JournalStatistics": "journal",
    "Projection": "journal",
    "Record": "journal",
    "SCHEMA_VERSION": "journal",
    "SupervisionView": "journal",
    "SupervisorEscalate": "journal",
    "SupervisorGiveUp": "journal",
    "SupervisorRestart": "journal",
    "SupervisorRetryLater": "journal",
    "open_journal": "journal",
    "read_journal": "journal",
    "rebuild": "journal",
    "replay": "journal",
    "BUDGET_RECORDS": "metering",
    "BudgetReclaimed": "metering",
    "BudgetReserved": "metering",
    "BudgetReserver": "metering",
    "BudgetSettled": "metering",
    "MeterActor": "metering",
    "MeterPlace": "metering",
    "MeterStats": "metering",
    "ReserverClient": "metering",
    "rebuild_budget": "metering",
    "run_meter": "metering",
    "start_meter": "metering",
}


def __getattr__(name: str) -> object:
    """``mw_actors.metering`` on first use (it loads the HTTP stack); a moved name, told."""
    if name == "metering":
        import importlib

        return importlib.import_module(f"{__name__}.metering")
    if name in _MOVED:
        raise AttributeError(f"mw_actors.{name} moved: import it from mw_actors.{_MOVED[name]}")
    raise AttributeError(f"module 'mw_actors' has no attribute {name!r}")
