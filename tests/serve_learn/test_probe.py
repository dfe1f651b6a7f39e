"""The knowledge probe's player: it looks up as served episodes did, acts on the ranking, reads
nothing a method may not read; and on the benchmark's own scenario, it scores the oracle 100."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from mw_actors.serve_learn._probe import (
    Lookups,
    act,
    look_up,
    parse_signature,
    play_test,
    shape,
)
from mw_actors.serve_learn._protocol import episode_record
from mw_actors.serve_learn._slb import slb_available
from mw_actors.serve_learn._worldmodel import parse_record

ROOT = Path(__file__).resolve().parents[2]
needs_slb = pytest.mark.skipif(not slb_available(), reason="servelearnbench is not installed")


def test_a_signature_reads_back_into_a_call() -> None:
    assert parse_signature("deny_case(reason=verification_required)") == (
        "deny_case", {"reason": "verification_required"})  # fmt: skip
    assert parse_signature("execute_leg(leg=2)") == ("execute_leg", {"leg": 2})
    assert parse_signature('decide_batch(decisions=[{"line": 1, "action": "approve"}])') == (
        "decide_batch", {"decisions": [{"line": 1, "action": "approve"}]})  # fmt: skip
    assert parse_signature("approve_case()") == ("approve_case", {})
    assert (shape("TRF-211564"), shape("#W9051859"), shape("approve")) == ("TRF-#", "#W#", None)


class SealedTask:
    """A task whose every field but the id and the instruction refuses to be read."""

    def __init__(self, task_id: str, instruction: str) -> None:
        object.__setattr__(self, "_open", {"task_id": task_id, "instruction": instruction})

    def __getattr__(self, name: str) -> Any:
        if name in self._open:
            return self._open[name]
        raise AssertionError(f"the player read the task's {name}")


class RecordingEnv:
    """Answers look-ups from a table; records what the player did; rewards the right act."""

    def __init__(self, facts: dict[str, dict[str, Any]], right: tuple[str, dict[str, Any]]) -> None:
        self.facts, self.right, self.calls = facts, right, []  # type: ignore[var-annotated]
        self.resets = 0

    def reset(self, task: Any) -> None:
        self.calls = []
        self.resets += 1

    def step(self, action: Any) -> Any:
        self.calls.append((action.name, dict(action.kwargs)))
        found = next(iter(action.kwargs.values()), None)
        return type("Step", (), {"observation": json.dumps(self.facts.get(str(found), {}))})()

    def compute_reward(self) -> Any:
        return type("Reward", (), {"reward": float(self.right in self.calls)})()


@needs_slb
def test_the_player_looks_up_like_served_episodes_then_acts_on_the_top_rank() -> None:
    served_trace = [
        {"kind": "tool", "name": "get_case", "args": {"case_id": "TRF-100001"},
         "obs": json.dumps({"case_id": "TRF-100001", "account_id": "ACC-200001"})},
        {"kind": "tool", "name": "get_account", "args": {"account_id": "ACC-200001"},
         "obs": json.dumps({"account_id": "ACC-200001", "tier": "basic"})},
        {"kind": "tool", "name": "deny_case", "args": {"case_id": "TRF-100001", "reason": "r1"},
         "obs": "ok"},
        {"kind": "finish", "name": "finish", "args": {}, "obs": ""},
    ]  # fmt: skip
    record = episode_record("Decide TRF-100001.", served_trace, 1.0)
    lookups = Lookups.learn([parse_record(record)])
    assert lookups.steps == [("get_case", ["case_id"]), ("get_account", ["account_id"])]
    env = RecordingEnv(
        {"TRF-300003": {"case_id": "TRF-300003", "account_id": "ACC-400004"},
         "ACC-400004": {"account_id": "ACC-400004", "tier": "gold"}},
        ("deny_case", {"reason": "r1", "case_id": "TRF-300003"}),
    )  # fmt: skip
    seen: list[str] = []

    def rank(text: str) -> list[str]:
        seen.append(text)
        return ["deny_case(reason=r1)", "approve_case()"]

    required = {"deny_case": ["case_id", "reason"], "approve_case": ["case_id"]}
    task = SealedTask("t1", "Current timestamp: 9\n\nPlease decide TRF-300003 today.")
    played = play_test(env, task, rank, lookups, required)
    assert played.reward == 1.0 and played.action == "deny_case(reason=r1)"
    assert [name for name, _ in env.calls] == ["get_case", "get_account", "deny_case", "finish"]
    assert "gold" in seen[0] and "Current timestamp" not in seen[0]  # what it found, no time


@needs_slb
def test_rankers_compared_on_one_test_share_its_look_ups_and_each_action_is_replayed_once() -> None:
    """``look_up`` once, ``act`` per ranker: the same rewards as ``play_test``, fewer replays."""
    served_trace = [
        {"kind": "tool", "name": "get_case", "args": {"case_id": "TRF-100001"},
         "obs": json.dumps({"case_id": "TRF-100001", "account_id": "ACC-200001"})},
        {"kind": "tool", "name": "deny_case", "args": {"case_id": "TRF-100001", "reason": "r1"},
         "obs": "ok"},
        {"kind": "finish", "name": "finish", "args": {}, "obs": ""},
    ]  # fmt: skip
    lookups = Lookups.learn([parse_record(episode_record("Decide TRF-100001.", served_trace, 1.0))])
    env = RecordingEnv(
        {"TRF-300003": {"case_id": "TRF-300003", "account_id": "ACC-400004"}},
        ("deny_case", {"reason": "r1", "case_id": "TRF-300003"}),
    )
    required = {"deny_case": ["case_id", "reason"], "approve_case": ["case_id"]}
    task = SealedTask("t1", "Please decide TRF-300003 today.")
    right, wrong = (lambda text: ["deny_case(reason=r1)"]), (lambda text: ["approve_case()"])
    alone = [play_test(env, task, rank, lookups, required).reward for rank in (right, wrong)]
    looked, scored = look_up(env, task, lookups), {}
    assert [name for name, _ in env.calls] == ["get_case"] and env.resets == 3
    first = act(env, looked, right, lookups, required, scored)
    assert [name for name, _ in env.calls] == ["get_case", "deny_case", "finish"]
    assert env.resets == 3  # acted where the look-ups left it
    again = act(env, looked, right, lookups, required, scored)
    assert env.resets == 3 and len(env.calls) == 3  # the same action: not replayed
    other = act(env, looked, wrong, lookups, required, scored)
    # The env had moved on: reset, the look-ups made again as made, then the other action.
    assert [name for name, _ in env.calls] == ["get_case", "approve_case", "finish"]
    assert env.resets == 4
    assert [first.reward, other.reward] == alone == [1.0, 0.0] and again.reward == 1.0


@needs_slb
@pytest.mark.slow
def test_on_banking_the_oracle_scores_100_and_mwm_knows_more_than_the_majority() -> None:
    """The probe on the benchmark's own scenario: the player never loses a right answer."""
    sys.path.insert(0, str(ROOT / "bench"))
    import learning  # bench/learning.py

    # The first two windows (half the stream) prove the point; the bench plays all four.
    probed = learning.probe_scenario(
        "banking_l1", right=0.5, seed=0, windows=(0, 1), models=("majority", "mwm", "oracle")
    )
    scores = probed["scores"]
    assert scores["oracle"]["hidden"] == 100.0 == scores["oracle"]["fully_specified"]
    assert scores["mwm"]["hidden"] > scores["majority"]["hidden"] + 20
    # --losses: every hidden test MWM played, each lost one with its family and mistake.
    lost = probed["lost"]
    kept = sum(not was_lost for *_, was_lost in lost)
    assert 100 * kept / len(lost) == pytest.approx(scores["mwm"]["hidden"])
    assert all(f != "-" and (" -> " in m or "wrong" in m) for f, m, was in lost if was)


