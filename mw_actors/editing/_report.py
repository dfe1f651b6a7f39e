"""``wsm benchmark report``: a pure function of a run's retained evidence.

It reads the journal, the receipts and the exports' hashes, and nothing
else: no model, no original input, no provider, no torch. It verifies every
checkpoint and grade against the hashes recorded for it and refuses a run
that was tampered with. Rebuilding it gives the same bytes, because it holds
nothing that was not retained (no clock, no path outside the run).

The exported report holds partition means only: never a case's text or its
per-case score.
"""

from __future__ import annotations

import hashlib
from decimal import Decimal
from pathlib import Path
from typing import Any

import msgspec

from mw_errors import EvidenceError, IntegrityError

from .._core import Entry, read_journal
from .._hashing import file_sha256
from .._reserver import BUDGET_RECORDS, BudgetReserved, BudgetSettled
from ._layout import RunLayout
from .records import (
    EDITING_RECORDS,
    EditingEnded,
    EditingStarted,
    Receipt,
    TrialEnded,
    TrialExported,
    TrialGraded,
    TrialRegraded,
    TrialStarted,
    TrialStep,
)

__all__ = [
    "REPORT_SCHEMA_VERSION",
    "ArmSummary",
    "Report",
    "StepReport",
    "TrialReport",
    "build_report",
    "load_receipt",
    "read_run",
    "render_json",
]

REPORT_SCHEMA_VERSION = 1


class ReceiptRef(msgspec.Struct, frozen=True, kw_only=True):
    kind: str
    path: str
    sha256: str
    means: dict[str, float]
    matches: bool | None = None


class StepReport(msgspec.Struct, frozen=True, kw_only=True):
    """One tool call of a trial, as the walkthrough steps through it."""

    turn: int
    tool: str  # run_python | undo | finish (or none | rejected | invalid: a policy's misstep)
    arguments: dict[str, Any]  # {"code": ...}, {"script": ...} or {}
    result: str  # "exit code 0", "timed out", "restored the original weights", ...
    output: str  # the last line the program printed (stdout, else stderr), if any
    before_sha256: str | None  # the working weights' file hash before the call
    after_sha256: str | None  # and after it


class TrialReport(msgspec.Struct, frozen=True, kw_only=True):
    trial_id: str
    task: str
    arm: str
    index: int
    outcome: str  # completed | failed | budget_blocked | cancelled | unknown
    reason: str | None
    backend: str | None
    isolated: bool | None
    steps: int
    task_loss: float | None
    regression_loss: float | None
    file_sha256: str | None
    payload_sha256: str | None
    receipts: list[ReceiptRef]
    envelope_usd: str | None
    spent_usd: str | None
    step_log: list[StepReport] = []  # every tool call, in order


class ArmSummary(msgspec.Struct, frozen=True, kw_only=True):
    trials: int
    graded: int
    mean_task_loss: float | None
    mean_regression_loss: float | None


class Checks(msgspec.Struct, frozen=True, kw_only=True):
    tolerance: float | None
    scripted_worse_than_baseline: bool | None
    agent_restores_baseline: bool | None


class Budget(msgspec.Struct, frozen=True, kw_only=True):
    allocation_usd: str
    reserved_usd: str
    spent_usd: str


class Report(msgspec.Struct, frozen=True, kw_only=True):
    schema_version: int = REPORT_SCHEMA_VERSION
    campaign: str
    labels: list[str]
    config_sha256: str
    backend: str
    isolated: bool
    local_trusted: bool
    finished: bool
    outcomes: dict[str, int]
    trials: list[TrialReport]
    arms: dict[str, ArmSummary]
    checks: Checks
    budget: Budget
    seed: int | None = None  # the trials' WSM_SEED (a grid cell's seed), if the config set one


class RunEvidence(msgspec.Struct, frozen=True):
    layout: RunLayout
    entries: list[Entry]
    started: EditingStarted


