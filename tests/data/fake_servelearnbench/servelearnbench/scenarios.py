"""Bundles over the real banking_l1 export (tests/data/servelearnbench)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .engine.types import Task

EXPORT = Path(__file__).resolve().parents[2] / "servelearnbench"


def _tasks(path: Path) -> list[Task]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [Task(r["task_id"], r["instruction"], {"window": r["window"]}) for r in rows]


def get_bundle(name: str, fresh: bool = False) -> dict[str, Any]:
    if name != "banking_l1":
        raise KeyError(f"unknown scenario {name!r}; one of ['banking_l1']")
    data, env = EXPORT / "data" / name, EXPORT / "environments" / name
    tools = [
        t for t in json.loads((env / "tools.json").read_text()) if t["function"]["name"] != "finish"
    ]
    tests = _tasks(data / "test.jsonl")
    windows = json.loads((env / "windows.json").read_text())
    return {
        "meta": {"domain": "banking", "system_prompt": (env / "system_prompt.txt").read_text()},
        "serving": _tasks(data / "serving.jsonl"),
        "test_set": lambda w: [t for t in tests if t.z["window"] == w],
        "tools_info": tools,
        "windows": windows,
    }


def n_windows(bundle: dict[str, Any]) -> int:
    return len(bundle["windows"])
