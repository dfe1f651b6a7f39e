"""Facts and rules: what MWM reads of a case, and what it learns from served outcomes.

**Facts.** A case is text: the instruction, then what the look-ups returned.
Every JSON object in it becomes typed facts: numbers stay numbers, strings are
categories, booleans and nulls are categories too, nested keys keep their
path, a list gives its length, and an id (``ACC-172127``) gives its shape
(``ACC-#``: which kind of thing, never which one). An object is named by its
first id field (``{"case_id": ..., "amount": 12}`` gives ``case.amount``).
The figures of the text outside JSON (amounts, counts) are ``figure.1``,
``figure.2``, ... in order, and ``figure.max``; its words are ``word:<w>``
facts (present or not), for a query written in words.

**Rules.** :func:`grow` fits one tree over the facts of served cases. Its
splits separate the outcomes that scored (``case.amount > 650``,
``account.verification = basic``): thresholds and conjunctions, chosen by
Gini gain on the successful outcomes. Each leaf keeps, per outcome, the
recency-weighted evidence that reached it: successes; failures; and *implied*
failures, since a served case that scored with one outcome shows that the
others would not have. A leaf's estimate for an outcome is its evidence
smoothed towards its parent's estimate, so a leaf that lacks evidence falls
back on the wider rule. Recent evidence weighs most, so a policy that changes
is followed; the tree's splits use every block, so a rule that still holds
keeps its shape.

Nothing here names a domain, a tool or a field. The module stands alone
(the standard library only): the Codex learner copies it into its sandbox.
"""

from __future__ import annotations

import copy
import heapq
import itertools
import json
import math
import re
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Node",
    "Row",
    "anchors_of",
    "facts_of",
    "grow",
    "grow_each",
    "id_shape",
    "in_scope",
    "items_of",
    "prose_words",
    "scopes",
    "words_of",
]

Value = float | str
_ID = re.compile(r"#?\b[A-Za-z]{1,6}-?\d{2,}\b|#[A-Za-z]?\d{4,}\b")
_FIGURE = re.compile(r"(?<![\w#.-])\$?(\d+(?:,\d{3})*(?:\.\d+)?)(?![\w-])")
_WORD = re.compile(r"[a-z]+")
_ENUMERATION = re.compile(r"^\s*\d+[.)]\s", re.MULTILINE)  # "1) A single request."
_PARAGRAPH = re.compile(r"\n\s*\n|\n(?=#)")
_SENTENCE = re.compile(r"(?<=\.)\s+")
_ARGUMENT = re.compile(r"=([^,()\[\]<>]+)")  # an outcome's argument's value: reason=late
MIN_SAID = 4  # characters of an argument's value the manual is searched for
TEXT_CHARS = 40  # a string longer than this is free text, not a category
SPLIT_DECAY = 0.8  # per block, for choosing splits
LEAF_DECAY = 0.85  # per block before a rule's latest evidence, for its estimate
SMOOTHING = 0.1  # weight of the parent's estimate in a leaf's (a pure leaf of 6 reads 0.9+)
MIN_LEAF = 2  # successes on each side of a split
MAX_DEPTH = 8
MAX_CATEGORIES = 16  # a category with more values is a name (a person, a firm, a month)
MIN_NAME = 4  # cases on the named side of a split on a name
NAME_WEIGHT = 0.25  # of a name's (or word's) gain: a rule on one name reaches no other
SAID_WEIGHT = 1.2  # of a threshold's gain at a figure the manual prints for the outcome
LOOKAHEAD = 6  # a root's best tests, each weighed with the best test it leaves on each side
CHI2_MIN = 3.84  # a split must be this sure (chi-squared, p < 0.05 at one degree of freedom)
SUMMED = 3  # numbers whose pairwise sums a split may test: the best splitting ones (one each)
SAME_SCALE = 10.0  # two numbers summed have medians within this factor (one unit, likely)
SUM = " + "  # in a fact's name: the sum of two numbers (``account.today_total + case.amount``)
SCOPE_CHANCE = 0.001  # a scope must be this unlikely to come of chance


def id_shape(value: Any) -> str | None:
    """An id's shape (``TRF-211564`` -> ``TRF-#``); None for anything that is no id."""
    if not isinstance(value, str) or not _ID.fullmatch(value):
        return None
    return re.sub(r"\d+", "#", value)


def _name(obj: dict[str, Any]) -> str:
    for key, value in obj.items():
        if key.endswith("_id") and id_shape(value) is not None:
            return key[: -len("_id")]
    return "obs"


