"""MWM's world model: learned from served episodes' records, on any scenario.

A learner reads what a learning method may read in ServeLearnBench: each
served episode's record (``protocol.episode_record``: the instruction, every
step's action and observation, the score line). It never sees an evaluator, a
category, a window or an oracle bulletin, and nothing here names a domain's
tools. From each record it takes

- the **case**: the instruction without its timestamp line, and what the
  agent observed before it acted;
- the **outcome**: the episode's last action before ``finish`` (``wm`` steps
  left out), as a signature such as ``deny_case(reason=VELOCITY)``; argument
  values that identify the case (they contain a digit and appear in the case
  text, like a case id) and free text (over 40 characters) are dropped, so
  one action on two cases is one signature;
- the **score** (the reward the agent was told).

The adapter estimates, for each outcome signature, the chance that it scores
given the case's typed facts (:mod:`._rules`: the JSON the tools returned, the
instruction's figures, the prose's words): one rule tree per signature, with
the implied zeros of the other outcomes' successes, recent evidence weighing
most, and older evidence set aside where the policy changed (for the outcomes
that scored since). Where several outcomes' rules fire, they are estimated
again on the cases of the narrowest: an exception is judged where it applies.
An outcome
decided item by item (a list numbered by a small ordinal: a batch's lines) is
one signature with ``[...]``, its items' decisions learned by trees of their
own; an ordered choice (``leg=2`` of the legs the case lists) is one signature
with ``<item>``, a tree learning when an item is the one chosen. Both are
filled for the case at hand, or, where that did better on the scored cases,
each item is decided as the single cases are (:mod:`._standins`).

``wm`` (:meth:`WorldModel.answer`) answers a query with the actions ranked
by their estimate for the query's facts, the rule that fires, and the most similar past served
cases (Okapi BM25 over the case text, as the benchmark's RAG retrieves), with
what was done in them and their score lines. The card (``card.md``) states
what the model believes, from the same statistics; the host sees it in its
system prompt.

The checkpoint is ``adapter.safetensors`` (each signature's evidence, and one
metadata key, ``index``, holding the rules as JSON, so its bytes are stable
across processes), ``cases.jsonl`` (the retrieval store) and ``card.md``.
This module stands alone (with ``rules.py``, ``standins.py`` and ``tensorfile.py``
beside it, and msgspec; no torch): the Codex learner's ``fit_adapter`` imports it inside
the sandbox.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec

try:
    from .. import _tensorfile as tensorfile
    from . import _rules as rules
    from . import _standins as standins
except ImportError:  # in the Codex learner's sandbox, copied beside it as rules.py, standins.py
    import rules  # type: ignore[no-redef,import-not-found]
    import standins  # type: ignore[no-redef,import-not-found]
    import tensorfile  # type: ignore[no-redef,import-not-found]

__all__ = [
    "Case",
    "ParsedRecord",
    "Served",
    "WorldModel",
    "bm25_top_k",
    "case_of",
    "fit",
    "parse_record",
    "tokenize",
]

_TOKEN = re.compile(r"[a-z0-9]+")
_STEP = re.compile(r"^\[step \d+\]$")
_SCORE = re.compile(r"^Score: ([0-9.]+)/100\.$")
_TIMESTAMP = "Current timestamp: "
_OWN_TOOLS = ("finish", "wm")  # the episode's end, and the world model itself
CASE_CHARS = 4_000  # of a case's text kept for retrieval
TOP_K = 3  # similar past cases in a wm answer
MAX_VOCABULARY = 128  # words that are facts, the most frequent (a query may be in words)
SCORED = 0.5  # a reward at least this scored (binary domains give 0 or 1)
VALUE_CHARS = 40  # an argument longer than this is free text, left out of a signature
CARD_ROWS = 20  # signatures on the card, most evidence first (it goes into every prompt)
ITEMS = "[...]"  # in a signature: a list decided item by item, filled for the case at hand
CHOICE = "<item>"  # in a signature: which of the case's numbered items, filled for the case
LIKELY = 0.5  # an outcome whose rule gives it this chance fires for the case
MIN_SHARED = 2  # scored cases a firing rule must hold for, to estimate the outcomes on them
TIED = 0.05  # two outcomes' chances this close, for an item read as a single case, are a tie
OUT_OF_SCOPE = 0.01  # an outcome's estimate on a case outside its scope is scaled by this
CHOSEN, PASSED = "chosen", "passed over"  # an item of an ordered choice, before the one chosen


class Served(msgspec.Struct, frozen=True):
    """What a learner is given of one served episode: its block, position, score and record."""

    block: int
    task_id: str
    timestamp: int  # the stream position
    instruction: str  # as the agent received it, timestamp line included
    reward: float  # the score the agent was told, as a fraction
    record: str  # protocol.episode_record(instruction, trace, reward): what MWM reads


class ParsedRecord(msgspec.Struct, frozen=True):
    instruction: str
    actions: list[tuple[str, dict[str, Any], str]]  # (tool, arguments, observation)
    score: float | None


class Case(msgspec.Struct, frozen=True):
    """One served episode as the world model keeps it."""

    block: int
    timestamp: int
    reward: float
    text: str  # the case: instruction without its timestamp line, then what was observed
    signature: str  # the outcome action
    done: str  # every action, in order
    # An outcome decided item by item (a batch, line by line): "tool|argument|ordinal key",
    # and each item's decision (its element without the ordinal, as JSON). "" and [] if not.
    itemized: str = ""
    items: list[tuple[int, str]] = []
    # An outcome that chose one of the case's numbered items (``leg=2`` of the legs the
    # case lists, in order): "tool|argument", and the item chosen. "" and 0 if not.
    chose: str = ""
    choice: int = 0


def tokenize(text: str) -> list[str]:
    """Lower-case runs of letters and digits (the benchmark's RAG tokenizer)."""
    return _TOKEN.findall(text.lower())


def bm25_top_k(
    query: str, docs: list[list[str]], k: int, k1: float = 1.5, b: float = 0.75
) -> list[int]:
    """Indices of the ``k`` best Okapi BM25 scores that are positive, best first."""
    if not docs:
        return []
    n = len(docs)
    average = sum(len(d) for d in docs) / n
    frequency: dict[str, int] = {}
    for doc in docs:
        for token in set(doc):
            frequency[token] = frequency.get(token, 0) + 1
    terms = tokenize(query)
    scored = []
    for i, doc in enumerate(docs):
        counts: dict[str, int] = {}
        for token in doc:
            counts[token] = counts.get(token, 0) + 1
        score = 0.0
        for term in terms:
            if term in counts:
                idf = math.log(1 + (n - frequency[term] + 0.5) / (frequency[term] + 0.5))
                tf = counts[term]
                score += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(doc) / average))
        scored.append((score, i))
    scored.sort(key=lambda pair: pair[0], reverse=True)
    return [i for score, i in scored[:k] if score > 0]


