"""``mw probe RUN_DIR``: the knowledge probe on a run's own records and checkpoints.

Every window's tests are played on that window's test version by the probe's
player (:mod:`._probe`): it looks the case up as the served episodes known to
that version did, takes the top action the method's knowledge ranks, and
finishes; the benchmark's verifier scores it. No model is called: the probe
costs $0, reads only what a method may read (the served episodes' records and
scores, the method's checkpoints), and works on a finished or a running
campaign (read only; a window whose checkpoint is not learned yet is skipped).

The method's knowledge, by method:

- ``mwm``, ``mwm-local``: the checkpoint's world model (``WorldModel.ranked``,
  what ``wm`` answers with); v0 has learned nothing and ranks nothing;
- ``slb:rag``: its retrieval's idea, the outcome of the most similar past
  case that scored 100 (BM25), over the episodes served before the version.

Scores are the benchmark's (``scoring.setting_scores``: 100 x the mean reward
per category); a test the player could not play counts 0 and is named in
``skipped`` with the reason. Only the scoring reads a test's category.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec

from mw_errors import ConfigError

from .._core import read_journal
from ._actors import UNSCORED
from ._probe import Lookups, Ranker, nearest_success_ranker, play_test, required_parameters
from ._run_report import WindowScores, window_scores
from ._scenario import Scenario, read_scenario
from ._schedule import Plan, plan
from ._spec import CAMPAIGN_RECORDS
from ._state import served_episode
from ._synthetic import is_synthetic
from ._worldmodel import Case, Served, WorldModel, case_of, parse_record
from .records import BlockLearned, EpisodeEnded, ServeLearnStarted

__all__ = [
    "PROBED_METHODS",
    "ProbeReport",
    "ProbeSkip",
    "ProbeWindow",
    "RunScores",
    "probe_run",
    "render_probe",
]


class ProbeWindow(msgspec.Struct, frozen=True):
    window: int
    version: int  # the checkpoint its tests were played on
    hidden: float | None
    fully_specified: float | None
    tests: int


class ProbeSkip(msgspec.Struct, frozen=True):
    task_id: str
    window: int
    reason: str


class ProbeReport(msgspec.Struct, frozen=True):
    """What ``mw probe --json`` prints (the contract of issue 28)."""

    method: str
    scenario: str
    hidden: float | None
    fully_specified: float | None
    windows: list[ProbeWindow]
    skipped: list[ProbeSkip]


class RunScores(msgspec.Struct, frozen=True):
    """The run's own test scores so far, to show beside the probe's."""

    hidden: float | None
    fully_specified: float | None
    windows: list[WindowScores]


# A version's knowledge: (its directory, the cases served before it) -> a ranker, or None.
Knowledge = Callable[[Path, Sequence[Case]], Ranker | None]


def _world_model(version_dir: Path, cases: Sequence[Case]) -> Ranker | None:
    if not (version_dir / "adapter.safetensors").is_file():
        return None  # v0: nothing learned yet
    return WorldModel.load(version_dir).ranked


def _nearest_success(version_dir: Path, cases: Sequence[Case]) -> Ranker | None:
    return nearest_success_ranker(cases) if cases else None


PROBED_METHODS: dict[str, Knowledge] = {
    "mwm": _world_model,
    "mwm-local": _world_model,
    "slb:rag": _nearest_success,
}


def probe_run(root: Path, *, dataset: Path | None = None) -> tuple[ProbeReport, RunScores]:
    """Probe the campaign in ``root``; the report, and the run's own test scores per window.

    ``dataset``: the scenario's export, where it is no longer where the run was
    started from.

    Raises:
        ConfigError: ``root`` holds no campaign that started, its scenario is mw's
            synthetic one, the method ranks no actions, or the dataset is gone.
    """
    records, began, knowledge = _probed_campaign(root)
    from ._slb import SlbScenario

    slb = SlbScenario(began.scenario)  # refused in one line without the package
    settings = began.settings or {}
    where = dataset or Path(str(settings.get("dataset") or ""))
    if not str(where) or not where.is_dir():
        raise ConfigError(
            f"the scenario's dataset {str(where) or '(not recorded)'} is not there",
            hint="pass --dataset DIR (slb export-data --out DIR writes it)",
        )
    scenario = read_scenario(where, began.scenario)
    schedule = plan(scenario, settings.get("train_split"), schedule=settings.get("schedule", "mw"))
    ended = {r.task_id: r for r in records if isinstance(r, EpisodeEnded)}
    versions = {0: root / began.tag / "checkout" / "versions" / "v0"}
    versions |= {
        r.version: root / began.tag / "checkout" / "versions" / r.digest
        for r in records
        if isinstance(r, BlockLearned)
    }
    served = _served(scenario, schedule, ended)
    player = _Player(slb)
    windows: list[ProbeWindow] = []
    skipped: list[ProbeSkip] = []
    rows: list[dict[str, Any]] = []
    for window in schedule.windows:
        tests = [t for t in scenario.test if t.window == window.window]
        version = window.test_version
        if version not in versions:
            reason = f"its checkpoint v{version} is not learned yet"
            skipped += [ProbeSkip(t.task_id, window.window, reason) for t in tests]
            continue
        known = [s for s in served if s.block < version]
        rank = knowledge(versions[version], [c for c in map(case_of, known) if c is not None])
        lookups = Lookups.learn([parse_record(s.record) for s in known])
        played = []
        for task in tests:
            reward, reason = player.play(task.task_id, rank, lookups)
            if reason:
                skipped.append(ProbeSkip(task.task_id, window.window, reason))
            played.append(player.row(task.task_id, reward))
        scores = slb.scoring.setting_scores(played)
        hidden, full = _rounded(scores["hidden"]), _rounded(scores["fully_specified"])
        windows.append(ProbeWindow(window.window, version, hidden, full, len(tests)))
        rows += played
    overall = slb.scoring.setting_scores(rows)
    report = ProbeReport(
        method=began.method,
        scenario=began.scenario,
        hidden=_rounded(overall["hidden"]),
        fully_specified=_rounded(overall["fully_specified"]),
        windows=windows,
        skipped=skipped,
    )
    tested = [
        {"phase": "test", "category": r.category, "reward": r.reward}
        for r in ended.values()
        if r.phase == "test"
    ]
    own = slb.scoring.setting_scores(tested)
    return report, RunScores(
        _rounded(own["hidden"]), _rounded(own["fully_specified"]), window_scores(records)
    )


def _probed_campaign(root: Path) -> tuple[list[Any], ServeLearnStarted, Knowledge]:
    """The journal's records of the campaign in ``root``, its start, and its method's knowledge.

    Raises:
        ConfigError: as :func:`probe_run`, before the scenario is read.
    """
    journal = root / "journal"
    if not journal.is_dir():
        raise ConfigError(
            f"{root} holds no campaign (no journal/)", hint="pass a run directory: $MW_RUNS/TAG"
        )
    records = [e.rec for e in read_journal(journal, CAMPAIGN_RECORDS)]
    began = next((r for r in records if isinstance(r, ServeLearnStarted)), None)
    if began is None:
        raise ConfigError(
            f"{root} holds no serve-and-learn campaign that started",
            hint="start one with mw serve-learn run (or launch.sh SCENARIO)",
        )
    if is_synthetic(began.scenario):
        raise ConfigError(
            f"the probe plays the benchmark's own scenarios, and {began.scenario} is mw's "
            "synthetic one",
            hint="probe a run of a real scenario (banking_l1, ...)",
        )
    knowledge = PROBED_METHODS.get(began.method)
    if knowledge is None:
        raise ConfigError(
            f"method {began.method!r} ranks no actions, so the probe cannot play its knowledge",
            hint=f"the probe plays runs of {', '.join(PROBED_METHODS)}",
        )
    return records, began, knowledge


def _served(scenario: Scenario, schedule: Plan, ended: dict[str, EpisodeEnded]) -> list[Served]:
    """What the campaign's learner was given: the scored serving episodes, by block."""
    cases = scenario.serving[: schedule.serving_total]
    served: list[Served] = []
    for block, end in enumerate(schedule.block_ends[: schedule.blocks]):
        for task in cases[schedule.block_start(block) : end]:
            found = ended.get(task.task_id)
            if found is not None and found.phase == "serving" and found.status not in UNSCORED:
                served.append(served_episode(task, found, block))
    return served


