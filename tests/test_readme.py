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
