"""The embedding examples run as written, on asyncio and on trio."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("library", ["asyncio", "trio"])
def test_a_campaign_embeds_in_a_users_program(library: str, tmp_path: Path) -> None:
    script = ROOT / "examples" / "embedded" / f"serve_learn_{library}.py"
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path), "24"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{library}: ") and "hidden" in done.stdout
    assert (
        tmp_path / f"embedded-{library}" / "task" / "results" / "synthetic_l1_mwm-local.jsonl"
    ).is_file()
