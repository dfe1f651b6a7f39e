"""Codex CLI (``codex exec``) through the learner meter, with the scripted engine behind it.

Codex speaks only the Responses API; the meter adapts it to the provider's
Chat Completions. Optional: runs where ``codex`` is on PATH or where
scripts/setup.sh installed it (npm package ``@openai/codex``).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import anyio
import pytest

import meters
from mw_actors.provider import Reply, ScriptedEngine, ToolCall, Turn
from tests.processes import ROOT

from .conftest import SECRET, open_wire

pytestmark = [pytest.mark.anyio, pytest.mark.codex]

SCRIPT = [
    Reply(tool_calls=[ToolCall("exec_command", {"cmd": "echo metered-tool-output"})]),
    Reply(content="All done."),
]


def codex_binary() -> str | None:
    installed = ROOT / ".venv" / "codex" / "node_modules" / ".bin" / "codex"
    return shutil.which("codex") or (str(installed) if installed.is_file() else None)


class Recording(ScriptedEngine):
    def __init__(self) -> None:
        super().__init__(SCRIPT)
        self.turns: list[Turn] = []

    def respond(self, turn: Turn) -> Reply:
        self.turns.append(turn)
        return super().respond(turn)


@pytest.mark.timeout(180)
async def test_codex_exec_through_the_learner_meter(tmp_path: Path) -> None:
    codex = codex_binary()
    if codex is None:
        pytest.skip("codex is not installed (npm install @openai/codex)")
    engine = Recording()
    home, work = tmp_path / "codex-home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    async with open_wire(tmp_path, adapt_responses=True, engine=engine) as wire:
        provider = (
            f'{{name="mw", base_url="{wire.meter_url}", env_key="MW_CODEX_KEY", '
            'wire_api="responses"}'
        )
        done = await anyio.run_process(
            [
                codex, "exec", "--skip-git-repo-check", "-m", "local/scripted",
                "-c", "model_provider=mw", "-c", f"model_providers.mw={provider}",
                "Print the word metered-tool-output, then say you are done.",
            ],
            cwd=work,
            env={**os.environ, "CODEX_HOME": str(home), "MW_CODEX_KEY": "placeholder"},
            check=False,
        )  # fmt: skip
        statistics = wire.provider.statistics()
    output = done.stdout.decode()
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert output.strip().endswith("All done."), output
    # The tool ran and its output reached the model on the second turn, as a Chat tool message.
    assert len(engine.turns) == 2
    second = engine.turns[1].conversation
    tool_results = [m for m in second if m.get("role") == "tool"]
    assert tool_results and "metered-tool-output" in str(tool_results[-1]["content"])
    assert any(m.get("role") == "assistant" and m.get("tool_calls") for m in second)
    # One ledger line per request, each ok, totals equal to what the provider counted.
    lines = meters.read_ledger(wire.ledger_dir / "ledger.jsonl")
    assert [(x.endpoint, x.status) for x in lines] == [("/v1/responses", "ok")] * 2
    assert sum(x.input_tokens for x in lines) == statistics.input_tokens
    assert sum(x.output_tokens for x in lines) == statistics.output_tokens
    # The upstream key is in no file that the run or Codex wrote.
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path