def _rounded(score: float | None) -> float | None:
    return None if score is None else round(score, 4)


class _Player:
    """The probe's player in the benchmark's own ``Env``, one at a time."""

    def __init__(self, slb: Any) -> None:
        self.slb = slb
        self.env = slb.agent.new_env(slb.bundle)
        self.required = required_parameters(self.env)

    def play(self, task_id: str, rank: Ranker | None, lookups: Lookups) -> tuple[float, str]:
        """The test's reward, and why it was not played ("" when it was)."""
        if rank is None:
            return 0.0, "the method has learned nothing by this version"
        played = play_test(self.env, self.slb.task(task_id), rank, lookups, self.required)
        if played.reward is None:
            return 0.0, played.skipped
        return played.reward, ""

    def row(self, task_id: str, reward: float) -> dict[str, Any]:
        """A test row as the benchmark's scoring reads it (only the scoring reads the category)."""
        return {
            "phase": "test",
            "category": self.slb.labels(task_id)["category"],
            "reward": reward,
        }


def render_probe(report: ProbeReport, run: RunScores) -> str:
    """The probe's figures as a table, beside the run's own test scores."""
    own = {w.window: w for w in run.windows}

    def shown(score: float | None) -> str:
        return "-" if score is None else f"{score:.1f}"

    lines = [
        f"{report.scenario}, {report.method}: the probe's scores (for $0) beside the run's own",
        "",
        "| window | version | tests | probe H | probe F | run H | run F |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for w in report.windows:
        mine = own.get(w.window)
        run_h = None if mine is None else mine.hidden
        run_f = None if mine is None else mine.fully_specified
        lines.append(
            f"| {w.window} | v{w.version} | {w.tests} | {shown(w.hidden)} | "
            f"{shown(w.fully_specified)} | {shown(run_h)} | {shown(run_f)} |"
        )
    total = sum(w.tests for w in report.windows)
    lines.append(
        f"| all | | {total} | {shown(report.hidden)} | {shown(report.fully_specified)} | "
        f"{shown(run.hidden)} | {shown(run.fully_specified)} |"
    )
    if report.skipped:
        reasons: dict[str, int] = {}
        for skip in report.skipped:
            reasons[skip.reason] = reasons.get(skip.reason, 0) + 1
        lines += ["", f"skipped {len(report.skipped)} tests (each counts 0):"]
        lines += [f"- {n} x {reason}" for reason, n in sorted(reasons.items(), key=lambda p: -p[1])]
    return "\n".join(lines) + "\n"