def _flatten(obj: Any, path: str, facts: dict[str, Value]) -> None:
    if isinstance(obj, dict):
        for key, value in obj.items():
            _flatten(value, f"{path}.{key}", facts)
    elif isinstance(obj, list):
        facts.setdefault(f"{path}.count", float(len(obj)))
    elif isinstance(obj, bool) or obj is None:
        facts.setdefault(path, json.dumps(obj))
    elif isinstance(obj, (int, float)):
        if math.isfinite(obj):
            facts.setdefault(path, float(obj))
    elif isinstance(obj, str):
        shape = id_shape(obj)
        if shape is not None:
            facts.setdefault(f"{path}.shape", shape)
        elif len(obj) <= TEXT_CHARS:
            facts.setdefault(path, obj)


def _objects(text: str) -> tuple[list[dict[str, Any]], str]:
    """The JSON objects in ``text``, and the text without them."""
    decoder = json.JSONDecoder()
    found, rest, start = [], [], 0
    position = text.find("{")
    while position >= 0:
        try:
            obj, end = decoder.raw_decode(text, position)
        except ValueError:
            position = text.find("{", position + 1)
            continue
        if isinstance(obj, dict):
            found.append(obj)
            rest.append(text[start:position])
            start = end
        position = text.find("{", end)
    rest.append(text[start:])
    return found, " ".join(rest)


