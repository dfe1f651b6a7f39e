"""The mwm learner's codex backend: `codex exec` in the bwrap sandbox, on the world-model files.

Offline, the learner meter's provider is the synthetic learner, which drives
Codex's shell tool as it drives the built-in loop's tools. Optional: runs where
Codex CLI is installed (scripts/setup.sh puts it in .venv/codex) and
bubblewrap works.
"""

from __future__ import annotations

import json
import os
from decimal import Decimal
from pathlib import Path

import pytest

import meters
import sandbox
from mw_actors.serve_learn import find_codex, score_file
from tests.processes import ROOT, mw

pytestmark = [pytest.mark.codex, pytest.mark.timeout(300)]

SHIM = ROOT / ".venv" / "codex" / "node_modules" / ".bin" / "codex"


def codex_path() -> str:
    """PATH with Codex on it: the one already there, else the one setup installed."""
    import shutil

    if shutil.which("codex"):
        return os.environ["PATH"]
    if not SHIM.is_file():
        pytest.skip("codex is not installed (npm install @openai/codex)")
    return f"{SHIM.parent}:{os.environ['PATH']}"


def test_find_codex_resolves_npms_shim_to_the_native_binary() -> None:
    if not SHIM.is_file():
        pytest.skip("codex is not installed by scripts/setup.sh here")
    install = find_codex(str(SHIM))
    assert install is not None
    assert Path(install.binary).read_bytes()[:4] == b"\x7fELF"
    assert Path(install.binary).is_relative_to(install.root)
    assert find_codex(None) is None


def test_a_campaign_learns_with_codex_in_the_sandbox(tmp_path: Path) -> None:
    if sandbox.find_bwrap() is None:
        pytest.skip("bubblewrap is not installed here")
    env = {"PATH": codex_path(), "MW_MODEL": "local/scripted"}
    args = ("serve-learn", "run", "synthetic_l1", "--method", "mwm", "--runs", str(tmp_path))
    args += ("--train-split", "24")
    done = mw(*args, "--tag", "codex", env=env, timeout=280)
    assert done.returncode == 0, done.stderr
    builtin = mw(*args, "--tag", "builtin", "--learner-backend", "builtin", env=env, timeout=280)
    assert builtin.returncode == 0, builtin.stderr
    run = tmp_path / "codex"
    stamp = json.loads((run / "run.log").read_text().splitlines()[0])["setting"]
    assert stamp["learner_backend"] == "codex" and stamp["codex"].endswith("/bin/codex")
    # One step per block, each priced from the learner meter's own ledger, to the cent.
    steps = [json.loads(line) for line in (run / "codex" / "steps.jsonl").read_text().splitlines()]
    assert [s["block"] for s in steps] == [0, 1]
    lines = meters.read_ledger(run / "learner" / "ledger.jsonl")
    assert lines and {(x.endpoint, x.status) for x in lines} == {("/v1/responses", "ok")}
    assert sum(Decimal(s["learner_cost_usd"]) for s in steps) == sum(
        Decimal(x.cost_usd) for x in lines
    )
    assert sum(s["learner_tokens"] for s in steps) == sum(
        x.input_tokens + x.output_tokens for x in lines
    )
    # Codex worked in the sandbox: as the sandbox's uid, on its workspace, by its shell.
    for block in (0, 1):
        session = run / "learner" / "sessions" / f"block-{block}"
        events = [json.loads(x) for x in (session / "codex.jsonl").read_text().splitlines()]
        commands = [
            e["item"]["command"]
            for e in events
            if e.get("type") == "item.completed" and e["item"].get("type") == "command_execution"
        ]
        assert any("./fit_adapter" in c for c in commands), commands
        assert "Score: " in (session / "evidence.md").read_text()  # the block's records
        assert "# Manual" in (session / "manual.md").read_text()  # the policy fit_adapter reads
        if os.geteuid() == 0:
            assert (session / "card.md").stat().st_uid == 65534
    card = (run / "codex" / "checkout" / "card.md").read_text()
    assert "## Learner notes" in card
    # The same adapter the built-in loop fits: the same learning curve.
    mine = score_file(run / "task" / "results" / "synthetic_l1_mwm.jsonl")
    theirs = score_file(tmp_path / "builtin" / "task" / "results" / "synthetic_l1_mwm.jsonl")
    assert (mine.hidden, mine.fully_specified) == (theirs.hidden, theirs.fully_specified)
