"""MWM's facts and rules: typed facts from what the tools returned, rules with numbers in them."""

from __future__ import annotations

import json
import random
import re
import tempfile
from pathlib import Path
from typing import Any

import pytest

from mw_actors.serve_learn import _rules as rules
from mw_actors.serve_learn import _standins as standins
from mw_actors.serve_learn._protocol import episode_record
from mw_actors.serve_learn._worldmodel import Served, WorldModel, _choice_legs, case_of, fit


def test_facts_keep_numbers_paths_and_kinds_never_ids() -> None:
    observation = {"case_id": "TXN-170299", "amount": 742.69, "nested": {"level": 3},
                   "shop_id": "MER-756", "flags": ["a", "b"], "ok": True}  # fmt: skip
    text = f"Card payment of $1,250.50 for 3 items.\n{json.dumps(observation)}"
    facts = rules.facts_of(text)
    assert facts["case.amount"] == 742.69 and facts["case.nested.level"] == 3.0
    assert facts["case.case_id.shape"] == "TXN-#" and facts["case.shop_id.shape"] == "MER-#"
    assert facts["case.flags.count"] == 2.0 and facts["case.ok"] == "true"
    assert facts["figure.1"] == 1250.5 and facts["figure.2"] == 3.0  # the instruction's figures
    assert "170299" not in json.dumps(facts)  # which case it is never becomes a fact


def _episode(
    n: int,
    block: int,
    instruction: str,
    looked: tuple[str, dict[str, Any], dict[str, Any]],
    acted: tuple[str, dict[str, Any]],
    reward: float,
) -> Served:
    """A served episode: one look-up (tool, arguments, what it found), one act, finish."""
    trace = [
        {"kind": "tool", "name": looked[0], "args": looked[1], "obs": json.dumps(looked[2])},
        {"kind": "tool", "name": acted[0], "args": acted[1], "obs": "ok"},
        {"kind": "finish", "name": "finish", "args": {}, "obs": ""},
    ]
    return Served(block=block, task_id=f"t{n}", timestamp=n + 1, instruction=instruction,
                  reward=reward, record=episode_record(instruction, trace, reward))  # fmt: skip


def _served(n: int, block: int, facts: dict[str, Any], decision: str, reward: float) -> Served:
    case = {"case_id": f"CASE-{1000 + n}"}
    instruction = f"Current timestamp: {n + 1}\n\nDecide case CASE-{1000 + n}."
    looked = ("get_case", case, {**case, **facts})
    return _episode(n, block, instruction, looked, ("decide", {**case, "decision": decision}),
                    reward)  # fmt: skip


