"""Episode engine (a): ServeLearnBench's own environment, tools, budgets and verifier.

When the ``servelearnbench`` package imports (it needs Python >= 3.12), a real
scenario's episodes run in its environment, exactly as its runner runs them:
``agent.new_env(bundle)`` and ``env.reset(task)`` per episode, each tool call
as ``env.step(Action(name=..., kwargs=...))`` (its Env holds the 50-tool-call
budget and turns a tool's exception into an observation), ``finish`` as a
step with the model's arguments (the structured answer its verifier grades),
then ``env.compute_reward()``. The tools offered are its own schemas
(``agent.tool_specs``, ``finish`` included); the system prompt is the
bundle's. The acting loop keeps the turn and output-token budgets.

The dataset export still gives the schedule and the instructions; the
package's tasks, stamped as its runner stamps them and matched by
``task_id``, carry what its verifier needs. Nothing of a task's ground truth
reaches the agent: the environment holds it.
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

from mw_errors import ConfigError

__all__ = ["SlbEnvironment", "SlbScenario", "slb_available", "slb_missing"]


def slb_available() -> bool:
    """Whether the ``servelearnbench`` package can be imported here."""
    return importlib.util.find_spec("servelearnbench") is not None


def slb_missing(scenario: str) -> ConfigError:
    """The error for a real scenario on a machine without the package."""
    here = f"Python {sys.version_info.major}.{sys.version_info.minor}"
    return ConfigError(
        f"scenario {scenario!r} runs in ServeLearnBench's own environment and verifier, and "
        f"the servelearnbench package cannot be imported here ({here})",
        hint="install it into a Python >= 3.12 environment (pip install -e "
        "path/to/ServeLearnBench) and run mw from there; offline, use synthetic_l1",
    )


class SlbEnvironment:
    """One episode's environment: the package's Env, reset on the package's task."""

    def __init__(self, scenario: SlbScenario, task: Any) -> None:
        self._action = scenario.action
        self._env = scenario.agent.new_env(scenario.bundle)
        self._env.reset(task)
        self.tools: list[dict[str, Any]] = scenario.agent.tool_specs(
            self._env.tools_info, scenario.domain
        )

    def call(self, name: str, arguments: dict[str, Any]) -> str:
        if name not in self._env.tools_map:
            return f"not executed: unknown tool '{name}'."
        return str(self._env.step(self._action(name=name, kwargs=arguments)).observation)

    def finish(self, arguments: dict[str, Any]) -> None:
        self._env.step(self._action(name="finish", kwargs=arguments))

    def reward(self) -> float:
        return float(self._env.compute_reward().reward)


class SlbScenario:
    """A scenario's bundle from the package, with every task stamped as its runner does."""

    def __init__(self, name: str) -> None:
        if not slb_available():
            raise slb_missing(name)
        from servelearnbench import agent, protocol, scenarios
        from servelearnbench.engine.types import Action

        try:
            self.bundle = scenarios.get_bundle(name, fresh=True)
        except KeyError as exc:
            raise ConfigError(f"servelearnbench has no scenario {name!r}: {exc}") from None
        self.agent, self.action = agent, Action
        self.domain: str = self.bundle["meta"]["domain"]
        self.system_prompt: str = self.bundle["meta"]["system_prompt"]
        serving = list(self.bundle["serving"])
        protocol.stamp_serving(serving)
        self._tasks: dict[str, Any] = {task.task_id: task for task in serving}
        for window in range(scenarios.n_windows(self.bundle)):
            tests = self.bundle["test_set"](window)
            protocol.stamp_test(tests, self.bundle["serving"], window)
            self._tasks.update({task.task_id: task for task in tests})

    def environment(self, task_id: str) -> SlbEnvironment:
        """A fresh environment for ``task_id``.

        Raises:
            ConfigError: the package has no such task (the export is another version).
        """
        task = self._tasks.get(task_id)
        if task is None:
            raise ConfigError(
                f"servelearnbench's bundle has no task {task_id!r}",
                hint="export the dataset with the same servelearnbench version (slb export-data)",
            )
        return SlbEnvironment(self, task)
