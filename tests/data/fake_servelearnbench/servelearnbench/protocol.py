"""Stream timestamps, as the package stamps them (the export's instructions already carry one)."""

from __future__ import annotations

from typing import Any

TIMESTAMP_PREFIX = "Current timestamp: "


def _stamp(task: Any, t: int) -> None:
    if not task.instruction.startswith(TIMESTAMP_PREFIX):
        task.instruction = f"{TIMESTAMP_PREFIX}{t}\n\n{task.instruction}"


def stamp_serving(tasks: list[Any]) -> None:
    for i, task in enumerate(tasks, 1):
        task.z["stream_pos"] = i
        _stamp(task, i)


def stamp_test(tasks: list[Any], serving: list[Any], w: int) -> int:
    t = sum(1 for task in serving if task.z["window"] <= w)
    for task in tasks:
        _stamp(task, t)
    return t
