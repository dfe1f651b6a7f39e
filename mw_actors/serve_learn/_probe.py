"""The knowledge probe: what a method knows, measured for $0 by a player that never guesses.

A method's knowledge is what it can rank: given a case (the instruction and
what the look-ups returned), the actions best first. The probe plays a test
task through the benchmark's own ``Env`` with a deterministic player, and the
benchmark's verifier scores it. No model is called.

The player knows no domain. It learns from the served episodes' records only
(what any method may read):

- **the look-ups**: the tools that served episodes called before their last
  action, with arguments that are ids (``TRF-211564``, ``#W9051859``), in the
  order they were called; each parameter's values have a *shape* (the id with
  its digits as ``#``: ``TRF-#``), and the player fills a look-up with an id of
  such a shape that the case shows (the instruction, or an earlier result),
  trying the next one (up to ``TRIES``) when the look-up finds nothing (the
  benchmark's tools answer ``Error: ...``);
- **the act**: the method's top-ranked action, an outcome *signature* such as
  ``deny_case(reason=verification_required)``; the arguments a signature
  leaves out (they name the case) are filled with the id a look-up found
  something with, or else by shape; then
  ``finish`` (with the signature's own arguments when the outcome *is* a
  ``finish``, as a refusal is in some domains).

A test the player cannot play (nothing ranked, an argument it cannot fill) is
skipped with its reason; it is never scored as a guess.
"""

from __future__ import annotations

import itertools
import json
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import _rules
from ._worldmodel import SCORED, Case, ParsedRecord, bm25_top_k, tokenize

__all__ = [
    "Looked",
    "Lookups",
    "Played",
    "Ranker",
    "act",
    "decision_tree_ranker",
    "look_up",
    "majority_ranker",
    "nearest_success_ranker",
    "parse_signature",
    "play_test",
    "required_parameters",
    "shape",
]

_ID = re.compile(r"#?\b[A-Za-z]{1,6}-?\d{2,}\b|#[A-Za-z]?\d{4,}\b|\b\d{7,}\b")
_OWN = ("finish", "wm")
FINISH = "finish"
ERROR = "Error"  # how the benchmark's Env words a tool that failed (a look-up that found nothing)
TRIES = 3  # ids a look-up tries, in the order the case shows them
Ranker = Callable[[str], Sequence[str]]  # a case's text -> signatures, best first


def shape(value: Any) -> str | None:
    """An id's shape (its digits as ``#``: ``TRF-211564`` -> ``TRF-#``); None if no id."""
    if not isinstance(value, str) or not _ID.fullmatch(value):
        return None
    return re.sub(r"\d+", "#", value)


def ids_in(text: str) -> list[str]:
    """The ids a text shows, in order, each once."""
    return list(dict.fromkeys(_ID.findall(text)))


def parse_signature(signature: str) -> tuple[str, dict[str, Any]]:
    """``deny_case(reason=x, leg=2)`` -> ``("deny_case", {"reason": "x", "leg": 2})``."""
    name, _, rest = signature.partition("(")
    inside = rest[:-1] if rest.endswith(")") else rest
    arguments: dict[str, Any] = {}
    for part in re.split(r", (?=\w+=)", inside) if inside else []:
        key, _, shown = part.partition("=")
        try:
            arguments[key] = json.loads(shown)
        except ValueError:
            arguments[key] = shown
    return name, arguments


@dataclass
class Lookups:
    """The look-ups served episodes made, and the shapes of each id parameter's values."""

    steps: list[tuple[str, list[str]]] = field(default_factory=list)  # (tool, id parameters)
    shapes: dict[tuple[str, str], Counter[str]] = field(default_factory=dict)

    @classmethod
    def learn(cls, records: Sequence[ParsedRecord], *, share: float = 0.25) -> Lookups:
        """From served records: look-ups used in at least ``share`` of them, in call order."""
        learned = cls()
        used: Counter[str] = Counter()
        positions: dict[str, list[int]] = {}
        parameters: dict[str, list[str]] = {}
        for record in records:
            acted = [a for a in record.actions if a[0] not in _OWN]
            for tool, arguments, _ in acted:
                for key, value in arguments.items():
                    for item in value if isinstance(value, list) else [value]:
                        if (found := shape(item)) is not None:
                            learned.shapes.setdefault((tool, key), Counter())[found] += 1
            firsts: dict[str, int] = {}
            for index, (tool, arguments, _) in enumerate(acted[:-1]):
                id_args = [k for k, v in arguments.items() if shape(v) is not None]
                if id_args and len(id_args) == len(arguments):
                    firsts.setdefault(tool, index)
                    parameters.setdefault(tool, sorted(id_args))
            for tool, index in firsts.items():
                used[tool] += 1
                positions.setdefault(tool, []).append(index)
        floor = share * max(len(records), 1)
        kept = [tool for tool, count in used.items() if count >= floor]
        kept.sort(key=lambda t: (sum(positions[t]) / len(positions[t]), t))
        learned.steps = [(tool, parameters[tool]) for tool in kept]
        return learned

    def values(self, parameter: str, text: str) -> list[str]:
        """The ids ``text`` shows, in order, of a shape that ``parameter`` took.

        A parameter of one name takes one kind of id in every tool (``case_id``):
        its shapes are those it took in any tool the served episodes called, so a
        case of a shape one tool was never called with is still filled.
        """
        shapes = {
            found
            for (_, named), seen in self.shapes.items()
            if named == parameter
            for found in seen
        }
        return [candidate for candidate in ids_in(text) if shape(candidate) in shapes]


@dataclass(frozen=True)
class Played:
    """One test the probe played: its reward, or why it was skipped."""

    task_id: str
    reward: float | None  # None: skipped
    action: str = ""
    skipped: str = ""