def parse_record(record: str) -> ParsedRecord:
    """The instruction, the actions with their observations, and the score of a record."""
    lines = record.split("\n")
    starts = [i for i, line in enumerate(lines) if _STEP.match(line)]
    head = lines[: starts[0]] if starts else lines
    instruction = "\n".join(head).removeprefix("INSTRUCTION: ").rstrip("\n")
    score = None
    if lines and (found := _SCORE.match(lines[-1])):
        score = float(found.group(1)) / 100
    if not starts:
        instruction = instruction.rsplit("\n", 1)[0] if score is not None else instruction
    actions = []
    for n, start in enumerate(starts):
        end = starts[n + 1] if n + 1 < len(starts) else len(lines) - 1
        action: str | None = None
        observation: list[str] = []
        for line in lines[start + 1 : end]:
            if action is None and line.startswith("  action: "):
                action = line.removeprefix("  action: ")
            elif observation or line.startswith("  observation: "):
                observation.append(line.removeprefix("  observation: "))
        if action is None or action.startswith("NONE "):
            continue
        name, _, rest = action.partition("(")
        try:
            arguments = json.loads(rest[:-1]) if rest.endswith(")") else {}
        except ValueError:
            arguments = {}
        text = "\n".join(observation).strip("\n")
        actions.append((name, arguments if isinstance(arguments, dict) else {}, text))
    return ParsedRecord(instruction=instruction, actions=actions, score=score)


def _untimed(instruction: str) -> str:
    if instruction.startswith(_TIMESTAMP):
        return instruction.split("\n\n", 1)[-1]
    return instruction


def _names_the_case(value: Any, seen: str) -> bool:
    """An id, or an amount the case gave: it has a digit and the case text holds it.

    A small number (a leg, a line, an ordinal of up to two digits) says what the
    decision is, not which case: it is kept.
    """
    if isinstance(value, bool) or (isinstance(value, int) and abs(value) < 100):
        return False
    if isinstance(value, str) and value.isdigit() and len(value) <= 2:
        return False
    shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return any(c.isdigit() for c in shown) and shown in seen


def _ordinal_key(value: Any) -> str | None:
    """The key that numbers a list's objects (``line``), if it is one decision per item."""
    if not isinstance(value, list) or not value or not all(isinstance(v, dict) for v in value):
        return None
    for key in sorted(value[0]):
        numbers = [v.get(key) for v in value]
        ordinal = all(type(n) is int and 0 <= n < 100 for n in numbers)
        if ordinal and len(set(numbers)) == len(numbers):
            return str(key)
    return None


def _itemized(name: str, arguments: dict[str, Any]) -> tuple[str, list[tuple[int, str]]]:
    """An outcome decided item by item: its family, and each item's decision; or ("", [])."""
    for argument in sorted(arguments):
        key = _ordinal_key(arguments[argument])
        if key is not None:
            items = [
                (int(item[key]), _item({k: v for k, v in item.items() if k != key}))
                for item in arguments[argument]
            ]
            return f"{name}|{argument}|{key}", sorted(items)
    return "", []


def _item(decision: dict[str, Any]) -> str:
    return json.dumps(decision, sort_keys=True, ensure_ascii=False)


def _chosen(arguments: dict[str, Any], seen: str) -> tuple[str, int]:
    """The argument that picks one of the items ``seen`` numbers by its name, and its value.

    ``execute(leg=2)`` on a case listing ``{"legs": [{"leg": 1, ...}, {"leg": 2, ...}]}``
    chose item 2 of the legs: the decision is which item, learned from each item's facts.
    """
    for key in sorted(arguments):
        value = arguments[key]
        if type(value) is int and 0 <= value < 100 and value in rules.items_of(seen, key):
            return key, value
    return "", 0


def _signature(name: str, arguments: dict[str, Any], seen: str) -> str:
    kept = []
    chosen, _ = _chosen(arguments, seen)
    for key in sorted(arguments):
        value = arguments[key]
        if _ordinal_key(value) is not None:
            kept.append(f"{key}={ITEMS}")  # decided item by item: the items' rules fill it
            continue
        if key == chosen:
            kept.append(f"{key}={CHOICE}")  # which item: the items' rules fill it
            continue
        if isinstance(value, list):  # a list of ids names the case item by item
            value = [v for v in value if not _names_the_case(v, seen)]
            if not value:
                continue
        elif _names_the_case(value, seen):
            continue  # it names the case, not the action
        if isinstance(value, str) and len(value) > VALUE_CHARS:
            continue  # free text (a message, an essay): what it says is not which action
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        kept.append(f"{key}={shown}")
    return f"{name}({', '.join(kept)})"


