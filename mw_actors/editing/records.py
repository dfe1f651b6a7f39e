"""The weight-editing campaign's journal records and receipts.

Records are tagged ``editing.*`` and follow the journal's evolution rules
(docs/design/editing.md): a tag never changes, new fields get defaults.

Every trial ends with exactly one :class:`TrialEnded`. A trial without one
(the process died mid-trial) reads as ``unknown``, never as success.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from .._core import Record
from ._grading import Fingerprint

__all__ = [
    "EDITING_RECORDS",
    "RECEIPT_SCHEMA_VERSION",
    "ArtifactHashes",
    "Comparison",
    "EditingEnded",
    "EditingStarted",
    "Outcome",
    "PolicyIntent",
    "Receipt",
    "TrialEnded",
    "TrialExported",
    "TrialGraded",
    "TrialRegraded",
    "TrialReserved",
    "TrialStarted",
    "TrialStep",
]

RECEIPT_SCHEMA_VERSION = 1
Outcome = Literal["completed", "failed", "budget_blocked", "cancelled", "unknown"]


class EditingStarted(Record, tag="editing.campaign_started", frozen=True):
    name: str
    labels: list[str]
    config_sha256: str
    backend: str
    isolated: bool
    local_trusted: bool
    trials: list[str]
    allocation_usd: str
    tolerance: float | None
    seed: int | None = None  # the config's WSM_SEED, if it has one


class TrialStarted(Record, tag="editing.trial_started", frozen=True):
    trial_id: str
    task: str
    arm: str
    index: int
    envelope_usd: str


class TrialReserved(Record, tag="editing.trial_reserved", frozen=True):
    trial_id: str
    reservation_id: str
    amount_usd: str


class TrialStep(Record, tag="editing.trial_step", frozen=True):
    """One tool call of a trial's editor (the script counts as one run_python)."""

    trial_id: str
    turn: int
    tool: str
    exit_code: int | None = None
    limits_hit: list[str] = []
    timed_out: bool = False
    duration: float = 0.0
    stdout_tail: str = ""
    stderr_tail: str = ""
    # What the call was given ({"code": ...} for run_python, {"script": ...} for the
    # scripted edit, {} for undo and finish) and the working weights' file hash before
    # and after it (None: no weights there). Absent from journals written before them.
    arguments: dict[str, Any] = {}
    before_sha256: str | None = None
    after_sha256: str | None = None


class PolicyIntent(Record, tag="editing.policy_intent", frozen=True):
    """A provider request, journaled (and fsynced) before it is sent."""

    trial_id: str
    turn: int
    idempotency_id: str
    request_sha256: str
    request_path: str


class TrialExported(Record, tag="editing.trial_exported", frozen=True):
    trial_id: str
    path: str  # relative to the run directory
    file_sha256: str
    payload_sha256: str
    size: int
    backend: str
    isolated: bool


class TrialGraded(Record, tag="editing.trial_graded", frozen=True):
    trial_id: str
    receipt: str  # relative to the run directory
    receipt_sha256: str


class TrialEnded(Record, tag="editing.trial_ended", frozen=True):
    """The trial's one terminal record."""

    trial_id: str
    outcome: Outcome
    reason: str | None = None
    spent_usd: str = "0"


class TrialRegraded(Record, tag="editing.trial_regraded", frozen=True):
    trial_id: str
    receipt: str
    receipt_sha256: str
    previous_sha256: str | None
    matches: bool | None  # None: there was no earlier grade to compare with


class EditingEnded(Record, tag="editing.campaign_ended", frozen=True):
    completed: int
    trials: int


EDITING_RECORDS: tuple[type[Record], ...] = (
    EditingStarted,
    TrialStarted,
    TrialReserved,
    TrialStep,
    PolicyIntent,
    TrialExported,
    TrialGraded,
    TrialEnded,
    TrialRegraded,
    EditingEnded,
)


class ArtifactHashes(msgspec.Struct, frozen=True, kw_only=True):
    path: str
    file_sha256: str
    payload_sha256: str
    size: int


class Comparison(msgspec.Struct, frozen=True, kw_only=True):
    """A regrade against the earlier grade's per-case results."""

    against_sha256: str
    tolerance: float | None
    cases: int
    mismatched: int
    max_abs_diff: float
    matches: bool


class Receipt(msgspec.Struct, frozen=True, kw_only=True):
    """What one grade of one artifact was, and everything it depended on."""

    schema_version: int = RECEIPT_SCHEMA_VERSION
    kind: Literal["grade", "regrade"]
    trial_id: str
    previous_sha256: str | None  # the receipt this one follows (regrades link back)
    inputs: dict[str, str]  # retained input file (relative path) -> sha256
    artifact: ArtifactHashes
    grader_version: str
    fingerprint: Fingerprint
    tolerance: float | None
    means: dict[str, float]
    cases: dict[str, int]
    tokens: int
    scores: str  # relative path of the per-case scores (restricted)
    scores_sha256: str
    comparison: Comparison | None = None
