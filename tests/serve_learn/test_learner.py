"""The mwm method's LLM learner: a session through the learner meter writes each checkpoint."""

from __future__ import annotations

import json
from decimal import Decimal
from functools import partial
from pathlib import Path

import anyio
import pytest

import meters
from mw_actors.journal import read_journal
from mw_actors.metering import BUDGET_RECORDS, BudgetReserved
from mw_actors.provider import (
    LOCAL_PRICES,
    Provider,
    Reply,
    ScriptedEngine,
    ToolCall,
    serve_provider,
)
from mw_actors.serve_learn import (
    SERVE_LEARN_RECORDS,
    CampaignSpec,
    run_campaign,
    score_file,
)
from mw_actors.serve_learn._learner import (
    LearnerEndpoint,
    LearnerUsage,
    _execute,
    evidence_text,
    run_learner_session,
)
from mw_actors.serve_learn._protocol import episode_record
from mw_actors.serve_learn._worldmodel import Served

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(240)]


async def test_an_mwm_campaign_learns_through_its_own_metered_learner(
    dataset: Path, tmp_path: Path
) -> None:
    spec = CampaignSpec(
        tag="llm", scenario="synthetic_l1", dataset=dataset, runs=tmp_path, method="mwm",
        train_split=72,
    )  # fmt: skip
    run = await run_campaign(spec)
    steps = [json.loads(x) for x in (run.root / "llm" / "steps.jsonl").read_text().splitlines()]
    assert [s["block"] for s in steps] == list(range(6))
    assert all(s["learner_tokens"] > 0 and Decimal(s["learner_cost_usd"]) > 0 for s in steps)
    # The learner reached its model only through its meter; its ledger is the run's.
    lines = meters.read_ledger(run.root / "learner" / "ledger.jsonl")
    assert {(x.role, x.endpoint, x.status) for x in lines} == {("learner", "/v1/responses", "ok")}
    assert len(lines) == 4 * len(steps)  # fit, read, write, finish: one call per turn
    summary = json.loads((run.root / "meta_wire_ledger.json").read_text())
    assert summary["requests"] == len(lines)
    spent = sum((Decimal(x.cost_usd) for x in lines), Decimal(0))
    per_step = sum(Decimal(s["learner_cost_usd"]) for s in steps)
    assert Decimal(summary["cost_usd"]) == spent == per_step
    entries = read_journal(run.journal, [*BUDGET_RECORDS, *SERVE_LEARN_RECORDS])
    holders = {e.rec.holder.split(":")[0] for e in entries if isinstance(e.rec, BudgetReserved)}
    assert holders == {"host", "learner"}  # one allocation for both meters
    card = (run.root / "llm" / "checkout" / "card.md").read_text()
    assert card.startswith("# World model v6") and "## Learner notes" in card
    score = score_file(run.results)
    assert score.hidden is not None and score.hidden > 50  # it learned the hidden policy


def test_the_learner_sees_the_blocks_records_only() -> None:
    trace = [
        {
            "kind": "tool",
            "name": "get_case",
            "args": {"case_id": "C-1"},
            "obs": '{"kind": "refund"}',
        },
        {"kind": "tool", "name": "decide", "args": {"decision": "deny"}, "obs": "recorded"},
    ]
    served = [
        Served(block=b, task_id=f"t{b}", timestamp=b + 1, instruction=f"Case {b}", reward=1.0,
               record=episode_record(f"Case {b}", trace, 1.0))
        for b in (0, 1)
    ]  # fmt: skip
    text = evidence_text(served, 1)
    assert text.count("INSTRUCTION:") == 1 and "INSTRUCTION: Case 1" in text  # this block's
    assert 'action: decide({"decision": "deny"})' in text and "Score: 100/100." in text
    assert "2 served so far" in text
    # Before the records: the block's cases as the rules read them, and the rules so far.
    facts = text.index("| 2 | `decide(decision=deny)` | 100 | obs.kind=refund; figure.1=1;")
    rules = text.index("## The rules fitted on every block so far")
    assert facts < rules < text.index("INSTRUCTION: Case 1")
    assert "| 1 | `decide" not in text  # block 0's case is not this block's
    assert "| `decide(decision=deny)` | 2 / 2 |" in text  # the card, fitted on both blocks


async def _session(script: list[Reply], tmp_path: Path, out: Path) -> LearnerUsage:
    """One learner session against ``script``, through a learner meter; its usage."""
    prices = meters.load_prices(LOCAL_PRICES)
    async with anyio.create_task_group() as tg:
        port = await tg.start(serve_provider, Provider(ScriptedEngine(script)))
        config = meters.MeterConfig(
            role="learner", upstream=f"http://127.0.0.1:{port}/v1", prices=prices,
            ledger_dir=tmp_path / "ledger", adapt_responses=True,
        )  # fmt: skip
        meter = await tg.start(partial(meters.serve_meter, config))
        endpoint = LearnerEndpoint(f"http://127.0.0.1:{meter}/v1", "local/scripted", prices)
        usage = await run_learner_session(endpoint, [], 0, out)
        tg.cancel_scope.cancel()
    return usage


async def test_a_turn_with_two_calls_executes_none(tmp_path: Path) -> None:
    script = [
        Reply(tool_calls=[ToolCall("write_card", {"text": "A"}), ToolCall("fit_adapter", {})]),
        Reply(tool_calls=[ToolCall("write_card", {"text": "# card B"})]),
        Reply(content="no tool this time"),
        Reply(tool_calls=[ToolCall("finish", {})]),
    ]
    out = tmp_path / "v1"
    usage = await _session(script, tmp_path, out)
    assert (usage.turns, usage.finished) == (4, True)
    assert (out / "card.md").read_text() == "# card B\n"  # turn 1 executed nothing
    assert not (out / "adapter.safetensors").exists()


async def test_a_session_stops_at_its_turn_and_output_token_budgets(tmp_path: Path) -> None:
    from mw_actors.serve_learn._learner import MAX_OUTPUT_TOKENS, MAX_TURNS

    chatty = Reply(content="thinking " * 3000)  # no tool: a corrective message each turn
    usage = await _session([chatty] * 40, tmp_path, tmp_path)
    assert not usage.finished and usage.turns < MAX_TURNS
    assert usage.output_tokens <= MAX_OUTPUT_TOKENS  # each turn asked for what was left
    assert (tmp_path / "card.md").read_text().startswith("# World model v1")  # a version still


async def test_both_learners_fit_with_the_manual_the_host_may_read(tmp_path: Path) -> None:
    """mwm-local's fit and the mwm session's fit_adapter both read the manual's figures: a
    threshold the evidence leaves in a gap goes where the manual prints it."""
    from mw_actors.serve_learn._methods import Lesson, MwmLocal
    from mw_actors.serve_learn._worldmodel import WorldModel
    from tests.serve_learn.test_rules import MANUAL, _aged

    served = _aged([3, 10, 26, 233, 400, 661], newer_than=30)
    local = tmp_path / "local"
    lesson = Lesson(served=served, block=3, previous=tmp_path, out=local, manual=MANUAL)
    assert await MwmLocal().learn(lesson) is None
    session = tmp_path / "session"
    said = await anyio.to_thread.run_sync(_execute, "fit_adapter", {}, served, 3, session, MANUAL)
    assert said.startswith("adapter trained on 48 episodes")
    for out in (local, session):
        assert "payee_added_days_ago <= 30:" in WorldModel.load(out).card(4)
    assert "<= 30:" in evidence_text(served, 3, MANUAL)  # the rules the session is shown
    assert "<= 129.5:" in evidence_text(served, 3)
