"""``mw export inspect``: a run as Inspect AI eval logs, read back with Inspect's own reader."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import httpx
import pytest

from mw_actors.serve_learn import score_file
from tests.processes import ROOT

inspect_log = pytest.importorskip("inspect_ai.log", reason="mw[inspect] is not installed")


def mw(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bin.mw", *args], cwd=ROOT, capture_output=True,
                          text=True, check=False)  # fmt: skip


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A real campaign's run (``mwm``, synthetic_l1), and the folder it was exported to."""
    tmp_path = tmp_path_factory.mktemp("inspect")
    runs = tmp_path / "runs"
    done = mw("serve-learn", "run", "synthetic_l1", "--method", "mwm", "--train-split", "24",
              "--runs", str(runs), "--tag", "x")  # fmt: skip
    assert done.returncode == 0, done.stderr
    exported = mw("export", "inspect", str(runs / "x"), "--output", str(tmp_path / "logs"))
    assert exported.returncode == 0, exported.stderr
    assert "inspect view --log-dir" in exported.stdout
    return runs / "x", tmp_path / "logs"


@pytest.mark.timeout(300)
def test_each_episode_is_a_sample_with_its_messages_score_usage_and_card(
    exported: tuple[Path, Path],
) -> None:
    root, logs = exported
    results = root / "task" / "results" / "synthetic_l1_mwm.jsonl"
    header, *rows = [json.loads(line) for line in results.read_text().splitlines()]
    log = inspect_log.read_eval_log(str(logs / "synthetic_l1_mwm.eval"))
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


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_inspect_view_serves_the_exported_run_to_its_page(exported: tuple[Path, Path]) -> None:
    """Inspect's own viewer, started on the export: it lists the log and serves its samples."""
    root, logs = exported
    port = _free_port()
    viewer = subprocess.Popen(
        [str(Path(sys.executable).with_name("inspect")), "view", "--log-dir", str(logs),
         "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        listed: list[dict[str, object]] = []
        deadline = time.monotonic() + 120  # a hang guard only: it starts in seconds
        while not listed and time.monotonic() < deadline and viewer.poll() is None:
            try:
                listed = httpx.get(f"{url}/api/log-files", timeout=5).json()["files"]
            except httpx.HTTPError:
                time.sleep(0.5)
        if not listed:
            viewer.kill()
            pytest.fail(f"inspect view did not start: {viewer.communicate(timeout=30)[1]}")
        (entry,) = listed
        assert entry["task"] == "synthetic_l1_mwm"
        assert "Inspect View" in httpx.get(url, timeout=30).text  # the viewer's page itself
        path = urllib.parse.quote(str(logs / "synthetic_l1_mwm.eval"), safe="")
        log = httpx.get(f"{url}/api/logs/{path}", timeout=60).json()
        results = root / "task" / "results" / "synthetic_l1_mwm.jsonl"
        rows = [json.loads(line) for line in results.read_text().splitlines()[1:]]
        score = score_file(results)
        metrics = log["results"]["scores"][0]["metrics"]
        assert (metrics["hidden"]["value"], metrics["fully_specified"]["value"]) == (
            score.hidden, score.fully_specified)  # fmt: skip
        assert [s["scores"]["reward"]["value"] for s in log["samples"]] == [
            r["reward"] for r in rows]  # fmt: skip
        assert [m["role"] for m in log["samples"][0]["messages"]][:3] == [
            "user", "assistant", "tool"]  # fmt: skip
    finally:
        if viewer.returncode is None:
            viewer.kill()
            viewer.communicate(timeout=30)


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
