"""``wsm benchmark run``: the campaign as actors under the runtime's supervisors.

::

    root (one_for_one)
     ├─ reserver                 the cumulative allocation (journaled budget)
     └─ campaign (one_for_all)
          ├─ grader              runs one grader process per request
          └─ scheduler           the trials, one after another (temporary: no retry)

For each trial the scheduler reserves its envelope (or records
``budget_blocked``), runs the editor in a new sandbox, takes the export out
once the sandbox has ended, hashes it, has the grader grade it, writes the
receipt, and ends the trial with exactly one :class:`TrialEnded`.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import msgspec

from meters import (
    Blocked,
    Budget,
    LocalReserver,
    MeterConfig,
    Reserver,
    encode_summary,
    read_ledger,
    reserve_waiting,
    summarize,
    usd,
    write_atomically,
)
from mw_errors import (
    ConfigError,
    FingerprintMismatch,
    GradingFailed,
    IntegrityError,
    MwError,
    SandboxUnavailable,
)
from sandbox import Limits, SandboxConfig, open_sandbox
from sandbox import self_test as sandbox_self_test

from .._core import (
    Actor,
    ActorContext,
    ActorRef,
    ChildSpec,
    Journal,
    SupervisorRef,
    SupervisorSpec,
    get_logger,
)
from .._hashing import file_sha256, payload_sha256
from .._lifecycle import Lifecycle, Stage, run_kind
from .._metering import ledger_lines, start_meter
from .._reserver import BUDGET_RECORDS
from ._actions import load_actions
from ._config import Grading, Loaded, Trial
from ._datasets import read_cases, split
from ._editors import EditContext, run_agent, run_scripted
from ._grading import GradeAnswer, GradeRequest, GradeResult
from ._layout import RunLayout
from ._policy import run_policy
from ._preflight import check_runtime, load_checked_policy, preflight, trial_envelope
from .records import (
    EDITING_RECORDS,
    ArtifactHashes,
    EditingEnded,
    EditingStarted,
    Receipt,
    TrialEnded,
    TrialExported,
    TrialGraded,
    TrialReserved,
    TrialStarted,
)

__all__ = ["CampaignOptions", "grader_answer", "prepare_run", "run_campaign", "write_receipt"]

# How long a trial waits for envelopes in flight (another cell's) to settle: their lease.
ENVELOPE_WAIT_SECONDS = 900.0
log = get_logger("mw.editing")


@dataclass(frozen=True)
class CampaignOptions:
    """What the command line decided; nothing below reads the environment."""

    local_trusted: bool = False
    bwrap: Path | None = None
    grader_argv: tuple[str, ...] = (sys.executable, "-m", "mw_actors.editing.grader")
    omp_num_threads: str | None = None
    git_commit: str = "unknown"
    python: str = sys.executable
    grader_timeout: float = 1800.0
    secrets: Mapping[str, str] = field(default_factory=dict, repr=False)

    @property
    def backend(self) -> str:
        """The sandbox the trials' editors run in."""
        return "local-trusted" if self.local_trusted else "bwrap"

    def grader_env(self, threads: int) -> dict[str, str]:
        omp = self.omp_num_threads or str(threads)
        return {"OMP_NUM_THREADS": omp, "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}


def _copy(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
    target.chmod(0o644)


def prepare_run(loaded: Loaded, output: Path) -> RunLayout:
    """Verify the inputs and lay out a new run directory.

    Raises:
        ConfigError: ``output`` exists (there is no continuation), or an input is unsound.
        IntegrityError: an input file changed since it was pinned.
    """
    if output.exists():
        raise ConfigError(
            f"output directory {output} already exists; a run never continues or retries",
            hint="pass a new --output directory",
        )
    preflight(loaded)
    layout = RunLayout(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.mkdir(mode=0o700)  # private: its traces hold prompts and spend
    _copy(loaded.path, layout.config)
    student = loaded.resolve(loaded.config.student.path)
    for name in ("config.json", "tokenizer.json"):
        _copy(student / name, layout.student / name)
    layout.public.mkdir()
    layout.restricted.mkdir(mode=0o700)
    for dataset in loaded.config.datasets:
        parts = split(read_cases(loaded.resolve(dataset.file.path)), dataset)
        encode = msgspec.json.encode
        public = b"".join(encode(case) + b"\n" for case in parts["public"])
        (layout.public / f"{dataset.task}.jsonl").write_bytes(public)
        for name in ("private", "regression"):
            target = layout.partition(dataset.task, name)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(b"".join(encode(case) + b"\n" for case in parts[name]))
    layout.program.mkdir()
    for arm in loaded.config.arms:
        if arm.script is not None:
            _copy(loaded.resolve(arm.script.path), layout.program / "script.py")
    return layout


_ERRORS: dict[str, type[MwError]] = {
    cls.code: cls for cls in (FingerprintMismatch, IntegrityError, GradingFailed, ConfigError)
}


def grader_answer(returncode: int, stdout: bytes, stderr: bytes) -> GradeResult:
    """Decode what a grader process answered.

    Raises:
        GradingFailed: the process failed or answered nonsense.
        FingerprintMismatch, IntegrityError, ConfigError: what the grader refused, re-raised.
    """
    try:
        answer = msgspec.json.decode(stdout, type=GradeAnswer)
    except msgspec.DecodeError:
        last = stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
        raise GradingFailed(f"the grader exited {returncode}: {last[0]}") from None
    if answer.result is None:
        cls = _ERRORS.get(answer.error_code or "", GradingFailed)
        raise cls(answer.error or "the grader failed without saying why")
    return answer.result


async def run_grader(
    argv: tuple[str, ...], env: dict[str, str], request: GradeRequest, stderr: Path, timeout: float
) -> GradeResult:
    """Grade in a separate process; keep its stderr under ``restricted/``."""
    stderr.parent.mkdir(parents=True, exist_ok=True)
    with anyio.fail_after(timeout):
        done = await anyio.run_process(
            list(argv), input=msgspec.json.encode(request), env=env, check=False
        )
    await anyio.Path(stderr).write_bytes(done.stderr)
    return grader_answer(done.returncode, done.stdout, done.stderr)


class GradeJob(msgspec.Struct, frozen=True):
    request: GradeRequest
    stderr: str
    threads: int


class Grader(Actor[GradeJob]):
    """Runs the grader process for each request, one at a time.

    A grade that fails is an answer, not a crash: the error goes back to the
    asker, and the grader stays up for the next trial.
    """

    def __init__(self, options: CampaignOptions) -> None:
        self.options = options

    async def handle(self, job: GradeJob) -> GradeResult | MwError:
        try:
            return await run_grader(
                self.options.grader_argv,
                self.options.grader_env(job.threads),
                job.request,
                Path(job.stderr),
                self.options.grader_timeout,
            )
        except MwError as exc:
            return exc
        except TimeoutError:
            return GradingFailed(f"the grader ran past {self.options.grader_timeout} s")


def retained_inputs(layout: RunLayout, task: str) -> dict[str, Path]:
    """The run's own copies a grade of ``task`` depends on, by relative path."""
    paths = [
        layout.config,
        layout.student / "config.json",
        layout.student / "tokenizer.json",
        layout.partition(task, "private"),
        layout.partition(task, "regression"),
    ]
    return {layout.relative(p): p for p in paths}


def grade_request(
    layout: RunLayout,
    grading: Grading,
    trial_id: str,
    task: str,
    artifact: ArtifactHashes,
    scores: Path,
    *,
    omp_num_threads: str | None,
    git_commit: str,
) -> GradeRequest:
    parts = {n: layout.partition(task, n) for n in ("private", "regression")}
    return GradeRequest(
        trial_id=trial_id,
        model_config=str(layout.student / "config.json"),
        tokenizer=str(layout.student / "tokenizer.json"),
        weights=str(layout.root / artifact.path),
        weights_sha256=artifact.file_sha256,
        partitions={n: str(p) for n, p in parts.items()},
        partition_sha256={n: file_sha256(p) for n, p in parts.items()},
        max_tokens_per_case=grading.max_tokens_per_case,
        threads=grading.threads,
        omp_num_threads=omp_num_threads,
        git_commit=git_commit,
        scores_out=str(scores),
    )


def write_receipt(layout: RunLayout, receipt: Receipt) -> tuple[str, str]:
    """Write a receipt next to the trial's earlier ones; return (relative path, sha256)."""
    _, path = layout.next_receipt(receipt.trial_id, receipt.kind)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = msgspec.json.format(msgspec.json.encode(receipt), indent=2) + b"\n"
    write_atomically(path, data)
    return layout.relative(path), hashlib.sha256(data).hexdigest()


class TrialScheduler(Actor[Any]):
    """Runs the schedule once, then exits; it never retries a trial."""

    def __init__(
        self,
        loaded: Loaded,
        layout: RunLayout,
        options: CampaignOptions,
        *,
        reserver: Reserver,
        grader: ActorRef[GradeJob],
        meters: SupervisorRef,
        finished: Finished,
    ) -> None:
        self.loaded = loaded
        self.reserver = reserver  # the campaign's budget (or a grid's)
        self.meters = meters  # where a trial's policy meter runs: the tree's root
        self.grader = grader
        self.layout = layout
        self.options = options
        self.finished = finished
        self.policy = load_checked_policy(loaded)
        self.backend = options.backend

    async def init(self, ctx: ActorContext) -> object:
        self.ctx = ctx
        journal = ctx.journal
        assert journal is not None, "the editing campaign always runs with a journal"
        self.journal: Journal = journal
        return None

    async def run(self, ctx: ActorContext) -> None:
        completed = 0
        for trial in self.loaded.trials():
            completed += await self._trial(trial) == "completed"
        self.finished.completed = completed

    async def terminate(self, ctx: ActorContext, reason: object, interrupted: bool) -> None:
        self.finished.event.set()

    async def _trial(self, trial: Trial) -> str:
        envelope = trial_envelope(self.loaded, trial.arm, self.policy)
        await self.journal.append(
            TrialStarted(
                trial_id=trial.id,
                task=trial.task,
                arm=trial.arm,
                index=trial.index,
                envelope_usd=usd(envelope),
            )
        )
        reservation: str | None = None
        if envelope > 0:
            # Another cell's envelope in flight may settle for less: wait for it, not refuse.
            outcome = await reserve_waiting(
                self.reserver, envelope, trial.id, wait_seconds=ENVELOPE_WAIT_SECONDS
            )
            if isinstance(outcome, Blocked):
                reason = (
                    f"needs {outcome.requested} USD, {outcome.remaining} USD of the "
                    "allocation remains"
                )
                await self._end(trial, "budget_blocked", reason)
                return "budget_blocked"
            reservation = outcome.id
            await self.journal.append(
                TrialReserved(
                    trial_id=trial.id, reservation_id=outcome.id, amount_usd=usd(envelope)
                )
            )
        self.spent = Decimal(0)
        try:
            artifact = await self._edit(trial, envelope)
            await self._grade(trial, artifact)
        except MwError as exc:
            log.warning("trial_failed", trial=trial.id, error=exc.render())
            await self._end(trial, "failed", exc.render(), self.spent, reservation)
            return "failed"
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                reason = "the campaign was stopped"
                await self._end(trial, "cancelled", reason, self.spent, reservation)
            raise
        except Exception as exc:  # a bug: still exactly one terminal record, then crash
            reason = f"internal error: {type(exc).__name__}: {exc}"
            await self._end(trial, "failed", reason, self.spent, reservation)
            raise
        await self._end(trial, "completed", None, self.spent, reservation)
        return "completed"

    async def _end(
        self,
        trial: Trial,
        outcome: Any,
        reason: str | None,
        spent: Decimal = Decimal(0),
        reservation: str | None = None,
    ) -> None:
        if reservation is not None:
            await self.reserver.settle(reservation, spent)
        await self.journal.append(
            TrialEnded(trial_id=trial.id, outcome=outcome, reason=reason, spent_usd=usd(spent))
        )

    def _sandbox_config(self, trial: Trial) -> SandboxConfig:
        limits = self.loaded.config.limits
        inputs = (str(self.layout.student), str(self.layout.public), str(self.layout.program))
        return SandboxConfig(
            scratch=str(self.layout.scratch(trial.id)),
            inputs=inputs,
            limits=Limits(
                wall_seconds=limits.wall_seconds, cpu_seconds=int(limits.wall_seconds) + 1
            ),
        )

    async def _policy_edit(self, ctx: EditContext, trial: Trial, envelope: Decimal) -> None:
        """Run the LLM policy through a meter of its own, capped at the trial's envelope."""
        policy = self.policy
        assert policy is not None
        assert self.loaded.prices is not None
        ledger_dir = self.layout.policy(trial.id) / "ledger"
        config = MeterConfig(
            role="host",
            upstream=policy.endpoint,
            prices=self.loaded.prices,
            ledger_dir=ledger_dir,
            api_key=self.options.secrets.get(policy.credential_env),
            allocation_usd=envelope,
        )
        # The trial's meter is an actor of the runtime, for this trial only (temporary:
        # removed when it stops; stopping it writes and settles every attempt in flight).
        meter_id = f"policy-meter-{trial.id}"
        reserver = LocalReserver(Budget(envelope))
        place = await start_meter(self.meters, meter_id, config, reserver, restart="temporary")
        try:
            await run_policy(
                ctx,
                policy,
                f"http://127.0.0.1:{place.port}",
                turns=min(self.loaded.config.limits.policy_turns, policy.max_turns),
                output_tokens=self.loaded.config.limits.output_tokens,
                record_dir=self.layout.policy(trial.id),
                run_root=self.layout.root,
            )
        finally:
            with anyio.CancelScope(shield=True), contextlib.suppress(KeyError):
                await self.meters.terminate_child(meter_id)  # gone already if it crashed
            lines = ledger_lines(ledger_dir / "ledger.jsonl")
            self.spent = Decimal(summarize(lines, "host").cost_usd)

    async def _edit(self, trial: Trial, envelope: Decimal) -> ArtifactHashes:
        original = self.loaded.resolve(self.loaded.config.student.path) / "model.safetensors"
        sandbox = open_sandbox(self.backend, self._sandbox_config(trial), bwrap=self.options.bwrap)
        async with sandbox:
            ctx = EditContext(
                trial_id=trial.id,
                sandbox=sandbox,
                original=original,
                journal=self.journal,
                python=self.options.python,
                threads=self.loaded.config.grading.threads,
                seed=self.loaded.config.seed,
            )
            await ctx.restore()
            if trial.arm == "scripted":
                await run_scripted(ctx, "inputs/program/script.py")
            elif trial.arm == "agent" and self.policy is not None:
                await self._policy_edit(ctx, trial, envelope)
            elif trial.arm == "agent":
                ref = self.loaded.config.runtime.actions
                assert ref is not None, "a checked config has actions or a policy"
                actions = load_actions(self.loaded.resolve(ref.path)).actions
                await run_agent(ctx, actions, self.loaded.config.limits.policy_turns)
            [exported] = await sandbox.export(["model.safetensors"])
        # The sandbox has ended: nothing can change the file now. Take it out of scratch.
        target = self.layout.export(trial.id)
        target.parent.mkdir(parents=True)
        os.replace(exported.host_path, target)
        os.chown(target, os.geteuid(), os.getegid())
        target.chmod(0o444)
        file_digest = await anyio.to_thread.run_sync(file_sha256, target)
        if file_digest != exported.sha256:
            raise IntegrityError(f"the export of {trial.id} changed after the sandbox ended")
        artifact = ArtifactHashes(
            path=self.layout.relative(target),
            file_sha256=file_digest,
            payload_sha256=await anyio.to_thread.run_sync(payload_sha256, target),
            size=exported.size,
        )
        await self.journal.append(
            TrialExported(
                trial_id=trial.id,
                path=artifact.path,
                file_sha256=artifact.file_sha256,
                payload_sha256=artifact.payload_sha256,
                size=artifact.size,
                backend=sandbox.backend,
                isolated=sandbox.isolated,
            )
        )
        return artifact

    async def _grade(self, trial: Trial, artifact: ArtifactHashes) -> None:
        number, _ = self.layout.next_receipt(trial.id, "grade")
        scores = self.layout.scores(trial.id, number)
        request = grade_request(
            self.layout,
            self.loaded.config.grading,
            trial.id,
            trial.task,
            artifact,
            scores,
            omp_num_threads=self.options.omp_num_threads,
            git_commit=self.options.git_commit,
        )
        threads = self.loaded.config.grading.threads
        result: GradeResult | MwError = await self.grader.ask(
            GradeJob(request, str(scores.with_suffix(".stderr")), threads), timeout=None
        )
        if isinstance(result, MwError):
            raise result
        inputs = retained_inputs(self.layout, trial.task)
        receipt = Receipt(
            kind="grade",
            trial_id=trial.id,
            previous_sha256=None,
            inputs={name: file_sha256(path) for name, path in inputs.items()},
            artifact=artifact,
            grader_version=result.grader_version,
            fingerprint=result.fingerprint,
            tolerance=self.loaded.config.grading.tolerance,
            means=result.means,
            cases=result.cases,
            tokens=result.tokens,
            scores=self.layout.relative(scores),
            scores_sha256=result.scores_sha256,
        )
        path, digest = write_receipt(self.layout, receipt)
        await self.journal.append(
            TrialGraded(trial_id=trial.id, receipt=path, receipt_sha256=digest)
        )


async def probe_sandbox(options: CampaignOptions) -> None:
    """Fail closed: refuse the run unless the sandbox proves its isolation and runs Python.

    The backend is trusted only after its self-test (a probe that tries the network,
    the system's files, root's home and its privileges) passed here: a bubblewrap that
    ignores its flags would run every edit unisolated and record it as isolated.

    Raises:
        SandboxUnavailable: it cannot (the reason is in the message).
    """
    await sandbox_self_test("bwrap", bwrap=options.bwrap)
    with tempfile.TemporaryDirectory(prefix="mw-probe-") as temp:
        config = SandboxConfig(scratch=str(Path(temp) / "scratch"))
        async with open_sandbox("bwrap", config, bwrap=options.bwrap) as sandbox:
            result = await sandbox.exec([options.python, "-c", "import safetensors"])
        if not result.ok:
            raise SandboxUnavailable(
                f"the bwrap sandbox could not run {options.python}: "
                f"exit {result.exit_code}, {result.stderr.strip()[-200:]}"
            )


async def run_campaign(
    loaded: Loaded,
    output: Path,
    options: CampaignOptions,
    *,
    budget: Reserver | None = None,
) -> RunLayout:
    """Run every trial of ``loaded`` into the new directory ``output``.

    ``budget``, if given, is what the trials reserve their envelopes from instead
    of the campaign's own reserver: a grid's one budget, shared by its cells.

    Raises:
        ConfigError: the output exists, an input is unsound, or the runtime cannot run.
        SandboxUnavailable: isolation was asked for and cannot start.
        IntegrityError: an input changed since it was pinned.
    """
    check_runtime(loaded)
    if loaded.config.runtime.backend == "local" and not options.local_trusted:
        raise ConfigError(
            "runtime.backend is 'local', which runs untrusted edits without isolation",
            hint="pass --local-trusted to accept that, or set runtime.backend to 'bwrap'",
        )
    if await anyio.Path(output).exists():
        raise ConfigError(
            f"output directory {output} already exists; a run never continues or retries",
            hint="pass a new --output directory",
        )
    if not options.local_trusted:
        await probe_sandbox(options)
    layout = prepare_run(loaded, output)
    await run_kind(_Editing(loaded, layout, options), budget=budget)
    return layout


@dataclass
class Finished:
    """How the trial scheduler ended.

    ``event`` is set when it stops; ``completed`` counts the trials that completed,
    once it has run them all (None if it stopped before).
    """

    event: anyio.Event = field(default_factory=anyio.Event)
    completed: int | None = None


class _Editing(Lifecycle[Finished]):
    """An editing campaign's steps under :func:`run_kind`.

    It never resumes: a run that stopped keeps no end record, and its report says so.
    """

    def __init__(self, loaded: Loaded, layout: RunLayout, options: CampaignOptions) -> None:
        self.loaded, self.layout, self.options = loaded, layout, options
        self.root, self.journal = layout.root, layout.journal
        self.records, self.allocation = [*BUDGET_RECORDS, *EDITING_RECORDS], loaded.allocation
        # The campaign supervisor: the grader, then the trial scheduler (started once the
        # grader is up). A failure of either ends the campaign: trials never retry.
        self.campaign = SupervisorSpec(
            strategy="one_for_all",
            intensity=0,
            period=1,
            children=[ChildSpec(id="grader", start=lambda: Grader(options))],
        )

    async def started(self, stage: Stage) -> None:
        config, options = self.loaded.config, self.options
        await stage.tree.journal.append(
            EditingStarted(
                name=config.name,
                labels=list(config.labels),
                config_sha256=self.loaded.sha256,
                backend=options.backend,
                isolated=options.backend == "bwrap",
                local_trusted=options.local_trusted,
                trials=[t.id for t in self.loaded.trials()],
                allocation_usd=usd(self.loaded.allocation),
                tolerance=config.grading.tolerance,
                seed=config.seed,
            )
        )

    async def run(self, stage: Stage) -> Finished:
        tree, finished = stage.tree, Finished()
        campaign = await tree.campaign()
        grader = await campaign.child("grader")

        def scheduler() -> TrialScheduler:
            return TrialScheduler(
                self.loaded,
                self.layout,
                self.options,
                reserver=tree.budget,
                grader=grader,
                meters=tree.runtime.root,
                finished=finished,
            )

        await campaign.start_child(ChildSpec(id="scheduler", start=scheduler, restart="temporary"))
        await finished.event.wait()
        return finished

    async def ended(self, stage: Stage, result: Finished) -> None:
        if result.completed is None:  # the scheduler crashed: no end record
            return
        # The spend summary first: an end record vouches for it.
        await anyio.to_thread.run_sync(_write_wire_ledger, self.loaded, self.layout)
        trials = len(self.loaded.trials())
        await stage.tree.journal.append(EditingEnded(completed=result.completed, trials=trials))


def _write_wire_ledger(loaded: Loaded, layout: RunLayout) -> None:
    """``wire_ledger.json``: the host role's spend over every trial's ledger lines."""
    lines = []
    for path in sorted((layout.root / "trials").glob("*/policy/ledger/ledger.jsonl")):
        lines.extend(read_ledger(path))
    summary = summarize(
        lines,
        "host",
        allocation_usd=loaded.allocation,
        prices_date=loaded.prices.date if loaded.prices else None,
    )
    write_atomically(layout.root / "wire_ledger.json", encode_summary(summary))