def read_run(run: Path) -> RunEvidence:
    """The journal of a run directory.

    Raises:
        EvidenceError: ``run`` is not a weight-editing run directory.
    """
    layout = RunLayout(run)
    if not layout.journal.is_dir():
        raise EvidenceError(
            f"{run} is not a weight-editing run: it has no journal/",
            hint="pass the --output directory of `wsm benchmark run`",
        )
    entries = read_journal(layout.journal, [*BUDGET_RECORDS, *EDITING_RECORDS])
    started = next((e.rec for e in entries if isinstance(e.rec, EditingStarted)), None)
    if started is None:
        raise EvidenceError(f"{run}: the journal never recorded the campaign's start")
    return RunEvidence(layout, entries, started)


def load_receipt(layout: RunLayout, relative: str, sha256: str) -> Receipt:
    """A receipt, checked against the hash its journal record holds.

    Raises:
        IntegrityError: the receipt is missing or was changed.
    """
    path = layout.root / relative
    try:
        data = path.read_bytes()
    except OSError:
        raise IntegrityError(f"receipt {path} is missing") from None
    if hashlib.sha256(data).hexdigest() != sha256:
        raise IntegrityError(f"receipt {path} was changed after it was written")
    return msgspec.json.decode(data, type=Receipt)


def _verify_export(layout: RunLayout, exported: TrialExported) -> None:
    path = layout.root / exported.path
    if not path.is_file():
        raise IntegrityError(f"the export of {exported.trial_id} ({path}) is missing")
    if file_sha256(path) != exported.file_sha256:
        raise IntegrityError(
            f"the export of {exported.trial_id} ({path}) does not match its recorded hash",
            hint="the checkpoint was changed after the run; restore it from the original copy",
        )


def _verify_scores(layout: RunLayout, receipt: Receipt) -> None:
    path = layout.root / receipt.scores
    if path.is_file() and file_sha256(path) != receipt.scores_sha256:
        raise IntegrityError(f"the per-case scores {path} do not match their receipt")


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def build_report(run: Path) -> Report:
    """Rebuild the report of a run from its retained evidence.

    Raises:
        EvidenceError: ``run`` is not a run directory.
        IntegrityError: a checkpoint, receipt or grade changed after it was recorded.
    """
    evidence = read_run(run)
    layout, started = evidence.layout, evidence.started
    by_trial: dict[str, list[object]] = {t: [] for t in started.trials}
    finished = False
    reserved_total, settled_total = Decimal(0), Decimal(0)
    for entry in evidence.entries:
        record = entry.rec
        trial_id = getattr(record, "trial_id", None)
        if trial_id in by_trial:
            by_trial[trial_id].append(record)
        elif isinstance(record, EditingEnded):
            finished = True
        elif isinstance(record, BudgetReserved):
            reserved_total += Decimal(record.amount)
        elif isinstance(record, BudgetSettled):
            settled_total += Decimal(record.actual)
    trials = [_trial(layout, trial_id, records) for trial_id, records in by_trial.items()]
    arms: dict[str, ArmSummary] = {}
    for arm in dict.fromkeys(t.arm for t in trials):
        mine = [t for t in trials if t.arm == arm]
        graded = [t for t in mine if t.task_loss is not None and t.outcome == "completed"]
        arms[arm] = ArmSummary(
            trials=len(mine),
            graded=len(graded),
            mean_task_loss=_mean([t.task_loss for t in graded if t.task_loss is not None]),
            mean_regression_loss=_mean(
                [t.regression_loss for t in graded if t.regression_loss is not None]
            ),
        )
    outcomes: dict[str, int] = {}
    for t in trials:
        outcomes[t.outcome] = outcomes.get(t.outcome, 0) + 1
    return Report(
        campaign=started.name,
        labels=list(started.labels),
        config_sha256=started.config_sha256,
        backend=started.backend,
        isolated=started.isolated,
        local_trusted=started.local_trusted,
        finished=finished,
        outcomes=dict(sorted(outcomes.items())),
        trials=trials,
        arms=arms,
        checks=_checks(arms, started.tolerance),
        budget=Budget(
            allocation_usd=started.allocation_usd,
            reserved_usd=format(reserved_total, "f"),
            spent_usd=format(settled_total, "f"),
        ),
        seed=started.seed,
    )