def case_of(served: Served) -> Case | None:
    """The case, outcome and score of a served episode; None if it did nothing.

    The outcome is the last action before ``finish``; or ``finish`` itself when it
    carries the decision (a refusal, in a domain that refuses through it).
    """
    parsed = parse_record(served.record)
    acted = [a for a in parsed.actions if a[0] != "wm"]
    finished = [a for a in acted if a[0] == "finish"]
    acted = [a for a in acted if a[0] not in _OWN_TOOLS]
    if finished and finished[-1][1]:
        observed = [obs for _, _, obs in acted]
        outcome = finished[-1]
    elif acted:
        observed = [obs for _, _, obs in acted[:-1]]
        outcome = acted[-1]
    else:
        return None
    text = "\n".join([_untimed(parsed.instruction), *observed])
    name, arguments, _ = outcome
    decided = finished[-1:] if outcome[0] == "finish" else []
    signatures = [_signature(n, a, text) for n, a, _ in [*acted, *decided]]  # the outcome last
    itemized, items = _itemized(name, arguments)
    chosen, choice = _chosen(arguments, text)
    return Case(
        block=served.block,
        timestamp=served.timestamp,
        reward=served.reward,
        text=text[:CASE_CHARS],
        signature=signatures[-1],
        done="; ".join(signatures),
        itemized=itemized,
        items=items,
        chose=f"{name}|{chosen}" if chosen else "",
        choice=choice,
    )


