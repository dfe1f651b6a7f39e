"""``wsm benchmark regrade``: grade an artifact again and compare with its receipt.

Before the artifact is loaded, the retained inputs are checked against the
receipt's hashes and the grader checks the runtime fingerprint; either
difference refuses the regrade with a diff. The regrade never repeats an edit
or a provider request, and only appends: a new receipt linked to the one it
checks, and a ``TrialRegraded`` record. A trial whose grading was cut off gets
its missing grade this way; its earlier outcome stays as it was.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from mw_errors import ConfigError, FingerprintMismatch, IntegrityError

from .._core import open_journal
from .._hashing import file_sha256
from .._reserver import BUDGET_RECORDS
from ._campaign import CampaignOptions, grade_request, retained_inputs, run_grader, write_receipt
from ._config import BenchmarkConfig
from ._grading import Scores
from ._report import RunEvidence, load_receipt, read_run
from .records import (
    EDITING_RECORDS,
    ArtifactHashes,
    Comparison,
    Receipt,
    TrialExported,
    TrialGraded,
    TrialRegraded,
)

__all__ = ["RegradeOutcome", "compare_scores", "regrade"]


class RegradeOutcome(msgspec.Struct, frozen=True, kw_only=True):
    trial_id: str
    receipt: str
    receipt_sha256: str
    previous_sha256: str | None
    comparison: Comparison | None
    means: dict[str, float]


def compare_scores(old: Scores, new: Scores, tolerance: float | None, against: str) -> Comparison:
    """Compare per-case losses, exactly when ``tolerance`` is None."""
    cases = mismatched = 0
    worst = 0.0
    for name in sorted(set(old.partitions) | set(new.partitions)):
        before = {c.id: c for c in old.partitions.get(name, [])}
        after = {c.id: c for c in new.partitions.get(name, [])}
        for case_id in sorted(set(before) | set(after)):
            cases += 1
            a, b = before.get(case_id), after.get(case_id)
            if a is None or b is None or a.tokens != b.tokens:
                mismatched += 1
                continue
            diff = abs(a.loss - b.loss)
            worst = max(worst, diff)
            if (diff != 0.0) if tolerance is None else (diff > tolerance):
                mismatched += 1
    return Comparison(
        against_sha256=against,
        tolerance=tolerance,
        cases=cases,
        mismatched=mismatched,
        max_abs_diff=worst,
        matches=mismatched == 0,
    )


def _check_inputs(run: Path, frozen: dict[str, str]) -> None:
    diff = []
    for relative, digest in sorted(frozen.items()):
        path = run / relative
        now = file_sha256(path) if path.is_file() else "missing"
        if now != digest:
            diff.append(f"{relative}: {digest[:12]} -> {now[:12]}")
    if diff:
        raise FingerprintMismatch("the inputs differ from the receipt's: " + "; ".join(diff))


async def regrade(run: Path, trial_id: str, options: CampaignOptions) -> RegradeOutcome:
    """Regrade one trial's export against its latest receipt (or give it its missing grade).

    Raises:
        ConfigError: no such trial, or it has no export to grade.
        IntegrityError: the export, a receipt or the scores were changed.
        FingerprintMismatch: the inputs or the runtime differ from the receipt's.
        GradingFailed: the grader failed.
    """
    evidence = read_run(run)
    layout = evidence.layout
    exported, previous, previous_sha = _graded_so_far(evidence, run, trial_id)
    config = msgspec.json.decode(layout.config.read_bytes(), type=BenchmarkConfig)
    task = trial_id.split(".")[0]
    number, _ = layout.next_receipt(trial_id, "regrade")
    scores = layout.scores(trial_id, number)
    artifact = ArtifactHashes(
        path=exported.path,
        file_sha256=exported.file_sha256,
        payload_sha256=exported.payload_sha256,
        size=exported.size,
    )
    request = grade_request(
        layout,
        config.grading,
        trial_id,
        task,
        artifact,
        scores,
        omp_num_threads=options.omp_num_threads,
        git_commit=options.git_commit,
    )
    if previous is not None:
        request = msgspec.structs.replace(request, expect_fingerprint=previous.fingerprint)
    threads = config.grading.threads
    result = await run_grader(
        options.grader_argv,
        options.grader_env(threads),
        request,
        scores.with_suffix(".stderr"),
        options.grader_timeout,
    )
    tolerance = previous.tolerance if previous is not None else config.grading.tolerance
    comparison = None
    if previous is not None and previous_sha is not None:
        old = msgspec.json.decode((layout.root / previous.scores).read_bytes(), type=Scores)
        new = msgspec.json.decode(scores.read_bytes(), type=Scores)
        comparison = compare_scores(old, new, tolerance, previous_sha)
    inputs = retained_inputs(layout, task)
    receipt = Receipt(
        kind="regrade" if previous is not None else "grade",
        trial_id=trial_id,
        previous_sha256=previous_sha,
        inputs={name: file_sha256(path) for name, path in inputs.items()},
        artifact=artifact,
        grader_version=result.grader_version,
        fingerprint=result.fingerprint,
        tolerance=tolerance,
        means=result.means,
        cases=result.cases,
        tokens=result.tokens,
        scores=layout.relative(scores),
        scores_sha256=result.scores_sha256,
        comparison=comparison,
    )
    path, digest = write_receipt(layout, receipt)
    async with open_journal(
        layout.journal, record_types=[*BUDGET_RECORDS, *EDITING_RECORDS]
    ) as journal:
        await journal.append(
            TrialRegraded(
                trial_id=trial_id,
                receipt=path,
                receipt_sha256=digest,
                previous_sha256=previous_sha,
                matches=None if comparison is None else comparison.matches,
            )
        )
    return RegradeOutcome(
        trial_id=trial_id,
        receipt=path,
        receipt_sha256=digest,
        previous_sha256=previous_sha,
        comparison=comparison,
        means=result.means,
    )


def _graded_so_far(
    evidence: RunEvidence, run: Path, trial_id: str
) -> tuple[TrialExported, Receipt | None, str | None]:
    """The trial's export, checked against its hash; its latest receipt, checked, if any.

    Raises:
        ConfigError: no such trial, or it has no export to grade.
        IntegrityError: the export, the receipt's inputs or its scores were changed.
    """
    layout = evidence.layout
    if trial_id not in evidence.started.trials:
        known = ", ".join(evidence.started.trials)
        raise ConfigError(
            f"{run} has no trial {trial_id!r}; its trials are {known}",
            hint="trial ids read <task>.<arm>.<index>, e.g. completion.agent.0000",
        )
    records = [e.rec for e in evidence.entries if getattr(e.rec, "trial_id", None) == trial_id]
    exported = next((r for r in records if isinstance(r, TrialExported)), None)
    if exported is None:
        raise ConfigError(
            f"trial {trial_id} exported nothing, so there is nothing to grade",
            hint="its journal records say how it ended; a regrade never repeats an edit",
        )
    export = layout.root / exported.path
    if not export.is_file() or file_sha256(export) != exported.file_sha256:
        raise IntegrityError(
            f"the export of {trial_id} ({export}) does not match its recorded hash"
        )
    graded = [r for r in records if isinstance(r, TrialGraded | TrialRegraded)]
    previous: Receipt | None = None
    previous_sha: str | None = None
    if graded:
        previous_sha = graded[-1].receipt_sha256
        previous = load_receipt(layout, graded[-1].receipt, previous_sha)
        _check_inputs(layout.root, previous.inputs)
        if file_sha256(layout.root / previous.scores) != previous.scores_sha256:
            raise IntegrityError(
                f"the per-case scores {previous.scores} do not match their receipt"
            )
    return exported, previous, previous_sha
