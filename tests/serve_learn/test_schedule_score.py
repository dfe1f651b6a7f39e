"""The scenario reader, the schedule on the real banking_l1 export, and ``mw score``."""

from __future__ import annotations

import json
import random
from pathlib import Path

import msgspec
import pytest

from mw_actors.serve_learn import (
    OFFICIAL_SCENARIOS,
    Task,
    averages,
    plan,
    read_evaluators,
    read_scenario,
    score_file,
)
from mw_errors import ConfigError
from tests.processes import mw

ROOT = Path(__file__).resolve().parents[2]
DATASET = ROOT / "tests" / "data" / "servelearnbench"  # the banking_l1 export, vendored
needs_export = pytest.mark.skipif(
    not (DATASET / "data" / "banking_l1").is_dir(), reason="the banking_l1 export is not here"
)


@needs_export
def test_the_banking_l1_schedule() -> None:
    schedule = plan(read_scenario(DATASET, "banking_l1"))
    assert schedule.serving_total == 336 and schedule.test_total == 178
    assert [w.serving for w in schedule.windows] == [84, 84, 84, 84]
    assert [w.test_version for w in schedule.windows] == [7, 14, 21, 28]
    assert [w.unlearned for w in schedule.windows] == [0, 0, 0, 0]
    assert [schedule.serving_version(i) for i in (0, 11, 12, 335)] == [0, 0, 1, 27]


@needs_export
def test_plan_json_is_the_contract() -> None:
    done = mw("serve-learn", "plan", "banking_l1", "--dataset", str(DATASET), "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert {k: data[k] for k in ("scenario", "block_size", "serving_total", "test_total")} == {
        "scenario": "banking_l1",
        "block_size": 12,
        "serving_total": 336,
        "test_total": 178,
    }
    assert data["windows"][0] == {
        "window": 0,
        "serving": 84,
        "test": 41,
        "last_position": 84,
        "test_version": 7,
        "unlearned": 0,
    }


@needs_export
def test_a_train_split_keeps_a_prefix_and_leaves_cases_unlearned() -> None:
    done = mw(
        "serve-learn",
        "plan",
        "banking_l1",
        "--dataset",
        str(DATASET),
        "--json",
        env={"MW_TRAIN_SPLIT": "100"},
    )
    data = json.loads(done.stdout)
    assert data["serving_total"] == 100
    assert [(w["window"], w["test_version"], w["unlearned"]) for w in data["windows"]] == [
        (0, 7, 0),
        (1, 8, 4),
    ]
    flag = mw(
        "serve-learn",
        "plan",
        "banking_l1",
        "--dataset",
        str(DATASET),
        "--json",
        "--train-split",
        "24",
        env={"MW_TRAIN_SPLIT": "100"},
    )
    assert json.loads(flag.stdout)["serving_total"] == 24  # the flag wins


def test_the_slb_schedule_restarts_blocks_at_each_window_and_learns_every_one(
    tmp_path: Path,
) -> None:
    from mw_actors.serve_learn import write_synthetic

    scenario = read_scenario(write_synthetic(tmp_path, serving_per_window=30), "synthetic_l1")
    ours, theirs = plan(scenario), plan(scenario, schedule="slb")
    assert ours.block_ends[:4] == [12, 24, 36, 48] and ours.blocks == 10  # 120 // 12
    assert [w.test_version for w in ours.windows] == [2, 5, 7, 10]
    assert [w.unlearned for w in ours.windows] == [6, 0, 6, 0]
    # As slb run: 12, 12, 6 per window of 30; every block learned; tests after the last.
    assert theirs.block_ends[:6] == [12, 24, 30, 42, 54, 60] and theirs.blocks == 12
    assert [w.test_version for w in theirs.windows] == [3, 6, 9, 12]
    assert [w.unlearned for w in theirs.windows] == [0, 0, 0, 0]
    assert [theirs.serving_version(i) for i in (0, 29, 30, 119)] == [0, 2, 3, 11]
    assert plan(scenario, 40, schedule="slb").block_ends == [12, 24, 30, 40]


@needs_export
def test_evaluators_and_bulletins_never_reach_what_an_agent_sees() -> None:
    scenario = read_scenario(DATASET, "banking_l1")
    assert "evaluator" not in Task.__struct_fields__
    seen = msgspec.json.encode(scenario).decode()
    bulletins = json.loads((DATASET / "environments" / "banking_l1" / "windows.json").read_text())
    for bulletin in bulletins:
        for line in bulletin["oracle_bulletin"].splitlines():
            if len(line) > 20:
                assert line not in seen
    evaluators = read_evaluators(DATASET, "banking_l1")
    assert len(evaluators) == 336 + 178
    families = {e["family"] for e in evaluators.values()}
    for family in families:
        assert family not in seen
    assert "evaluator" not in seen and "oracle_bulletin" not in seen


