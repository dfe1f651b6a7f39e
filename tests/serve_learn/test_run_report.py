"""``mw report RUN_DIR``: one run's figures from its files, the same in every form."""

from __future__ import annotations

import html
import json
import shutil
import subprocess
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import msgspec
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
from mw_actors.serve_learn._trajectories import trajectories
from mw_actors.serve_learn.records import EpisodeEnded
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
    assert page.count("<svg") == 3 and page.count("<details id='v") == 6
    assert "window 1 begins" in page  # the boundary between the windows, marked
    again = build_run_report(run)
    assert render_run_json(again) == render_run_json(report)
    assert render_run_html(again) == page and render_run_markdown(again) == markdown
    cli = mw("report", str(run), "--html")
    assert cli.returncode == 0, cli.stderr
    assert cli.stdout == page


def _rows(run: Path) -> list[dict[str, Any]]:
    results = next((run / "task" / "results").glob("*.jsonl"))
    return [json.loads(line) for line in results.read_text().splitlines()[1:]]


def test_the_failed_tests_are_shown_step_by_step_with_their_card_and_cost(run: Path) -> None:
    report = build_run_report(run)
    failed = [r for r in _rows(run) if r["phase"] == "test" and r["reward"] < 1]
    assert failed, "the fixture's run fails some tests"
    by_position = sorted(failed, key=lambda r: (r["window"], r["timestamp"]))
    assert [(t.task_id, t.window) for t in report.trajectories] == [
        (r["task_id"], r["window"]) for r in by_position
    ]
    page, markdown = render_run_html(report), render_run_markdown(report)
    assert page.count("<details class='episode'") == len(failed)
    prices = meters.load_prices(run / "prices.json")
    for row, shown in zip(by_position, report.trajectories, strict=True):
        assert shown.asked == row["instruction"] and html.escape(row["instruction"]) in page
        assert row["instruction"] in markdown
        assert [s.call.split("(")[0] for s in shown.steps] == [s["name"] for s in row["trace"]]
        for step in row["trace"]:
            assert html.escape(step["obs"]) in page and step["obs"] in markdown
        assert shown.tokens == row["tokens"] and shown.version == row["checkpoint"]
        usage = meters.Usage(input_tokens=row["tokens"]["input"],
                             output_tokens=row["tokens"]["output"])  # fmt: skip
        assert shown.cost_usd == meters.usd(prices.cost(row["model"], usage))
        assert f"<a href='#v{row['checkpoint']}'>" in page  # its version's card, one click away
        assert f"{row['task_id']}: test, window {row['window']}" in page
        assert "Score: 0/100" in page


def test_no_evaluator_is_in_the_page_and_no_task_text_in_a_figures_only_one(run: Path) -> None:
    page = render_run_html(build_run_report(run))
    dataset = run.parent.parent / "dataset"
    secrets = {
        json.dumps(e, sort_keys=True) for e in read_evaluators(dataset, "synthetic_l1").values()
    }
    for secret in secrets:
        assert secret not in page
    figures = render_run_html(build_run_report(run, figures_only=True))
    for row in _rows(run):
        assert row["instruction"] not in figures
        assert all(html.escape(s["obs"]) not in figures for s in row["trace"] if len(s["obs"]) > 20)
    cli = mw("report", str(run), "--html", "--figures-only")
    assert cli.returncode == 0, cli.stderr
    assert cli.stdout == figures


def test_a_long_observation_is_cut_and_says_how_much_was_left_out() -> None:
    step = {"kind": "tool", "name": "search", "args": {"q": "x"}, "obs": "y" * 5000, "input": "go"}
    ended = EpisodeEnded(task_id="t1", phase="test", window=0, timestamp=1, category="hidden",
                         checkpoint=2, status="finished", reward=0.0, trace=[step])  # fmt: skip
    (shown,) = trajectories([ended], "local/scripted", None)
    assert shown.asked == "go" and shown.cost_usd is None
    assert (
        shown.steps[0].observed
        == "y" * 2000 + "... (3000 more characters: mw export inspect has them)"
    )
    assert trajectories([msgspec.structs.replace(ended, reward=1.0)], "m", None) == []


def test_a_run_that_the_budget_stopped_lists_its_blocked_episodes(tmp_path: Path) -> None:
    root = _run(tmp_path, "b", train_split=24, allocation_usd=Decimal("0.03"), concurrency=1)
    report = build_run_report(root)
    assert report.state == "budget_blocked"
    assert report.odd and {o.status for o in report.odd} == {"budget_blocked"}
    page = render_run_html(report)
    assert f"{report.odd[0].task_id}" in page
    # Each blocked episode links to its own trajectory, which says it recorded no steps.
    for odd in report.odd:
        (number,) = [n for n, t in enumerate(report.trajectories) if t.task_id == odd.task_id]
        assert f"<a href='#episode-{number}'>{odd.task_id}</a>" in page
        assert f"id='episode-{number}'" in page
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
    assert dom.count("<svg") == 3 and dom.count('<details id="v') == 6
    for axis in ("window", "test score", "block of 12 served cases", "seconds since the start"):
        assert f">{axis}</text>" in dom
    assert "<title>window 0: Hidden" in dom  # a hover shows each point's numbers