def _untimed(instruction: str) -> str:
    if instruction.startswith("Current timestamp:"):
        return instruction.split("\n\n", 1)[-1]
    return instruction


@dataclass
class Looked:
    """A test after the player's look-ups: what the case shows, and the calls that showed it."""

    task: Any
    text: str
    found: dict[str, str]  # parameter -> the id a look-up found something with
    calls: list[tuple[str, dict[str, str]]]  # every look-up made, in order (failed ones too)
    fresh: bool = True  # the env is still where the look-ups left it


def look_up(env: Any, task: Any, lookups: Lookups) -> Looked:
    """Reset ``env`` (the benchmark's) to ``task`` and make the player's look-ups.

    They depend on the case alone, never on a method: every method the probe
    compares acts on the same text.
    """
    from servelearnbench.engine.types import Action

    env.reset(task)
    looked = Looked(task, _untimed(task.instruction), {}, [])
    for tool, parameters in lookups.steps:
        choices = [
            [looked.found[p]] if p in looked.found else lookups.values(p, looked.text)
            for p in parameters
        ]
        for values in itertools.islice(itertools.product(*choices), TRIES):
            arguments = dict(zip(parameters, values, strict=True))
            looked.calls.append((tool, arguments))
            observation = str(env.step(Action(name=tool, kwargs=arguments)).observation)
            if not observation.startswith(ERROR):  # the benchmark's tools fail in words
                looked.text += "\n" + observation
                looked.found.update(arguments)
                break
    return looked


def act(
    env: Any,
    looked: Looked,
    rank: Ranker,
    lookups: Lookups,
    required: dict[str, list[str]],
    scored: dict[str, float] | None = None,
) -> Played:
    """Take ``rank``'s first action on a looked-up test, finish, and have the verifier score it.

    ``scored``: rewards already computed for this test, by the calls that earned them.
    A method that acts as another did gets the same reward without a second replay
    (the verifier is deterministic; the episode would be the same calls). Where the
    env has moved on since the look-ups, the test is reset and they are made again,
    as they were made.
    """
    from servelearnbench.engine.types import Action

    task, text, found = looked.task, looked.text, looked.found
    ranked = list(rank(text))
    if not ranked:
        return Played(task.task_id, None, skipped="the method ranks no action yet")
    name, arguments = parse_signature(ranked[0])
    if name != FINISH and name not in required:
        return Played(task.task_id, None, ranked[0], f"{name} is not a tool of this scenario")
    for parameter in required.get(name, []):
        if parameter not in arguments:
            value = found.get(parameter) or next(iter(lookups.values(parameter, text)), None)
            if value is None:
                return Played(task.task_id, None, ranked[0], f"cannot fill {name}'s {parameter}")
            arguments[parameter] = value
    calls = [(name, arguments), (FINISH, {})] if name != FINISH else [(FINISH, arguments)]
    key = json.dumps(calls, sort_keys=True, default=str)
    if scored is not None and key in scored:
        return Played(task.task_id, scored[key], ranked[0])
    if not looked.fresh:
        env.reset(task)
        for tool, made in looked.calls:
            env.step(Action(name=tool, kwargs=made))
    looked.fresh = False
    for tool, made in calls:
        env.step(Action(name=tool, kwargs=made))
    reward = float(env.compute_reward().reward)
    if scored is not None:
        scored[key] = reward
    return Played(task.task_id, reward, ranked[0])


def play_test(
    env: Any, task: Any, rank: Ranker, lookups: Lookups, required: dict[str, list[str]]
) -> Played:
    """Play ``task`` in ``env`` (the benchmark's, reset here) as the probe's player.

    ``required``: each tool's required parameters (from the env's tool schemas).
    """
    return act(env, look_up(env, task, lookups), rank, lookups, required)


def required_parameters(env: Any) -> dict[str, list[str]]:
    """Each tool's required parameters, from the benchmark ``Env``'s tool schemas."""
    return {
        t["function"]["name"]: list(t["function"]["parameters"].get("required") or [])
        for t in env.tools_info
    }


def majority_ranker(cases: Sequence[Case]) -> Ranker:
    """The most common outcome among the served cases that scored (the majority action)."""
    scored = Counter(c.signature for c in cases if c.reward >= 1.0)
    order = [s for s, _ in scored.most_common()] or [
        s for s, _ in Counter(c.signature for c in cases).most_common()
    ]
    return lambda text: order


def nearest_success_ranker(cases: Sequence[Case]) -> Ranker:
    """RAG's idea: the outcome of the most similar served case (BM25) that scored 100."""
    wins = [c for c in cases if c.reward >= 1.0]
    docs = [tokenize(c.text) for c in wins]

    def rank(text: str) -> list[str]:
        found = bm25_top_k(text, docs, 5)
        return list(dict.fromkeys(wins[i].signature for i in found))

    return rank


def decision_tree_ranker(cases: Sequence[Case], now: int) -> Ranker:
    """A plain decision tree over the facts of the served cases (no words, no recency).

    The baseline MWM's rules are measured against: the same facts, one tree over all
    outcomes, every block weighed alike.
    """
    outcomes = sorted({c.signature for c in cases})
    rows = [_rules.Row(_rules.facts_of(c.text), c.signature, c.reward >= SCORED, c.block)
            for c in cases]  # fmt: skip
    tree = _rules.grow(rows, now, outcomes, decay=1.0)

    def rank(text: str) -> list[str]:
        estimate = tree.leaf(_rules.facts_of(text))[-1].estimate
        return sorted(outcomes, key=lambda o: (-estimate.get(o, 0.0), o))

    return rank
