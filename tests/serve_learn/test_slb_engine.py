"""Engine (a): a real scenario plays through the real ServeLearnBench package's own loop.

The set-up installs the package (Python >= 3.12) from ``../shared/vendor``; these
tests run the real banking_l1 through it, against the project's local provider
behind a real host meter. Without the package, a real scenario is refused with
how to install it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import meters
from mw_actors.serve_learn._slb import slb_available
from tests.processes import ROOT, mw

DATASET = ROOT / "tests" / "data" / "servelearnbench"  # the real banking_l1 export
VENDORED = ROOT.parent / "shared" / "vendor" / "servelearnbench"
needs_slb = pytest.mark.skipif(
    not slb_available(), reason="the servelearnbench package (Python >= 3.12) is not installed"
)

# Every field of ServeLearnBench's runner's rows (runner.Runner._episode), then mw's own.
RUNNER_FIELDS = ["scenario", "method", "model", "phase", "window", "timestamp", "task_id",
                 "tier", "family", "slice", "category", "reward", "answer_detail",
                 "instruction", "tokens", "judge_tokens", "trace"]  # fmt: skip


def _rows(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return lines[0]["config"], lines[1:]


def test_the_set_up_installed_the_package_where_it_can() -> None:
    """A Python 3.12 venv beside a vendored copy has the package (else the tests below skip)."""
    if sys.version_info < (3, 12) or not VENDORED.is_dir():
        pytest.skip("no Python 3.12 venv, or no vendored package beside the project")
    import servelearnbench

    assert Path(servelearnbench.__file__).parent.name == "servelearnbench"


def test_a_real_scenario_without_the_package_says_how_to_install_it(tmp_path: Path) -> None:
    for extra in ((), ("--check",)):
        done = subprocess.run(
            [sys.executable, "-m", "tests.serve_learn.without_child", "servelearnbench",
             "serve-learn", "run", "banking_l1", "--dataset", str(DATASET),
             "--runs", str(tmp_path), "--tag", "nopkg", *extra],
            cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert done.returncode == 2, done.stderr
        (line,) = done.stderr.splitlines()
        assert "servelearnbench package cannot be imported here" in line
        assert "Python >= 3.12" in line and "pip install" in line
        assert not (tmp_path / "nopkg").exists()


@needs_slb
def test_a_benchmark_method_on_the_synthetic_scenario_is_refused_by_the_check(
    tmp_path: Path,
) -> None:
    for extra in ((), ("--check",)):  # the check says what the run would: nothing starts
        done = mw("serve-learn", "run", "synthetic_l1", "--method", "slb:blind",
                  "--runs", str(tmp_path), "--tag", "mixed", *extra)  # fmt: skip
        assert done.returncode == 2, done.stdout
        (line,) = done.stderr.splitlines()
        assert "'slb:blind' runs on the benchmark's own scenarios" in line
        assert not (tmp_path / "mixed").exists()


@needs_slb
def test_a_method_that_does_not_learn_runs_the_test_sets_as_the_benchmarks_runner_does(
    tmp_path: Path,
) -> None:
    from servelearnbench import scenarios, scoring

    done = mw("serve-learn", "run", "banking_l1", "--method", "blind", "--dataset", str(DATASET),
              "--runs", str(tmp_path), "--tag", "b", env={"MW_MODEL": "local/scripted"},
              timeout=200)  # fmt: skip
    assert done.returncode == 0, done.stderr
    path = tmp_path / "b" / "task" / "results" / "banking_l1_blind.jsonl"
    config, rows = _rows(path)
    assert config["scenario"] == "banking_l1" and config["method"] == "blind"
    assert (config["max_tokens"], config["max_steps"], config["tool_budget"]) == (65536, 100, 50)
    bundle = scenarios.get_bundle("banking_l1")
    tests = {t.task_id for w in range(scenarios.n_windows(bundle)) for t in bundle["test_set"](w)}
    assert {r["phase"] for r in rows} == {"test"}  # no serving stream for blind
    assert {r["task_id"] for r in rows} == tests and len(rows) == len(tests)
    for row in rows:
        assert list(row)[: len(RUNNER_FIELDS)] == RUNNER_FIELDS
        assert "record" not in row  # only a learning method's serving rows carry one
        assert row["category"] == scoring.category("banking", row["slice"])
        assert row["tokens"]["calls"] == len(row["trace"]) >= 1
        assert row["trace"][-1]["kind"] == "finish" and row["status"] == "finished"
    rewards = [r["reward"] for r in rows]
    assert 0 < sum(rewards) < len(rewards)  # both outcomes occur
    # slb score and mw score give the same figures on the file mw wrote.
    assert _scores(path, tmp_path) == _slb_scores(path, tmp_path)


def _scores(path: Path, tmp_path: Path) -> tuple[Any, ...]:
    mine = subprocess.run([str(ROOT / ".venv" / "bin" / "mw"), "score", str(path), "--json"],
                          capture_output=True, text=True, check=True).stdout  # fmt: skip
    (setting,) = json.loads(mine)
    return setting["hidden"], setting["fully_specified"], setting["n_test"]


def _slb_scores(path: Path, tmp_path: Path) -> tuple[Any, ...]:
    out = tmp_path / "slb-score.json"
    subprocess.run([str(ROOT / ".venv" / "bin" / "slb"), "score", str(path), "--json", str(out)],
                   capture_output=True, text=True, check=True)  # fmt: skip
    ((_, cells),) = json.loads(out.read_text()).items()
    (setting,) = (v for k, v in cells.items() if k not in ("avg_h", "avg_f"))
    return setting["hidden"], setting["fully_specified"], setting["n_test"]


@needs_slb
def test_a_learning_methods_serving_rows_carry_the_packages_episode_record(
    tmp_path: Path,
) -> None:
    from servelearnbench import protocol

    done = mw("serve-learn", "run", "banking_l1", "--method", "mwm-local", "--dataset",
              str(DATASET), "--runs", str(tmp_path), "--tag", "m", "--train-split", "24",
              env={"MW_MODEL": "local/scripted"}, timeout=200)  # fmt: skip
    assert done.returncode == 0, done.stderr
    _, rows = _rows(tmp_path / "m" / "task" / "results" / "banking_l1_mwm-local.jsonl")
    serving = [r for r in rows if r["phase"] == "serving"]
    assert len(serving) == 24 and {r["checkpoint"] for r in serving} == {0, 1}
    for row in serving:
        assert row["record"] == protocol.episode_record(
            row["instruction"], row["trace"], row["reward"]
        )
        assert row["record"].endswith(protocol.score_line(row["reward"]))
    assert _scores(
        tmp_path / "m" / "task" / "results" / "banking_l1_mwm-local.jsonl", tmp_path
    ) == _slb_scores(tmp_path / "m" / "task" / "results" / "banking_l1_mwm-local.jsonl", tmp_path)
    tested = [r for r in rows if r["phase"] == "test"]
    assert tested and {r["checkpoint"] for r in tested} == {2}  # window 0's tests, on v2
    # The wm tool rode beside the benchmark's tools, answered by the version's adapter.
    assert all(any(s["name"] == "finish" for s in r["trace"]) for r in rows)


def _episodes(path: Path) -> dict[tuple[str, str], tuple[Any, ...]]:
    """Each episode's task, actions and reward, keyed by (phase, task id)."""
    _, rows = _rows(path)
    return {
        (r["phase"], r["task_id"]): (
            [(s["kind"], s["name"], json.dumps(s.get("args"), sort_keys=True)) for s in r["trace"]],
            r["reward"],
            r["tokens"]["calls"],
            r.get("n_retrieved"),
        )
        for r in rows
    }


