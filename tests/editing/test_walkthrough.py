"""The README walkthrough of ``wsm benchmark``, exactly as written, as real subprocesses."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import ROOT, wsm

pytestmark = pytest.mark.timeout(300)

# The walkthrough of the issue that specified `wsm benchmark`, verbatim.
WALKTHROUGH = """\
python scripts/benchmark_fixture.py --output /tmp/wsm-benchmark-inputs
wsm benchmark preflight --config /tmp/wsm-benchmark-inputs/config.json
OMP_NUM_THREADS=1 wsm benchmark run --config /tmp/wsm-benchmark-inputs/config.json \
--output /tmp/wsm-benchmark-run --local-trusted > /tmp/wsm-benchmark-report.json
wsm benchmark report /tmp/wsm-benchmark-run > /tmp/wsm-benchmark-report-again.json
cmp /tmp/wsm-benchmark-report.json /tmp/wsm-benchmark-report-again.json
wsm benchmark report /tmp/wsm-benchmark-run --markdown > /tmp/wsm-benchmark-report.md
OMP_NUM_THREADS=1 wsm benchmark regrade /tmp/wsm-benchmark-run --trial-id completion.agent.0000
"""  # the backslash-newline joins the long run line, as the issue wrote it


def test_the_readme_walkthrough_runs_exactly_as_written(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    (block,) = [
        b for b in re.findall(r"```sh\n(.*?)```", readme, re.S) if "wsm-benchmark-inputs" in b
    ]
    assert block == WALKTHROUGH
    venv_bin = Path(sys.executable).parent
    script = "set -euo pipefail\n" + block.replace("/tmp/", f"{tmp_path}/")
    done = subprocess.run(
        ["bash", "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": f"{venv_bin}:{os.environ['PATH']}"},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "schedule: 3 trials" in done.stdout
    assert "external calls: 0" in done.stdout
    assert "worst-case new reservation: $0.04" in done.stdout
    regraded = json.loads(done.stdout[done.stdout.index("{") :])
    assert regraded["trial_id"] == "completion.agent.0000"
    assert regraded["comparison"]["matches"] is True and regraded["comparison"]["cases"] == 32

    report = json.loads((tmp_path / "wsm-benchmark-report.json").read_text())
    assert report["labels"] == ["synthetic", "exploratory"]
    assert report["local_trusted"] is True and report["isolated"] is False
    assert [t["trial_id"] for t in report["trials"]] == [
        "completion.baseline.0000",
        "completion.scripted.0000",
        "completion.agent.0000",
    ]
    assert report["outcomes"] == {"completed": 3}
    arms = report["arms"]
    assert arms["scripted"]["mean_task_loss"] > arms["baseline"]["mean_task_loss"]
    assert abs(arms["agent"]["mean_task_loss"] - arms["baseline"]["mean_task_loss"]) <= 1e-6
    assert report["checks"] == {
        "tolerance": 1e-6,
        "scripted_worse_than_baseline": True,
        "agent_restores_baseline": True,
    }
    assert regraded["previous_sha256"] == report["trials"][2]["receipts"][0]["sha256"]
    markdown = (tmp_path / "wsm-benchmark-report.md").read_text()
    assert "| completion.agent.0000 | completed |" in markdown


@pytest.mark.slow
def test_the_same_campaign_in_the_bwrap_sandbox(fixture_master: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    ran = wsm("benchmark", "run", "--config", str(fixture_master), "--output", str(run))
    assert ran.returncode == 0, ran.stderr.decode()
    report = json.loads(ran.stdout)
    assert report["backend"] == "bwrap" and report["isolated"] is True
    assert report["local_trusted"] is False
    assert {t["backend"] for t in report["trials"]} == {"bwrap"}
    assert report["checks"]["scripted_worse_than_baseline"] is True
    assert report["checks"]["agent_restores_baseline"] is True
    # The sandbox ran as the unprivileged sandbox user: scratch files belong to it.
    scratch = run / "trials" / "completion.scripted.0000" / "scratch"
    assert scratch.stat().st_uid == 65534


@pytest.mark.slow
def test_a_sandboxed_edit_sees_only_public_inputs(fixture_config: Path, tmp_path: Path) -> None:
    from mw_actors._reserver import BUDGET_RECORDS
    from mw_actors.editing import EDITING_RECORDS
    from mw_actors.editing.records import TrialStep
    from mw_actors.journal import read_journal

    from .conftest import edit_config, repin

    run = tmp_path / "run"
    private = run / "restricted" / "inputs" / "completion" / "private.jsonl"
    script = fixture_config.parent / "script.py"
    script.write_text(
        "import os\n"
        "print(sorted(os.listdir('inputs')), sorted(os.listdir('inputs/public')))\n"
        f"for path in ({str(private)!r}, {str(fixture_config.parent / 'datasets')!r}):\n"
        "    try:\n"
        "        print('READ', open(path).read()[:9])\n"
        "    except OSError as exc:\n"
        "        print('DENIED', type(exc).__name__)\n"
    )
    repin(fixture_config, script)
    edit_config(fixture_config, lambda d: d.update(arms=[d["arms"][1]]))
    ran = wsm("benchmark", "run", "--config", str(fixture_config), "--output", str(run))
    assert ran.returncode == 0, ran.stderr.decode()
    entries = read_journal(run / "journal", [*BUDGET_RECORDS, *EDITING_RECORDS])
    (step,) = [e.rec for e in entries if isinstance(e.rec, TrialStep)]
    lines = step.stdout_tail.splitlines()
    assert lines[0] == "['program', 'public', 'student'] ['completion.jsonl']"
    assert lines[1:] == ["DENIED FileNotFoundError", "DENIED FileNotFoundError"]
    assert private.is_file()  # it exists on the host, just not in the sandbox