def _within(a: float, b: float, tolerance: float | None) -> bool:
    return a == b if tolerance is None else abs(a - b) <= tolerance


def _checks(arms: dict[str, ArmSummary], tolerance: float | None) -> Checks:
    def loss(arm: str) -> float | None:
        summary = arms.get(arm)
        return summary.mean_task_loss if summary is not None else None

    base, scripted, agent = loss("baseline"), loss("scripted"), loss("agent")
    return Checks(
        tolerance=tolerance,
        scripted_worse_than_baseline=None if base is None or scripted is None else scripted > base,
        agent_restores_baseline=None
        if base is None or agent is None
        else _within(agent, base, tolerance),
    )


def _trial(layout: RunLayout, trial_id: str, records: list[object]) -> TrialReport:
    started = next((r for r in records if isinstance(r, TrialStarted)), None)
    exported = next((r for r in records if isinstance(r, TrialExported)), None)
    ended = next((r for r in records if isinstance(r, TrialEnded)), None)
    task, arm, index = trial_id.split(".")
    if exported is not None:
        _verify_export(layout, exported)
    receipts: list[ReceiptRef] = []
    first: Receipt | None = None
    for record in records:
        if isinstance(record, TrialGraded | TrialRegraded):
            receipt = load_receipt(layout, record.receipt, record.receipt_sha256)
            if exported is not None and receipt.artifact.file_sha256 != exported.file_sha256:
                raise IntegrityError(f"receipt {record.receipt} grades another artifact")
            _verify_scores(layout, receipt)
            first = first or receipt
            receipts.append(
                ReceiptRef(
                    kind=receipt.kind,
                    path=record.receipt,
                    sha256=record.receipt_sha256,
                    means=receipt.means,
                    matches=record.matches if isinstance(record, TrialRegraded) else None,
                )
            )
    return TrialReport(
        trial_id=trial_id,
        task=task,
        arm=arm,
        index=int(index),
        outcome=ended.outcome if ended is not None else "unknown",
        reason=ended.reason if ended is not None else "no terminal record: the run stopped here",
        backend=exported.backend if exported is not None else None,
        isolated=exported.isolated if exported is not None else None,
        steps=sum(isinstance(r, TrialStep) for r in records),
        task_loss=first.means.get("private") if first is not None else None,
        regression_loss=first.means.get("regression") if first is not None else None,
        file_sha256=exported.file_sha256 if exported is not None else None,
        payload_sha256=exported.payload_sha256 if exported is not None else None,
        receipts=receipts,
        envelope_usd=started.envelope_usd if started is not None else None,
        spent_usd=ended.spent_usd if ended is not None else None,
        step_log=[_step(r) for r in records if isinstance(r, TrialStep)],
    )


_RESULTS = {
    "undo": "restored the original weights",
    "finish": "finished",
    "none": "the policy called no tool",
    "rejected": "the policy called more than one tool",
    "invalid": "the policy's call was not a valid tool call",
}


def _step(step: TrialStep) -> StepReport:
    if step.tool in _RESULTS:
        result = _RESULTS[step.tool]
    elif step.timed_out:
        result = "timed out"
    else:
        result = f"exit code {step.exit_code}"
        if step.limits_hit:
            result += f", limits hit: {', '.join(step.limits_hit)}"
    lines = (step.stdout_tail.strip() or step.stderr_tail.strip()).splitlines()
    return StepReport(
        turn=step.turn,
        tool=step.tool,
        arguments=dict(step.arguments),
        result=result,
        output=lines[-1][:300] if lines else "",
        before_sha256=step.before_sha256,
        after_sha256=step.after_sha256,
    )


def render_json(report: Report) -> bytes:
    """The report as JSON bytes: stable field order, two-space indent, a final newline."""
    return msgspec.json.format(msgspec.json.encode(report), indent=2) + b"\n"
