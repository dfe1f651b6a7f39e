"""The offline scenario: a small evolving environment written in ServeLearnBench's export format.

Cases come in four kinds; each needs one decision: approve, deny or escalate.
The manual (``policy.md``) documents a decision per kind, but a hidden policy
governs each window and departs from the manual for some kinds, differently
in every window. A task whose kind follows the manual in its window is
``fully_specified``; one that departs is ``hidden``. Tools: ``get_case``,
``decide`` (final; the first decision counts) and ``finish``.

Everything is seeded: the same name and seed write the same bytes. The
``evaluator`` of each task and the ``oracle_bulletin`` of each window state the
hidden policy; they are for the verifier only.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from mw_errors import ConfigError

__all__ = [
    "ACTIONS",
    "KINDS",
    "MANUAL",
    "SYNTHETIC_HOME",
    "SyntheticCase",
    "dataset_for",
    "ensure_synthetic",
    "hidden_policy",
    "is_synthetic",
    "verify",
    "write_synthetic",
]


SYNTHETIC_HOME = ".datasets"  # under a runs directory: the synthetic scenarios mw writes


def is_synthetic(scenario: str) -> bool:
    """Whether ``scenario`` is mw's own (played offline from its export)."""
    return scenario.startswith("synthetic_")


def dataset_for(scenario: str, dataset: Path | None, runs: Path) -> Path:
    """``dataset``, or for a synthetic scenario the folder under ``runs`` its export goes to.

    The export is written by :func:`ensure_synthetic`, once the campaign is checked.

    Raises:
        ConfigError: a scenario of the benchmark, and no dataset.
    """
    if dataset is not None:
        return dataset
    if not is_synthetic(scenario):
        raise ConfigError(
            f"scenario {scenario!r} needs a dataset (--dataset DIR)",
            hint="pass a ServeLearnBench dataset/ folder (`slb export-data --out DIR` writes "
            "one), or use synthetic_l1",
        )
    return runs / SYNTHETIC_HOME


def ensure_synthetic(dataset: Path, scenario: str) -> Path:
    """``dataset``, with the built-in generator's export of ``scenario`` if it is synthetic.

    Only mw's own folder (:data:`SYNTHETIC_HOME`, from :func:`dataset_for`) is
    written, once: a dataset the user gave is read, never written.
    """
    home = dataset.name == SYNTHETIC_HOME
    if home and is_synthetic(scenario) and not (dataset / "data" / scenario).is_dir():
        write_synthetic(dataset, scenario)
    return dataset