def test_a_missing_scenario_names_what_the_dataset_has(tmp_path: Path) -> None:
    (tmp_path / "data" / "retail_l1").mkdir(parents=True)
    with pytest.raises(ConfigError, match=r"has no scenario 'banking_l1' \(it has: retail_l1\)"):
        read_scenario(tmp_path, "banking_l1")
    done = mw("serve-learn", "plan", "banking_l1", "--dataset", str(tmp_path))
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1


def _export(root: Path, timestamps: list[int]) -> None:
    data, env = root / "data" / "s", root / "environments" / "s"
    data.mkdir(parents=True)
    env.mkdir(parents=True)
    rows = [
        {
            "task_id": f"t{i}",
            "window": 0,
            "timestamp": t,
            "category": "hidden",
            "instruction": f"Current timestamp: {t}",
            "evaluator": {"secret": 1},
        }
        for i, t in enumerate(timestamps)
    ]
    (data / "serving.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (data / "test.jsonl").write_text("")
    (env / "windows.json").write_text(json.dumps([{"window": 0, "first_position": 1}]))


def test_a_stream_out_of_order_is_refused(tmp_path: Path) -> None:
    _export(tmp_path, [1, 3, 2])
    with pytest.raises(ConfigError, match="in stream order"):
        read_scenario(tmp_path, "s")


def _results(path: Path, scenario: str, rows: list[tuple[str, str, float]]) -> None:
    lines = [{"config": {"scenario": scenario, "method": "mwm", "model": "local/scripted"}}]
    lines += [
        {
            "scenario": scenario,
            "method": "mwm",
            "model": "local/scripted",
            "task_id": f"t{i}",
            "phase": phase,
            "window": 0,
            "timestamp": i + 1,
            "category": category,
            "reward": reward,
            "tokens": 0,
            "trace": [],
            "record": {},
        }
        for i, (phase, category, reward) in enumerate(rows)
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_score_is_the_mean_test_reward_per_category(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    rows = [
        (rng.choice(["serving", "test"]), rng.choice(["hidden", "fully_specified"]), rng.random())
        for _ in range(200)
    ]
    path = tmp_path / "banking_l1_mwm.jsonl"
    _results(path, "banking_l1", rows)
    score = score_file(path)
    for category, got in (("hidden", score.hidden), ("fully_specified", score.fully_specified)):
        wanted = [r for p, c, r in rows if p == "test" and c == category]
        assert got == pytest.approx(100 * sum(wanted) / len(wanted))
    assert score.n_test == sum(p == "test" for p, _, _ in rows)

    done = mw("score", str(path), "--json")
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)
    assert {k: row[k] for k in ("scenario", "method", "model")} == {
        "scenario": "banking_l1",
        "method": "mwm",
        "model": "local/scripted",
    }
    assert row["hidden"] == pytest.approx(score.hidden)


def test_a_category_without_test_rows_scores_null(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    _results(path, "pitch_l1", [("test", "hidden", 1.0), ("serving", "fully_specified", 1.0)])
    score = score_file(path)
    assert score.hidden == 100.0 and score.fully_specified is None


def test_averages_need_every_official_setting(tmp_path: Path) -> None:
    scores = []
    for i, name in enumerate(OFFICIAL_SCENARIOS):
        path = tmp_path / f"{name}.jsonl"
        rows = [("test", "hidden", (i % 3) / 2)]
        if not name.startswith("pitch"):
            rows.append(("test", "fully_specified", 1.0))
        _results(path, name, rows)
        scores.append(score_file(path))
    (full,) = averages(scores)
    assert full.avg_hidden == pytest.approx(sum(s.hidden or 0 for s in scores) / 9)
    assert full.avg_fully_specified == 100.0
    (partial,) = averages(scores[:-1])
    assert partial.avg_hidden is None and partial.avg_fully_specified == 100.0


def test_score_refuses_a_file_without_a_config_line(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps({"phase": "test", "category": "hidden", "reward": 1}) + "\n")
    done = mw("score", str(path))
    assert done.returncode == 2 and "has no config line" in done.stderr
