"""The ``mw`` command line, run as a real subprocess."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.processes import mw

from .scenarios.bad_inputs import BAD_INPUTS, BAD_PATHS, MISSING, BadInput

ROOT = Path(__file__).resolve().parents[1]


def test_demo_runs_end_to_end_and_checks_its_journal(tmp_path: Path) -> None:
    result = mw("demo", env={"MW_RUNS": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    assert "one per run: True" in result.stdout
    assert "evidence records: 10 of 10" in result.stdout
    assert "mwm-local beats blind on hidden tasks: True" in result.stdout
    assert "agent's undo restores the baseline: True" in result.stdout
    assert "every campaign completed with all its terminal records: True" in result.stdout
    assert "mw daemon: stopped" in result.stdout
    (run_dir,) = tmp_path.iterdir()
    check = mw("journal", "check", str(run_dir / "journal"))
    assert check.returncode == 0, check.stderr
    summary = json.loads(check.stdout)
    assert summary["runs_without_terminal_record"] == {}
    assert summary["records"] > 20


def test_demo_on_trio(tmp_path: Path) -> None:
    result = mw("demo", "--runs", str(tmp_path), "--backend", "trio")
    assert result.returncode == 0, result.stderr


def test_a_corrupt_journal_is_one_line_with_a_code_and_a_hint(tmp_path: Path) -> None:
    assert mw("demo", "--runs", str(tmp_path)).returncode == 0
    (segment,) = tmp_path.glob("*/journal/*.jsonl")
    lines = segment.read_bytes().splitlines(keepends=True)
    lines[3] = lines[3].replace(b'"actor"', b'"actxr"')
    segment.write_bytes(b"".join(lines))
    result = mw("journal", "check", str(segment.parent))
    assert result.returncode == 2
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith("mw: error[journal_corrupt]: ")
    assert "line 4" in line and "hint:" in line


def test_a_missing_journal_is_a_clear_error(tmp_path: Path) -> None:
    result = mw("journal", "check", str(tmp_path / "nope"))
    assert result.returncode == 2
    assert "no journal here" in result.stderr and "hint:" in result.stderr


@pytest.mark.parametrize("case", BAD_INPUTS, ids=lambda c: " ".join(c.argv[:1] + c.argv[-2:]))
def test_a_bad_number_or_url_is_one_line_and_writes_nothing(tmp_path: Path, case: BadInput) -> None:
    prices = tmp_path / "prices.json"
    prices.write_text((ROOT / "mw_actors" / "provider" / "local_prices.json").read_text())
    places = {"runs": tmp_path / "runs", "ledger": tmp_path / "ledger", "prices": prices}
    argv = [arg.format(**places) for arg in case.argv]
    result = mw(*argv)
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith("mw: error[") and case.says in line and "hint:" in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prices.json"]  # nothing written


@pytest.mark.parametrize(("prog", "argv", "says"), BAD_PATHS, ids=lambda v: str(v)[:40])
def test_a_path_that_cannot_be_used_is_one_line(
    tmp_path: Path, prog: str, argv: tuple[str, ...], says: str
) -> None:
    """Each of these was a traceback."""
    (tmp_path / "file").write_text("a file, not a directory\n")
    (tmp_path / "rows.jsonl").write_text("[1, 2]\n")
    places = {"file": tmp_path / "file", "tmp": tmp_path, "long": "a" * 300,
              "rows": tmp_path / "rows.jsonl"}  # fmt: skip
    before = sorted(p.name for p in tmp_path.iterdir())
    result = mw(*[arg.format(**places) for arg in argv], module=f"bin.{prog}")
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"{prog}: error[") and says in line and "hint:" in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written
    assert not Path("/nonexistent-mw").exists()


def test_journal_check_reads_a_campaign_journal_and_fails_on_none(tmp_path: Path) -> None:
    run = mw("serve-learn", "run", "synthetic_l1", "--runs", str(tmp_path), "--tag", "j",
             "--train-split", "12")  # fmt: skip
    assert run.returncode == 0, run.stderr
    for path in (tmp_path / "j", tmp_path / "j" / "journal"):
        check = mw("journal", "check", str(path))
        assert check.returncode == 0, check.stderr
        summary = json.loads(check.stdout)
        assert summary["records"] > 20 and summary["runs_without_terminal_record"] == {}
    (tmp_path / "empty").mkdir()
    empty = mw("journal", "check", str(tmp_path / "empty"))
    assert empty.returncode == 2 and "no journal here" in empty.stderr


@pytest.mark.parametrize(("argv", "says"), MISSING, ids=lambda x: str(x)[:40])
def test_a_missing_thing_is_one_line(tmp_path: Path, argv: tuple[str, ...], says: str) -> None:
    (tmp_path / "runs").mkdir()
    result = mw(*[arg.format(runs=tmp_path / "runs") for arg in argv])
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.splitlines()
    assert says in line and "hint:" in line, line


def test_a_runs_traces_are_private_to_its_user(tmp_path: Path) -> None:
    """Run directories were 0755 and journals and ledgers 0644: any local user read them."""
    import stat

    run = mw("serve-learn", "run", "synthetic_l1", "--runs", str(tmp_path), "--tag", "p",
             "--train-split", "12")  # fmt: skip
    assert run.returncode == 0, run.stderr
    root = tmp_path / "p"
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    private = [*root.glob("journal/*.jsonl"), root / "ledger.jsonl", root / "wire_ledger.json"]
    assert len(private) >= 3
    for path in private:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