def _stream(right: float, seed: int, cases: int = 144) -> list[Served]:
    """Deny above $650 for electronics, approve otherwise; the agent right ``right`` of the time."""
    rng = random.Random(seed)
    served = []
    for n in range(cases):
        facts = {"amount": round(rng.uniform(50, 1500), 2),
                 "category": rng.choice(["electronics", "grocery", "travel"])}  # fmt: skip
        wanted = (
            "deny" if facts["category"] == "electronics" and facts["amount"] > 650 else "approve"
        )
        taken = wanted if rng.random() < right else ("approve" if wanted == "deny" else "deny")
        served.append(_served(n, n // 12, facts, taken, float(taken == wanted)))
    return served


def _query(amount: float, category: str) -> str:
    observation = json.dumps({"case_id": "CASE-9999", "amount": amount, "category": category})
    return f"Decide case CASE-9999.\n{observation}"


def test_a_threshold_and_a_conjunction_are_learned_and_stated_with_their_numbers() -> None:
    """The bag of words could not see an amount: every rule with a number was invisible."""
    model = fit(_stream(right=0.5, seed=1), now=11)
    assert model.ranked(_query(1200.0, "electronics"))[0] == "decide(decision=deny)"
    assert model.ranked(_query(300.0, "electronics"))[0] == "decide(decision=approve)"
    assert model.ranked(_query(1200.0, "grocery"))[0] == "decide(decision=approve)"
    card = model.card(12)
    rule = next(line for line in card.splitlines() if line.startswith("- `decide(decision=deny)`"))
    assert "case.amount >" in rule and "case.category = electronics" in rule, card


def test_a_score_on_one_decision_is_evidence_against_the_others() -> None:
    """Only ever taken and scored, approve looked right everywhere; implied zeros say otherwise."""
    served = [_served(n, n // 12, {"category": "travel"}, "deny", 1.0) for n in range(24)] + [
        _served(24 + n, 2, {"category": "grocery"}, "approve", 1.0) for n in range(12)
    ]
    model = fit(served, now=2)
    estimate = model.estimate(_query(10.0, "travel"))
    assert estimate["decide(decision=deny)"] > 0.5 > estimate["decide(decision=approve)"]


def test_an_ordinal_argument_stays_in_the_outcome() -> None:
    """A leg number is a digit the case shows, and was dropped as if it named the case."""
    instruction = "Transfer TRF-55: leg 1 $700, leg 2 $500. Settle it."
    trace = [{"kind": "tool", "name": "execute_leg", "obs": "ok",
              "args": {"case_id": "TRF-55", "leg": 2}}]  # fmt: skip
    served = Served(block=0, task_id="t", timestamp=1, instruction=instruction, reward=1.0,
                    record=episode_record(instruction, trace, 1.0))  # fmt: skip
    case = case_of(served)
    assert case is not None and case.signature == "execute_leg(leg=2)"


def test_a_decision_made_through_finish_is_the_outcome() -> None:
    """A refusal through finish was ignored: the outcome became the last look-up."""
    instruction = "Cancel order #W1234567 please."
    trace = [{"kind": "tool", "name": "get_order_details", "args": {"order_id": "#W1234567"},
              "obs": json.dumps({"order_id": "#W1234567", "status": "delivered"})},
             {"kind": "finish", "name": "finish", "obs": "",
              "args": {"decision": "refuse", "reason": "order_delivered"}}]  # fmt: skip
    served = Served(block=0, task_id="t", timestamp=1, instruction=instruction, reward=1.0,
                    record=episode_record(instruction, trace, 1.0))  # fmt: skip
    case = case_of(served)
    assert case is not None
    assert case.signature == "finish(decision=refuse, reason=order_delivered)"
    assert "delivered" in case.text


def test_nothing_in_the_rules_names_a_domain() -> None:
    from pathlib import Path

    import mw_actors.serve_learn._probe as probe
    import mw_actors.serve_learn._worldmodel as worldmodel

    for module in (rules, standins, worldmodel, probe):
        source = Path(str(module.__file__)).read_text().lower()
        for word in ("bank", "retail", "pitch", "merchant", "payee", "refund", "order_id"):
            assert word not in source, (module.__name__, word)


def test_the_learner_is_given_no_window_category_or_evaluator() -> None:
    """What a learner reads of an episode: no label that only the scoring may read."""
    assert set(Served.__struct_fields__) == {
        "block", "task_id", "timestamp", "instruction", "reward", "record"}  # fmt: skip
    served = _stream(right=1.0, seed=2, cases=24)
    renamed = [
        Served(block=s.block, task_id=f"other-{n}", timestamp=s.timestamp,
               instruction=s.instruction, reward=s.reward, record=s.record)
        for n, s in enumerate(served)
    ]  # fmt: skip
    card = fit(served, now=1).card(2)  # a task's id tells the learner nothing either
    assert card == fit(renamed, now=1).card(2)


def _batch(n: int, block: int, days: list[int], right: float, rng: random.Random) -> Served:
    """A batch of lines, each to approve, or to review when its payee is under 30 days old."""
    lines = [{"line": i + 1, "payee_added_days_ago": d, "amount": 100.0 + i}
             for i, d in enumerate(days)]  # fmt: skip
    wanted = [{"line": x["line"], "action": "review" if x["payee_added_days_ago"] <= 30
               else "approve"} for x in lines]  # fmt: skip
    taken = (
        wanted
        if rng.random() < right
        else [{"line": x["line"], "action": rng.choice(["approve", "review"])} for x in lines]
    )
    batch = {"batch_id": f"BATCH-{1000 + n}"}
    looked = ("look", batch, {**batch, "lines": lines})
    return _episode(n, block, f"Settle batch BATCH-{1000 + n}.", looked,
                    ("settle", {**batch, "decisions": taken}), float(taken == wanted))  # fmt: skip


def test_a_decision_made_item_by_item_is_learned_per_item_and_filled_for_the_case() -> None:
    """A batch decided line by line was one outcome per combination of lines: never learned.
    Per line, the rule is a threshold on the line's own fact, and a new batch is filled."""
    rng = random.Random(3)
    served = [_batch(n, n // 12, [rng.choice([3, 12, 45, 400, 800]) for _ in range(3)], 0.5, rng)
              for n in range(96)]  # fmt: skip
    model = fit(served, now=7)
    assert model.signatures == ["settle(decisions=[...])"]
    lines = [{"line": 1, "payee_added_days_ago": 700, "amount": 5.0},
             {"line": 2, "payee_added_days_ago": 9, "amount": 5.0}]  # fmt: skip
    query = "Settle batch BATCH-9999.\n" + json.dumps({"batch_id": "BATCH-9999", "lines": lines})
    assert model.ranked(query) == [
        'settle(decisions=[{"line": 1, "action": "approve"}, {"line": 2, "action": "review"}])'
    ]
    assert model.ranked("Settle batch BATCH-9999.") == ["settle(decisions=[...])"]  # no lines
    card = model.card(8)
    assert "## `settle`, decisions item by item (each `line`)" in card, card
    assert "item.payee_added_days_ago <=" in card and '{"action": "review"}' in card, card
    with tempfile.TemporaryDirectory() as out:  # the items' rules survive the checkpoint
        model.save(Path(out), 8)
        assert WorldModel.load(Path(out)).ranked(query) == model.ranked(query)


def _fallback(n: int, block: int, amounts: list[float], right: float, rng: random.Random) -> Served:
    """Legs in order; the first whose amount is at most 500 is the one to execute."""
    legs = [{"leg": i + 1, "amount": a} for i, a in enumerate(amounts)]
    wanted = next((x["leg"] for x in legs if x["amount"] <= 500), len(legs))
    taken = wanted if rng.random() < right else rng.choice([x["leg"] for x in legs])
    case = {"case_id": f"PAY-{1000 + n}"}
    looked = ("look", case, {**case, "legs": legs})
    return _episode(n, block, f"Pay case PAY-{1000 + n}, falling back leg by leg.", looked,
                    ("execute", {**case, "leg": taken}), float(taken == wanted))  # fmt: skip


def test_an_ordered_choice_learns_which_item_passes_and_picks_the_first_that_does() -> None:
    """execute(leg=2) was one outcome per leg number, blind to the legs' own facts."""
    rng = random.Random(5)
    served = [
        _fallback(
            n, n // 12, [rng.choice([200.0, 450.0, 700.0, 900.0]) for _ in range(3)], 0.5, rng
        )
        for n in range(96)
    ]
    model = fit(served, now=7)
    assert model.signatures == ["execute(leg=<item>)"]

    def query(amounts: list[float]) -> str:
        legs = [{"leg": i + 1, "amount": a} for i, a in enumerate(amounts)]
        return "Pay case PAY-9999.\n" + json.dumps({"case_id": "PAY-9999", "legs": legs})

    assert model.ranked(query([800.0, 300.0, 100.0])) == ["execute(leg=2)"]
    assert model.ranked(query([100.0, 300.0, 800.0])) == ["execute(leg=1)"]
    assert model.ranked(query([950.0, 800.0, 250.0])) == ["execute(leg=3)"]
    card = model.card(8)
    assert "## `execute`: which `leg` (the first, in order, that is)" in card, card
    assert "item.amount <=" in card, card
    with tempfile.TemporaryDirectory() as out:
        model.save(Path(out), 8)
        assert WorldModel.load(Path(out)).ranked(query([800.0, 300.0, 100.0])) == ["execute(leg=2)"]


def _legs_or_deny(n: int, block: int, amounts: list[float], right: bool) -> Served:
    """Legs in order: execute the first at most 500, else decide the case as leg 1 (deny)."""
    legs = [{"leg": i + 1, "amount": a} for i, a in enumerate(amounts)]
    wanted = next((x["leg"] for x in legs if x["amount"] <= 500), 0)
    taken = wanted if right else (1 if wanted != 1 else 2)
    case = {"case_id": f"CASE-{1000 + n}"}
    executed = ("execute", {**case, "leg": taken})
    acted = executed if taken else ("decide", {**case, "decision": "deny"})
    instruction = f"Current timestamp: {n + 1}\n\nDecide case CASE-{1000 + n}, leg by leg."
    looked = ("get_case", case, {**case, "legs": legs})
    return _episode(n, block, instruction, looked, acted, float(taken == wanted))


def test_the_items_of_a_rare_choice_are_decided_as_the_many_single_cases_are() -> None:
    """Single requests (approve up to 500, deny above) are many; cases that list legs of the
    same requests are rare, too few for the legs' own rules. Each leg stands in for a single
    case: the first leg a single case would approve is executed, and a case none of whose
    legs goes is denied, as its first leg would be."""
    rng = random.Random(9)
    served = []
    for n in range(120):
        if n % 12 == 5:  # one case with legs per block, served right 2 times in 3
            # every third one has no leg that goes
            offered = [700.0, 900.0] if n % 36 == 17 else [200.0, 450.0, 700.0, 900.0]
            amounts = [rng.choice(offered) for _ in range(3)]
            served.append(_legs_or_deny(n, n // 12, amounts, right=n % 36 != 5))
            continue
        amount = round(rng.uniform(50, 1000), 2)
        wanted = "approve" if amount <= 500 else "deny"
        taken = wanted if rng.random() < 0.8 else ("deny" if wanted == "approve" else "approve")
        served.append(_served(n, n // 12, {"amount": amount}, taken, float(taken == wanted)))
    model = fit(served, now=9)

    def query(amounts: list[float]) -> str:
        legs = [{"leg": i + 1, "amount": a} for i, a in enumerate(amounts)]
        return "Decide case CASE-9999.\n" + json.dumps({"case_id": "CASE-9999", "legs": legs})

    cases = [([800.0, 300.0, 100.0], "execute(leg=2)"),
             ([950.0, 800.0, 250.0], "execute(leg=3)"),
             ([100.0, 300.0, 800.0], "execute(leg=1)"),
             ([950.0, 800.0, 700.0], "decide(decision=deny)")]  # fmt: skip
    assert [model.ranked(query(legs))[0] for legs, _ in cases] == [want for _, want in cases]
    assert model.as_cases.go == {"execute|leg": "decide(decision=approve)"}
    for legs, want in cases:  # wm answers as the ranking does
        assert model.answer(query(legs)).startswith(f"best: {want} "), model.answer(query(legs))
    card = model.card(10)
    assert "`execute`: the first `leg` that a single case would `decide(decision=approve)`" in card
    with tempfile.TemporaryDirectory() as out:
        model.save(Path(out), 10)
        loaded = WorldModel.load(Path(out))
        assert [loaded.ranked(query(legs))[0] for legs, _ in cases] == [w for _, w in cases]


def test_what_lets_an_item_go_is_what_picks_the_items_chosen_and_else_the_default() -> None:
    """A first-pass rule misreads legs between 450 and 600 as ``hold``. Four cases chose
    480 after passing over 520 (both read ``hold``), three chose 300 after passing over
    700: ``hold`` is what the chosen legs get most, but the first leg it would pick is the
    one chosen in none of those cases; ``approve`` picks the chosen leg in three. Of two
    outcomes that pick alike (within two cases), the single cases' default goes."""

    def plain(facts: dict[str, rules.Value]) -> str:
        amount = facts["case.amount"]
        assert isinstance(amount, float)
        return "approve" if amount <= 450 else "hold" if amount <= 600 else "deny"

    def choice(first: float, chosen: float) -> standins.Choice:
        legs: dict[int, dict[str, rules.Value]] = {
            1: {"item.amount": first},
            2: {"item.amount": chosen},
        }
        return ("execute|leg", {"case.kind": "legs"}, legs, 2, "execute(leg=<item>)")

    single: list[dict[str, rules.Value]] = [
        {"case.kind": "one", "case.amount": 100.0 * n} for n in range(1, 9)
    ]
    choices = [choice(520.0, 480.0)] * 4 + [choice(700.0, 300.0)] * 3
    assert standins.learn(single, choices, [], plain).go == {"execute|leg": "approve"}
    assert standins.learn(single, choices, [], plain, default="hold").go == {
        "execute|leg": "approve"  # better by three cases
    }
    near = [choice(520.0, 480.0)] * 4 + [choice(700.0, 300.0)]  # better by one case
    assert standins.learn(single, near, [], plain).go == {"execute|leg": "approve"}
    assert standins.learn(single, near, [], plain, default="hold").go == {"execute|leg": "hold"}


def test_a_choice_kept_to_its_own_rules_teaches_the_legs_what_picks_the_chosen_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where a choice's own rules decide it better than the stand-ins do, its chosen legs
    still teach the single cases' rules, as successes of what lets a leg go. A first pass
    that misreads legs between 450 and 600 as ``hold`` must not make ``hold`` that outcome
    because the chosen legs got it most: the first leg ``hold`` would pick was chosen in
    none of those cases (the misreading would become evidence for itself)."""
    served = [
        _served(
            n, n // 12, {"amount": 100.0 * (n % 9 + 1)}, "approve" if n % 9 < 5 else "deny", 1.0
        )
        for n in range(0, 96, 2)
    ]
    for n, (first, chosen) in enumerate([(520.0, 480.0)] * 4 + [(700.0, 300.0)] * 3):
        served.append(_legs_or_deny(97 + 2 * n, (97 + 2 * n) // 12, [first, chosen], right=True))
    model = fit(served, now=7)

    def misread(facts: dict[str, rules.Value]) -> str:
        amount = next(v for k, v in facts.items() if k.endswith("amount"))
        assert isinstance(amount, float)
        return "decide(decision=approve)" if amount <= 450 else "hold" if amount <= 600 else "deny"

    monkeypatch.setattr(model, "_plain", misread)
    model.as_cases.go.clear()  # the choice kept to its own rules
    cases = [c for c in (case_of(s) for s in served) if c is not None]
    scored = [
        (rules.Row(rules.facts_of(c.text, model.vocabulary), c.signature, True, c.block), c)
        for c in cases
    ]
    legs = _choice_legs(model, scored)
    assert len(legs) == 14  # two legs in each of the seven cases
    assert {r.outcome for r in legs} == {"decide(decision=approve)"}
    assert sum(r.scored for r in legs) == 7  # the chosen legs; the ones passed over failed


def _request(n: int, block: int, days: int, amount: float, right: bool) -> Served:
    """A single payment: review a payee under 30 days old, report above 5000, else approve."""
    wanted = ("escalate", "new_payee") if days <= 30 else ("escalate", "big") if amount > 5000 \
        else ("approve", "")  # fmt: skip
    taken = wanted if right else ("approve", "") if wanted[0] != "approve" else ("escalate", "big")
    case = {"case_id": f"CASE-{1000 + n}"}
    looked = ("get_case", case, {**case, "payee_added_days_ago": days, "amount": amount})
    acted = (taken[0], {**case, **({"reason": taken[1]} if taken[1] else {})})
    return _episode(n, block, f"Decide case CASE-{1000 + n}.", looked, acted,
                    float(taken == wanted))  # fmt: skip


def test_a_batch_that_never_scored_is_decided_line_by_line_as_single_cases_are() -> None:
    """Batches are rare and were all served wrong: the lines' own rules have nothing to
    learn from, and no single outcome ever scored on a case that lists lines. The batch is
    still the form such a case takes, and each line is decided as a single case is, in the
    decision that says the same: one never seen in a batch is made as the others are."""
    rng = random.Random(4)
    served = []
    for n in range(120):
        if n % 24 == 7:  # a batch, served wrong, whose lines only ever approved or reviewed
            lines = [{"line": 1, "payee_added_days_ago": 700, "amount": 120.0},
                     {"line": 2, "payee_added_days_ago": 700, "amount": 300.0}]  # fmt: skip
            batch = {"batch_id": f"BATCH-{1000 + n}"}
            taken = [{"line": 1, "action": "escalate", "reason": "new_payee"},
                     {"line": 2, "action": "approve"}]  # fmt: skip
            served.append(_episode(n, n // 12, f"Settle batch BATCH-{1000 + n}.",
                                   ("look", batch, {**batch, "lines": lines}),
                                   ("settle", {**batch, "decisions": taken}), 0.0))  # fmt: skip
            continue
        days, amount = rng.choice([5, 20, 90, 700]), rng.choice([150.0, 900.0, 6000.0, 9000.0])
        served.append(_request(n, n // 12, days, amount, rng.random() < 0.8))
    model = fit(served, now=9)
    assert model.items == {}  # no batch scored: the lines' own rules learned nothing
    lines = [{"line": 1, "payee_added_days_ago": 700, "amount": 100.0},
             {"line": 2, "payee_added_days_ago": 9, "amount": 100.0},
             {"line": 3, "payee_added_days_ago": 700, "amount": 9000.0}]  # fmt: skip
    query = "Settle batch BATCH-9999.\n" + json.dumps({"batch_id": "BATCH-9999", "lines": lines})
    want = ('settle(decisions=[{"line": 1, "action": "approve"}, '
            '{"line": 2, "action": "escalate", "reason": "new_payee"}, '
            '{"line": 3, "action": "escalate", "reason": "big"}])')  # fmt: skip
    assert model.ranked(query)[0] == want
    assert model.answer(query).startswith(f"best: {want} "), model.answer(query)
    single = "Decide case CASE-9999.\n" + json.dumps(
        {"case_id": "CASE-9999", "payee_added_days_ago": 700, "amount": 9000.0}
    )
    assert model.ranked(single)[0] == "escalate(reason=big)"  # a single case is not a batch
    with tempfile.TemporaryDirectory() as out:
        model.save(Path(out), 10)
        assert WorldModel.load(Path(out)).ranked(query)[0] == want


def test_a_rule_on_kinds_is_learned_where_a_rule_on_names_fits_the_cases_seen() -> None:
    """Gift shops (each with its own name) deny a basic account and approve a verified one;
    other shops approve. The basic accounts came with two of the gift shops: a rule on
    those names fits the served cases as well, and reaches no new shop. The rule on the
    kind and the grade does."""
    rng = random.Random(4)
    gift = ["Vault", "Token", "Prepaid", "Cardnest"]
    others = [f"Shop{chr(65 + i)}" for i in range(20)]
    served = []
    for n in range(144):
        is_gift = n % 3 == 0
        name = rng.choice(gift if is_gift else others)
        # As it happened, the basic accounts came with two of the gift shops.
        grade = (
            ("basic" if name in gift[:2] else "verified")
            if is_gift
            else rng.choice(["basic", "verified"])
        )
        facts = {"shop": {"shop_id": f"SHP-{100 + (gift + others).index(name)}", "name": name,
                          "kind": "gift" if is_gift else "other"},
                 "account": {"account_id": f"ACC-{n + 100}", "grade": grade}}  # fmt: skip
        wanted = "deny" if is_gift and grade == "basic" else "approve"
        taken = wanted if rng.random() < 0.5 else ("approve" if wanted == "deny" else "deny")
        served.append(_served(n, n // 12, facts, taken, float(taken == wanted)))
    model = fit(served, now=11)

    def query(name: str, kind: str, grade: str) -> str:
        shown = {"case_id": "CASE-9999", "shop": {"shop_id": "SHP-999", "name": name,
                 "kind": kind}, "account": {"account_id": "ACC-9", "grade": grade}}  # fmt: skip
        return "Decide case CASE-9999.\n" + json.dumps(shown)

    assert model.ranked(query("Newgift", "gift", "basic"))[0] == "decide(decision=deny)"
    assert model.ranked(query("Newgift", "gift", "verified"))[0] == "decide(decision=approve)"
    assert model.ranked(query("Newshop", "other", "basic"))[0] == "decide(decision=approve)"


def test_a_broad_rule_and_an_exception_that_both_fire_are_judged_where_it_applies() -> None:
    """``approve`` when the amount is small (its rule never looked at the kind of shop) and
    ``deny`` for a gift shop and a basic account both fire on a small gift purchase from a
    basic account. The served cases the exception speaks of were all denied: it wins."""
    served = []
    for n in range(48):
        gift = n % 4 == 0
        facts = {"amount": 100.0 + n, "kind": "gift" if gift else "other",
                 "grade": "basic" if gift or n % 3 else "verified"}  # fmt: skip
        taken = "deny" if gift else "approve"
        served.append(_served(n, n // 12, facts, taken, 1.0))
    approve, deny = "decide(decision=approve)", "decide(decision=deny)"
    leaf = rules.Node
    small = leaf(fact="case.amount", op="<=", value=500.0,
                 yes=leaf(estimate={approve: 0.99}), no=leaf(estimate={approve: 0.2}))  # fmt: skip
    basic = leaf(fact="case.grade", op="=", value="basic",
                 yes=leaf(estimate={deny: 0.9}), no=leaf(estimate={deny: 0.1}))  # fmt: skip
    exception = leaf(fact="case.kind", op="=", value="gift", yes=basic,
                     no=leaf(estimate={deny: 0.01}))  # fmt: skip
    cases = [c for c in map(case_of, served) if c is not None]
    model = WorldModel([], [approve, deny], {approve: small, deny: exception}, [1.0, 1.0], cases)
    query = "Decide case CASE-9999.\n" + json.dumps(
        {"case_id": "CASE-9999", "amount": 120.0, "kind": "gift", "grade": "basic"}
    )
    assert model.ranked(query)[0] == deny
    estimate = model.estimate(query)
    assert estimate[deny] > 0.9 > 0.1 > estimate[approve]  # on the 12 gift cases: all denied
    other = query.replace('"gift"', '"other"')
    assert model.ranked(other)[0] == approve  # the exception does not fire: the broad rule


def test_a_change_in_one_policy_is_followed_and_its_start_survives_a_checkpoint() -> None:
    """The limit falls from 650 to 300 at block 9: the rules are learned again from there,
    and the exceptions' re-estimate of a loaded checkpoint reads the same cases."""
    rng = random.Random(6)
    served = []
    for n in range(144):
        block, amount = n // 12, round(rng.uniform(50, 1000), 2)
        limit = 650 if block < 9 else 300
        wanted = "approve" if amount <= limit else "escalate"
        taken = wanted if rng.random() < 0.7 else rng.choice(["approve", "escalate"])
        served.append(_served(n, block, {"amount": amount}, taken, float(taken == wanted)))
    model = fit(served, now=11)
    assert model.since > 0  # a change was found

    def query(amount: float) -> str:
        return "Decide case CASE-9999.\n" + json.dumps({"case_id": "CASE-9999", "amount": amount})

    assert model.ranked(query(500.0))[0] == "decide(decision=escalate)"  # the new limit
    assert model.ranked(query(200.0))[0] == "decide(decision=approve)"
    with tempfile.TemporaryDirectory() as out:
        model.save(Path(out), 12)
        loaded = WorldModel.load(Path(out))
        assert loaded.since == model.since
        for amount in (200.0, 500.0, 800.0):
            assert loaded.estimate(query(amount)) == model.estimate(query(amount))


def _kinds(n: int, block: int, rng: random.Random) -> Served:
    """Payments escalate above $5000; limit requests (no amount) are denied above $4000."""
    case = {"case_id": f"CASE-{1000 + n}"}
    if n % 2:
        facts: dict[str, Any] = {"kind": "payment", "amount": rng.choice([900.0, 3000.0, 7000.0])}
        wanted = ("escalate", "big") if facts["amount"] > 5000 else ("approve", "")
        text = f"Pay ${facts['amount']:.2f} on case CASE-{1000 + n}."
    else:
        facts = {"kind": "limit", "requested": rng.choice([2000.0, 3000.0, 4500.0, 6000.0])}
        wanted = ("deny", "cap") if facts["requested"] > 4000 else ("approve", "")
        text = f"Raise the limit to ${facts['requested']:.2f} on case CASE-{1000 + n}."
    others = [d for d in [("approve", ""), ("escalate", "big"), ("deny", "cap")] if d != wanted]
    taken = wanted if rng.random() < 0.7 else rng.choice(others)
    acted = (taken[0], {**case, **({"reason": taken[1]} if taken[1] else {})})
    return _episode(n, block, text, ("get_case", case, {**case, **facts}), acted,
                    float(taken == wanted))  # fmt: skip


def test_an_outcome_goes_only_to_the_kind_of_case_it_has_scored_on() -> None:
    """Escalation has only ever scored on payments. A limit request of $9000 is larger than
    any request served: the figure that escalation's rule reads (above $5000) is where only
    payments were, and the denial's rule never saw so much. The request still goes as
    limit requests do, and the card says where each action has scored."""
    rng = random.Random(0)
    model = fit([_kinds(n, n // 12, rng) for n in range(144)], now=11)
    assert model.scopes["escalate(reason=big)"] == {"case.kind": "payment"}
    assert model.scopes["approve()"] == {}  # it scored on both kinds
    for requested, want in [(9000.0, "deny(reason=cap)"), (6000.0, "deny(reason=cap)"),
                            (2500.0, "approve()")]:  # fmt: skip
        query = f"Raise the limit to ${requested:.2f} on case CASE-9999.\n" + json.dumps(
            {"case_id": "CASE-9999", "kind": "limit", "requested": requested}
        )
        assert model.ranked(query)[0] == want, (requested, model.estimate(query))
    card = model.card(12)
    assert "- `escalate(reason=big)`: only where case.kind = payment" in card
    with tempfile.TemporaryDirectory() as out:
        model.save(Path(out), 12)
        assert WorldModel.load(Path(out)).scopes == model.scopes


def test_a_rule_on_the_sum_of_two_numbers_is_learned_and_stated() -> None:
    """Escalate when today's total plus this amount passes $2000; a tenure in years is
    summed with neither (its size is apart from theirs)."""
    rng = random.Random(5)
    served = []
    for n in range(144):
        total, amount = rng.uniform(0, 1900), rng.uniform(20, 1500)
        facts = {"today_total": round(total, 2), "amount": round(amount, 2),
                 "tenure_years": rng.randint(1, 9)}  # fmt: skip
        wanted = "escalate" if total + amount > 2000 else "approve"
        right = rng.random() < 0.7
        taken = wanted if right else ("approve" if wanted == "escalate" else "escalate")
        served.append(_served(n, n // 12, facts, taken, float(taken == wanted)))
    model = fit(served, now=11)
    for total, amount, want in [(1500.0, 650.0, "escalate"), (1500.0, 350.0, "approve"),
                                (300.0, 1850.0, "escalate"), (900.0, 950.0, "approve"),
                                (1100.0, 1050.0, "escalate")]:  # fmt: skip
        query = "Decide case CASE-9999.\n" + json.dumps(
            {"case_id": "CASE-9999", "today_total": total, "amount": amount, "tenure_years": 4}
        )
        assert model.ranked(query)[0] == f"decide(decision={want})", (total, amount)
    card = model.card(12)
    assert "case.amount + case.today_total" in card, card
    assert "tenure_years +" not in card and "+ case.tenure_years" not in card


def test_a_number_shown_twice_does_not_crowd_out_the_sum_that_decides() -> None:
    """Escalate when today's total plus this amount passes $2000. Today's total is shown
    under two names, and a count of today's payments follows it: alone, those split
    best, and the small amount least. The sum that decides is still tried, because a
    number under a second name is one number."""
    rng = random.Random(5)
    served = []

    def case(total: float, amount: float) -> dict[str, float]:
        return {"today_total": total, "same_day_total": total,
                "today_count": float(round(total / 100)), "amount": amount}  # fmt: skip

    for n in range(144):
        total, amount = round(rng.uniform(0, 2400), 2), round(rng.uniform(20, 400), 2)
        wanted = "escalate" if total + amount > 2000 else "approve"
        right = rng.random() < 0.7
        taken = wanted if right else ("approve" if wanted == "escalate" else "escalate")
        served.append(_served(n, n // 12, case(total, amount), taken, float(taken == wanted)))
    model = fit(served, now=11)
    asked = [(1900.0, 40.0, "approve"), (1900.0, 160.0, "escalate"),
             (1700.0, 350.0, "escalate"), (1700.0, 250.0, "approve")]  # fmt: skip
    for total, amount, want in asked:
        query = "Decide case CASE-9999.\n" + json.dumps(
            {"case_id": "CASE-9999", **case(total, amount)}
        )
        assert model.ranked(query)[0] == f"decide(decision={want})", (total, amount)
    assert re.search(r"case\.amount \+ case\.(today|same_day)_total [<>]", model.card(12))


def test_of_tests_that_part_the_cases_alike_a_kind_is_chosen_over_a_threshold() -> None:
    """Deny overseas. Every overseas case served so far came with a balance above $1000
    and every domestic one below $800, so ``balance > 900`` parts them exactly as
    ``region = overseas`` does. A threshold could have been drawn anywhere in that gap
    and on any number: a kind is the likelier rule, and it decides a new overseas case
    with a small balance, and a domestic one with a large balance."""
    rng = random.Random(3)
    served = []
    for n in range(48):
        overseas = rng.random() < 0.3
        balance = round(rng.uniform(1000, 2000) if overseas else rng.uniform(50, 800), 2)
        decision = "deny" if overseas else "approve"
        facts = {"balance": balance, "region": "overseas" if overseas else "domestic"}
        served.append(_served(n, n // 12, facts, decision, 1.0))
    model = fit(served, now=3)
    for balance, region, want in [(200.0, "overseas", "deny"), (1500.0, "domestic", "approve")]:
        query = "Decide case CASE-9999.\n" + json.dumps(
            {"case_id": "CASE-9999", "balance": balance, "region": region}
        )
        assert model.ranked(query)[0] == f"decide(decision={want})", (balance, region)


def test_an_item_lacking_a_fact_every_served_case_showed_reads_both_sides_of_its_rule() -> None:
    """Review the rare case scored over 90; approve the rest. An item read as a single
    case has no score: it is not the rare case more than the served cases were, so it is
    approved, where taking the side a missing fact falls to (``> 90``) reviewed it."""
    rng = random.Random(11)
    served = []
    for n in range(60):
        score = float(rng.choice([95, 97, 99]) if n % 6 == 0 else rng.randint(10, 80))
        decision = "review" if score > 90 else "approve"
        served.append(_served(n, n // 12, {"score": score, "kind": "plain"}, decision, 1.0))
    model = fit(served, now=4)
    assert model._plain({"case.kind": "plain", "case.score": 95.0}) == "decide(decision=review)"
    assert model._plain({"case.kind": "plain"}) == "decide(decision=approve)"
    tree = model.trees["decide(decision=review)"]
    assert tree.leaf({"case.kind": "plain"})[-1].estimate["decide(decision=review)"] > 0.5
    assert rules.estimate_of(tree, {"case.kind": "plain"}, "decide(decision=review)") < 0.5


def test_of_kinds_that_part_the_cases_alike_the_one_of_fewer_values_is_chosen() -> None:
    """Every denial came through desk ``a`` and from overseas; the approvals through five
    other desks, at home. A fact of two values is the likelier rule than one of six."""
    rows = []
    for n in range(24):
        deny = n % 4 == 0
        facts: dict[str, rules.Value] = {
            "case.desk": "a" if deny else "bcdef"[n % 5],
            "case.region": "overseas" if deny else "domestic",
        }
        rows.append(rules.Row(facts, "deny" if deny else "approve", True, 3))
    found = rules._split(rows, now=3)
    assert found is not None and found[0] == "case.region", found


def test_two_rules_alike_sure_for_an_item_are_told_apart_where_both_hold() -> None:
    """A line read as a single case (``_plain``): the broad rule reads 0.99 everywhere,
    having never split off its exception, and the narrow one (a recent counterpart, over
    $5000) reads 0.985 where it fires. The served cases both rules hold for went to the
    narrow one, so it decides; where they are fewer than ``MIN_SHARED``, or the narrow
    rule is not alike sure, the broad one stays."""
    rng = random.Random(7)
    served = []
    for n in range(48):
        days, amount = rng.choice([5, 20, 90, 700]), rng.choice([150.0, 900.0, 6000.0, 9000.0])
        wanted = "review" if days <= 30 and amount > 5000 else "approve"
        served.append(_served(n, n // 12, {"days": days, "amount": amount}, wanted, 1.0))
    model = fit(served, now=3)

    def leaf(outcome: str, chance: float) -> rules.Node:
        return rules.Node(estimate={outcome: chance})

    review = "decide(decision=review)"
    over = rules.Node(fact="case.amount", op="<=", value=5000.0,
                      yes=leaf(review, 0.01), no=leaf(review, 0.985))  # fmt: skip
    recent = rules.Node(fact="case.days", op="<=", value=30.0, yes=over, no=leaf(review, 0.01))
    model.trees = {"decide(decision=approve)": leaf("decide(decision=approve)", 0.99),
                   review: recent}  # fmt: skip
    assert model._plain({"case.days": 4.0, "case.amount": 7000.0}) == review
    assert model._plain({"case.days": 400.0, "case.amount": 7000.0}) == "decide(decision=approve)"
    over.no.estimate[review] = 0.9  # not alike sure: the likelier stays
    assert model._plain({"case.days": 4.0, "case.amount": 7000.0}) == "decide(decision=approve)"
    over.no.estimate[review] = 0.985
    rows = model._rows()
    one = [r for r in rows if r.outcome == review][:1]
    assert len([r for r in rows if r.outcome == review]) >= 3
    model._facts = [r for r in rows if r.outcome != review] + one  # one shared case: too few
    assert model._plain({"case.days": 4.0, "case.amount": 7000.0}) == "decide(decision=approve)"


def test_the_lines_of_scored_batches_teach_the_single_cases_rules() -> None:
    """Single payments are rare, batches of three are common: the rules for a payee's
    review and for a large amount are learned from the batches' lines, and reach a
    single payment."""
    rng = random.Random(3)
    served = []
    for n in range(144):
        days, amount = rng.choice([5, 20, 90, 700]), rng.choice([150.0, 900.0, 6000.0, 9000.0])
        if n % 12 == 0:
            served.append(_request(n, n // 12, days, amount, rng.random() < 0.5))
            continue
        lines, wanted = [], []
        for line in (1, 2, 3):
            days, amount = rng.choice([5, 20, 90, 700]), rng.choice([150.0, 900.0, 9000.0])
            lines.append({"line": line, "payee_added_days_ago": days, "amount": amount})
            decision: dict[str, Any] = {"line": line, "action": "approve"}
            if days <= 30:
                decision = {"line": line, "action": "escalate", "reason": "new_payee"}
            elif amount > 5000:
                decision = {"line": line, "action": "escalate", "reason": "big"}
            wanted.append(decision)
        right = rng.random() < 0.6
        taken = wanted if right else [{"line": d["line"], "action": "approve"} for d in wanted]
        batch = {"batch_id": f"BATCH-{1000 + n}"}
        served.append(_episode(n, n // 12, f"Settle batch BATCH-{1000 + n}.",
                               ("look", batch, {**batch, "lines": lines}),
                               ("settle", {**batch, "decisions": taken}),
                               float(taken == wanted)))  # fmt: skip
    model = fit(served, now=11)
    for days, amount, want in [(700, 9000.0, "escalate(reason=big)"),
                               (9, 150.0, "escalate(reason=new_payee)"),
                               (700, 150.0, "approve()")]:  # fmt: skip
        single = "Decide case CASE-9999.\n" + json.dumps(
            {"case_id": "CASE-9999", "payee_added_days_ago": days, "amount": amount}
        )
        assert model.ranked(single)[0] == want, (days, amount, model.estimate(single))


def test_the_legs_of_scored_choices_teach_the_single_cases_rules() -> None:
    """Single requests (approve up to 500, deny above) came only at 100 or 1000, so they
    place the line anywhere between. The cases with legs are many, and their legs came
    at 300 to 700: a leg executed was an approval, the legs passed over before it were
    not, and they place the approval's line at 500 for a single request too."""
    rng = random.Random(1)
    served = []
    for n in range(144):
        if n % 4 == 0:
            amount = rng.choice([100.0, 1000.0])
            wanted = "approve" if amount <= 500 else "deny"
            taken = wanted if rng.random() < 0.8 else ("deny" if wanted == "approve" else "approve")
            served.append(_served(n, n // 12, {"amount": amount}, taken, float(taken == wanted)))
            continue
        amounts = [rng.choice([550.0, 700.0]), rng.choice([450.0, 550.0]), 300.0]
        served.append(_legs_or_deny(n, n // 12, amounts, right=rng.random() < 0.7))
    model = fit(served, now=11)
    approve = "decide(decision=approve)"
    for amount, approved in [(530.0, False), (470.0, True), (900.0, False)]:
        single = "Decide case CASE-9999.\n" + json.dumps({"case_id": "CASE-9999", "amount": amount})
        assert (model.estimate(single)[approve] >= 0.5) == approved, (amount, model.card(12))
    assert f"- `{approve}` when case.amount <= 500:" in model.card(12)


MANUAL = """## transfers
1) A transfer to a payee added within the last 30 days is escalated (reason new_payee).
2) Transfers above the reporting threshold of $8,000.00 are escalated too.
"""


def test_the_figures_a_manual_prints_are_read_but_not_its_numbering() -> None:
    assert rules.anchors_of(MANUAL) == (30.0, 8000.0)
    assert rules.anchors_of("") == ()


def _aged(ages: list[int], newer_than: int, blocks: int = 4) -> list[Served]:
    """Review a payee added fewer than ``newer_than`` days ago, else approve; served right."""
    served = []
    for n in range(blocks * 12):
        age = ages[n % len(ages)]
        case = {"case_id": f"CASE-{1000 + n}"}
        looked = ("get_case", case, {**case, "payee_added_days_ago": age, "amount": 100.0})
        new = age < newer_than
        acted = ("escalate", {**case, "reason": "new_payee"}) if new else ("approve", case)
        served.append(_episode(n, n // 12, f"Decide case CASE-{1000 + n}.", looked, acted, 1.0))
    return served


def _payee(age: int) -> str:
    observation = {"case_id": "CASE-9999", "payee_added_days_ago": age, "amount": 100.0}
    return f"Decide case CASE-9999.\n{json.dumps(observation)}"


def test_a_threshold_the_evidence_leaves_in_a_gap_goes_to_the_figure_the_manual_prints() -> None:
    """No payee between 26 and 233 days old was served: the middle, 129.5, would call a payee
    of 47 days new; the manual's 30, inside the gap, is where the rule was written."""
    served = _aged([3, 10, 26, 233, 400, 661], newer_than=30)
    guessed = fit(served, now=3)
    assert guessed.ranked(_payee(47))[0] == "escalate(reason=new_payee)"  # the gap's middle
    assert "payee_added_days_ago <= 129.5:" in guessed.card(4), guessed.card(4)
    read = fit(served, now=3, manual=MANUAL)
    assert read.ranked(_payee(47))[0] == "approve()"
    assert read.ranked(_payee(26))[0] == "escalate(reason=new_payee)"
    assert "payee_added_days_ago <= 30:" in read.card(4), read.card(4)


def test_a_printed_figure_the_evidence_contradicts_moves_no_threshold() -> None:
    """The manual says 30 days; the served cases show payees of 40 and 60 days reviewed: the
    figure is stale, outside the gap (60, 90), and the evidence's own middle stands."""
    served = _aged([5, 40, 60, 90, 200, 500], newer_than=75)
    model = fit(served, now=3, manual=MANUAL)
    assert "payee_added_days_ago <= 75:" in model.card(4), model.card(4)
    assert model.ranked(_payee(60))[0] == "escalate(reason=new_payee)"


def test_a_conjunction_whose_parts_say_little_alone_is_found_a_step_ahead() -> None:
    """A greedy root took the amount alone (over the limit of one category, not the other),
    and its sides were left too few to find the categories: over a quarter of the cases
    were misjudged. Chosen a step ahead, the root is the category, and every case is right.
    """

    def over(category: str, amount: float) -> bool:
        return (category == "electronics" and amount > 460) or (
            category == "travel" and amount > 900
        )

    rng = random.Random(5)
    rows = []
    for n in range(48):
        category = rng.choice(["electronics", "travel", "grocery", "home"])
        amount = round(rng.uniform(50, 1500), 2)
        facts: dict[str, rules.Value] = {
            "case.category": category,
            "case.amount": amount,
            "case.same_day_total": round(amount + rng.uniform(0, 400), 2),
        }
        rows.append(
            rules.Row(facts, "escalate" if over(category, amount) else "approve", True, n // 12)
        )
    cases = [
        ({"case.category": c, "case.amount": a, "case.same_day_total": a + t}, over(c, a))
        for c in ("electronics", "travel", "grocery", "home")
        for a in (300.0, 600.0, 1200.0)
        for t in (0.0, 200.0, 400.0)
    ]

    def right(look: bool) -> int:
        tree = rules.grow_each(rows, 3, ["escalate", "approve"], look=look)["escalate"]
        return sum((tree.leaf(f)[-1].estimate["escalate"] >= 0.5) == want for f, want in cases)

    assert right(look=False) < len(cases)  # the greedy tree misses it on these cases
    assert right(look=True) == len(cases)


def test_a_name_is_a_name_within_every_rule_though_a_rule_sees_few_of_its_values() -> None:
    """Firms are names: 17 are served. A rule on card payments sees only the 5 firms that
    take cards, few enough to pass for a kind; two approvals above the limit at one of
    them, in the latest block, must not become a rule on that firm as if it were a kind
    of merchant (a rule on a name reaches no other firm, and needs more evidence)."""
    rng = random.Random(3)
    rows = []
    for n in range(48):  # transfers to 12 firms, all approved
        facts: dict[str, rules.Value] = {
            "case.kind": "transfer",
            "merchant.name": f"M{5 + n % 12}",
            "case.amount": float(rng.randint(100, 900)),
        }
        rows.append(rules.Row(facts, "approve", True, n % 4))
    for n in range(40):  # card payments at 5 firms: over the limit above 500
        amount = float(rng.randint(100, 900))
        facts = {
            "case.kind": "txn", "merchant.name": f"M{n % 5}", "case.amount": amount,
        }  # fmt: skip
        rows.append(rules.Row(facts, "over" if amount > 500 else "approve", True, n % 4))
    for amount in (700.0, 800.0):
        facts = {"case.kind": "txn", "merchant.name": "M0", "case.amount": amount}
        rows.append(rules.Row(facts, "approve", True, 3))
    assert rules.names_of(rows) == {"merchant.name"}
    tree = rules.grow_each(rows, 3, ["over", "approve"], look=True)["over"]
    tested = {node.fact for path in rules.leaves(tree) for node in path}
    assert "case.amount" in tested
    assert "merchant.name" not in tested


def test_the_figures_a_manual_prints_for_an_outcome_are_those_beside_its_argument() -> None:
    manual = (
        "## transfers\nTransfers to payees added within 30 days are escalated with reason"
        " new_payee. A transfer above the threshold of $8,000.00 is escalated with reason"
        " reportable.\n\n## cards\nLimits: electronics $500.00, travel $1200.00. A charge"
        " above its limit is escalated with reason over_limit.\n"
    )
    said = rules.said_of(
        manual,
        ["escalate(reason=new_payee)", "escalate(reason=reportable)",
         "escalate(reason=over_limit)", "approve()", "deny(reason=unheard_of)"],
    )  # fmt: skip
    assert said == {
        "escalate(reason=new_payee)": (30.0,),
        "escalate(reason=reportable)": (8000.0,),
        "escalate(reason=over_limit)": (500.0, 1200.0),  # its sentence prints none
    }


def test_of_two_rules_that_fit_alike_an_outcome_takes_the_one_on_its_printed_figure() -> None:
    """Every transfer served above $8,000 came from an account of more than 5 years: the two
    rules fit the evidence alike, and the escalation was learned on the first by name, the
    age. The manual prints $8,000 beside the escalation: its rule is learned on the amount,
    and holds for a large transfer from a young account (by the age, it did not)."""
    served = []
    for n in range(48):
        amount = [1200.0, 4500.0, 7600.0, 8400.0, 9100.0, 12000.0][n % 6]
        years = [1.0, 2.0, 4.0, 6.0, 8.0, 11.0][n % 6]  # moves with the amount
        facts = {"amount": amount, "account_age_years": years}
        decision = "escalate" if amount > 8000 else "approve"
        served.append(_served(n, n // 12, facts, decision, 1.0))
    manual = "A transfer above $8,000.00 is held: decision escalate.\n"
    query = "Decide case CASE-9999.\n" + json.dumps(
        {"case_id": "CASE-9999", "amount": 9500.0, "account_age_years": 1.0}
    )
    escalate = "decide(decision=escalate)"
    unread = fit(served, now=3)
    assert f"`{escalate}` when case.account_age_years > 5:" in unread.card(4), unread.card(4)
    assert _rule_says(unread, escalate, query) < 0.5
    read = fit(served, now=3, manual=manual)
    assert f"`{escalate}` when case.amount > 8000:" in read.card(4), read.card(4)
    assert _rule_says(read, escalate, query) > 0.9


def _rule_says(model: WorldModel, outcome: str, query: str) -> float:
    """The chance ``outcome``'s own rule gives the case (before rules that disagree meet)."""
    return model.trees[outcome].leaf(model.facts(query))[-1].estimate[outcome]
