"""Manual test mode: test the windows whose checkpoint exists, while training goes on.

``launch.sh SCENARIO test`` (``mw serve-learn test``) runs beside a campaign
that may still be training. It reads the campaign's journal (never writes it),
and tests each window whose test version ``v(floor(p_w / 12))`` has been
learned, on exactly that version; a window whose checkpoint is missing is
skipped and reported. It keeps everything of its own under ``<run>/manual/``:
its journal (one terminal record per episode; an episode a killed run left in
flight ends ``unknown``), its host meter's ledger and the results JSONL, so it
never races the campaign's writers. Tests never update the method. Running it
again tests only the windows it has not tested yet.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import anyio

from mw_errors import ConfigError

from .._core import read_journal
from .._lifecycle import Lifecycle, Stage, run_kind
from ._checks import check_model, prepare_scenario, probe_endpoints
from ._episode import serve_episode
from ._methods import make_method
from ._outputs import write_outputs
from ._services import start_judge, start_upstream
from ._spec import CAMPAIGN_RECORDS, CampaignSpec, RunDir
from ._state import Shared, end_interrupted, restore
from .records import ServeLearnStarted

__all__ = ["ManualReport", "run_manual_tests"]


@dataclass(frozen=True)
class ManualReport:
    run: RunDir  # the manual run's own directory, ``<run>/manual``
    tested: list[int]  # windows tested now
    skipped: list[int]  # windows whose checkpoint does not exist yet
    earlier: list[int]  # windows an earlier manual run tested

    def describe(self) -> str:
        """What ``mw serve-learn test`` prints: each window's fate, the results, the score."""
        from ._score import score_file

        lines = [f"window {w}: tested now" for w in self.tested]
        lines += [f"window {w}: tested by an earlier manual run" for w in self.earlier]
        lines += [f"window {w}: its checkpoint is not learned yet, skipped" for w in self.skipped]
        lines += [f"results: {self.run.results}", score_file(self.run.results).line()]
        return "\n".join(lines)


async def run_manual_tests(spec: CampaignSpec) -> ManualReport:
    """Test every window whose checkpoint ``spec.tag``'s campaign has learned so far.

    Raises:
        ConfigError: no such campaign, or another manual test run holds it.
    """
    asked, method = spec.method, make_method(spec.method)
    scenario, schedule = prepare_scenario(spec, method)
    campaign = RunDir(spec.runs, spec.tag, spec.scenario, method.name)
    if not campaign.journal.is_dir():
        raise ConfigError(
            f"{campaign.root} holds no campaign to test",
            hint="start it first: launch.sh SCENARIO (or mw serve-learn run)",
        )
    records = [e.rec for e in read_journal(campaign.journal, CAMPAIGN_RECORDS)]
    began = next((r for r in records if isinstance(r, ServeLearnStarted)), None)
    if began is None or began.scenario != spec.scenario:
        raise ConfigError(
            f"{campaign.root} is not a {spec.scenario} campaign",
            hint="pass the scenario and MW_TAG the campaign was launched with",
        )
    # Test what the campaign learned, the way it learned it.
    judge_model = (began.settings or {}).get("judge_model", spec.judge_model)
    spec = dataclasses.replace(
        spec, method=began.method, model=began.model, judge_model=judge_model
    )
    models = [spec.model, spec.judge_model] if spec.judged else [spec.model]
    for model in models:
        check_model(spec, model)
    await probe_endpoints(spec, models)  # before anything is written
    if began.method != asked:  # the campaign's own method, as it learned
        method = make_method(began.method)
    manual = RunDir(campaign.root, "manual", spec.scenario, method.name)
    for path in (manual.evidence, manual.results.parent):
        path.mkdir(parents=True, exist_ok=True)
    shared = Shared(spec, manual, scenario, schedule, method)
    tested, skipped, earlier = await run_kind(_ManualTests(shared, campaign))
    return ManualReport(manual, tested, skipped, earlier)


Windows = tuple[list[int], list[int], list[int]]  # tested, skipped, tested earlier


class _ManualTests(Lifecycle[Windows]):
    """Manual test mode's steps under :func:`run_kind`: no start or end record of its own.

    One budget for every meter of the run (host, judge), kept by a reserver journaled
    with the run's episodes and rebuilt from its ledger, as a campaign's is.
    """

    def __init__(self, shared: Shared, campaign: RunDir) -> None:
        self.shared, self.learned = shared, campaign
        manual = shared.run
        self.root, self.journal, self.records = manual.root, manual.journal, CAMPAIGN_RECORDS
        self.allocation, self.ledger = shared.spec.allocation_usd, manual.root / "ledger.jsonl"

    async def started(self, stage: Stage) -> None:
        # The campaign's checkpoints, as its journal says they are now (read only); the
        # manual run's own episodes, from its own journal.
        shared = self.shared
        interrupted = await anyio.to_thread.run_sync(
            lambda: restore(shared, checkpoints=self.learned)
        )
        await end_interrupted(shared, stage.tree.journal, interrupted)

    async def run(self, stage: Stage) -> Windows:
        return await _test_ready_windows(self.shared, stage)

    def write_outputs(self, result: Windows) -> None:
        shared = self.shared
        write_outputs(shared.run, shared.spec, shared.method, shared.scenario, shared.records())


async def _test_ready_windows(shared: Shared, stage: Stage) -> Windows:
    spec, tree, services = shared.spec, stage.tree, stage.services
    journal = tree.journal
    tested: list[int] = []
    skipped: list[int] = []
    earlier: list[int] = []
    config = await start_upstream(spec, "host", shared.run.root, services)
    host = await tree.meter("host-meter", config)
    judge = await start_judge(spec, shared.run, services, tree)
    model = spec.wire_model(spec.model)
    async with shared.player.connected(
        host.port, model, spec.reasoning_effort, judge, spec.max_tokens
    ):
        for window in shared.plan.windows:
            tests = [t for t in shared.scenario.test if t.window == window.window]
            if tests and all(t.task_id in shared.ended for t in tests):
                earlier.append(window.window)
                continue
            if not shared.versions.ready(window.test_version).is_set():
                skipped.append(window.window)
                continue
            async with anyio.create_task_group() as tg:
                for task in tests:
                    tg.start_soon(serve_episode, shared, journal, task, "test", window.test_version)
            tested.append(window.window)
    return tested, skipped, earlier
