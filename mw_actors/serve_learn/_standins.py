"""An item as a case of its own: what the single cases teach about a case's items.

A case may list items and decide them in one action: a batch decided line by line
(``decide(decisions=[...])``), or an ordered choice (``execute(leg=2)``: the first
of the legs, in order, that may go ahead). Such cases are few, and half of them
may be served wrong, so the items' own rules (:mod:`._worldmodel`) learn slowly.
Single cases, one request each, are many: their rules often decide an item too.

**The stand-in.** An item stands in for a single case: the case's facts, with the
item's in place of those they name. An item's fact names the single case's fact
of the same name (``item.amount`` is ``case.amount``; ``item.owner_age_days``
is ``owner.age_days``). The text's figures are those of the whole case: they
are left out, and ``figure.1`` or ``figure.max`` is the item's value of the fact
that a single case's figure usually equals.

**What the stand-in's outcome means** is learned from the cases that scored:
- in an ordered choice, the single outcome that lets an item go (``approve``) is
  the one whose first item, in order, is the item chosen in the most scored cases
  (not the one the chosen items get most: a first-pass rule that misreads them
  reads the items passed over alike); the single cases' default (the outcome that
  scored most) goes unless another picks clearly more (by ``rules.MARGIN`` cases).
  The case takes the first item that gets it; where none does, it takes the outcome
  of the item whose outcome the scored cases took (the first leg's, say);
- in a batch, each single outcome stands for the item decision that says what it
  says (``{"action": "escalate", "reason": "late"}`` for ``escalate(reason=late)``:
  every word of the decision is a word of the outcome, and no other decision says
  more of it), read from every batch served, scored or not; an outcome that no
  decision says stands for the decision it came with most in the batches that scored.

**Chosen by measurement.** A family is decided through stand-ins only where that
decided the scored cases at least as well as the items' own rules did, those judged
on cases they were not fitted on (in sample, they would always fit).

Nothing here names a domain, a tool or a field.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

try:
    from . import _rules as rules
except ImportError:  # in the Codex learner's sandbox, copied beside it as rules.py
    import rules  # type: ignore[no-redef,import-not-found]

__all__ = ["ItemsAsCases", "agreement", "learn", "lets_go", "said_alike", "stand_in"]

Facts = dict[str, rules.Value]
Plain = Callable[[Facts], "str | None"]  # a single case's likeliest outcome
# A scored case listing a choice's items: family, case facts, items, the item chosen (0 if
# none was) and the outcome the case took.
Choice = tuple[str, Facts, dict[int, Facts], int, str]
# A scored batch: family, case facts, items, each item's decision.
Batch = tuple[str, Facts, dict[int, Facts], list[tuple[int, str]]]
# A batch served, scored or not: family, items, each item's decision.
Listed = tuple[str, dict[int, Facts], list[tuple[int, str]]]
# A scored case's item chosen (0 if none was) and the outcome each item gets as a single case.
Read = tuple[int, list[tuple[int, "str | None"]]]
FIGURES = ("figure.1", "figure.max")
ITEM = "item."
_WORDS = re.compile(r"[a-z0-9]+")


def _bare(name: str) -> str:
    """A single case's fact as an item would name it.

    ``case.amount`` -> ``amount``, ``owner.age_days`` -> ``owner_age_days``.
    """
    head, _, rest = name.partition(".")
    return (rest if head == "case" else name).replace(".", "_")


def fact_names(single: Iterable[str], items: Iterable[str]) -> dict[str, str]:
    """Each item fact that names a single case's fact (the same name; else the one it begins)."""
    bare: dict[str, list[str]] = {}
    for name in sorted(single):
        if not name.startswith(("figure.", "word:")):
            bare.setdefault(_bare(name), []).append(name)
    named = {}
    for item in sorted(set(items)):
        own = item[len(ITEM) :].replace(".", "_")
        exact = bare.get(own, [])
        begun = [n for b, ns in bare.items() if b.startswith(own + "_") for n in ns]
        found = exact if len(exact) == 1 else begun if not exact and len(begun) == 1 else []
        if found:
            named[item] = found[0]
    return named


def figure_names(rows: Sequence[dict[str, rules.Value]]) -> dict[str, str]:
    """For each of the text's figures, the fact it equals in most single cases (if most)."""
    out = {}
    for figure in FIGURES:
        equal: Counter[str] = Counter()
        seen = 0
        for facts in rows:
            value = facts.get(figure)
            if value is None:
                continue
            seen += 1
            for name, other in facts.items():
                if other == value and not name.startswith(("figure.", "word:")):
                    equal[name] += 1
        best = equal.most_common(1)
        if best and best[0][1] * 2 > seen:
            out[figure] = best[0][0]
    return out


