"""``mw report RUN_DIR``: one run's figures from its files, the same in every form."""

from __future__ import annotations

import json
import shutil
import subprocess
from decimal import Decimal
from pathlib import Path

import anyio
import pytest

import meters
from mw_actors.serve_learn import (
    CampaignSpec,
    build_run_report,
    read_evaluators,
    render_run_html,
    render_run_json,
    render_run_markdown,
    run_campaign,
    score_file,
    write_synthetic,
)
from mw_errors import ConfigError
from tests.processes import mw


def _run(tmp: Path, tag: str, **settings: object) -> Path:
    dataset = tmp / "dataset"
    if not dataset.exists():
        write_synthetic(dataset, "synthetic_l1")
    spec = CampaignSpec(tag=tag, scenario="synthetic_l1", dataset=dataset, runs=tmp / "runs",
                        **settings)  # type: ignore[arg-type]  # fmt: skip
    return anyio.run(run_campaign, spec).root


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _run(tmp_path_factory.mktemp("report"), "r", train_split=72)


def test_the_figures_come_from_the_journal_results_and_ledgers(run: Path) -> None:
    report = build_run_report(run)
    score = score_file(next((run / "task" / "results").glob("*.jsonl")))
    assert (report.state, report.hidden, report.fully_specified) == (
        "completed",
        score.hidden,
        score.fully_specified,
    )
    # Each window as test.log gives it, on the version it was tested on.
    logged = [line.split(":")[0] for line in (run / "test.log").read_text().splitlines()]
    assert [f"window {w.window} on v{w.version}" for w in report.windows] == logged
    assert sum(w.tests for w in report.windows) == report.n_test == 24
    assert [b.block for b in report.blocks] == list(range(6)) and report.blocks[3].window == 1
    assert [v.version for v in report.versions] == [1, 2, 3, 4, 5, 6]
    assert report.versions[0].diff[:2] == ["--- v0", "+++ v1"]
    assert report.versions[0].card is not None and "# World model v1" in report.versions[0].card
    assert all(
        line.startswith(("---", "+++", "@@", "+", "-", " ")) for line in report.versions[1].diff
    )
    spent = sum(Decimal(x.cost_usd) for x in meters.read_ledger(run / "ledger.jsonl"))
    assert report.spend_usd == {"host": meters.usd(spent)}
    assert report.spend[-1].usd == str(spent) and report.odd == []


def test_every_form_shows_the_same_figures_and_rebuilds_byte_for_byte(run: Path) -> None:
    report = build_run_report(run)
    as_json = json.loads(render_run_json(report))
    markdown, page = render_run_markdown(report), render_run_html(report)
    for w in as_json["windows"]:
        assert f"| {w['window']} | v{w['version']} | {w['tests']} | {w['hidden']:.1f} |" in markdown
        assert f"window {w['window']}: Hidden {w['hidden']:.1f} ({w['tests']} tests)" in page
    for b in as_json["blocks"]:
        assert f"| {b['block']} | {b['window']} | {b['cases']} | {b['reward']:.1f} |" in markdown
        assert f"block {b['block']} (window {b['window']}): {b['reward']:.1f}" in page
    assert page.count("<svg") == 3 and page.count("<details>") == 6
    assert "window 1 begins" in page  # the boundary between the windows, marked
    again = build_run_report(run)
    assert render_run_json(again) == render_run_json(report)
    assert render_run_html(again) == page and render_run_markdown(again) == markdown
    cli = mw("report", str(run), "--html")
    assert cli.returncode == 0, cli.stderr
    assert cli.stdout == page


def test_no_evaluator_and_no_task_text_is_in_the_page(run: Path, tmp_path: Path) -> None:
    page = render_run_html(build_run_report(run))
    rows = [json.loads(line) for line in next((run / "task" / "results").glob("*.jsonl"))
            .read_text().splitlines()[1:]]  # fmt: skip
    dataset = run.parent.parent / "dataset"
    secrets = {
        json.dumps(e, sort_keys=True) for e in read_evaluators(dataset, "synthetic_l1").values()
    }
    for row in rows:
        assert row["instruction"] not in page
    for secret in secrets:
        assert secret not in page


def test_a_run_that_the_budget_stopped_lists_its_blocked_episodes(tmp_path: Path) -> None:
    root = _run(tmp_path, "b", train_split=24, allocation_usd=Decimal("0.03"), concurrency=1)
    report = build_run_report(root)
    assert report.state == "budget_blocked"
    assert report.odd and {o.status for o in report.odd} == {"budget_blocked"}
    assert f"{report.odd[0].task_id}" in render_run_html(report)
    assert "budget_blocked" in render_run_markdown(report)


def test_a_directory_without_a_campaign_is_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="holds no campaign"):
        build_run_report(tmp_path)
    done = mw("report", str(tmp_path))
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1


@pytest.mark.skipif(shutil.which("chromium") is None, reason="no chromium (make test installs it)")
def test_a_real_browser_finds_the_plots_axes_and_versions(run: Path, tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    page.write_text(render_run_html(build_run_report(run)))
    dom = subprocess.run(
        ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=90, check=True,
    ).stdout  # fmt: skip
    assert dom.count("<svg") == 3 and dom.count("<details>") == 6
    for axis in ("window", "test score", "block of 12 served cases", "seconds since the start"):
        assert f">{axis}</text>" in dom
    assert "<title>window 0: Hidden" in dom  # a hover shows each point's numbers
