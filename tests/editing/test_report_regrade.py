"""Reports are pure functions of retained evidence; regrades check before they load."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mw_actors.editing import CampaignOptions, build_report, regrade, render_html, render_json
from mw_errors import ConfigError, FingerprintMismatch, IntegrityError

from .conftest import ROOT, wsm

pytestmark = pytest.mark.anyio

AGENT = "completion.agent.0000"


def _options(**changes: object) -> CampaignOptions:
    from bin._common import git_commit

    fields: dict[str, object] = {"omp_num_threads": "1", "git_commit": git_commit(), **changes}
    return CampaignOptions(**fields)  # type: ignore[arg-type]


def test_report_is_the_same_bytes_every_time(finished_run: tuple[Path, bytes]) -> None:
    run, printed = finished_run
    assert render_json(build_report(run)) == printed
    assert render_json(build_report(run)) == printed


def test_report_works_without_torch(finished_run: tuple[Path, bytes]) -> None:
    run, printed = finished_run
    program = f"""
import sys
sys.modules["torch"] = None
sys.modules["transformers"] = None
from pathlib import Path
from mw_actors.editing import build_report, render_json, render_html, render_markdown
report = build_report(Path({str(run)!r}))
render_html(report); render_markdown(report)
sys.stdout.buffer.write(render_json(report))
"""
    done = subprocess.run(
        [sys.executable, "-c", program], cwd=ROOT, capture_output=True, check=False
    )
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout == printed


def test_exported_reports_hold_no_private_text_or_case_scores(
    finished_run: tuple[Path, bytes],
) -> None:
    run, printed = finished_run
    private = (run / "restricted" / "inputs" / "completion" / "private.jsonl").read_text()
    cases = [json.loads(line) for line in private.splitlines()]
    scores = json.loads((run / "restricted" / "grades" / AGENT / "0000.json").read_text())
    losses = [c["loss"] for c in scores["partitions"]["private"]]
    outputs = [printed.decode()]
    for style in ("--markdown", "--html"):
        done = wsm("benchmark", "report", str(run), style)
        assert done.returncode == 0
        outputs.append(done.stdout.decode())
    for text in outputs:
        for case in cases:
            assert case["id"] not in text
            assert case["prompt"].splitlines()[0] not in text
        for loss in losses[:-1]:  # a one-case partition's mean would equal its score
            assert repr(loss) not in text


def test_html_is_self_contained(finished_run: tuple[Path, bytes]) -> None:
    done = wsm("benchmark", "report", str(finished_run[0]), "--html")
    page = done.stdout.decode()
    assert page.startswith("<!doctype html>") and page.count("<svg") == 2
    for external in ("http://", "https://", "<script", " src=", "<link", "@import"):
        assert external not in page


def _flip_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.chmod(0o644)
    path.write_bytes(bytes(data))


async def test_report_and_regrade_refuse_a_tampered_artifact(run_copy: Path) -> None:
    _flip_byte(run_copy / "trials" / AGENT / "export" / "model.safetensors")
    with pytest.raises(IntegrityError, match=r"export of completion\.agent\.0000"):
        build_report(run_copy)
    with pytest.raises(IntegrityError, match=r"export of completion\.agent\.0000"):
        await regrade(run_copy, AGENT, _options())
    done = wsm("benchmark", "report", str(run_copy))
    assert done.returncode == 2 and b"error[integrity_mismatch]" in done.stderr
    assert not list((run_copy / "trials" / AGENT / "receipts").glob("*regrade*"))


async def test_report_refuses_a_tampered_receipt(run_copy: Path) -> None:
    receipt = run_copy / "trials" / AGENT / "receipts" / "0000-grade.json"
    receipt.write_text(receipt.read_text().replace('"private": 5', '"private": 4'))
    with pytest.raises(IntegrityError, match="was changed"):
        build_report(run_copy)


async def test_regrade_refuses_another_runtime_with_a_diff(run_copy: Path) -> None:
    with pytest.raises(FingerprintMismatch, match=r"git_commit: \w+ -> 0{40}"):
        await regrade(run_copy, AGENT, _options(git_commit="0" * 40))
    with pytest.raises(FingerprintMismatch, match=r"omp_num_threads: 1 -> 2"):
        await regrade(run_copy, AGENT, _options(omp_num_threads="2"))
    assert not list((run_copy / "trials" / AGENT / "receipts").glob("*regrade*"))


async def test_regrade_refuses_changed_inputs_with_a_diff(run_copy: Path) -> None:
    private = run_copy / "restricted" / "inputs" / "completion" / "private.jsonl"
    private.write_text(private.read_text().replace(' 5"', ' 6"', 1))
    with pytest.raises(FingerprintMismatch, match=r"restricted/inputs/completion/private\.jsonl"):
        await regrade(run_copy, AGENT, _options())


async def test_regrade_appends_a_linked_receipt_and_the_report_shows_it(run_copy: Path) -> None:
    before = build_report(run_copy)
    outcome = await regrade(run_copy, AGENT, _options())
    assert outcome.comparison is not None and outcome.comparison.matches
    assert outcome.comparison.max_abs_diff == 0.0
    after = build_report(run_copy)
    agent = next(t for t in after.trials if t.trial_id == AGENT)
    assert [r.kind for r in agent.receipts] == ["grade", "regrade"]
    assert agent.receipts[1].matches is True
    assert agent.outcome == "completed" and agent.task_loss == before.trials[2].task_loss
    # A second regrade links to the first regrade.
    second = await regrade(run_copy, AGENT, _options())
    assert second.previous_sha256 == outcome.receipt_sha256


async def test_regrade_of_an_unknown_trial_lists_the_trials(run_copy: Path) -> None:
    with pytest.raises(ConfigError, match=r"completion\.baseline\.0000"):
        await regrade(run_copy, "completion.agent.0001", _options())


def test_status_of_an_editing_run_without_a_daemon(run_copy: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bin.mw",
            "status",
            run_copy.name,
            "--runs",
            str(run_copy.parent),
            "--json",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    status = json.loads(done.stdout)
    assert status["kind"] == "editing" and status["state"] == "completed"
    assert status["progress"]["trials_done"] == 3
    assert status["allocation_usd"] == "1.00" and status["spend_usd"]["host"] == "0"


def test_the_page_steps_through_what_each_trial_did(finished_run: tuple[Path, bytes]) -> None:
    run = finished_run[0]
    report = build_report(run)
    agent = next(t for t in report.trials if t.trial_id == AGENT)
    baseline = next(t for t in report.trials if t.arm == "baseline")
    assert [s.tool for s in agent.step_log] == ["run_python", "run_python", "undo", "finish"]
    inspect, damage, undo, finish = agent.step_log
    assert "code" in damage.arguments and damage.result == "exit code 0"
    # The damage changes the weights, the undo puts the original's back, finish leaves them.
    assert inspect.before_sha256 == inspect.after_sha256 == damage.before_sha256
    assert damage.after_sha256 != damage.before_sha256
    assert undo.before_sha256 == damage.after_sha256 and undo.after_sha256 == inspect.before_sha256
    assert finish.before_sha256 == finish.after_sha256 == agent.file_sha256 == baseline.file_sha256
    page = render_html(report)
    assert page == render_html(build_report(run))  # rebuilt: the same bytes
    assert page.count("<ol class='steps'>") == len(report.trials)
    assert "turn 3: undo</b>" in page and "restored the original weights" in page
    assert f"{damage.before_sha256[:12]} &rarr; {damage.after_sha256[:12]}" in page  # type: ignore[index]


@pytest.mark.skipif(shutil.which("chromium") is None, reason="no chromium (make test installs it)")
def test_a_real_browser_finds_the_plots_axes_and_step_through(
    finished_run: tuple[Path, bytes], tmp_path: Path
) -> None:
    page = tmp_path / "report.html"
    page.write_bytes(wsm("benchmark", "report", str(finished_run[0]), "--html").stdout)
    dom = subprocess.run(
        ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=90, check=True,
    ).stdout  # fmt: skip
    assert dom.count("<svg") == 2
    for axis in ("arm", "mean loss (lower is better)", "task loss", "regression loss"):
        assert f">{axis}</text>" in dom
    assert "<title>completion.baseline.0000, completion.agent.0000: task" in dom  # one spot
    assert dom.count('<ol class="steps">') == 3 and "turn 2: run_python" in dom
