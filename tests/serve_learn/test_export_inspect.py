"""``mw export inspect``: a run as Inspect AI eval logs, read back with Inspect's own reader."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mw_actors.serve_learn import score_file
from tests.processes import ROOT

inspect_log = pytest.importorskip("inspect_ai.log", reason="mw[inspect] is not installed")


def mw(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bin.mw", *args], cwd=ROOT, capture_output=True,
                          text=True, check=False)  # fmt: skip


@pytest.mark.timeout(300)
def test_each_episode_is_a_sample_with_its_messages_score_usage_and_card(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    done = mw("serve-learn", "run", "synthetic_l1", "--method", "mwm", "--train-split", "24",
              "--runs", str(runs), "--tag", "x")  # fmt: skip
    assert done.returncode == 0, done.stderr
    root = runs / "x"
    exported = mw("export", "inspect", str(root), "--output", str(tmp_path / "logs"))
    assert exported.returncode == 0, exported.stderr
    assert "inspect view --log-dir" in exported.stdout
    results = root / "task" / "results" / "synthetic_l1_mwm.jsonl"
    header, *rows = [json.loads(line) for line in results.read_text().splitlines()]
    log = inspect_log.read_eval_log(str(tmp_path / "logs" / "synthetic_l1_mwm.eval"))
    assert log.status == "success"
    assert (log.eval.task, log.eval.model) == ("synthetic_l1_mwm", header["config"]["model"])
    assert log.samples is not None and len(log.samples) == len(rows)
    score = score_file(results)
    metrics = log.results.scores[0].metrics
    assert (metrics["hidden"].value, metrics["fully_specified"].value) == (
        score.hidden, score.fully_specified)  # fmt: skip
    index = json.loads((root / "x" / "checkout" / "index.json").read_text())
    for sample, row in zip(log.samples, rows, strict=True):
        assert sample.scores["reward"].value == row["reward"]
        assert sample.metadata["phase"] == row["phase"]
        assert sample.metadata["window"] == row["window"]
        assert sample.metadata["version"] == row["checkpoint"]
        if str(row["checkpoint"]) in index:  # the card of the version it ran on
            card = root / "x" / "checkout" / "versions" / index[str(row["checkpoint"])] / "card.md"
            assert sample.metadata["card"] == card.read_text()
        usage = sample.model_usage[row["model"]]
        assert (usage.input_tokens, usage.output_tokens) == (
            row["tokens"]["input"], row["tokens"]["output"])  # fmt: skip
        calls = [m.tool_calls[0].function for m in sample.messages
                 if m.role == "assistant" and m.tool_calls]  # fmt: skip
        assert calls == [step["name"] for step in row["trace"]]
        observed = [m.text for m in sample.messages if m.role == "tool"]
        assert observed == [step["obs"] for step in row["trace"] if step["kind"] == "tool"]
        # The transcript's events: a model call per step, with that call's usage, and each
        # tool call with what it returned.
        models = [e for e in sample.events if e.event == "model"]
        assert [e.output.usage.output_tokens for e in models] == [
            step["usage"]["output"] for step in row["trace"]]  # fmt: skip
        tools = [e.result for e in sample.events if e.event == "tool"]
        assert tools == observed
    assert any("card" in sample.metadata for sample in log.samples)
    # The samples' usage is the host meter's ledger, request for request.
    ledger = json.loads((root / "wire_ledger.json").read_text())
    total = sum(sample.model_usage[row["model"]].input_tokens
                for sample, row in zip(log.samples, rows, strict=True))  # fmt: skip
    assert total == ledger["input_tokens"]


def test_a_folder_without_results_is_one_line_saying_what_to_pass(tmp_path: Path) -> None:
    done = mw("export", "inspect", str(tmp_path))
    assert done.returncode == 2
    assert "holds no results" in done.stderr and len(done.stderr.strip().splitlines()) == 1


HEADER = '{"config": {"scenario": "x", "method": "m", "model": "local/scripted"}}\n'


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (HEADER + "not json\n", "x_m.jsonl:2: not JSON"),
        ("[1, 2]\n", "a row is a JSON object, not list"),
        ('{"phase": "test", "category": "hidden", "reward": 1}\n', "has no config line"),
        (HEADER + '{"phase": "serving", "reward": 0, "tokens": [1]}\n', "episode row 1"),
        (HEADER + '{"phase": "serving", "reward": 0, "tokens": {"input": "lots"}}\n',
         "episode row 1"),
        (HEADER + '{"phase": "serving", "reward": 0, "trace": [{"kind": "tool", '
         '"tool_calls": "x"}]}\n', "episode row 1"),
    ],
)  # fmt: skip
def test_a_malformed_results_file_is_one_line_and_nothing_is_written(
    tmp_path: Path, text: str, says: str
) -> None:
    results = tmp_path / "task" / "results"
    results.mkdir(parents=True)
    (results / "x_m.jsonl").write_text(text)
    done = mw("export", "inspect", str(tmp_path))
    assert done.returncode == 2, done.stderr
    assert says in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "inspect").exists()