class WorldModel:
    """Rules over a case's facts: for each outcome, its chance to score (:mod:`._rules`)."""

    def __init__(
        self,
        vocabulary: list[str],
        signatures: list[str],
        trees: dict[str, rules.Node],
        evidence: list[float],
        cases: list[Case],
        *,
        now: int = -1,
        items: dict[str, dict[str, rules.Node]] | None = None,
        choices: dict[str, rules.Node] | None = None,
        as_cases: standins.ItemsAsCases | None = None,
        since: int = 0,
        scopes: dict[str, dict[str, str]] | None = None,
    ) -> None:
        self.vocabulary = vocabulary  # words that are facts (for a query written in words)
        self.signatures = signatures
        self.trees = trees  # per signature: when it scores
        # Per family decided item by item ("tool|argument|key"): per item decision, its rules.
        self.items = items or {}
        # Per family of ordered choices ("tool|argument"): when an item is the one chosen.
        self.choices = choices or {}
        # Families whose items single cases decide better than the items' own rules.
        self.as_cases = as_cases or standins.ItemsAsCases()
        self.evidence = evidence  # decayed weight of the episodes behind each signature
        self.cases = cases
        self.now = now
        self._docs = [tokenize(c.text) for c in cases]
        self._facts: list[rules.Row] | None = None  # the cases' facts, read when first asked
        # The item-by-item families taken, and the item keys a single outcome scored with.
        self._itemized: tuple[list[str], set[str]] | None = None
        self.since = since  # where the rules' evidence starts (a detected change)
        # Per signature: the categories of every case it scored on (rules.scopes).
        self.scopes = scopes or {}
        self._categories = sorted(
            {
                (n.fact, n.value)
                for tree in trees.values()
                for path in rules.leaves(tree)
                for n in path
                if n.op == "="
            },
            key=str,
        )

    def facts(self, query: str) -> dict[str, rules.Value]:
        """The query's facts, as a served case's were read.

        A category the rules test that the query only names in words (``an upgrade
        case`` for ``obs.kind = upgrade``) is read from its words.
        """
        facts = rules.facts_of(_untimed(query), self.vocabulary)
        words = rules.words_of(query)
        for fact, value in self._categories:
            if fact and fact not in facts and isinstance(value, str) and value.lower() in words:
                facts[fact] = value
        return facts

    def estimate(self, query: str) -> dict[str, float]:
        """The estimated chance that each signature scores, for a case described by ``query``.

        Each outcome's rule says when it scores, over the cases its tree saw. Two rules
        that both fire speak of different sets of cases: a broad one (``approve`` when
        domestic) and a narrow exception (``deny`` for one kind, one grade). Where more
        than one fires, the likely outcomes are estimated again on the served cases of
        the narrowest rule that fires: the exception is judged where it applies.
        """
        facts = self.facts(query)
        return self._scoped(self._estimate(facts), facts)

    def _scoped(
        self, estimate: dict[str, float], facts: dict[str, rules.Value]
    ) -> dict[str, float]:
        """``estimate`` with each outcome outside its scope (:func:`rules.scopes`) put last."""
        return {
            s: e if rules.in_scope(self.scopes.get(s, {}), facts) else e * OUT_OF_SCOPE
            for s, e in estimate.items()
        }

    def _estimate(self, facts: dict[str, rules.Value]) -> dict[str, float]:
        paths = {s: self._path(s, facts) for s in self.signatures}
        estimate = {s: path[-1].estimate.get(s, 0.0) for s, path in paths.items()}
        likely = [s for s in self.signatures if estimate[s] >= LIKELY]
        if len(likely) < 2:
            return estimate
        regions = []
        for s in likely:
            held = self._held(paths[s])
            if sum(r.scored for r in held) >= MIN_SHARED:
                regions.append((len(held), s, held))
        if not regions:
            return estimate
        _, _, rows = min(regions, key=lambda region: region[:2])
        latest = max(row.block for row in rows)
        won: dict[str, float] = {}
        lost: dict[str, float] = {}
        for row in rows:
            weight = rules.LEAF_DECAY ** (latest - row.block)
            into = won if row.scored else lost
            into[row.outcome] = into.get(row.outcome, 0.0) + weight
        scored = sum(won.values())
        for s in likely:
            mine = won.get(s, 0.0)
            against = lost.get(s, 0.0) + scored - mine
            estimate[s] = (mine + rules.SMOOTHING * estimate[s]) / (
                mine + against + rules.SMOOTHING
            )
        return estimate

    def _held(self, *paths: list[rules.Node]) -> list[rules.Row]:
        """The served cases that every rule on ``paths`` holds for, each taken as the path went."""
        tests = [
            (node, after is node.yes) for path in paths for node, after in itertools.pairwise(path)
        ]
        return [r for r in self._rows() if all(n.holds(r.facts) == yes for n, yes in tests)]

    def _rows(self) -> list[rules.Row]:
        """The served cases as the rules saw them (:func:`_evidence`)."""
        if self._facts is None:
            rows = [
                rules.Row(rules.facts_of(c.text, self.vocabulary), c.signature,
                          c.reward >= SCORED, c.block)
                for c in self.cases
            ]  # fmt: skip
            self._facts = _evidence(rows, self.since)
        return self._facts

    def _path(self, signature: str, facts: dict[str, rules.Value]) -> list[rules.Node]:
        tree = self.trees.get(signature)
        return tree.leaf(facts) if tree is not None else [rules.Node()]

    def ranked(self, query: str) -> list[str]:
        """The actions, best first, for ``query`` (an outcome decided item by item, filled).

        An outcome over items the case does not list (a choice of leg on a case with no
        legs) cannot be taken there: it comes last, unfilled.
        """
        estimate = self.estimate(query)
        order = [
            self.filled(s, query) for s in sorted(self.signatures, key=lambda s: (-estimate[s], s))
        ]
        order = sorted(order, key=lambda s: ITEMS in s or CHOICE in s)
        chosen = self._chosen_form(query)
        return order if chosen is None else [chosen, *(s for s in order if s != chosen)]

    def _chosen_form(self, query: str) -> str | None:
        """The outcome a case's items decide (a choice's, or a batch's form), if any."""
        return self._chosen_as_cases(query) or self._itemized_form(query)

    def _itemized_form(self, query: str) -> str | None:
        """The outcome decided item by item, filled, for a case listing its items.

        Where a case lists items (numbered by a family's key), no single outcome has
        scored on such a case, and the family was taken on them, the family is the form
        those cases take: a failed one missed an item, not the form.
        """
        if self._itemized is None:
            families = sorted({case.itemized for case in self.cases if case.itemized})
            keys = {family.rsplit("|", 1)[-1] for family in families}
            single_scored = {
                key
                for case in self.cases
                if case.reward >= SCORED and not (case.itemized or case.chose)
                for key in keys
                if rules.items_of(case.text, key)
            }
            self._itemized = families, single_scored
        families, single_scored = self._itemized
        for signature in self.signatures:
            if ITEMS not in signature:
                continue
            name = signature.split("(", 1)[0]
            for family in families:
                tool, _, key = family.split("|")
                if tool != name or key in single_scored:
                    continue
                if rules.items_of(_untimed(query), key):
                    filled = self.filled(signature, query)
                    return filled if ITEMS not in filled else None
        return None

    def _plain(self, facts: dict[str, rules.Value]) -> str | None:
        """The likeliest outcome of a single case (no items) with ``facts``.

        An item read as a single case lacks facts every served case showed; where a rule
        tests one, the item reads both sides (:func:`rules.estimate_of`).
        """
        estimate = self._scoped(
            {
                s: rules.estimate_of(t, facts, s)
                for s, t in self.trees.items()
                if ITEMS not in s and CHOICE not in s
            },
            facts,
        )
        order = sorted(estimate, key=lambda s: (-estimate[s], s))
        if len(order) < 2 or estimate[order[1]] < LIKELY:
            return order[0] if order else None
        if estimate[order[0]] - estimate[order[1]] > TIED:
            return order[0]
        return self._between(order[0], order[1], facts)

    def _between(self, first: str, second: str, facts: dict[str, rules.Value]) -> str:
        """Of two outcomes whose rules both fire, alike sure: the one that scored where both do.

        A stand-in (an item read as a single case) lacks facts a broad rule's exceptions
        were split on: a general rule reads 0.99 for an item that a narrow exception
        (a recent counterpart, over an amount) claims at 0.99 too. The served cases
        that both rules hold for tell them apart (weighed by recency); with fewer than
        ``MIN_SHARED`` of them scored with either, or as many for each, the likelier stays.
        """
        won = {first: 0.0, second: 0.0}
        shared = 0
        for row in self._held(self._path(first, facts), self._path(second, facts)):
            if row.scored and row.outcome in won:
                won[row.outcome] += rules.LEAF_DECAY ** (self.now - row.block)
                shared += 1
        return second if shared >= MIN_SHARED and won[second] > won[first] else first

    def _chosen_as_cases(self, query: str) -> str | None:
        """The outcome of an ordered choice decided through its items as single cases."""
        for family in sorted(self.as_cases.go):
            tool, argument = family.split("|")
            shown = rules.items_of(_untimed(query), argument)
            if not shown:
                continue
            ordinal, outcome = self.as_cases.choose(family, self.facts(query), shown, self._plain)
            if not ordinal:
                return outcome
            for signature in self.signatures:
                if signature.startswith(f"{tool}(") and f"{argument}={CHOICE}" in signature:
                    taken = signature.replace(f"{argument}={CHOICE}", f"{argument}={ordinal}")
                    return self.filled(taken, query)
        return None

    def filled(self, signature: str, query: str) -> str:
        """``signature`` with its items decided for the case ``query`` describes, by their rules.

        ``decide(decisions=[...])`` becomes ``decide(decisions=[{"line": 1, ...}, ...])``:
        each item the case shows (an object numbered by the key) gets the decision its
        rules rank first. A signature the case shows no items for is left as it is.
        """
        name = signature.split("(", 1)[0]
        for family, tree in self.choices.items():
            tool, argument = family.split("|")
            if tool == name and f"{argument}={CHOICE}" in signature:
                picked = self._choose(tree, argument, query)
                if picked is not None:
                    signature = signature.replace(f"{argument}={CHOICE}", f"{argument}={picked}")
        if ITEMS not in signature:
            return signature
        for family in sorted({*self.items, *self.as_cases.decisions}):
            trees = self.items.get(family, {})
            tool, argument, key = family.split("|")
            if tool != name or f"{argument}={ITEMS}" not in signature:
                continue
            if not trees and family not in self.as_cases.decisions:
                continue
            shown = rules.items_of(_untimed(query), key)
            if not shown:
                return signature
            case = self.facts(query)
            decided = []
            for ordinal, own in sorted(shown.items()):
                best = None
                if family in self.as_cases.decisions:
                    best = self.as_cases.decide(family, case, own, self._plain)
                best = best or rules.rank(trees, {**case, **own})
                if best is None:
                    return signature  # an item nothing decides: the items stay unfilled
                decided.append({key: ordinal, **json.loads(best)})
            listed = json.dumps(decided, ensure_ascii=False)
            return signature.replace(f"{argument}={ITEMS}", f"{argument}={listed}")
        return signature

    def _choose(self, tree: rules.Node, key: str, query: str) -> int | None:
        """The first item (numbered by ``key``) the rules say is chosen, else the likeliest.

        None when the case shows no such items.
        """
        shown = rules.items_of(_untimed(query), key)
        if not shown:
            return None
        case = self.facts(query)
        chance = {
            ordinal: tree.leaf({**case, **own})[-1].estimate.get(CHOSEN, 0.0)
            for ordinal, own in shown.items()
        }
        passing = [ordinal for ordinal in sorted(chance) if chance[ordinal] >= 0.5]
        return passing[0] if passing else max(sorted(chance), key=lambda o: chance[o])

    def similar(self, query: str, k: int = TOP_K) -> list[Case]:
        return [self.cases[i] for i in bm25_top_k(_untimed(query), self._docs, k)]

    def answer(self, query: str) -> str:
        """The ``wm`` tool: the actions ranked for the case, the rule that fires, similar cases."""
        if not self.signatures:
            return "no knowledge yet: nothing has been served and scored"
        facts = self.facts(query)
        estimate = self.estimate(query)
        ranked = sorted(self.signatures, key=lambda s: (-estimate[s], s))
        best = ranked[0]
        path = self._path(best, facts)
        shown = self.filled(best, query)
        lines = [f"best: {shown} (estimated chance to score {estimate[best]:.2f})"]
        if len(ranked) > 1:
            lines.append("others: " + "; ".join(f"{s} {estimate[s]:.2f}" for s in ranked[1:5]))
        lines.append("rule: " + _rule_line(path, best))
        chosen = self._chosen_form(query)
        if chosen is not None and chosen != shown:  # the items decided as single cases are
            lines.insert(0, f"best: {chosen} (its items decided as single cases are)")
            lines[1] = "next: " + lines[1].removeprefix("best: ")
        found = self.similar(query)
        if found:
            lines.append("similar past cases:")
            for case in found:
                outcome = f"Score: {case.reward * 100:g}/100."
                lines.append(f"- stream position {case.timestamp}: did {case.done} — {outcome}")
        return "\n".join(lines)

    def card(self, version: int) -> str:
        """What the model believes, in rules with their evidence (the host's system prompt)."""
        lines = [f"# World model v{version}", ""]
        if not self.signatures:
            return "\n".join([*lines, "Nothing has been served and scored yet.", ""])
        lines += [
            f"Learned from {len(self.cases)} served episodes (blocks 0-{self.now}); the latest "
            "blocks weigh most. An action is the last one an episode took before finish.",
            "",
            "## Rules",
            "",
        ]
        said = _stated(self.trees, lambda signature: f"`{signature}`")
        lines += said or ["- (no rule has evidence yet)"]
        scoped = [
            f"- `{signature}`: only where "
            + " and ".join(f"{key} = {value}" for key, value in sorted(scope.items()))
            for signature, scope in sorted(self.scopes.items())
            if scope
        ]
        if scoped:
            lines += ["", "## Where each action has scored (never elsewhere)", "", *scoped]
        for family, trees in self.items.items():
            tool, argument, key = family.split("|")
            if said := _stated(trees, str):
                lines += ["", f"## `{tool}`, {argument} item by item (each `{key}`)", "", *said]
        for family, tree in self.choices.items():
            tool, argument = family.split("|")
            if said := _stated({CHOSEN: tree}, str):
                heading = f"## `{tool}`: which `{argument}` (the first, in order, that is)"
                lines += ["", heading, "", *said]
        lines += _as_cases_lines(self.as_cases)
        changed = _changes(self.trees)
        if changed:
            lines += ["", "## Newest rules (the block each first scored from)", "", *changed[:5]]
        lines += ["", "## Actions", "", "| action | scored / taken |", "|---|---:|"]
        shown = sorted(range(len(self.signatures)), key=lambda s: -self.evidence[s])[:CARD_ROWS]
        for s in shown:
            mine = [c for c in self.cases if c.signature == self.signatures[s]]
            won = sum(c.reward >= SCORED for c in mine)
            lines.append(f"| `{self.signatures[s]}` | {won} / {len(mine)} |")
        if len(shown) < len(self.signatures):
            lines.append(f"({len(self.signatures) - len(shown)} rarer actions not shown)")
        return "\n".join(lines) + "\n"

    def save(self, directory: Path, version: int) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        index = {
            "vocabulary": self.vocabulary,
            "signatures": self.signatures,
            "now": self.now,
            "since": self.since,
            "rules": {signature: tree.encode() for signature, tree in self.trees.items()},
            "items": {
                family: {decision: tree.encode() for decision, tree in trees.items()}
                for family, trees in self.items.items()
            },
            "choices": {family: tree.encode() for family, tree in self.choices.items()},
            "as_cases": self.as_cases.encode(),
            "scopes": self.scopes,
        }
        tensorfile.write_f32(
            directory / "adapter.safetensors",
            {"evidence": self.evidence},
            {"index": json.dumps(index, sort_keys=True)},
        )
        (directory / "cases.jsonl").write_bytes(
            b"".join(msgspec.json.encode(c) + b"\n" for c in self.cases)
        )
        (directory / "card.md").write_text(self.card(version))

    @classmethod
    def load(cls, directory: Path) -> WorldModel:
        tensors, metadata = tensorfile.read_f32(directory / "adapter.safetensors")
        index = json.loads(metadata.get("index", "{}"))
        evidence = tensors["evidence"]
        cases_file = directory / "cases.jsonl"
        decoder = msgspec.json.Decoder(Case)
        cases = [decoder.decode(line) for line in cases_file.read_bytes().splitlines() if line]
        return cls(
            index.get("vocabulary", []),
            index.get("signatures", []),
            {s: rules.Node.decode(tree) for s, tree in index.get("rules", {}).items()},
            evidence,
            cases,
            now=int(index.get("now", -1)),
            since=int(index.get("since", 0)),
            items={
                family: {decision: rules.Node.decode(tree) for decision, tree in trees.items()}
                for family, trees in index.get("items", {}).items()
            },
            choices={
                family: rules.Node.decode(tree) for family, tree in index.get("choices", {}).items()
            },
            as_cases=standins.ItemsAsCases.decode(index.get("as_cases", {})),
            scopes=index.get("scopes", {}),
        )


