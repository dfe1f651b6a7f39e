"""The README's embedding example runs as written, on asyncio and trio."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_readme_example(
    tmp_path: Path,
    backend: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (code,) = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    monkeypatch.chdir(tmp_path)
    code = code.replace("anyio.run(main)", f"anyio.run(main, backend={backend!r})")
    exec(compile(code, str(README), "exec"), {"__name__": "readme"})
    assert capsys.readouterr().out == "HI\n"
    assert list((tmp_path / "runs/example/journal").glob("*.jsonl"))


def test_the_benchmark_is_installed_from_the_seeds_repository_everywhere() -> None:
    """The README and the missing-package error's hint name the seed's repository, one place."""
    from mw_actors.serve_learn._slb import SLB_INSTALL, slb_missing

    assert SLB_INSTALL == "git+https://github.com/Infini-AI-Lab/ServeLearnBench"
    installs = re.findall(r"pip install (git\+\S+ServeLearnBench)", README.read_text())
    assert installs and set(installs) == {SLB_INSTALL}
    assert SLB_INSTALL in (slb_missing("banking_l1").hint or "")
