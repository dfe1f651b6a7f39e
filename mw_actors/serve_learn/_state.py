"""What a campaign's actors share, and how a journal restores it.

:class:`Shared` holds the scenario, the schedule, the method, the versions
learned so far (:class:`Versions`) and every episode's terminal record.
:func:`restore` rebuilds it from the journal after a crash or a stop, which
both a campaign's resume and manual test mode use.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import anyio
import anyio.abc

from .._core import ActorRef, Entry, Journal, read_journal
from ._methods import Method, Session
from ._play import Player
from ._players import make_player
from ._protocol import episode_record
from ._scenario import Scenario, Task
from ._schedule import Plan
from ._slots import Slots
from ._spec import CAMPAIGN_RECORDS, CampaignSpec, RunDir
from ._worldmodel import Served
from .records import (
    BlockLearned,
    EpisodeEnded,
    EpisodeStarted,
    WindowTested,
)

__all__ = [
    "Shared",
    "Versions",
    "end_interrupted",
    "ended_unknown",
    "restore",
    "served_episode",
]


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

    def __init__(
        self, spec: CampaignSpec, run: RunDir, scenario: Scenario, schedule: Plan, method: Method
    ) -> None:
        self.spec = spec
        self.run = run
        self.scenario = scenario
        self.plan = schedule
        self.method = method
        # A real scenario plays in ServeLearnBench's own package and loop; the synthetic
        # one in mw's, from its export.
        self.player: Player = make_player(spec.dataset, spec.scenario)
        self.method.bind(self.player)  # refused here: a benchmark method on the synthetic one
        self.versions = Versions(run.checkout / "versions" / "v0")
        self.ended: dict[str, EpisodeEnded] = {}
        self._served: dict[str, Served] = {}
        self.learned: set[int] = set()
        self.tested: set[int] = set()
        self.blocked = anyio.Event()
        self.overhead: list[float] = []  # per episode: wall minus queueing and provider time
        self.stream_done = anyio.Event()
        self.learner_done = anyio.Event()
        self.learner: ActorRef[int] | None = None  # the learner actor, once it started
        self.session: Session | None = None  # the learner session, where a meter serves it
        self.waiter_done = anyio.Event()
        if schedule.blocks == 0:  # nothing to learn
            self.learner_done.set()
        self.window_tested: dict[int, anyio.Event] = {
            w.window: anyio.Event() for w in schedule.windows
        }
        # ``concurrency`` episodes in flight in all, serving and tests together; a freed
        # slot goes to a waiting serving episode first (the stream is the critical path).
        self.slots = Slots(spec.concurrency)

    def served(self, task: Task, ended: EpisodeEnded, block: int) -> Served:
        """What a learner is given of a served episode (its record text, made once)."""
        found = self._served.get(task.task_id)
        if found is None or found.block != block:
            found = served_episode(task, ended, block)
            self._served[task.task_id] = found
        return found

    def records(self) -> dict[str, str]:
        """The episode records made so far, by task id: the results file reuses them."""
        return {task_id: served.record for task_id, served in self._served.items()}

    def serving_blocks(self) -> list[list[Task]]:
        if not self.plan.learns:
            return []
        cases = self.scenario.serving[: self.plan.serving_total]
        ends = self.plan.block_ends
        return [cases[self.plan.block_start(k) : end] for k, end in enumerate(ends)]


def served_episode(task: Task, ended: EpisodeEnded, block: int) -> Served:
    """What a learner is given of one served episode of ``block``: its record, as MWM reads it."""
    return Served(
        block=block,
        task_id=task.task_id,
        timestamp=task.timestamp,
        instruction=task.instruction,  # as the agent received it
        reward=ended.reward,
        record=episode_record(task.instruction, ended.trace, ended.reward),
    )


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


def restore(
    shared: Shared, entries: Sequence[Entry] | None = None, *, checkpoints: RunDir | None = None
) -> list[EpisodeStarted]:
    """Rebuild what the journal says was done (resume after a crash or a stop).

    ``entries``: the run's journal as already read (:class:`._checks.Prepared`); None
    reads it here. ``checkpoints`` is the run whose learned versions are used, when
    it is not ``shared.run`` itself (manual test mode tests a campaign's versions and
    keeps its own episodes); its journal is only read.

    Returns the episodes that were started and never ended.
    """
    source = checkpoints or shared.run
    if checkpoints is not None:
        shared.versions = Versions(checkpoints.checkout / "versions" / "v0")
        if checkpoints.journal.is_dir():
            for entry in read_journal(checkpoints.journal, CAMPAIGN_RECORDS):
                if isinstance(entry.rec, BlockLearned):
                    shared.versions.publish(entry.rec.version, source.version_dir(entry.rec.digest))
    if entries is None:
        if not shared.run.journal.is_dir():
            return []
        entries = read_journal(shared.run.journal, CAMPAIGN_RECORDS)
    started: list[EpisodeStarted] = []
    for entry in entries:
        rec = entry.rec
        if isinstance(rec, EpisodeStarted):
            started.append(rec)
        elif isinstance(rec, EpisodeEnded):
            shared.ended[rec.task_id] = rec
        elif isinstance(rec, BlockLearned):
            shared.learned.add(rec.block)
            shared.versions.publish(rec.version, source.version_dir(rec.digest))
        elif isinstance(rec, WindowTested):
            shared.tested.add(rec.window)
    if len(shared.learned) == shared.plan.blocks:  # every block was learned before the stop
        shared.learner_done.set()
    return [s for s in started if s.task_id not in shared.ended]


async def end_interrupted(shared: Shared, journal: Journal, started: list[EpisodeStarted]) -> None:
    """Journal ``unknown`` for each episode a dead process left in flight: never re-run."""
    tasks = {t.task_id: t for t in [*shared.scenario.serving, *shared.scenario.test]}
    for rec in started:
        ended = ended_unknown(tasks[rec.task_id], rec)
        await journal.append(ended)
        shared.ended[rec.task_id] = ended