@dataclass
class ItemsAsCases:
    """What single cases decide of items: fact names, and per family what an outcome means."""

    facts: dict[str, str] = field(default_factory=dict)  # item fact -> single case's fact
    figures: dict[str, str] = field(default_factory=dict)  # figure -> the fact it equals
    go: dict[str, str] = field(default_factory=dict)  # choice family -> the outcome that goes
    lead: dict[str, int] = field(default_factory=dict)  # choice family -> item when none goes
    decisions: dict[str, dict[str, str]] = field(default_factory=dict)  # batch: outcome -> item

    def encode(self) -> dict[str, Any]:
        return {
            "facts": self.facts,
            "figures": self.figures,
            "go": self.go,
            "lead": self.lead,
            "decisions": self.decisions,
        }

    @classmethod
    def decode(cls, data: dict[str, Any]) -> ItemsAsCases:
        return cls(
            facts=dict(data.get("facts", {})),
            figures=dict(data.get("figures", {})),
            go=dict(data.get("go", {})),
            lead={k: int(v) for k, v in data.get("lead", {}).items()},
            decisions={k: dict(v) for k, v in data.get("decisions", {}).items()},
        )

    def stand_in(
        self, case: dict[str, rules.Value], item: dict[str, rules.Value]
    ) -> dict[str, rules.Value]:
        return stand_in(case, item, self.facts, self.figures)

    def legs(
        self,
        case: dict[str, rules.Value],
        shown: dict[int, dict[str, rules.Value]],
        plain: Plain,
    ) -> list[tuple[int, str | None]]:
        """The outcome each item gets as a single case, in the items' order."""
        return [(o, plain(self.stand_in(case, shown[o]))) for o in sorted(shown)]

    def choose(
        self,
        family: str,
        case: dict[str, rules.Value],
        shown: dict[int, dict[str, rules.Value]],
        plain: Plain,
    ) -> tuple[int, str | None]:
        """(the item chosen, 0 if none; else the outcome the case takes, or None)."""
        outcomes = dict(self.legs(case, shown, plain))
        for ordinal, outcome in outcomes.items():
            if outcome == self.go[family]:
                return ordinal, None
        lead = self.lead.get(family, 0)
        return 0, outcomes.get(lead) if lead else None

    def decide(
        self, family: str, case: dict[str, rules.Value], item: dict[str, rules.Value], plain: Plain
    ) -> str | None:
        """An item's decision (JSON, as the items' rules give it), or None."""
        outcome = plain(self.stand_in(case, item))
        return None if outcome is None else self.decisions[family].get(outcome)


def stand_in(
    case: dict[str, rules.Value],
    item: dict[str, rules.Value],
    facts: dict[str, str],
    figures: dict[str, str],
) -> dict[str, rules.Value]:
    """The single case an item stands for: the case's facts, the item's in their place."""
    out = {k: v for k, v in case.items() if not k.startswith("figure.")}
    for name, value in item.items():
        if name in facts:
            out[facts[name]] = value
    for figure, name in figures.items():
        if name in out and any(facts.get(n) == name for n in item):
            out[figure] = out[name]
    return out


def _said(text: str) -> set[str]:
    return set(_WORDS.findall(text.lower()))


def said_alike(outcomes: Iterable[str], decisions: Iterable[str]) -> dict[str, str]:
    """Each single outcome's item decision that says what it says (see the module's text).

    A decision's words are those of its values; an outcome's, those of its signature.
    """
    words = {}
    for decision in sorted(set(decisions)):
        try:
            values = json.loads(decision)
        except ValueError:
            continue
        if isinstance(values, dict) and values:
            words[decision] = _said(" ".join(str(v) for v in values.values()))
    table = {}
    for outcome in sorted(set(outcomes)):
        mine = _said(outcome)
        fits = [(len(w), d) for d, w in words.items() if w and w <= mine]
        if not fits:
            continue
        most = max(size for size, _ in fits)
        best = [d for size, d in fits if size == most]
        if len(best) == 1:
            table[outcome] = best[0]
    templates: dict[tuple[str, tuple[str, ...]], dict[str, str]] = {}
    for outcome, decision in table.items():
        shape = _template(outcome, json.loads(decision))
        if shape is not None:
            templates.setdefault(shape[0], shape[1])
    for outcome in sorted(set(outcomes) - set(table)):
        parts = _parts(outcome)
        if parts is None or (parts[0], tuple(sorted(parts[1]))) not in templates:
            continue
        template = templates[parts[0], tuple(sorted(parts[1]))]
        made = {k: parts[1][v[1:]] if v.startswith("=") else v for k, v in template.items()}
        table[outcome] = json.dumps(made, sort_keys=True, ensure_ascii=False)
    return table


def _parts(outcome: str) -> tuple[str, dict[str, str]] | None:
    """``escalate(reason=late)`` -> ``("escalate", {"reason": "late"})``; None if not a call."""
    name, _, rest = outcome.partition("(")
    if not rest.endswith(")"):
        return None
    arguments = {}
    for pair in filter(None, rest[:-1].split(", ")):
        key, equal, value = pair.partition("=")
        if not equal:
            return None
        arguments[key] = value
    return name, arguments


