"""Reading a ServeLearnBench dataset export.

A ``dataset/`` folder holds ``data/<scenario>/{serving,test}.jsonl`` (one task
per line) and ``environments/<scenario>/windows.json``. :class:`Task` is what
an agent may see: its decoder skips the ``evaluator`` field, so the hidden
policy is never even in memory on the agent's path. The evaluators are read
only by :func:`read_evaluators`, for the verifier; ``windows.json``'s
``oracle_bulletin`` is never read at all.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import msgspec

from mw_errors import ConfigError

__all__ = ["Scenario", "Task", "Window", "read_evaluators", "read_scenario"]

Category = Literal["hidden", "fully_specified"]


class Task(msgspec.Struct, frozen=True):
    """One task as the agent may know it. Unknown fields (the evaluator) are skipped."""

    task_id: str
    window: int
    timestamp: int
    category: Category
    instruction: str
    split: str = ""


class Window(msgspec.Struct, frozen=True):
    """A window's place in the stream (the oracle bulletin is never decoded)."""

    window: int
    first_position: int


class Scenario(msgspec.Struct, frozen=True):
    name: str
    serving: list[Task]
    test: list[Task]
    windows: list[Window]


def _paths(dataset: Path, name: str) -> tuple[Path, Path]:
    data, env = dataset / "data" / name, dataset / "environments" / name
    if not data.is_dir() or not env.is_dir():
        known = (
            sorted(p.name for p in (dataset / "data").glob("*"))
            if (dataset / "data").is_dir()
            else []
        )
        raise ConfigError(
            f"dataset {dataset} has no scenario {name!r} (it has: {', '.join(known) or 'none'})",
            hint="pass --dataset DIR: a ServeLearnBench dataset/ folder (data/, environments/)",
        )
    return data, env


def _read_tasks(path: Path, split: str) -> list[Task]:
    decoder = msgspec.json.Decoder(Task)
    tasks = []
    with open(path, "rb") as handle:
        for number, line in enumerate(handle, 1):
            if line.strip():
                try:
                    tasks.append(decoder.decode(line))
                except msgspec.DecodeError as exc:
                    raise ConfigError(f"{path}:{number}: not a task ({exc})") from None
    for task in tasks:
        if task.split and task.split != split:
            raise ConfigError(f"{path}: task {task.task_id} says split {task.split!r}")
    return tasks


def read_scenario(dataset: Path, name: str) -> Scenario:
    """The serving stream, the test tasks and the windows of one scenario.

    Raises:
        ConfigError: the scenario is missing, or its stream is not contiguous and ordered.
    """
    data, env = _paths(dataset, name)
    serving = _read_tasks(data / "serving.jsonl", "serving")
    test = _read_tasks(data / "test.jsonl", "test")
    try:
        windows = msgspec.json.decode((env / "windows.json").read_bytes(), type=list[Window])
    except (OSError, msgspec.DecodeError) as exc:
        raise ConfigError(f"{env / 'windows.json'}: {exc}") from None
    positions = [task.timestamp for task in serving]
    if positions != list(range(1, len(serving) + 1)):
        raise ConfigError(
            f"{data / 'serving.jsonl'}: timestamps must run 1, 2, ... in stream order",
            hint="the serving stream is ordered by its 1-based stream position",
        )
    known = {w.window for w in windows}
    for task in [*serving, *test]:
        if task.window not in known:
            raise ConfigError(
                f"task {task.task_id} is in window {task.window}, not in windows.json"
            )
    return Scenario(name=name, serving=serving, test=test, windows=windows)


def read_evaluators(dataset: Path, name: str) -> dict[str, Any]:
    """``task_id -> evaluator``: for the verifier only; never pass it to an agent or a learner."""
    data, _ = _paths(dataset, name)
    evaluators: dict[str, Any] = {}
    for split in ("serving", "test"):
        with open(data / f"{split}.jsonl", "rb") as handle:
            for line in handle:
                if line.strip():
                    row = msgspec.json.decode(line)
                    evaluators[row["task_id"]] = row.get("evaluator")
    return evaluators