def _as_cases_lines(found: standins.ItemsAsCases) -> list[str]:
    """The card's sections on items decided as single cases are."""
    lines = []
    for family, outcome in sorted(found.go.items()):
        tool, argument = family.split("|")
        lines += ["", f"## `{tool}`: the first `{argument}` that a single case would `{outcome}`"]
        lead = found.lead.get(family)
        if lead:
            lines += ["", f"When none would, the case goes as its {argument} {lead} would."]
    for family, table in sorted(found.decisions.items()):
        tool, argument, key = family.split("|")
        lines += ["", f"## `{tool}`, each `{key}` of {argument} as a single case", ""]
        lines += [f"- `{outcome}`: {decision}" for outcome, decision in sorted(table.items())]
    return lines


def _stated(trees: dict[str, rules.Node], shown: Callable[[str], str]) -> list[str]:
    """The rules worth a line on the card (2 successes or more, likelier than not), most first."""
    said = []
    for outcome, tree in trees.items():
        for path in rules.leaves(tree):
            won = path[-1].count.get(outcome, 0)
            if won >= 2 and path[-1].estimate.get(outcome, 0.0) >= 0.5:
                said.append((-won, f"- {shown(outcome)} when {_rule_line(path, outcome)}"))
    return [line for _, line in sorted(said)[:CARD_ROWS]]