def _template(
    outcome: str, decision: dict[str, Any]
) -> tuple[tuple[str, tuple[str, ...]], dict[str, str]] | None:
    """How a decision is made from an outcome that says it, to make the ones not yet seen.

    ``escalate(reason=late)`` said as ``{"action": "escalate", "reason": "late"}`` gives
    ``{"action": "escalate", "reason": "=reason"}``: ``escalate(reason=early)``, never
    seen in a batch, is then ``{"action": "escalate", "reason": "early"}``.
    """
    parts = _parts(outcome)
    if parts is None or not all(isinstance(v, str) for v in decision.values()):
        return None
    name, arguments = parts
    made = {}
    for key, value in decision.items():
        argument = [a for a, v in arguments.items() if v == value]
        if len(argument) == 1:
            made[key] = "=" + argument[0]
        elif _said(value) <= _said(name) and not value.startswith("="):
            made[key] = value
        else:
            return None
    return (name, tuple(sorted(arguments))), made


def learn(
    single: Sequence[dict[str, rules.Value]],
    choices: Sequence[Choice],
    batches: Sequence[Batch],
    plain: Plain,
    listed: Sequence[Listed] = (),
    outcomes: Sequence[str] = (),
    default: str | None = None,
) -> ItemsAsCases:
    """What the served cases say a stand-in's outcome means.

    ``single``: the facts of single cases. ``choices``: (family, case facts, items, the item
    chosen or 0, the outcome when none was) of scored cases listing a choice's items.
    ``batches``: (family, case facts, items, each item's decision) of scored batches.
    ``listed``: (family, items, each item's decision) of every batch served; ``outcomes``:
    the single cases' outcomes; ``default``: the single outcome that scored most.
    """
    shown_items = [c[2] for c in choices] + [b[2] for b in batches] + [b[1] for b in listed]
    item_names = {name for shown in shown_items for own in shown.values() for name in own}
    found = ItemsAsCases(
        facts=fact_names({k for facts in single for k in facts}, item_names),
        figures=figure_names(single),
    )
    if not found.facts:
        return found
    by: dict[str, list[Choice]] = {}
    for row in choices:
        by.setdefault(row[0], []).append(row)
    for family, rows in by.items():
        read: list[Read] = [
            (chosen, found.legs(case, shown, plain)) for _, case, shown, chosen, _ in rows
        ]
        go = lets_go(read, default)
        if go is None:
            continue
        found.go[family] = go
        led: Counter[int] = Counter()
        for (*_, taken), (chosen, legs) in zip(rows, read, strict=True):
            if not chosen:
                for ordinal, given in legs:
                    led[ordinal] += given == taken
        if led:
            found.lead[family] = max(sorted(led), key=lambda o: led[o])
    decided: dict[str, Counter[tuple[str, str]]] = {}
    for family, case, shown, items in batches:
        for ordinal, decision in items:
            if ordinal in shown:
                outcome = plain(found.stand_in(case, shown[ordinal]))
                if outcome is not None:
                    decided.setdefault(family, Counter())[outcome, decision] += 1
    seen: dict[str, set[str]] = {}
    for family, _, items in listed:
        seen.setdefault(family, set()).update(decision for _, decision in items)
    for family in sorted({*seen, *decided}):
        table = said_alike(outcomes, seen.get(family, ()))
        for (outcome, decision), _ in decided.get(family, Counter()).most_common():
            table.setdefault(outcome, decision)
        if table:
            found.decisions[family] = table
    return found


def lets_go(read: Sequence[Read], default: str | None) -> str | None:
    """The single outcome that lets a choice's item go (``None``: no scored case chose one).

    ``read``: each scored case's item chosen (or 0) and the outcome each of its items gets as
    a single case. What lets an item go picks, as the first item it is given, the item chosen
    in the most scored cases that chose one; of two alike, the chosen items' likeliest. The
    single cases' ``default`` (the outcome that scored most) goes unless another is clearly
    better (by ``rules.MARGIN`` cases).
    """
    went: Counter[str] = Counter(
        outcome for chosen, legs in read for o, outcome in legs if o == chosen and outcome
    )
    if not went:
        return None
    right = {
        outcome: sum(
            next((o for o, given in legs if given == outcome), 0) == chosen
            for chosen, legs in read
            if chosen
        )
        for outcome in went
    }
    go = min(went, key=lambda g: (-right[g], -went[g], g))
    if default is not None and default in went and right[go] < right[default] + rules.MARGIN:
        return default
    return go


def agreement(pairs: Iterable[tuple[Any, Any]]) -> float:
    pairs = list(pairs)
    return sum(a == b for a, b in pairs) / len(pairs) if pairs else 0.0