def _slb_run(out: Path, scenario: str, method: str, *extra: str) -> None:
    """``slb run`` itself, against the project's provider in its own process (the same
    deterministic player, and judge, that mw's local provider runs)."""
    import threading

    from tests.processes import start_server, stop_server

    provider, url = start_server("provider", "--engine", "synthetic-host")
    for stream in (provider.stdout, provider.stderr):  # drained: a full pipe stalls it
        threading.Thread(target=stream.read, daemon=True).start()  # type: ignore[union-attr]
    judge = ("--judge-model", "local/scripted", "--judge-base-url", f"{url}/v1",
             "--judge-api-key-env", "") if scenario.startswith("pitch") else ()  # fmt: skip
    try:
        done = subprocess.run(
            [str(ROOT / ".venv" / "bin" / "slb"), "run", "--scenario", scenario,
             "--method", method, "--model", "local/scripted", "--base-url", f"{url}/v1",
             "--api-key-env", "", *judge, "--workers", "4", *extra, "--out", str(out)],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
    finally:
        stop_server(provider)


@needs_slb
@pytest.mark.slow
@pytest.mark.parametrize("method", ["blind", "oracle", "rag"])
def test_slb_run_and_mw_give_row_for_row_the_same_episodes(method: str, tmp_path: Path) -> None:
    """The benchmark's own runner and mw (on slb run's schedule), on the same deterministic
    player: the same rows, a learning method's serving stream included. RAG plays window 0
    only (its 84 stream episodes, then its tests): the smallest run that shows the point."""
    theirs = tmp_path / "slb.jsonl"
    windows, split = ("0", "84") if method == "rag" else ("0,1", "168")
    _slb_run(theirs, "banking_l1", method, "--windows", windows)
    done = mw("serve-learn", "run", "banking_l1", "--method", f"slb:{method}", "--dataset",
              str(DATASET), "--runs", str(tmp_path), "--tag", "m", "--train-split", split,
              "--schedule", "slb", env={"MW_MODEL": "local/scripted"}, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    ours = tmp_path / "m" / "task" / "results" / f"banking_l1_{method}.jsonl"
    mine, slbs = _episodes(ours), _episodes(theirs)
    assert len(slbs) == (41 + 84 if method == "rag" else 41 + 47)  # the tests (and stream)
    assert mine == slbs
    config, _ = _rows(ours)
    their_config, _ = _rows(theirs)
    for field in ("scenario", "method", "reasoning_effort", "max_tokens", "max_steps",
                  "tool_budget"):  # fmt: skip
        assert config[field] == their_config[field], field
    if method == "oracle":  # the oracle bulletin reached the prompts: it scores better
        assert sum(v[1] for v in mine.values()) > 0
    if method == "rag":  # past cases were retrieved, from the state of the right block
        assert config["block_size"] == their_config["block_size"] == 12
        assert sum(bool(v[3]) for v in mine.values()) > 60


@needs_slb
def test_a_pitch_scenarios_judge_is_metered_and_scores_as_slb_run_does(tmp_path: Path) -> None:
    """Every request of the verifier's LLM judge goes through the judge's own meter, is in
    its ledger and in the rows' judge_tokens; the rewards are slb run's on the same judge."""
    subprocess.run([str(ROOT / ".venv" / "bin" / "slb"), "export-data", "--scenario", "pitch_l1",
                    "--out", str(tmp_path / "data")], capture_output=True, check=True)  # fmt: skip
    done = mw("serve-learn", "run", "pitch_l1", "--dataset", str(tmp_path / "data"),
              "--runs", str(tmp_path / "runs"), "--tag", "p", "--method", "blind",
              env={"MW_MODEL": "local/scripted"}, timeout=200)  # fmt: skip
    assert done.returncode == 0, done.stderr
    run = tmp_path / "runs" / "p"
    _, rows = _rows(run / "task" / "results" / "pitch_l1_blind.jsonl")
    judge = meters.read_ledger(run / "judge" / "ledger.jsonl")
    host = meters.read_ledger(run / "ledger.jsonl")
    assert len(rows) == 96 and len(judge) == 96  # one checklist per pitch, each metered
    assert {(x.role, x.status) for x in judge} == {("judge", "ok")}
    assert [r["judge_tokens"]["calls"] for r in rows] == [1] * 96
    assert sum(r["judge_tokens"]["input"] for r in rows) == sum(x.input_tokens for x in judge)
    assert sum(r["judge_tokens"]["output"] for r in rows) == sum(x.output_tokens for x in judge)
    assert len(host) == sum(r["tokens"]["calls"] for r in rows)  # the host's, only
    summary = json.loads((run / "judge_wire_ledger.json").read_text())
    assert summary["requests"] == 96 and summary["role"] == "judge"
    rewards = [r["reward"] for r in rows]
    assert 0 < sum(rewards) < len(rewards) and len(set(rewards)) > 2  # a continuous score
    path = run / "task" / "results" / "pitch_l1_blind.jsonl"
    assert _scores(path, tmp_path) == _slb_scores(path, tmp_path)
    theirs = tmp_path / "slb.jsonl"
    _slb_run(theirs, "pitch_l1", "blind")
    _, slbs = _rows(theirs)
    assert {r["task_id"]: r["reward"] for r in rows} == {r["task_id"]: r["reward"] for r in slbs}


@needs_slb
@pytest.mark.anyio
@pytest.mark.parametrize("method", ["mwm-local", "mwm"])
async def test_mwm_on_a_real_scenario_learns_from_records_and_its_cards_reach_the_right_prompts(
    method: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """banking_l1 with mwm-local and mwm (its LLM learner writes the card): what reaches
    the learner, and what reaches the host."""
    import msgspec
    from servelearnbench import protocol

    from mw_actors.provider import _synthetic_host
    from mw_actors.provider._tool_player import message_text
    from mw_actors.serve_learn import CampaignSpec, run_campaign
    from mw_actors.serve_learn._methods import Lesson, Mwm, MwmLocal
    from mw_actors.serve_learn._worldmodel import Served

    learner = Mwm if method == "mwm" else MwmLocal
    prompts: dict[str, set[str]] = {}  # instruction -> system prompts, as the provider got them
    respond = _synthetic_host.SyntheticHost.respond

    def recording(self: Any, turn: Any) -> Any:
        said = [(m["role"], message_text(m.get("content"))) for m in turn.conversation]
        user = next(text for role, text in said if role == "user")
        prompts.setdefault(user, set()).add("".join(t for role, t in said if role == "system"))
        return respond(self, turn)

    learned: list[tuple[int, list[Served]]] = []
    manuals: set[str] = set()
    learn = learner.learn

    async def watching(self: Any, lesson: Lesson) -> Any:
        learned.append((lesson.block, list(lesson.served)))
        manuals.add(lesson.manual)
        return await learn(self, lesson)

    monkeypatch.setattr(_synthetic_host.SyntheticHost, "respond", recording)
    monkeypatch.setattr(learner, "learn", watching)
    spec = CampaignSpec(tag="m", scenario="banking_l1", dataset=DATASET, runs=tmp_path,
                        method=method, train_split=48)  # fmt: skip
    run = await run_campaign(spec)
    _, rows = _rows(run.results)
    serving = {r["task_id"]: r for r in rows if r["phase"] == "serving"}
    # The learner gets each served episode's record, the package's text, and nothing else.
    assert [b for b, _ in learned] == [0, 1, 2, 3]
    # And the documents the host may read (read_docs: the policy, the workflow guide).
    from servelearnbench import scenarios

    bundle = scenarios.get_bundle("banking_l1", fresh=True)
    assert manuals == {f"{bundle['policy_md']}\n\n{bundle['workflow_md']}"}
    assert set(msgspec.structs.asdict(learned[0][1][0])) == {
        "block", "task_id", "timestamp", "instruction", "reward", "record"}  # fmt: skip
    for block, served in learned:
        assert len(served) == 12 * (block + 1)
        for item in served:
            row = serving[item.task_id]
            assert item.record == protocol.episode_record(row["instruction"], row["trace"],
                                                          row["reward"])  # fmt: skip
            assert item.block == (row["timestamp"] - 1) // 12
    # Every request of an episode on version v carried v's card, and no other version's.
    cards = {v: (run.checkout / "versions" / d / "card.md").read_text()
             for v, d in json.loads((run.checkout / "index.json").read_text()).items()}  # fmt: skip
    assert len(cards) == 4
    for row in rows:
        (system,) = prompts[row["instruction"]]
        version = row["checkpoint"]
        if version == 0:
            assert "(nothing learned yet)" in system
        else:
            assert cards[str(version)] in system
        assert [v for v in cards if f"# World model v{v}\n" in system] == (
            [str(version)] if version else []
        )
    if method == "mwm":  # the learner session wrote the cards
        assert all("## Learner notes" in card for card in cards.values())
        return
    # And the adapter's advice moves the scores: window 0's tests on v4 beat the same
    # player with no world model (blind, v0).
    done = mw("serve-learn", "run", "banking_l1", "--method", "blind", "--dataset", str(DATASET),
              "--runs", str(tmp_path), "--tag", "b", "--train-split", "48",
              env={"MW_MODEL": "local/scripted"}, timeout=200)  # fmt: skip
    assert done.returncode == 0, done.stderr
    _, blind = _rows(tmp_path / "b" / "task" / "results" / "banking_l1_blind.jsonl")
    mine = [r["reward"] for r in rows if r["phase"] == "test"]
    theirs = [r["reward"] for r in blind if r["phase"] == "test"]
    assert len(mine) == len(theirs) == 41 and sum(mine) > sum(theirs) + 4


@needs_slb
def test_a_learning_methods_version_is_rebuilt_from_its_chain_of_updates(tmp_path: Path) -> None:
    """After a restart, slb:rag's state on v3 is replayed from v1..v3's updates: the same
    state the benchmark's runner builds from the same results rows."""
    from servelearnbench.methods import RAG, EpisodeResult

    from mw_actors.serve_learn._methods import make_method
    from mw_actors.serve_learn._slb import SlbScenario

    done = mw("serve-learn", "run", "banking_l1", "--method", "slb:rag", "--dataset",
              str(DATASET), "--runs", str(tmp_path), "--tag", "r", "--train-split", "36",
              "--schedule", "slb", env={"MW_MODEL": "local/scripted"}, timeout=200)  # fmt: skip
    assert done.returncode == 0, done.stderr
    run = tmp_path / "r"
    path = run / "task" / "results" / "banking_l1_rag.jsonl"
    _, rows = _rows(path)
    assert _scores(path, tmp_path) == _slb_scores(path, tmp_path)
    index = json.loads((run / "r" / "checkout" / "index.json").read_text())
    v3 = run / "r" / "checkout" / "versions" / index["3"]
    scenario = SlbScenario("banking_l1")
    method = make_method("slb:rag")  # a fresh process's: nothing in memory
    method.bind(scenario)
    theirs = RAG()
    theirs.setup(scenario.bundle)
    serving = sorted((r for r in rows if r["phase"] == "serving"), key=lambda r: r["timestamp"])
    for start in (0, 12, 24):  # as the runner replays completed blocks on --resume
        block = serving[start : start + 12]
        theirs.update([EpisodeResult(task_id=r["task_id"], instruction=r["instruction"],
                                     timestamp=r["timestamp"], reward=r["reward"],
                                     record=r["record"]) for r in block])  # fmt: skip
    tests = [r for r in rows if r["phase"] == "test"]
    assert tests and {r["checkpoint"] for r in tests} == {3}
    for row in tests[:10]:
        task = scenario.task(row["task_id"])
        assert method.context(v3, row["task_id"], "test", 0) == theirs.context(task, "test", 0)
        extra = method.row_extra(v3, row["task_id"], "test", 0)
        assert extra == {k: row[k] for k in ("n_retrieved", "retrieved_timestamps")}
    # Each version's update holds its own block, and names the version before it.
    update = json.loads((v3 / "update.json").read_text())
    assert update["block"] == 2 and update["previous"] == index["2"]
    assert [r["task_id"] for r in update["results"]] == [r["task_id"] for r in serving[24:36]]


@needs_slb
def test_manual_test_mode_plays_a_real_scenarios_windows_through_the_package(
    tmp_path: Path,
) -> None:
    """launch.sh SCENARIO test on banking_l1: the learned window's tests, on its version."""
    common = ("--dataset", str(DATASET), "--runs", str(tmp_path), "--tag", "t")
    done = mw("serve-learn", "run", "banking_l1", "--method", "mwm-local", "--train-split", "84",
              *common, env={"MW_MODEL": "local/scripted"}, timeout=200)  # fmt: skip
    assert done.returncode == 0, done.stderr
    done = mw("serve-learn", "test", "banking_l1", *common, env={"MW_MODEL": "local/scripted"},
              timeout=200)  # fmt: skip
    assert done.returncode == 0, done.stderr
    _, manual = _rows(tmp_path / "t" / "manual" / "task" / "results" / "banking_l1_mwm-local.jsonl")
    _, campaign = _rows(tmp_path / "t" / "task" / "results" / "banking_l1_mwm-local.jsonl")
    theirs = {r["task_id"]: r["reward"] for r in campaign if r["phase"] == "test"}
    assert len(manual) == 41 and {r["checkpoint"] for r in manual} == {7}
    assert {r["task_id"]: r["reward"] for r in manual} == theirs  # the same version, the same


@needs_slb
@pytest.mark.anyio
async def test_an_episode_that_fails_is_rerun_as_the_runner_reruns_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Any failure inside an episode (a judge's malformed reply raises ValueError in the
    package's verifier) gets the runner's attempts; one that always fails ends failed."""
    from mw_actors.serve_learn import CampaignSpec, run_campaign
    from mw_actors.serve_learn._slb import EPISODE_ATTEMPTS, SlbScenario

    attempt = SlbScenario._attempt
    tries: dict[str, int] = {}

    def flaky(self: Any, model: Any, task: Any, *rest: Any) -> Any:
        tries[task.task_id] = tries.get(task.task_id, 0) + 1
        if tries[task.task_id] == 1 or task.task_id == doomed:
            raise ValueError("judge checklist: no JSON object in reply")
        return attempt(self, model, task, *rest)

    monkeypatch.setattr(SlbScenario, "_attempt", flaky)
    _, theirs = _rows(_blind_window_0(tmp_path))  # the same episodes, never failing
    doomed = theirs[0]["task_id"]
    spec = CampaignSpec(tag="f", scenario="banking_l1", dataset=DATASET, runs=tmp_path,
                        method="blind", train_split=12)  # fmt: skip
    run = await run_campaign(spec)
    _, rows = _rows(run.results)
    assert len(rows) == 41 and tries[doomed] == EPISODE_ATTEMPTS
    by_id = {r["task_id"]: r for r in rows}
    assert by_id[doomed]["status"] == "failed" and by_id[doomed]["reward"] == 0.0
    rest = [r for r in theirs if r["task_id"] != doomed]
    assert all(by_id[r["task_id"]]["reward"] == r["reward"] for r in rest)  # scored as ever
    assert all(tries[r["task_id"]] == 2 for r in rest)


def _blind_window_0(tmp_path: Path) -> Path:
    done = mw("serve-learn", "run", "banking_l1", "--method", "blind", "--dataset", str(DATASET),
              "--runs", str(tmp_path), "--tag", "ref", "--train-split", "12",
              env={"MW_MODEL": "local/scripted"}, timeout=200)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return tmp_path / "ref" / "task" / "results" / "banking_l1_blind.jsonl"


@needs_slb
@pytest.mark.parametrize("previous", ["v7", "../../elsewhere", ""])
def test_a_damaged_chain_of_versions_is_refused_not_walked(previous: str, tmp_path: Path) -> None:
    import types

    from mw_actors.serve_learn._methods import make_method
    from mw_errors import ConfigError

    versions = tmp_path / "versions"
    (versions / "v7").mkdir(parents=True)  # names itself as the version before it
    (versions / "v7" / "update.json").write_text(
        json.dumps({"previous": previous, "block": 0, "results": []})
    )
    method = make_method("slb:rag")
    method.bind(types.SimpleNamespace(bundle={"meta": {}}, task=lambda task_id: None))
    with pytest.raises(ConfigError, match="as the version before it"):
        method.context(versions / "v7", "any", "test", 0)


@needs_slb
@pytest.mark.anyio
async def test_a_learner_never_learns_from_an_episode_nobody_scored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A served episode that ended failed (or unknown, or budget_blocked) told the agent no
    score: it is not in what the learner is given, and its row is still written."""
    from mw_actors.serve_learn import CampaignSpec, run_campaign
    from mw_actors.serve_learn._methods import Lesson, MwmLocal
    from mw_actors.serve_learn._slb import SlbScenario
    from mw_actors.serve_learn._worldmodel import Served

    attempt = SlbScenario._attempt
    doomed = ""  # the stream's third task, set below

    def failing(self: Any, model: Any, task: Any, *rest: Any) -> Any:
        if task.task_id == doomed:
            raise ValueError("the verifier raised")
        return attempt(self, model, task, *rest)

    learned: list[list[Served]] = []
    learn = MwmLocal.learn

    async def watching(self: Any, lesson: Lesson) -> Any:
        learned.append(list(lesson.served))
        return await learn(self, lesson)

    lines = (DATASET / "data" / "banking_l1" / "serving.jsonl").read_text().splitlines()
    doomed = json.loads(lines[2])["task_id"]
    monkeypatch.setattr(SlbScenario, "_attempt", failing)
    monkeypatch.setattr(MwmLocal, "learn", watching)
    spec = CampaignSpec(tag="u", scenario="banking_l1", dataset=DATASET, runs=tmp_path,
                        method="mwm-local", train_split=12)  # fmt: skip
    run = await run_campaign(spec)
    _, rows = _rows(run.results)
    (served,) = learned
    assert len(served) == 11 and doomed not in {s.task_id for s in served}
    assert {r["task_id"]: r["status"] for r in rows if r["phase"] == "serving"}[doomed] == "failed"