def _rule_line(path: list[rules.Node], outcome: str) -> str:
    """A rule for ``outcome`` with its evidence: when ...: scored N of M since block B."""
    leaf = path[-1]
    won, missed = leaf.count.get(outcome, 0), leaf.count.get("-", 0)
    since = leaf.since.get(outcome)
    evidence = f"scored {won} of {won + missed}" + (
        f" since block {since}" if since is not None and won else ""
    )
    return f"{rules.describe(path)}: {evidence}"


def _changes(trees: dict[str, rules.Node]) -> list[str]:
    """Rules that first scored after block 0, newest first: where a policy is new."""
    out = []
    for signature, tree in trees.items():
        for path in rules.leaves(tree):
            leaf = path[-1]
            since = leaf.since.get(signature, 0)
            if since > 0 and leaf.count.get(signature, 0) >= 2 and leaf.estimate[signature] >= 0.5:
                out.append(
                    (since, f"- from block {since}: `{signature}` when {rules.describe(path)}")
                )
    return [line for _, line in sorted(out, reverse=True)]


def _vocabulary(docs: list[set[str]]) -> list[str]:
    frequency: dict[str, int] = {}
    for doc in docs:
        for token in doc:
            frequency[token] = frequency.get(token, 0) + 1
    ceiling = len(docs) / 2 if len(docs) >= 4 else len(docs)
    kept = [t for t, f in frequency.items() if 2 <= f <= ceiling]
    kept.sort(key=lambda t: (-frequency[t], t))
    return sorted(kept[:MAX_VOCABULARY])


def fit(served: list[Served], *, now: int, decay: float = 0.5, manual: str = "") -> WorldModel:
    """Fit the model on every served episode up to block ``now`` (inclusive).

    ``manual``: the documents the host may read; a threshold the evidence leaves
    anywhere in a gap goes to a figure the manual prints there (:func:`rules.anchors_of`),
    and an outcome's rules favour the figures printed beside its argument
    (:func:`rules.said_of`: "above $8000.00 ... escalated with reason reportable_amount").
    """
    anchors = rules.anchors_of(manual)
    cases = [c for c in (case_of(s) for s in served) if c is not None]
    if not cases:
        return WorldModel([], [], {}, [], [], now=now)
    vocabulary = _vocabulary([rules.prose_words(_untimed(c.text)) for c in cases])
    signatures = sorted({c.signature for c in cases})
    rows = [
        rules.Row(rules.facts_of(c.text, vocabulary), c.signature, c.reward >= SCORED, c.block)
        for c in cases
    ]
    single = [r for r, c in zip(rows, cases, strict=True) if not (c.itemized or c.chose)]
    since, trees = rules.regime(_evidence(rows, 0), now, signatures, anchors)
    evidence = [
        sum(decay ** (now - c.block) for c in cases if c.signature == s) for s in signatures
    ]
    model = WorldModel(
        vocabulary,
        signatures,
        trees,
        evidence,
        cases,
        now=now,
        items=_fit_items(rows, cases, since, now, anchors),
        choices=_fit_choices(rows, cases, since, now, anchors),
        since=since,
        scopes=rules.scopes(single),
    )
    model._facts = _evidence(rows, since)  # the cases' facts, as ``_rows`` would read them
    # The model's rules, grown once more: from the items of the cases that scored too
    # (where single cases of a kind are few, their items are most of its evidence), and
    # each root's rule chosen a step ahead. The regime's greedy trees only compared
    # where the evidence starts, and read the items as single cases here.
    items: list[rules.Row] = []
    held: dict[int, WorldModel] = {}  # the model's own rules held out, fitted once
    if any(c.itemized or c.chose for c in cases):
        model.as_cases = _as_cases(model, rows, cases, since, anchors, held)
        items = _items_as_cases(model, rows, cases)
    taught = _evidence([*rows, *items], since)
    said = rules.said_of(manual, signatures)
    model.trees = rules.grow_each(taught, now, signatures, anchors=anchors, look=True, said=said)
    if items:
        model.scopes = rules.scopes([*single, *items])
    model.as_cases = _as_cases(model, rows, cases, since, anchors, held)
    return model


