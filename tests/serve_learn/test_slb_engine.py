"""Episode engine (a): a real scenario plays in ServeLearnBench's own environment.

The package needs Python >= 3.12 and is not on this machine's registry, so
these tests put a stand-in with its API (tests/data/fake_servelearnbench,
read from the package's source) on PYTHONPATH. Without either, a real
scenario is refused with how to install the package.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.processes import ROOT, mw

DATASET = ROOT / "tests" / "data" / "servelearnbench"  # the real banking_l1 export
STAND_IN = ROOT / "tests" / "data" / "fake_servelearnbench"


def test_a_real_scenario_without_the_package_says_how_to_install_it(tmp_path: Path) -> None:
    for extra in ((), ("--check",)):
        done = mw("serve-learn", "run", "banking_l1", "--dataset", str(DATASET),
                  "--runs", str(tmp_path), "--tag", "nopkg", *extra)  # fmt: skip
        assert done.returncode == 2
        line = done.stderr.strip()
        assert "servelearnbench package cannot be imported here" in line
        assert "Python >= 3.12" in line and "\n" not in line
        assert not (tmp_path / "nopkg").exists()


def test_episodes_run_in_the_packages_environment_and_its_verifier_scores_them(
    tmp_path: Path,
) -> None:
    log = tmp_path / "slb.jsonl"
    env = {"PYTHONPATH": str(STAND_IN), "FAKE_SLB_LOG": str(log), "MW_MODEL": "local/scripted"}
    done = mw("serve-learn", "run", "banking_l1", "--dataset", str(DATASET), "--runs",
              str(tmp_path), "--tag", "slb", "--train-split", "24", env=env,
              timeout=200)  # fmt: skip
    assert done.returncode == 0, done.stderr
    results = tmp_path / "slb" / "task" / "results" / "banking_l1_mwm.jsonl"
    rows = [json.loads(line) for line in results.read_text().splitlines()[1:]]
    assert sum(r["phase"] == "serving" for r in rows) == 24
    assert sum(r["phase"] == "test" for r in rows) == 41  # window 0's tests, on v2
    assert {r["checkpoint"] for r in rows if r["phase"] == "test"} == {2}
    events = [json.loads(line) for line in log.read_text().splitlines()]
    resets = [e for e in events if e["event"] == "reset"]
    # One fresh environment per episode, on the package's own (stamped) task.
    assert sorted(e["task_id"] for e in resets) == sorted(r["task_id"] for r in rows)
    assert all(e["stamped"] for e in resets)
    # finish reached the environment with the model's arguments; the reward is its verifier's.
    finished = {e["task_id"] for e in events if e["event"] == "step" and e["name"] == "finish"}
    assert finished == {r["task_id"] for r in rows}
    rewards = {e["task_id"]: e["reward"] for e in events if e["event"] == "reward"}
    assert {r["task_id"]: r["reward"] for r in rows} == rewards
    assert 0 < sum(rewards.values()) < len(rewards)  # both outcomes occur


def test_a_learner_reads_a_real_scenarios_episodes_as_records() -> None:
    from mw_actors.serve_learn._learner import evidence_text

    rows = [json.loads(line) for line in (DATASET / "data" / "banking_l1" / "serving.jsonl")
            .read_text().splitlines()[:2]]  # fmt: skip
    evidence = [
        {
            "block": 0,
            "instruction": row["instruction"],
            "reward": reward,
            "feedback": f"Score: {100 * reward:g}/100.",
            "trace": [
                {
                    "turn": 1,
                    "tool": "get_case_details",
                    "arguments": {"case_id": "X"},
                    "result": '{"amount": 12}',
                },
                {"turn": 2, "rejected": 2},
                {"turn": 3, "tool": "finish", "arguments": {}, "result": "finished"},
            ],
        }
        for row, reward in zip(rows, (1.0, 0.0), strict=True)
    ]
    text = evidence_text(evidence, 0)
    assert rows[0]["instruction"].strip() in text and rows[1]["instruction"].strip() in text
    assert 'get_case_details({"case_id": "X"}) -> {"amount": 12}' in text
    assert "Score: 100/100." in text and "Score: 0/100." in text
    for row in rows:  # the evaluator's ground truth is nowhere in it
        assert json.dumps(row["evaluator"]["actions"]) not in text
        assert str(row["evaluator"]["slice"]) not in text