def words_of(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


def prose_words(text: str) -> set[str]:
    """The words of ``text`` outside its JSON objects (those are facts already)."""
    return words_of(_objects(text)[1])


def facts_of(text: str, vocabulary: Iterable[str] = ()) -> dict[str, Value]:
    """The typed facts of a case's text; ``vocabulary``: the words that are facts."""
    objects, rest = _objects(text)
    facts: dict[str, Value] = {}
    for obj in objects:
        _flatten(obj, _name(obj), facts)
    figures = [float(f.replace(",", "")) for f in _FIGURE.findall(_ID.sub(" ", rest))]
    for number, figure in enumerate(figures[:8], 1):
        facts[f"figure.{number}"] = figure
    if figures:
        facts["figure.max"] = max(figures)
        facts["figure.count"] = float(len(figures))
    words = words_of(rest)  # a word inside JSON is in a fact already (a name, a category)
    for word in vocabulary:
        if word in words:
            facts[f"word:{word}"] = "yes"
    return facts


def items_of(text: str, key: str) -> dict[int, dict[str, Value]]:
    """The items of ``text``'s JSON lists whose objects carry the ordinal ``key``, by it.

    ``{"lines": [{"line": 1, "amount": 12}, ...]}`` gives ``{1: {"item.amount": 12.0}}``:
    each item's own facts, for a decision made item by item (a batch, line by line).
    """
    found: dict[int, dict[str, Value]] = {}

    def walk(obj: Any) -> None:
        if isinstance(obj, dict):
            for value in obj.values():
                walk(value)
        elif isinstance(obj, list):
            for item in obj:
                ordinal = item.get(key) if isinstance(item, dict) else None
                if isinstance(ordinal, int) and not isinstance(ordinal, bool):
                    facts: dict[str, Value] = {}
                    _flatten({k: v for k, v in item.items() if k != key}, "item", facts)
                    found.setdefault(ordinal, facts)
                else:
                    walk(item)

    for obj in _objects(text)[0]:
        walk(obj)
    return found


@dataclass(frozen=True)
class Row:
    """One served case: its facts, the outcome it took, whether that scored, its block."""

    facts: dict[str, Value]
    outcome: str
    scored: bool
    block: int
    # The facts by kind, read once: a split reads them at every rule it tries.
    numbers: tuple[tuple[str, float], ...] = field(init=False, repr=False, compare=False)
    categories: tuple[tuple[str, str], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        numbers: list[tuple[str, float]] = []
        categories: list[tuple[str, str]] = []
        for key, value in self.facts.items():
            if isinstance(value, float):
                numbers.append((key, value))
            else:
                categories.append((key, value))
        object.__setattr__(self, "numbers", tuple(numbers))
        object.__setattr__(self, "categories", tuple(categories))

    def labelled(self, outcome: str, scored: bool) -> Row:
        """The same case with another outcome (its facts not read again)."""
        row = copy.copy(self)
        object.__setattr__(row, "outcome", outcome)
        object.__setattr__(row, "scored", scored)
        return row


@dataclass
class Node:
    """A rule: a test on one fact (or a leaf), and the evidence that reached it."""

    fact: str | None = None
    op: str = ""  # "=" (a category) or "<=" (a threshold)
    value: Value = ""
    absent: bool = False  # some cases lacked the fact (they take the ``no`` branch)
    yes: Node | None = None
    no: Node | None = None
    estimate: dict[str, float] = field(default_factory=dict)  # outcome -> chance to score
    won: dict[str, float] = field(default_factory=dict)  # outcome -> weighted successes
    lost: dict[str, float] = field(default_factory=dict)  # outcome -> weighted failures
    since: dict[str, int] = field(default_factory=dict)  # outcome -> first block it won here
    count: dict[str, int] = field(default_factory=dict)  # outcome -> successes here (unweighted)

    def holds(self, facts: dict[str, Value]) -> bool:
        have = value_of(facts, self.fact or "")
        if self.op == "=":
            return have == self.value
        return isinstance(have, float) and isinstance(self.value, float) and have <= self.value

    def leaf(self, facts: dict[str, Value]) -> list[Node]:
        """The path of rules ``facts`` take, from this one to a leaf."""
        path, node = [self], self
        while node.fact is not None and node.yes is not None and node.no is not None:
            node = node.yes if node.holds(facts) else node.no
            path.append(node)
        return path

    def encode(self) -> dict[str, Any]:
        out: dict[str, Any] = {"estimate": self.estimate, "won": self.won, "lost": self.lost,
                               "since": self.since, "count": self.count}  # fmt: skip
        if self.fact is not None and self.yes is not None and self.no is not None:
            out.update(fact=self.fact, op=self.op, value=self.value, absent=self.absent,
                       yes=self.yes.encode(), no=self.no.encode())  # fmt: skip
        return out

    @classmethod
    def decode(cls, data: dict[str, Any]) -> Node:
        node = cls(
            estimate=data.get("estimate", {}), won=data.get("won", {}), lost=data.get("lost", {}),
            since=data.get("since", {}), count=data.get("count", {}),
        )  # fmt: skip
        if "fact" in data:
            node.fact, node.op = data["fact"], data["op"]
            node.value = float(data["value"]) if data["op"] == "<=" else data["value"]
            node.absent = bool(data.get("absent", False))
            node.yes, node.no = cls.decode(data["yes"]), cls.decode(data["no"])
        return node


def estimate_of(node: Node, facts: dict[str, Value], outcome: str) -> float:
    """``outcome``'s chance for ``facts`` by ``node``'s rules.

    A case that lacks a fact no served case lacked where a rule tests it (an item read
    as a single case has no count of the request's figures) belongs to neither side
    more than the served cases did: it reads both, weighed by the evidence each holds.
    """
    while node.fact is not None and node.yes is not None and node.no is not None:
        if not node.absent and value_of(facts, node.fact) is None:
            sides = [(sum(c.won.values()) + sum(c.lost.values()), c) for c in (node.yes, node.no)]
            total = sum(weight for weight, _ in sides)
            if total <= 0:
                break
            return sum(w * estimate_of(side, facts, outcome) for w, side in sides) / total
        node = node.yes if node.holds(facts) else node.no
    return node.estimate.get(outcome, 0.0)


def value_of(facts: dict[str, Value], fact: str) -> Value | None:
    """A fact of a case, or the sum of two (``a + b``: None unless both are numbers)."""
    if SUM not in fact:
        return facts.get(fact)
    total = 0.0
    for part in fact.split(SUM):
        value = facts.get(part)
        if not isinstance(value, float):
            return None
        total += value
    return total


def _divide(
    node: Node, rows: Sequence[Row], test: tuple[str, str, Value]
) -> tuple[list[Row], list[Row]]:
    """Make ``node`` the rule ``test``; the rows it holds for, and the rest."""
    node.fact, node.op, node.value = test
    node.absent = any(value_of(r.facts, test[0]) is None for r in rows)
    yes = [r for r in rows if node.holds(r.facts)]
    return yes, [r for r in rows if not node.holds(r.facts)]


def _gini(weights: Sequence[float]) -> float:
    """Gini impurity times weight: ``total * (1 - sum of squared shares)``."""
    if len(weights) == 2:  # one outcome's rules (yes or no): most splits, written out
        a, b = weights
        total = a + b
        return total - (a * a + b * b) / total if total > 0 else 0.0
    total = sum(weights)
    if total <= 0:
        return 0.0
    return total - sum(w * w for w in weights) / total


Test = tuple[str, str, Value]  # a rule on one fact: (fact, "<=" or "=", value)


def _split(
    rows: Sequence[Row],
    now: int,
    decay: float = SPLIT_DECAY,
    anchors: Sequence[float] = (),
    said: Sequence[float] = (),
    names: frozenset[str] | None = None,
) -> Test | None:
    """The test on one fact that best separates the outcomes that scored."""
    found = _candidates(rows, now, decay, anchors, said, names)
    return found[0][1] if found else None


def _candidates(
    rows: Sequence[Row],
    now: int,
    decay: float = SPLIT_DECAY,
    anchors: Sequence[float] = (),
    said: Sequence[float] = (),
    names: frozenset[str] | None = None,
) -> list[tuple[float, Test]]:
    """Every test that separates the outcomes that scored, with its gain: the best first.

    The others follow in the order they were tried. Each fact gives its best
    threshold (or each of its categories). Thresholds are swept in one pass per fact
    (sorted values, running label weights). Outcomes are counted by index, so a sweep
    step adds one weight and reads two sums.

    ``said``: the figures the manual prints for the outcome (:func:`said_of`); a
    threshold in a gap holding one is that figure, and its gain weighs ``SAID_WEIGHT``.
    ``names``: the facts that are names (:func:`names_of`), as the whole evidence says;
    else those with many values among ``rows``.
    """
    labels: dict[str, int] = {}
    wins: list[tuple[Row, int, float]] = []
    for row in rows:
        if row.scored:
            label = labels.setdefault(row.outcome, len(labels))
            wins.append((row, label, decay ** (now - row.block)))
    total = [0.0] * len(labels)
    for _, label, weight in wins:
        total[label] += weight
    base = _gini(total)
    if base <= 1e-9 or len(wins) < 2 * MIN_LEAF:
        return []
    width = len(total)
    numeric, counted = _tallies(wins, width)
    if names is None:
        names = names_of(rows)
    groups: dict[str, list[str]] = {}
    for key, category in sorted(counted):
        groups.setdefault(key, []).append(category)
    best: tuple[float, Test] | None = None
    found: list[tuple[float, Test]] = []

    def consider(gain: float, key: str, op: str, value: Value) -> None:
        nonlocal best
        gain -= 1e-6 if key.startswith("word:") else 0.0  # a word is a weaker reading
        # Of tests that part the cases alike, a kind before a threshold: a threshold
        # could have been drawn anywhere in its gap, on any number (sums come last).
        gain -= 1e-7 if op == "<=" else 0.0
        if gain > 1e-6:
            found.append((gain, (key, op, value)))
            if best is None or gain > best[0] + 1e-12:
                best = found[-1]

    def sweep(key: str, values: list[tuple[float, int, float]]) -> float:
        """Consider the best threshold on one number; its gain."""
        numbers = sorted(values, key=lambda item: item[0])
        left = [0.0] * width
        top, at = 0.0, 0.0
        last = len(wins) - MIN_LEAF  # a threshold leaves MIN_LEAF successes on each side
        for index in range(len(numbers) - 1):
            value, label, weight = numbers[index]
            left[label] += weight
            following = numbers[index + 1][0]
            if following == value or index + 1 < MIN_LEAF or index + 1 > last:
                continue
            gain = base - _gini(left) - _gini([t - w for t, w in zip(total, left, strict=True)])
            printed = [f for f in said if value <= f < following] if said else None
            if printed:
                gain *= SAID_WEIGHT
            if gain > top + 1e-12:
                top, at = gain, (printed[0] if printed else _threshold(value, following, anchors))
        if top > 0.0:
            consider(top, key, "<=", at)
        return top

    splits: dict[str, float] = {}
    for key in sorted({*numeric, *groups}):
        if key in numeric:
            splits[key] = sweep(key, numeric[key])
        # A category of many values is a name (a person, a firm, a month): a rule on one
        # of them needs more evidence than a rule on a kind.
        named = key in names
        least = MIN_NAME if named else MIN_LEAF
        kinds = groups.get(key, [])
        weight = NAME_WEIGHT if named or key.startswith("word:") else 1.0
        many = 1e-9 * len(kinds)  # of kinds parting the cases alike, the fewer values first
        for category in kinds:
            counts = counted[key, category]
            if counts[width] < least or len(wins) - counts[width] < MIN_LEAF:
                continue
            inside = counts[:width]
            gain = base - _gini(inside) - _gini([t - w for t, w in zip(total, inside, strict=True)])
            consider(gain * weight - many, key, "=", category)
    # A rule may be on the sum of two numbers (today's total and this amount, over a
    # cap): of the numbers that split best alone, each pair's sum is tried too.
    # A number that is another under a second name (a day's total shown twice) takes
    # no place of its own: the place is the next number's.
    summed: list[str] = []
    for key in sorted((k for k in splits if not k.startswith("figure.")),
                      key=lambda k: (-splits[k], k)):  # fmt: skip
        if len(summed) < SUMMED and not any(_same(wins, key, k) for k in summed):
            summed.append(key)
    middle = {k: statistics.median(abs(v) for v, _, _ in numeric[k]) for k in summed}
    for a, b in itertools.combinations(sorted(summed), 2):
        low, high = sorted((middle[a], middle[b]))
        if high > SAME_SCALE * max(low, 1e-9):  # sizes apart: not one quantity's parts
            continue
        name = f"{a}{SUM}{b}"
        summed_values = []
        for row, label, weight in wins:
            both = value_of(row.facts, name)
            if isinstance(both, float):
                summed_values.append((both, label, weight))
        sweep(name, summed_values)
    if best is None:
        return []
    return [best, *(c for c in found if c is not best)]  # the best: the first of equal gains


def _same(wins: Sequence[tuple[Row, int, float]], a: str, b: str) -> bool:
    """Whether two numbers are one under two names: equal in every case that has either."""
    return all(row.facts.get(a) == row.facts.get(b) for row, _, _ in wins)


def _tallies(
    wins: Sequence[tuple[Row, int, float]], width: int
) -> tuple[dict[str, list[tuple[float, int, float]]], dict[tuple[str, str], list[float]]]:
    """One pass over the facts of the successes (row, outcome index, weight).

    Each fact's numbers, in the rows' order, as (number, outcome, weight); and each
    (fact, category)'s weight by outcome, with its count last.
    """
    numeric: dict[str, list[tuple[float, int, float]]] = {}
    counted: dict[tuple[str, str], list[float]] = {}
    alike: dict[tuple[int, float], Counter[tuple[str, str]]] = {}  # by outcome and weight
    for row, label, weight in wins:
        for key, number in row.numbers:
            if key in numeric:
                numeric[key].append((number, label, weight))
            else:
                numeric[key] = [(number, label, weight)]
        alike.setdefault((label, weight), Counter()).update(row.categories)
    for (label, weight), pairs in alike.items():
        for pair, many in pairs.items():
            counts = counted.get(pair)
            if counts is None:
                counts = counted[pair] = [0.0] * (width + 1)
            counts[label] += weight * many
            counts[width] += many
    return numeric, counted


def anchors_of(manual: str) -> tuple[float, ...]:
    """The figures a case's manual prints (``$8,000.00``, ``30 days``), a list's numbering aside.

    Where the served cases leave a threshold anywhere in a gap (no case between 26
    and 233 days), the manual's figure in that gap is the likeliest place for it: a
    written value that the evidence does not contradict.
    """
    return tuple(sorted(_figures(_ENUMERATION.sub(" ", manual))))


def said_of(manual: str, outcomes: Sequence[str]) -> dict[str, tuple[float, ...]]:
    """The figures the manual prints for each outcome: in the sentences that name its argument.

    ``escalate(reason=reportable_amount)`` and "a transfer above the threshold of
    $8000.00 is escalated with reason reportable_amount": 8000. Where those sentences
    print no figure, their paragraphs' ("electronics $500.00, travel $1200.00. A
    transaction above its limit is escalated with reason over_limit."). An outcome
    without an argument (``approve()``), or one the manual never names, has none.
    """
    found: dict[str, tuple[float, ...]] = {}
    sentences = [
        (sentence, paragraph)
        for paragraph in _PARAGRAPH.split(_ENUMERATION.sub(" ", manual))
        if paragraph.strip()
        for sentence in _SENTENCE.split(paragraph)
    ]
    for outcome in outcomes:
        named = [v for v in _ARGUMENT.findall(outcome) if len(v) >= MIN_SAID]
        in_sentences: set[float] = set()
        in_paragraphs: set[float] = set()
        for sentence, paragraph in sentences:
            if any(value in sentence for value in named):
                in_sentences.update(_figures(sentence))
                in_paragraphs.update(_figures(paragraph))
        if in_sentences or in_paragraphs:
            found[outcome] = tuple(sorted(in_sentences or in_paragraphs))
    return found


def _figures(text: str) -> set[float]:
    return {float(f.replace(",", "")) for f in _FIGURE.findall(text)}


def _threshold(below: float, above: float, anchors: Sequence[float]) -> float:
    """The threshold between neighbouring values: a printed figure in the gap, else the middle."""
    middle = (below + above) / 2
    inside = [a for a in anchors if below <= a < above]
    return min(inside, key=lambda a: (abs(a - middle), a)) if inside else middle


def _evidence(node: Node, rows: Sequence[Row], now: int, decay: float) -> None:
    """The rows' evidence, weighed by recency within this rule: its latest block weighs 1.

    A rule whose cases have not come for a while keeps its evidence whole; within a
    rule, newer evidence outweighs older (a policy that changed).
    """
    latest = max((row.block for row in rows), default=now)
    for row in rows:
        weight = decay ** (latest - row.block)
        into = node.won if row.scored else node.lost
        into[row.outcome] = into.get(row.outcome, 0.0) + weight
        if row.scored:
            node.count[row.outcome] = node.count.get(row.outcome, 0) + 1
            node.since[row.outcome] = min(node.since.get(row.outcome, row.block), row.block)


def _estimate(node: Node, outcomes: Sequence[str], prior: dict[str, float]) -> None:
    """Each outcome's chance here: its evidence (with implied failures), smoothed to ``prior``."""
    won_total = sum(node.won.values())
    for outcome in outcomes:
        won = node.won.get(outcome, 0.0)
        against = node.lost.get(outcome, 0.0) + (won_total - won)  # others' wins imply a loss
        node.estimate[outcome] = (won + SMOOTHING * prior[outcome]) / (won + against + SMOOTHING)


def grow(rows: Sequence[Row], now: int, outcomes: Sequence[str], *, decay: float = 1.0) -> Node:
    """One tree over all outcomes, its splits chosen on the ones that scored.

    With ``decay`` 1 (every block alike), it is a plain decision tree on the facts:
    the baseline the probe measures MWM's rules against.
    """
    root = Node()
    base = {o: 0.5 / max(len(outcomes), 1) for o in outcomes}
    _grow(root, rows, now, outcomes, base, 0, decay)
    return root


def _grow(
    node: Node,
    rows: Sequence[Row],
    now: int,
    outcomes: Sequence[str],
    prior: dict[str, float],
    depth: int,
    decay: float,
) -> None:
    _evidence(node, rows, now, decay)
    _estimate(node, outcomes, prior)
    if depth >= MAX_DEPTH:
        return
    found = _split(rows, now, decay)
    if found is None:
        return
    yes, no = _divide(node, rows, found)
    node.yes, node.no = Node(), Node()
    _grow(node.yes, yes, now, outcomes, node.estimate, depth + 1, decay)
    _grow(node.no, no, now, outcomes, node.estimate, depth + 1, decay)


def names_of(rows: Sequence[Row]) -> frozenset[str]:
    """The facts that are names: categories with more than ``MAX_CATEGORIES`` values.

    Read once over the whole evidence: within a rule's few cases a name shows few of
    its values, and would pass for a kind (15 of the 27 firms served were among one
    rule's 28 cases, and a firm with two old approvals was split off as one).
    """
    values: dict[str, set[str]] = {}
    for row in rows:
        for key, category in row.categories:
            values.setdefault(key, set()).add(category)
    return frozenset(key for key, seen in values.items() if len(seen) > MAX_CATEGORIES)


def grow_each(
    rows: Sequence[Row],
    now: int,
    outcomes: Sequence[str],
    *,
    anchors: Sequence[float] = (),
    look: bool = False,
    said: Mapping[str, Sequence[float]] | None = None,
) -> dict[str, Node]:
    """One rule tree per outcome, which says when it scores.

    An outcome's rows are the cases it was taken on (scored or not) and the cases
    another outcome scored on (an implied failure: that case wanted something else).
    ``look``: the root's rule is chosen a step ahead (:func:`_lookahead`), so that a
    conjunction whose parts say little alone (a category, and an amount over its
    limit) is found; else each rule is the best one alone (greedy, and cheaper).
    ``said``: the figures the manual prints for each outcome (:func:`said_of`), where a
    threshold of its rules is likelier than elsewhere.
    """
    trees = {}
    named = names_of(rows)
    for outcome in outcomes:
        labelled = [
            r.labelled("yes" if r.outcome == outcome and r.scored else "no", True)
            for r in rows
            if r.outcome == outcome or r.scored
        ]
        yes = sum(r.outcome == "yes" for r in labelled)
        prior = (yes + 0.5) / (len(labelled) + 1)
        root = Node()
        printed = (said or {}).get(outcome, ())
        _grow_one(root, labelled, now, outcome, prior, 0, anchors, look, printed, named)
        trees[outcome] = root
    return trees


HORIZONS = (2, 4, 8)  # blocks of recent evidence a policy that changed is fitted on
MARGIN = 2  # cases a shorter horizon must predict better by


def rank(trees: dict[str, Node], facts: dict[str, Value]) -> str | None:
    """The outcome the trees rank first for ``facts``."""
    if not trees:
        return None
    estimate = {o: tree.leaf(facts)[-1].estimate.get(o, 0.0) for o, tree in trees.items()}
    return min(estimate, key=lambda o: (-estimate[o], o))


def regime(
    rows: Sequence[Row], now: int, outcomes: Sequence[str], anchors: Sequence[float] = ()
) -> tuple[int, dict[str, Node]]:
    """Where the policy changed, and the rules fitted on the evidence since then.

    Rules fitted from each candidate start (every block, or only the last 8, 4 or
    2) to ``now`` are asked about the last two blocks' cases: whether the outcome
    taken scored. Where evidence from before a start contradicts the recent blocks
    (the policy changed), the rules that include it explain them worse; a shorter
    horizon that explains them clearly better (by ``MARGIN`` cases) sets the older
    evidence aside. Otherwise every block counts.
    """
    recent = [r for r in rows if r.block >= now - 1]
    if now < 3 or not recent:
        return 0, grow_each(rows, now, outcomes, anchors=anchors)
    best, start, chosen = -1, 0, {}
    for since in sorted({0, *(max(0, now - h + 1) for h in HORIZONS)}):
        trees = grow_each([r for r in rows if r.block >= since], now, outcomes, anchors=anchors)
        right = sum((rank(trees, r.facts) == r.outcome) == r.scored for r in recent)
        if right > best + (MARGIN if best >= 0 else 0):
            best, start, chosen = right, since, trees
    return start, chosen


def _grow_one(
    node: Node,
    rows: Sequence[Row],
    now: int,
    outcome: str,
    prior: float,
    depth: int,
    anchors: Sequence[float] = (),
    look: bool = False,
    said: Sequence[float] = (),
    names: frozenset[str] | None = None,
) -> None:
    latest = max((row.block for row in rows), default=now)
    won = lost = 0.0
    for row in rows:
        weight = LEAF_DECAY ** (latest - row.block)
        if row.outcome == "yes":
            won += weight
            node.count[outcome] = node.count.get(outcome, 0) + 1
            node.since[outcome] = min(node.since.get(outcome, row.block), row.block)
        else:
            lost += weight
            node.count["-"] = node.count.get("-", 0) + 1
    node.won, node.lost = {outcome: won}, {outcome: lost}
    node.estimate = {outcome: (won + SMOOTHING * prior) / (won + lost + SMOOTHING)}
    if depth >= MAX_DEPTH:
        return
    if look and depth == 0:  # the root's rule, chosen a step ahead
        found = _lookahead(rows, now, anchors, said, names)
    else:
        found = _split(rows, now, anchors=anchors, said=said, names=names)
    if found is None:
        return
    yes, no = _divide(node, rows, found)
    if _chi2(yes, no, now) < CHI2_MIN:  # no surer than chance: the rule would learn noise
        node.fact, node.op, node.value = None, "", ""
        return
    node.yes, node.no = Node(), Node()
    for child, side in ((node.yes, yes), (node.no, no)):
        parent = node.estimate[outcome]
        _grow_one(child, side, now, outcome, parent, depth + 1, anchors, said=said, names=names)


def _lookahead(
    rows: Sequence[Row],
    now: int,
    anchors: Sequence[float],
    said: Sequence[float] = (),
    names: frozenset[str] | None = None,
) -> Test | None:
    """The rule that, with the best rule on each of its sides, separates the outcomes best.

    Of the :data:`LOOKAHEAD` best rules alone, each one that passes the chi-squared
    gate is weighed by its gain plus the gain of the best rule on each side it leaves.
    "Over the limit" may be ``category = electronics and amount > 460``: neither part
    alone splits the cases well where other categories and amounts mix, so a greedy
    tree takes a third fact that splits a little better alone and never finds the pair.
    """
    found = _candidates(rows, now, anchors=anchors, said=said, names=names)
    tried = found[:1] + heapq.nlargest(LOOKAHEAD - 1, found[1:], key=lambda c: c[0])
    best: tuple[float, Test] | None = None
    for gain, test in tried:
        yes, no = _divide(Node(), rows, test)
        if _chi2(yes, no, now) < CHI2_MIN:
            continue
        for side in (yes, no):
            below = _candidates(side, now, anchors=anchors, said=said, names=names)
            gain += below[0][0] if below else 0.0
        if best is None or gain > best[0] + 1e-12:
            best = (gain, test)
    if best is not None:
        return best[1]
    return found[0][1] if found else None


def _chi2(yes: Sequence[Row], no: Sequence[Row], now: int) -> float:
    """Pearson's chi-squared of a split's 2x2 table (side x scored), weighed by recency.

    The weights are scaled to the evidence's effective size (Kish's), so a table of
    old, faded cases counts as few: the test is as sure as the recent evidence is.
    """
    weights = [[0.0, 0.0], [0.0, 0.0]]
    squares = total = 0.0
    for i, side in enumerate((yes, no)):
        for row in side:
            weight = SPLIT_DECAY ** (now - row.block)
            weights[i][0 if row.outcome == "yes" else 1] += weight
            total += weight
            squares += weight * weight
    if total <= 0:
        return 0.0
    scale = total / squares  # effective cases per unit of weight
    table = [[w * scale for w in line] for line in weights]
    size = total * scale
    columns = [table[0][j] + table[1][j] for j in (0, 1)]
    statistic = 0.0
    for i in (0, 1):
        for j in (0, 1):
            expected = sum(table[i]) * columns[j] / size
            if expected > 0:
                statistic += (table[i][j] - expected) ** 2 / expected
    return statistic


def scopes(rows: Sequence[Row]) -> dict[str, dict[str, str]]:
    """Where each outcome goes: the categories that every case it scored on shared.

    Each outcome's trees are fitted alone, so two of them may both claim a kind of
    case that neither ever scored on (a request of one kind stands in for an item,
    and a rule learned on another kind's amounts fires for it). An outcome that has
    only ever scored where ``case.kind = limit_increase`` goes only there. A shared
    category is a scope only where chance would rarely give it: the category's
    share of the scored cases, to the power of the outcome's successes, is below
    :data:`SCOPE_CHANCE` (five successes in a category of one case in four are not
    enough; five in one of ten are). A category of many values is a name, never a
    scope. A case that lacks the fact is not out of scope.
    """
    scored = [row for row in rows if row.scored]
    shares: dict[str, dict[str, int]] = {}
    for row in scored:
        for key, value in row.categories:
            if not key.startswith("word:"):
                counted = shares.setdefault(key, {})
                counted[value] = counted.get(value, 0) + 1
    found: dict[str, dict[str, str]] = {}
    for outcome in sorted({row.outcome for row in scored}):
        mine = [row for row in scored if row.outcome == outcome]
        scope = {}
        for key, counted in sorted(shares.items()):
            if not 2 <= len(counted) <= MAX_CATEGORIES:
                continue
            values = {row.facts.get(key) for row in mine}
            shared = values.pop()
            if values or not isinstance(shared, str):
                continue
            if (counted[shared] / len(scored)) ** len(mine) < SCOPE_CHANCE:
                scope[key] = shared
        found[outcome] = scope
    return found


def in_scope(scope: dict[str, str], facts: dict[str, Value]) -> bool:
    """Whether ``facts`` (a case) is within an outcome's ``scope`` (:func:`scopes`)."""
    return all(facts.get(key, value) == value for key, value in scope.items())


def describe(path: Sequence[Node]) -> str:
    """A path of rules in words: ``case.amount > 650 and account.verification = basic``."""
    said = []
    for parent, child in itertools.pairwise(path):
        if parent.op == "=":
            equal = child is parent.yes
            said.append(f"{parent.fact} {'=' if equal else '!='} {parent.value}")
        else:
            low = child is parent.yes
            shown = f"{parent.value:g}" if isinstance(parent.value, float) else parent.value
            unknown = " (or unknown)" if parent.absent and not low else ""
            said.append(f"{parent.fact} {'<=' if low else '>'} {shown}{unknown}")
    return " and ".join(said) if said else "always"


def leaves(node: Node, path: list[Node] | None = None) -> list[list[Node]]:
    """Every leaf, as the path of rules to it."""
    path = [*(path or []), node]
    if node.fact is None or node.yes is None or node.no is None:
        return [path]
    return leaves(node.yes, path) + leaves(node.no, path)