def _items_as_cases(model: WorldModel, rows: list[rules.Row], cases: list[Case]) -> list[rules.Row]:
    """The items of the cases that scored, as the single cases they stand for.

    Cases with items are rarer than single cases, but carry several items each:
    where single cases of a kind are few (a threshold seen scored four times),
    their items are most of its evidence.
    """
    scored = [
        (row, case)
        for row, case in zip(rows, cases, strict=True)
        if row.scored and case.block >= model.since
    ]
    outcomes = [c.signature for c in cases if not (c.itemized or c.chose)]
    return [*_batch_lines(model, scored, cases, outcomes), *_choice_legs(model, scored)]


def _batch_lines(
    model: WorldModel,
    scored: list[tuple[rules.Row, Case]],
    cases: list[Case],
    outcomes: list[str],
) -> list[rules.Row]:
    """The lines of the batches that scored, each a success of the outcome it says.

    A batch that scored decided every line right, and a line's decision says what a
    single outcome says (``{"action": "escalate", "reason": "late"}`` is
    ``escalate(reason=late)``, :func:`standins.said_alike`).
    """
    decisions: dict[str, set[str]] = {}
    for case in cases:
        if case.itemized:
            decisions.setdefault(case.itemized, set()).update(d for _, d in case.items)
    found = []
    for family, seen in decisions.items():
        meant: dict[str, list[str]] = {}
        for outcome, decision in standins.said_alike(outcomes, seen).items():
            meant.setdefault(decision, []).append(outcome)
        key = family.rsplit("|", 1)[-1]
        for row, case in scored:
            if case.itemized != family:
                continue
            shown = rules.items_of(case.text, key)
            for ordinal, decision in case.items:
                said = meant.get(decision, [])
                if ordinal in shown and len(said) == 1:
                    facts = model.as_cases.stand_in(row.facts, shown[ordinal])
                    found.append(rules.Row(facts, said[0], True, case.block))
    return found


def _choice_legs(model: WorldModel, scored: list[tuple[rules.Row, Case]]) -> list[rules.Row]:
    """The legs of the choices that scored, up to the one taken.

    The leg taken is a success of the single outcome that lets a leg go; the legs before
    it are failures of it (which outcome they would get is not known). That outcome is
    the stand-ins' (``as_cases.go``), or where a choice's own rules decide it better, the
    one the stand-ins would have picked (:func:`standins.lets_go`), not the one its chosen
    legs most get (a first pass misreading them would teach its misreading).
    """
    default = _scored_most(scored)
    chosen: dict[str, list[tuple[rules.Row, Case, dict[int, dict[str, rules.Value]]]]] = {}
    for row, case in scored:
        if case.chose:
            shown = rules.items_of(case.text, case.chose.split("|")[1])
            chosen.setdefault(case.chose, []).append((row, case, shown))
    found = []
    for family, mine in chosen.items():
        go = model.as_cases.go.get(family)
        if go is None:  # set aside for the choice's own rules: picked alike all the same
            read = [
                (case.choice, model.as_cases.legs(row.facts, shown, model._plain))
                for row, case, shown in mine
            ]
            go = standins.lets_go(read, default)
        if go is None:
            continue
        for row, case, shown in mine:
            for ordinal in sorted(shown):
                if case.choice and ordinal > case.choice:
                    break
                facts = model.as_cases.stand_in(row.facts, shown[ordinal])
                found.append(rules.Row(facts, go, ordinal == case.choice, case.block))
    return found


def _scored_most(scored: list[tuple[rules.Row, Case]]) -> str | None:
    """The single outcome that scored most (of two alike, the first by name)."""
    won = Counter(case.signature for _, case in scored if not (case.itemized or case.chose))
    return min(won, key=lambda s: (-won[s], s)) if won else None


def _evidence(rows: list[rules.Row], since: int) -> list[rules.Row]:
    """The rows the outcomes' rules learn from.

    Evidence from before a change (``since``) is set aside. A family decided item by
    item (or an ordered choice) that failed may have been the right family with a wrong
    item: its failures are no evidence against the family.
    """
    return [
        r
        for r in rows
        if r.block >= since and (r.scored or (ITEMS not in r.outcome and CHOICE not in r.outcome))
    ]


