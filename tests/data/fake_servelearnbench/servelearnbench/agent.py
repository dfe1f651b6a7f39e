"""new_env and tool_specs, with an Env that logs what it is asked."""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

from .engine.types import Action, Task

TOOL_BUDGET = 50


def _log(**event: Any) -> None:
    path = os.environ.get("FAKE_SLB_LOG")
    if path:
        with open(path, "a") as handle:
            handle.write(json.dumps(event) + "\n")


class _Result:
    def __init__(self, observation: str) -> None:
        self.observation = observation


class _Reward:
    def __init__(self, reward: float) -> None:
        self.reward = reward


class Env:
    def __init__(self, bundle: dict[str, Any]) -> None:
        self.tools_info = bundle["tools_info"]
        self.tools_map = {t["function"]["name"]: t for t in self.tools_info}
        self.task: Task | None = None
        self.finished: dict[str, Any] | None = None
        self._calls = 0

    def reset(self, task: Task | None = None) -> None:
        self.task, self.finished, self._calls = task, None, 0
        _log(
            event="reset",
            task_id=task.task_id if task else None,
            stamped=bool(task and task.instruction.startswith("Current timestamp: ")),
        )

    def step(self, action: Action) -> _Result:
        assert self.task is not None
        _log(event="step", task_id=self.task.task_id, name=action.name, kwargs=action.kwargs)
        if action.name == "finish":
            self.finished = action.kwargs
            return _Result("")
        if self._calls >= TOOL_BUDGET:
            return _Result("Error: tool-call budget exhausted")
        self._calls += 1
        return _Result(json.dumps({"tool": action.name, "ok": True}))

    def compute_reward(self) -> _Reward:
        assert self.task is not None
        digest = hashlib.sha256(self.task.task_id.encode()).digest()[0]
        reward = 1.0 if self.finished is not None and digest % 2 == 0 else 0.0
        _log(event="reward", task_id=self.task.task_id, reward=reward)
        return _Reward(reward)


def new_env(bundle: dict[str, Any]) -> Env:
    return Env(bundle)


def tool_specs(tools_info: list[dict[str, Any]], domain: str) -> list[dict[str, Any]]:
    finish = {
        "type": "function",
        "function": {
            "name": "finish",
            "description": f"End the {domain} episode.",
            "parameters": {"type": "object", "properties": {}, "required": []},
        },
    }
    return [*tools_info, finish]
