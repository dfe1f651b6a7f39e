"""The synthetic scenario as a player: its tools, and its episodes in mw's own acting loop.

A real scenario plays in the benchmark's package (:class:`~._slb.SlbScenario`);
the synthetic one, written by :func:`~._synthetic.write_synthetic`, plays here,
from its export: its tools (``get_case``, ``decide``, ``finish``), its world
and its verifier. Both players have one interface (:class:`~._players.Player`).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx

from mw_errors import ProviderRefused

from .._core import get_logger
from ._acting import MAX_TOKENS, acting_client, run_episode
from ._play import Played
from ._scenario import Task, read_evaluators
from ._synthetic import SyntheticCase, verify

__all__ = ["SyntheticEnvironment", "SyntheticScenario"]

log = get_logger("mw.serve_learn")


class SyntheticEnvironment:
    """The synthetic scenario's tools for one task; its evaluator stays inside."""

    def __init__(
        self, tools: list[dict[str, Any]], world: dict[str, Any], evaluator: dict[str, Any]
    ) -> None:
        self.tools = tools
        self._world = world
        self._evaluator = evaluator
        self.decisions: list[tuple[str, str]] = []

    def call(self, name: str, arguments: dict[str, Any]) -> str:
        case_id = str(arguments.get("case_id", ""))
        if name == "get_case":
            case = self._world.get(case_id)
            if case is None:
                return json.dumps({"error": f"no case {case_id}"})
            return json.dumps(SyntheticCase(case_id, case["kind"], case["amount"]).describe())
        if name == "decide":
            if any(c == case_id for c, _ in self.decisions):
                return "error: the case already has its final decision"
            decision = str(arguments.get("decision", ""))
            if decision not in ("approve", "deny", "escalate"):
                return "error: decide needs approve, deny or escalate"
            self.decisions.append((case_id, decision))
            return "decision recorded"
        return f"error: there is no tool {name!r}"

    def finish(self, arguments: dict[str, Any]) -> None:
        """Nothing to submit: the synthetic verifier grades the decisions."""

    def reward(self) -> float:
        return verify(self._evaluator, self.decisions)


class SyntheticScenario:
    """The synthetic scenario ``name`` of ``dataset``, played in mw's own acting loop."""

    bundle = None  # not the benchmark's: its methods refuse it

    def __init__(self, dataset: Path, name: str) -> None:
        env = dataset / "environments" / name
        self.name = name
        self.tools: list[dict[str, Any]] = json.loads((env / "tools.json").read_text())
        self.world: dict[str, Any] = json.loads((env / "world.json").read_text())["cases"]
        self.manual = (env / "policy.md").read_text()
        self.system_prompt = (env / "system_prompt.txt").read_text() + "\n" + self.manual
        self._evaluators = read_evaluators(dataset, name)  # the verifier's, only
        self._client: httpx.AsyncClient | None = None
        self._model = ""
        self._effort: str | None = None
        self._max_tokens = MAX_TOKENS

    @contextlib.asynccontextmanager
    async def connected(
        self,
        meter_port: int,
        model: str,
        reasoning_effort: str | None,
        judge: Any = None,  # the synthetic verifier calls no judge
        max_tokens: int = MAX_TOKENS,
    ) -> AsyncIterator[None]:
        """Episodes reach ``model`` through the host meter on ``meter_port`` while open."""
        async with acting_client(meter_port) as client:
            self._client, self._model, self._effort = client, model, reasoning_effort
            self._max_tokens = max_tokens
            try:
                yield
            finally:
                self._client = None

    def labels(self, task_id: str) -> dict[str, Any]:
        return {}  # the task's own category is the row's

    async def play(self, task: Task, extra_system: str, wm: Callable[[str], str] | None) -> Played:
        """One episode of ``task``; a provider's refusal ends it, never scored."""
        assert self._client is not None, "play() runs inside connected()"
        env = SyntheticEnvironment(self.tools, self.world, self._evaluators[task.task_id])
        try:
            episode = await run_episode(
                self._client,
                model=self._model,
                system_prompt=self.system_prompt,
                task=task,
                env=env,
                wm=wm,
                mwm_context=extra_system or None,
                reasoning_effort=self._effort,
                max_tokens=self._max_tokens,
            )
        except ProviderRefused as exc:
            status = "budget_blocked" if exc.kind == "budget_blocked" else "failed"
            log.warning("episode_refused", task=task.task_id, error=exc.message)
            return Played(status=status, reward=0.0, trace=[], tokens={})
        return Played(
            status=episode.status,
            reward=episode.reward,
            trace=episode.trace,
            tokens=episode.usage,
            provider_seconds=episode.provider_seconds,
        )
