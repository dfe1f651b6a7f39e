"""The package's Action and Task, as plain classes."""

from __future__ import annotations

from typing import Any


class Action:
    def __init__(self, name: str, kwargs: dict[str, Any] | None = None) -> None:
        self.name = name
        self.kwargs = kwargs or {}


class Task:
    def __init__(self, task_id: str, instruction: str, z: dict[str, Any]) -> None:
        self.task_id = task_id
        self.instruction = instruction
        self.z = z
