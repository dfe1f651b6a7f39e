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
from functools import partial

import anyio

import meters
from mw_errors import ConfigError

from .._core._journal import Journal, open_journal, read_journal
from .._lock import campaign_lock
from ._campaign import (
    RECORDS,
    CampaignSpec,
    RunDir,
    Shared,
    Versions,
    _check_model,
    _episode,
    _prepare_scenario,
    acting_client,
    ended_unknown,
    probe_endpoints,
    start_upstream,
    write_outputs,
)
from ._methods import make_method
from ._records import BlockLearned, CampaignStarted, EpisodeEnded, EpisodeStarted

__all__ = ["ManualReport", "run_manual_tests"]


@dataclass(frozen=True)
class ManualReport:
    run: RunDir  # the manual run's own directory, ``<run>/manual``
    tested: list[int]  # windows tested now
    skipped: list[int]  # windows whose checkpoint does not exist yet
    earlier: list[int]  # windows an earlier manual run tested


async def run_manual_tests(spec: CampaignSpec) -> ManualReport:
    """Test every window whose checkpoint ``spec.tag``'s campaign has learned so far.

    Raises:
        ConfigError: no such campaign, or another manual test run holds it.
    """
    scenario, schedule = _prepare_scenario(spec)
    campaign = RunDir(spec.runs, spec.tag, spec.scenario, make_method(spec.method).name)
    if not campaign.journal.is_dir():
        raise ConfigError(
            f"{campaign.root} holds no campaign to test",
            hint="start it first: launch.sh SCENARIO (or mw serve-learn run)",
        )
    records = [e.rec for e in read_journal(campaign.journal, RECORDS)]
    began = next((r for r in records if isinstance(r, CampaignStarted)), None)
    if began is None or began.scenario != spec.scenario:
        raise ConfigError(
            f"{campaign.root} is not a {spec.scenario} campaign",
            hint="pass the scenario and MW_TAG the campaign was launched with",
        )
    # Test what the campaign learned, the way it learned it.
    spec = dataclasses.replace(spec, method=began.method, model=began.model)
    _check_model(spec, spec.model)
    await probe_endpoints(spec, [spec.model])  # before anything is written
    manual = RunDir(campaign.root, "manual", spec.scenario, make_method(spec.method).name)
    for path in (manual.evidence, manual.results.parent):
        path.mkdir(parents=True, exist_ok=True)
    with campaign_lock(manual.root):
        shared = Shared(spec, manual, scenario, schedule)
        # The campaign's checkpoints, as its journal says they are now (read only).
        shared.versions = Versions(campaign.checkout / "versions" / "v0")
        for rec in records:
            if isinstance(rec, BlockLearned):
                shared.versions.publish(rec.version, campaign.version_dir(rec.digest))
        async with open_journal(manual.journal, record_types=RECORDS) as journal:
            started: list[EpisodeStarted] = []
            for entry in read_journal(manual.journal, RECORDS):
                if isinstance(entry.rec, EpisodeStarted):
                    started.append(entry.rec)
                elif isinstance(entry.rec, EpisodeEnded):
                    shared.ended[entry.rec.task_id] = entry.rec
            by_id = {task.task_id: task for task in scenario.test}
            for rec in started:
                if rec.task_id not in shared.ended:  # in flight when an earlier run died
                    lost = ended_unknown(by_id[rec.task_id], rec)
                    await journal.append(lost)
                    shared.ended[rec.task_id] = lost
            tested, skipped, earlier = await _test_ready_windows(shared, journal)
    write_outputs(manual, spec)
    return ManualReport(manual, tested, skipped, earlier)


async def _test_ready_windows(
    shared: Shared, journal: Journal
) -> tuple[list[int], list[int], list[int]]:
    spec = shared.spec
    tested: list[int] = []
    skipped: list[int] = []
    earlier: list[int] = []
    async with anyio.create_task_group() as services:
        config = await start_upstream(spec, "host", shared.run.root, services)
        async with anyio.create_task_group() as metering:
            meter_port = await metering.start(partial(meters.serve_meter, config))
            async with acting_client(meter_port) as client:
                shared.client = client
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
                            tg.start_soon(
                                _episode, shared, journal, task, "test", window.test_version
                            )
                    tested.append(window.window)
            metering.cancel_scope.cancel()
        services.cancel_scope.cancel()
    return tested, skipped, earlier
