"""The campaign in-process, on asyncio and trio: budget, failures, refusals, missing grades."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from mw_actors._reserver import BUDGET_RECORDS, BudgetBlocked
from mw_actors.editing import (
    EDITING_RECORDS,
    CampaignOptions,
    TrialEnded,
    build_report,
    load_config,
    regrade,
    run_campaign,
)
from mw_actors.editing.records import TrialReserved
from mw_actors.journal import read_journal
from mw_errors import ConfigError, SandboxUnavailable

from .conftest import edit_config, repin

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180)]

LOCAL = CampaignOptions(local_trusted=True, omp_num_threads="1", git_commit="test")


def _ended(run: Path) -> dict[str, TrialEnded]:
    entries = read_journal(run / "journal", [*BUDGET_RECORDS, *EDITING_RECORDS])
    ended = [e.rec for e in entries if isinstance(e.rec, TrialEnded)]
    assert len(ended) == len({t.trial_id for t in ended}), "one terminal record per trial"
    return {t.trial_id: t for t in ended}


async def test_an_allocation_too_small_for_the_third_trial_blocks_it(
    fixture_config: Path, tmp_path: Path
) -> None:
    edit_config(fixture_config, lambda d: d["money"].update(allocation_usd="0.03"))
    run = tmp_path / "run"
    await run_campaign(load_config(fixture_config), run, LOCAL)
    ended = _ended(run)
    assert ended["completion.agent.0000"].outcome == "budget_blocked"
    assert "needs 0.04 USD, 0.03 USD" in (ended["completion.agent.0000"].reason or "")
    assert ended["completion.baseline.0000"].outcome == "completed"
    entries = read_journal(run / "journal", [*BUDGET_RECORDS, *EDITING_RECORDS])
    assert any(isinstance(e.rec, BudgetBlocked) for e in entries)
    assert not any(isinstance(e.rec, TrialReserved) for e in entries)
    report = build_report(run)
    agent = next(t for t in report.trials if t.arm == "agent")
    assert agent.outcome == "budget_blocked" and agent.receipts == []
    assert report.outcomes == {"budget_blocked": 1, "completed": 2}
    assert report.checks.agent_restores_baseline is None
    assert report.budget.reserved_usd == "0"


async def test_the_agent_trial_reserves_and_settles_its_envelope(
    fixture_config: Path, tmp_path: Path
) -> None:
    edit_config(fixture_config, lambda d: d["arms"].pop(1))  # baseline and agent only
    run = tmp_path / "run"
    await run_campaign(load_config(fixture_config), run, LOCAL)
    report = build_report(run)
    assert report.budget.reserved_usd == "0.04" and report.budget.spent_usd == "0"
    assert report.checks.agent_restores_baseline is True


async def test_a_grading_cut_off_gets_its_missing_receipt_and_keeps_its_outcome(
    fixture_config: Path, tmp_path: Path
) -> None:
    edit_config(fixture_config, lambda d: d.update(arms=[{"name": "baseline"}]))
    run = tmp_path / "run"
    broken = CampaignOptions(
        local_trusted=True,
        omp_num_threads="1",
        git_commit="test",
        grader_argv=(sys.executable, "-c", "import sys; sys.exit('grader killed')"),
    )
    await run_campaign(load_config(fixture_config), run, broken)
    trial = "completion.baseline.0000"
    assert _ended(run)[trial].outcome == "failed"
    assert "grading_failed" in (_ended(run)[trial].reason or "")
    assert build_report(run).trials[0].receipts == []

    outcome = await regrade(run, trial, LOCAL)
    assert outcome.comparison is None and outcome.previous_sha256 is None
    report = build_report(run)
    (only,) = report.trials
    assert only.outcome == "failed"  # the earlier failure stays visible
    assert [r.kind for r in only.receipts] == ["grade"]
    assert only.task_loss is not None


async def test_a_failing_script_fails_its_trial_and_the_rest_go_on(
    fixture_config: Path, tmp_path: Path
) -> None:
    script = fixture_config.parent / "script.py"
    script.write_text("raise SystemExit('the edit broke')\n")
    repin(fixture_config, script)
    run = tmp_path / "run"
    await run_campaign(load_config(fixture_config), run, LOCAL)
    ended = _ended(run)
    assert ended["completion.scripted.0000"].outcome == "failed"
    assert "the edit broke" in (ended["completion.scripted.0000"].reason or "")
    assert ended["completion.agent.0000"].outcome == "completed"


async def test_an_existing_output_directory_is_refused(
    fixture_config: Path, tmp_path: Path
) -> None:
    (tmp_path / "run").mkdir()
    with pytest.raises(ConfigError, match="already exists"):
        await run_campaign(load_config(fixture_config), tmp_path / "run", LOCAL)


async def test_a_local_backend_needs_local_trusted(fixture_config: Path, tmp_path: Path) -> None:
    edit_config(fixture_config, lambda d: d["runtime"].update(backend="local"))
    isolated = CampaignOptions(omp_num_threads="1", git_commit="test")
    with pytest.raises(ConfigError, match="runs untrusted edits without isolation") as caught:
        await run_campaign(load_config(fixture_config), tmp_path / "run", isolated)
    assert "--local-trusted" in caught.value.hint
    assert not (tmp_path / "run").exists()


async def test_isolation_fails_closed(fixture_config: Path, tmp_path: Path) -> None:
    no_bwrap = CampaignOptions(bwrap=Path("/nonexistent/bwrap"), git_commit="test")
    with pytest.raises(SandboxUnavailable) as caught:
        await run_campaign(load_config(fixture_config), tmp_path / "run", no_bwrap)
    assert caught.value.code == "sandbox_unavailable"
    assert not (tmp_path / "run").exists()


def ignoring_bwrap(tmp_path: Path) -> Path:
    """A "bubblewrap" that ignores every isolation flag and runs the command on the host.

    Its privilege drop too: the command's ``setpriv`` is one that only runs what follows it
    (an interpreter under /root may not even load as the sandbox's uid on the host).
    """
    skip = '#!/bin/sh\nwhile [ "$#" -gt 0 ] && [ "$1" != "--" ]; do shift; done\nshift\n'
    tools = tmp_path / "liar-bin"
    tools.mkdir()
    (tools / "setpriv").write_text(skip + 'exec "$@"\n')
    (tools / "setpriv").chmod(0o755)
    path = tmp_path / "bwrap"
    path.write_text(skip + f'PATH={tools}:$PATH exec "$@"\n')
    path.chmod(0o755)
    return path


async def test_a_backend_that_does_not_isolate_is_refused_before_any_trial(
    fixture_config: Path, tmp_path: Path
) -> None:
    """It once ran every trial on the host and recorded ``"isolated": true``."""
    liar = CampaignOptions(bwrap=ignoring_bwrap(tmp_path), git_commit="test")
    with pytest.raises(SandboxUnavailable, match="failed its self-test") as caught:
        await run_campaign(load_config(fixture_config), tmp_path / "run", liar)
    assert caught.value.code == "sandbox_unavailable"
    assert not (tmp_path / "run").exists()
