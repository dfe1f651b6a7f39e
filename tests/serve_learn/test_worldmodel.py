"""MWM's world model: records in, a fitted adapter, a card and ``wm`` answers out, on any domain."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mw_actors.serve_learn._protocol import episode_record
from mw_actors.serve_learn._slb import slb_available
from mw_actors.serve_learn._worldmodel import (
    Served,
    WorldModel,
    bm25_top_k,
    case_of,
    fit,
    parse_record,
    tokenize,
)

DATASET = Path(__file__).parents[1] / "data" / "servelearnbench"


def _trace(case: str, kind: str, action: str, arguments: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"kind": "tool", "name": "lookup", "args": {"id": case},
         "obs": json.dumps({"id": case, "kind": kind, "note": "line one\nline two"}),
         "input": "", "raw": "", "reasoning": "I look it up.\n[step 9] is not a step"},
        {"kind": "tool", "name": "wm", "args": {"query": "what scores?"}, "obs": "best: x()"},
        {"kind": "none", "name": "(no_tool_call)", "args": {}, "obs": "call a tool"},
        {"kind": "tool", "name": action, "args": {"id": case, **arguments}, "obs": "done"},
        {"kind": "finish", "name": "finish", "args": {}, "obs": ""},
    ]  # fmt: skip


def _served(block: int, n: int, kind: str, action: str, reward: float) -> Served:
    case = f"CASE-{1000 + n}"
    instruction = f"Current timestamp: {n}\n\nPlease handle {case} today."
    trace = _trace(case, kind, action, {"reason": "policy_code"})
    return Served(block=block, task_id=f"t{n}", timestamp=n, instruction=instruction,
                  reward=reward, record=episode_record(instruction, trace, reward))  # fmt: skip


def test_a_record_reads_back_into_its_actions_observations_and_score() -> None:
    instruction = "Current timestamp: 3\n\nPlease handle CASE-7.\nIt is urgent."
    record = episode_record(instruction, _trace("CASE-7", "refund", "deny_case", {}), 0.0)
    parsed = parse_record(record)
    assert parsed.instruction == instruction and parsed.score == 0.0
    assert [(name, args) for name, args, _ in parsed.actions] == [
        ("lookup", {"id": "CASE-7"}), ("wm", {"query": "what scores?"}),
        ("deny_case", {"id": "CASE-7"}), ("finish", {})]  # fmt: skip
    assert json.loads(parsed.actions[0][2])["note"] == "line one\nline two"


def test_the_outcome_drops_what_names_the_case_and_keeps_what_names_the_action() -> None:
    case = case_of(_served(0, 5, "refund", "deny_case", 1.0))
    assert case is not None
    assert case.signature == "deny_case(reason=policy_code)"  # the case id is gone
    assert "wm" not in case.done and case.done.startswith("lookup(); deny_case(")
    assert "refund" in case.text and "Current timestamp" not in case.text
    assert "done" not in case.text  # what the action returned is not the case
    listed = Served(block=0, task_id="t", timestamp=1, instruction="Return #W12 and #W34",
                    reward=1.0, record=episode_record("Return #W12 and #W34", [
                        {"kind": "tool", "name": "return_items", "obs": "ok",
                         "args": {"items": ["#W12", "#W34"], "method": "card"}}], 1.0))  # fmt: skip
    assert case_of(listed).signature == "return_items(method=card)"  # type: ignore[union-attr]


def test_the_adapter_learns_which_action_scores_for_which_case_and_follows_a_change(
    tmp_path: Path,
) -> None:
    served = []
    for n in range(48):  # block 0-1: refund wants deny_case; block 2-3: refund wants approve_case
        block, kind = n // 12, ("refund", "upgrade")[n % 2]
        action = ("deny_case", "approve_case")[(n // 3) % 2]
        wanted = "approve_case" if kind == "upgrade" or block >= 2 else "deny_case"
        served.append(_served(block, n, kind, action, float(action == wanted)))
    early = fit(served[:24], now=1)
    assert early.answer("a refund case").startswith("best: deny_case(reason=policy_code)")
    assert early.answer("an upgrade case").startswith("best: approve_case(reason=policy_code)")
    late = fit(served, now=3)
    assert late.answer("a refund case").startswith("best: approve_case(")
    late.save(tmp_path / "v4", 4)
    again = WorldModel.load(tmp_path / "v4")
    assert again.answer("a refund case") == late.answer("a refund case")
    assert "similar past cases:" in again.answer("refund") and "Score: " in again.answer("refund")
    card = (tmp_path / "v4" / "card.md").read_text()
    assert card.startswith("# World model v4") and "`approve_case(reason=policy_code)`" in card
    assert fit([], now=0).answer("anything").startswith("no knowledge yet")


def test_a_fit_is_byte_stable_across_runs(tmp_path: Path) -> None:
    served = [_served(n // 12, n, ("a", "b")[n % 2], "act", float(n % 3 == 0)) for n in range(24)]
    for name in ("one", "two"):
        fit(served, now=1).save(tmp_path / name, 2)
    for file in ("adapter.safetensors", "cases.jsonl", "card.md"):
        assert (tmp_path / "one" / file).read_bytes() == (tmp_path / "two" / file).read_bytes()


@pytest.mark.skipif(not slb_available(), reason="the servelearnbench package is not installed")
def test_retrieval_is_the_benchmarks_bm25_on_real_instructions() -> None:
    from servelearnbench import protocol
    from servelearnbench.methods import rag

    lines = (DATASET / "data" / "banking_l1" / "serving.jsonl").read_text().splitlines()
    rows = [json.loads(x) for x in lines]
    docs = [protocol.strip_timestamp(r["instruction"]) for r in rows[:200]]
    assert [tokenize(d) for d in docs] == [rag.tokenize(d) for d in docs]
    tokens = [rag.tokenize(d) for d in docs]
    for query in [*docs[200 - 20 :], "card transaction declined abroad", "", "zzz"]:
        assert bm25_top_k(query, tokens, 60) == rag.bm25_top_k(query, tokens, 60)