KINDS = ("refund", "upgrade", "transfer", "waiver")
ACTIONS = ("approve", "deny", "escalate")
MANUAL = {"refund": "approve", "upgrade": "approve", "transfer": "escalate", "waiver": "deny"}
# How each window's actual practice departs from the manual.
_DEPARTURES = [
    {"refund": "deny"},
    {"refund": "deny", "upgrade": "escalate"},
    {"upgrade": "escalate", "waiver": "approve"},
    {"transfer": "approve", "waiver": "approve"},
]

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_case",
            "description": "Look up the case under review: its kind and amount.",
            "parameters": {
                "type": "object",
                "properties": {"case_id": {"type": "string"}},
                "required": ["case_id"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "decide",
            "description": "Give the case its one final decision: approve, deny or escalate.",
            "parameters": {
                "type": "object",
                "properties": {
                    "case_id": {"type": "string"},
                    "decision": {"type": "string", "enum": list(ACTIONS)},
                },
                "required": ["case_id", "decision"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "finish",
            "description": "End the episode.",
            "parameters": {"type": "object", "properties": {}},
        },
    },
]

SYSTEM_PROMPT = """\
You are a case-review agent. Each task names one case. Look it up with
get_case, give it exactly one final decision with decide (approve, deny or
escalate), then call finish. Call exactly one tool per turn. The manual
(read it below) documents a decision per kind of case, but actual practice
may differ and may change over time; after each task you see only its score.
"""


def hidden_policy(window: int) -> dict[str, str]:
    """The decision per kind that window ``window`` actually rewards."""
    return {**MANUAL, **_DEPARTURES[window % len(_DEPARTURES)]}


class SyntheticCase:
    """A case as the environment's tools describe it."""

    def __init__(self, case_id: str, kind: str, amount: float) -> None:
        self.case_id = case_id
        self.kind = kind
        self.amount = amount

    def describe(self) -> dict[str, Any]:
        return {"case_id": self.case_id, "kind": self.kind, "amount": self.amount}


def verify(evaluator: dict[str, Any], decisions: list[tuple[str, str]]) -> float:
    """1.0 when the first decision on the task's case is the one the hidden policy wants."""
    expected = evaluator["actions"][0]["kwargs"]
    for case_id, decision in decisions:
        if case_id == expected["case_id"]:
            return 1.0 if decision == expected["decision"] else 0.0
    return 0.0


def _task(rng: random.Random, split: str, window: int, position: int, name: str) -> dict[str, Any]:
    kind = rng.choice(KINDS)
    case_id = f"CASE-{rng.randrange(10**5, 10**6)}"
    amount = round(rng.uniform(20, 5000), 2)
    decision = hidden_policy(window)[kind]
    return {
        "task_id": f"{name}_{split[0]}{position:04d}_{case_id[-4:]}",
        "scenario": name,
        "domain": "synthetic",
        "tier": "L1",
        "split": split,
        "window": window,
        "timestamp": position,
        "category": "fully_specified" if decision == MANUAL[kind] else "hidden",
        "instruction": f"Current timestamp: {position}\n\nCase {case_id} is waiting for review. "
        "Decide it.",
        "evaluator": {
            "actions": [{"name": "decide", "kwargs": {"case_id": case_id, "decision": decision}}],
            "answer": None,
            "metadata": {"kind": kind, "amount": amount, "window_policy": hidden_policy(window)},
        },
    }


def write_synthetic(
    dataset: Path,
    name: str = "synthetic_l1",
    *,
    windows: int = 4,
    serving_per_window: int = 36,
    test_per_window: int = 12,
    seed: int = 0,
) -> Path:
    """Write scenario ``name`` into ``dataset`` (data/ and environments/); return ``dataset``.

    Raises:
        ConfigError: the scenario already exists there.
    """
    data, env = dataset / "data" / name, dataset / "environments" / name
    if data.exists() or env.exists():
        raise ConfigError(f"{dataset} already holds scenario {name!r}")
    rng = random.Random(f"{name}/{seed}")
    serving, test, bulletins = [], [], []
    position = 0
    for window in range(windows):
        first = position + 1
        for _ in range(serving_per_window):
            position += 1
            serving.append(_task(rng, "serving", window, position, name))
        for _ in range(test_per_window):
            test.append(_task(rng, "test", window, position, name))
        rules = "; ".join(f"{k}: {d.upper()}" for k, d in hidden_policy(window).items())
        bulletins.append(
            {
                "window": window,
                "first_position": first,
                "oracle_bulletin": f"ACTUAL POLICY: {rules}",
            }
        )
    data.mkdir(parents=True)
    env.mkdir(parents=True)
    for split, rows in (("serving", serving), ("test", test)):
        (data / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (env / "windows.json").write_text(json.dumps(bulletins, indent=1) + "\n")
    (env / "tools.json").write_text(json.dumps(TOOLS, indent=1) + "\n")
    (env / "system_prompt.txt").write_text(SYSTEM_PROMPT)
    manual = "\n".join(f"- {kind}: {decision}" for kind, decision in MANUAL.items())
    (env / "policy.md").write_text(f"# Manual\n\nThe documented decision per kind:\n{manual}\n")
    cases = {
        row["evaluator"]["actions"][0]["kwargs"]["case_id"]: {
            "kind": row["evaluator"]["metadata"]["kind"],
            "amount": row["evaluator"]["metadata"]["amount"],
        }
        for row in [*serving, *test]
    }
    (env / "world.json").write_text(json.dumps({"cases": cases}, indent=1, sort_keys=True) + "\n")
    return dataset