def test_the_learning_bench_says_where_mwm_loses_its_tests() -> None:
    """``bench/learning.py --losses``: per family of test, then the commonest mistakes."""
    sys.path.insert(0, str(ROOT / "bench"))
    import learning  # bench/learning.py

    batch = 'decide(lines=[{"line": 1, "action": "approve"}])'
    other = 'decide(lines=[{"line": 1, "action": "deny"}])'
    assert learning.mistake_of(batch, other) == "decide(lines=[...]), its items decided wrong"
    assert (
        learning.mistake_of("deny(reason=late)", batch)
        == "deny(reason=late) -> decide(lines=[...])"
    )
    assert learning.mistake_of("deny(reason=late)", "") == "deny(reason=late) -> (nothing)"
    tests = [
        ("F_batch", learning.mistake_of(batch, other), True),
        ("A_limit", "approve() -> deny(reason=late)", True),
        ("F_batch", learning.mistake_of(batch, other), True),
        ("F_batch", "", False),
        ("A_kind", "", False),
    ]
    assert learning.losses("bank", tests).splitlines() == [
        "bank: MWM lost 3 of 5 hidden tests; by family: F_batch 2/3, A_limit 1/1",
        "     2  decide(lines=[...]), its items decided wrong",
        "     1  approve() -> deny(reason=late)",
    ]


@needs_slb
@pytest.mark.slow
def test_on_banking_l3_the_legs_are_decided_as_single_cases_when_that_is_better_held_out() -> None:
    """The first window of banking_l3, served right half the time: seven cases listed legs,
    too few for the legs' own rules. Judged on the cases they were fitted on, those rules
    explained six of seven (a split on a credit limit that happened to separate them) and the
    single cases' rules were set aside; every leg test then went to a single outcome. Judged
    held out, the own rules lose, and a leg is executed where a single case would approve."""
    sys.path.insert(0, str(ROOT / "bench"))
    import random

    import learning  # bench/learning.py
    from servelearnbench import scenarios

    from mw_actors.serve_learn.learners import fit, manual_of

    bundle = scenarios.get_bundle("banking_l3", fresh=True)
    served = learning.serve(bundle, 0.5, random.Random(0), upto=96)  # the first 8 blocks
    model = fit(served, now=7, manual=manual_of(bundle))
    assert model.as_cases.go == {"execute_leg|leg": "approve_case()"}