def _as_cases(
    model: WorldModel,
    rows: list[rules.Row],
    cases: list[Case],
    since: int,
    anchors: Sequence[float],
    held: dict[int, WorldModel],
) -> standins.ItemsAsCases:
    """What single cases decide of the items (:mod:`._standins`).

    Kept for each family only where it decided the scored cases at least as well as the
    items' own rules did, those judged held out (:func:`_held_out`; ``held``: those fitted
    already, by parity).
    """
    scored = [
        (row, case)
        for row, case in zip(rows, cases, strict=True)
        if row.scored and case.block >= since
    ]
    single = [row.facts for row, case in scored if not case.itemized and not case.chose]
    families = {case.chose for _, case in scored if case.chose}
    choices = []
    for family in sorted(families):
        argument = family.split("|")[1]
        for row, case in scored:
            shown = rules.items_of(case.text, argument)
            if shown and (case.chose == family or not (case.chose or case.itemized)):
                choices.append((family, row.facts, shown, case.choice, case.signature, case))
    # Each batch's items, read once: every batch served names the decisions, the scored
    # ones (since the change) teach what a stand-in's outcome means.
    shown_items = [
        rules.items_of(case.text, case.itemized.rsplit("|", 1)[-1]) if case.itemized else {}
        for case in cases
    ]
    batches = [
        (case.itemized, row.facts, shown, case.items, case.block)
        for row, case, shown in zip(rows, cases, shown_items, strict=True)
        if case.itemized and row.scored and case.block >= since
    ]
    listed = [
        (case.itemized, shown, case.items)
        for case, shown in zip(cases, shown_items, strict=True)
        if case.itemized
    ]
    outcomes = [case.signature for case in cases if not (case.itemized or case.chose)]
    default = _scored_most(scored)
    learned = standins.learn(
        single,
        [c[:5] for c in choices],
        [b[:4] for b in batches],
        model._plain,
        listed,
        outcomes,
        default,
    )
    for family in list(learned.go):
        mine = [c for c in choices if c[0] == family]
        through = standins.agreement(
            (learned.choose(family, facts, shown, model._plain), (chosen, None if chosen else sig))
            for _, facts, shown, chosen, sig, _ in mine
        )
        # The model's own rules are judged held out too (in sample, they would always fit).
        for parity in {case.block % 2 for *_, case in mine} - held.keys():
            held[parity] = _held_out(model, rows, cases, since, anchors, parity)
        own = standins.agreement(
            (held[case.block % 2].ranked(case.text)[0], _taken(case)) for *_, case in mine
        )
        if through < own:
            del learned.go[family]
    for family in list(learned.decisions):
        pairs = [
            (facts, shown[o], decision, block)
            for f, facts, shown, items, block in batches
            if f == family
            for o, decision in items
            if o in shown
        ]
        through = standins.agreement(
            (learned.decide(family, facts, own, model._plain), d) for facts, own, d, _ in pairs
        )
        # The items' own rules are judged held out: fitted on the even blocks, asked about
        # the odd ones, and the other way round (in sample, they would always fit).
        judged = []
        for parity in (0, 1):
            other = [(r, c) for r, c in zip(rows, cases, strict=True) if c.block % 2 != parity]
            trees = _fit_items(
                [r for r, _ in other], [c for _, c in other], since, model.now, anchors
            ).get(family, {})
            judged += [
                (rules.rank(trees, {**facts, **own}), d)
                for facts, own, d, block in pairs
                if block % 2 == parity
            ]
        if through < standins.agreement(judged):
            del learned.decisions[family]
    return learned


def _held_out(
    model: WorldModel,
    rows: list[rules.Row],
    cases: list[Case],
    since: int,
    anchors: Sequence[float],
    parity: int,
) -> WorldModel:
    """The model's own rules (single outcomes and choices), fitted on the other parity's blocks.

    Asked about a case of a block of ``parity``, they are judged held out.
    """
    other = [(r, c) for r, c in zip(rows, cases, strict=True) if c.block % 2 != parity]
    fitted_rows, fitted_cases = [r for r, _ in other], [c for _, c in other]
    trees = rules.grow_each(_evidence(fitted_rows, since), model.now, model.signatures,
                            anchors=anchors)  # fmt: skip
    return WorldModel(
        model.vocabulary,
        model.signatures,
        trees,
        model.evidence,
        fitted_cases,
        now=model.now,
        items=model.items,
        choices=_fit_choices(fitted_rows, fitted_cases, since, model.now, anchors),
        since=since,
        scopes=model.scopes,
    )


def _taken(case: Case) -> str:
    """The outcome a case took, its choice filled in (as ``ranked`` gives it)."""
    if not case.chose:
        return case.signature
    argument = case.chose.split("|")[1]
    return case.signature.replace(f"{argument}={CHOICE}", f"{argument}={case.choice}")


def _fit_choices(
    rows: list[rules.Row], cases: list[Case], since: int, now: int, anchors: Sequence[float] = ()
) -> dict[str, rules.Node]:
    """When an item of an ordered choice is the one chosen, from the cases that scored.

    The items are read in order: the one chosen passed, those before it were passed
    over; those after it say nothing (the choice stopped at the first that passed).
    """
    by: dict[str, list[rules.Row]] = {}
    for row, case in zip(rows, cases, strict=True):
        if not case.chose or not row.scored or case.block < since:
            continue
        shown = rules.items_of(case.text, case.chose.split("|")[1])
        for ordinal in sorted(shown):
            if ordinal > case.choice:
                break
            label = CHOSEN if ordinal == case.choice else PASSED
            facts = {**row.facts, **shown[ordinal]}
            by.setdefault(case.chose, []).append(rules.Row(facts, label, True, case.block))
    return {
        family: rules.grow_each(items, now, [CHOSEN, PASSED], anchors=anchors)[CHOSEN]
        for family, items in by.items()
    }


def _fit_items(
    rows: list[rules.Row], cases: list[Case], since: int, now: int, anchors: Sequence[float] = ()
) -> dict[str, dict[str, rules.Node]]:
    """The rules of outcomes decided item by item, learned from the items of cases that scored.

    A case that scored shows every item's decision right; one that did not says not
    which item was wrong, so it teaches the items nothing.
    """
    by: dict[str, list[rules.Row]] = {}
    for row, case in zip(rows, cases, strict=True):
        if not case.itemized or not row.scored or case.block < since:
            continue
        key = case.itemized.rsplit("|", 1)[-1]
        shown = rules.items_of(case.text, key)
        for ordinal, decision in case.items:
            if ordinal in shown:
                facts = {**row.facts, **shown[ordinal]}
                by.setdefault(case.itemized, []).append(
                    rules.Row(facts, decision, True, case.block)
                )
    return {
        family: rules.grow_each(items, now, sorted({r.outcome for r in items}), anchors=anchors)
        for family, items in by.items()
    }
