"""An LLM editing policy, through a real wire meter, against the local provider on loopback."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import pytest

from meters import read_ledger
from mw_actors._reserver import BUDGET_RECORDS
from mw_actors.editing import (
    EDITING_RECORDS,
    CampaignOptions,
    TrialEnded,
    build_report,
    load_config,
    run_campaign,
)
from mw_actors.editing._fixture import DAMAGE
from mw_actors.editing.records import PolicyIntent, TrialStep
from mw_actors.journal import read_journal
from mw_actors.provider import FaultPlan, Provider, Reply, ScriptedEngine, ToolCall, serve_provider

from .conftest import ROOT, edit_config, repin

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180)]

SECRET = "sk-test-never-written-0123456789"
AGENT = "completion.agent.0000"

# Positions count the assistant items already in the conversation (see ScriptedEngine).
SCRIPT = [
    Reply(tool_calls=[ToolCall("run_python", {"code": DAMAGE})]),  # turn 1 -> 1 item
    Reply(tool_calls=[ToolCall("undo", {}), ToolCall("finish", {})]),  # turn 2: 2 calls, none run
    Reply(content="unused"),
    Reply(content="Thinking it over."),  # turn 3: no call -> a corrective message
    Reply(tool_calls=[ToolCall("undo", {})]),  # turn 4
    Reply(tool_calls=[ToolCall("finish", {})]),  # turn 5
]


def _use_policy(config: Path, port: int, *, allocation: str = "1.00") -> None:
    policy = config.parent / "policy.json"
    policy.write_text(
        json.dumps(
            {
                "schema_version": 1,
                "model": "local/scripted",
                "endpoint": f"http://127.0.0.1:{port}/v1",
                "credential_env": "LOCAL_PROVIDER_KEY",
                "max_turns": 6,
                "max_output_tokens": 256,
                "max_input_tokens": 8000,
            }
        )
    )

    def change(data: dict[str, Any]) -> None:
        data["runtime"] = {"backend": "bwrap", "policy": {"path": "policy.json", "sha256": ""}}
        data["limits"]["policy_turns"] = 6
        data["arms"] = [{"name": "baseline"}, {"name": "agent"}]
        data["money"]["allocation_usd"] = allocation

    edit_config(config, change)
    repin(config, policy)


async def test_a_policy_edits_through_the_meter_one_call_per_turn(
    fixture_config: Path, tmp_path: Path
) -> None:
    provider = Provider(ScriptedEngine(SCRIPT), FaultPlan())
    run = tmp_path / "run"
    async with anyio.create_task_group() as tg:
        port = await tg.start(serve_provider, provider)
        _use_policy(fixture_config, port)
        options = CampaignOptions(
            local_trusted=True,
            omp_num_threads="1",
            git_commit="test",
            secrets={"LOCAL_PROVIDER_KEY": SECRET},
        )
        await run_campaign(load_config(fixture_config), run, options)
        tg.cancel_scope.cancel()

    entries = read_journal(run / "journal", [*BUDGET_RECORDS, *EDITING_RECORDS])
    steps = [
        e.rec.tool for e in entries if isinstance(e.rec, TrialStep) and e.rec.trial_id == AGENT
    ]
    assert steps == ["run_python", "rejected", "none", "undo", "finish"]
    intents = [(e.seq, e.rec) for e in entries if isinstance(e.rec, PolicyIntent)]
    assert [i.turn for _, i in intents] == [1, 2, 3, 4, 5]
    for _, intent in intents:  # every request was retained before it was sent
        body = (run / intent.request_path).read_bytes()
        assert hashlib.sha256(body).hexdigest() == intent.request_sha256
        assert json.loads(body)["store"] is False
    ledger = read_ledger(run / "trials" / AGENT / "policy" / "ledger" / "ledger.jsonl")
    assert [line.status for line in ledger] == ["ok"] * 5
    spent = sum((Decimal(line.cost_usd) for line in ledger), Decimal(0))
    assert spent > 0
    ended = {e.rec.trial_id: e.rec for e in entries if isinstance(e.rec, TrialEnded)}
    assert ended[AGENT].outcome == "completed"
    assert Decimal(ended[AGENT].spent_usd) == spent
    report = build_report(run)
    assert Decimal(report.budget.spent_usd) == spent
    assert report.budget.reserved_usd == "0.06"
    summary = json.loads((run / "wire_ledger.json").read_text())
    assert summary["role"] == "host" and summary["requests"] == 5
    assert Decimal(summary["cost_usd"]) == spent
    assert report.checks.agent_restores_baseline is True
    # The key went upstream, and nowhere else: no file of the run holds it.
    for path in run.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path


async def test_the_meter_caps_the_policy_at_its_envelope(
    fixture_config: Path, tmp_path: Path
) -> None:
    # Every turn prints 2 kB, which comes back in the history: requests grow until the
    # meter's worst case for the next one no longer fits what is left of the envelope.
    noisy = Reply(tool_calls=[ToolCall("run_python", {"code": "print('x' * 5000)"})])
    provider = Provider(ScriptedEngine([noisy]), FaultPlan())
    run = tmp_path / "run"
    async with anyio.create_task_group() as tg:
        port = await tg.start(serve_provider, provider)
        _use_policy(fixture_config, port)

        def tighten(data: dict[str, Any]) -> None:
            data["money"]["teacher_request_usd"] = "0.0004"
            data["limits"]["policy_turns"] = 30

        edit_config(fixture_config, tighten)
        policy = fixture_config.parent / "policy.json"
        policy.write_text(
            policy.read_text()
            .replace('"max_turns": 6', '"max_turns": 30')
            .replace('"max_input_tokens": 8000', '"max_input_tokens": 2000')
        )
        repin(fixture_config, policy)
        options = CampaignOptions(
            local_trusted=True,
            omp_num_threads="1",
            git_commit="test",
            secrets={"LOCAL_PROVIDER_KEY": SECRET},
        )
        await run_campaign(load_config(fixture_config), run, options)
        tg.cancel_scope.cancel()
    ledger = read_ledger(run / "trials" / AGENT / "policy" / "ledger" / "ledger.jsonl")
    forwarded = [line for line in ledger if line.status == "ok"]
    assert ledger[-1].status == "budget_blocked"
    assert 3 < len(forwarded) < 30
    spent = sum((Decimal(line.cost_usd) for line in forwarded), Decimal(0))
    assert spent <= Decimal("0.012")  # never more than the envelope: 30 x 0.0004
    entries = read_journal(run / "journal", [*BUDGET_RECORDS, *EDITING_RECORDS])
    ended = {e.rec.trial_id: e.rec for e in entries if isinstance(e.rec, TrialEnded)}
    assert ended[AGENT].outcome == "failed"
    assert "HTTP 429" in (ended[AGENT].reason or "")
    assert Decimal(ended[AGENT].spent_usd) == spent
    assert Decimal(build_report(run).budget.spent_usd) == spent


def test_a_missing_credential_is_one_clear_line(fixture_config: Path, tmp_path: Path) -> None:
    _use_policy(fixture_config, 9)
    env = {k: v for k, v in os.environ.items() if k != "LOCAL_PROVIDER_KEY"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bin.wsm",
            "benchmark",
            "run",
            "--config",
            str(fixture_config),
            "--output",
            str(tmp_path / "run"),
            "--local-trusted",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        line for line in done.stderr.strip().splitlines() if "LOCAL_PROVIDER_KEY is not set" in line
    ]
    assert not (tmp_path / "run").exists()
