"""Episode player (a): a real scenario plays through ServeLearnBench's own acting loop.

When the ``servelearnbench`` package imports (it needs Python >= 3.12), each
episode of a real scenario is the package's: ``agent.run_episode`` (or, when a
method offers the ``wm`` tool, ``agent.run_turns`` with the package's ``Env``,
exactly as ``run_episode`` builds it). The budgets, the corrective messages,
the ``finish`` validation, the reasoning passed back, the length and overflow
handling, the trace and the reward are then the benchmark's by construction.

Its ``llm.LLM`` is pointed at the host meter, so every token is counted and
capped at the wire. The loop is synchronous: it runs on a worker thread, one
per episode in flight. A cancelled episode's thread is told to stop at its
next model call; an allocation the meter refuses (``budget_blocked``) stops
the episode at once, without the client's retries.

The dataset export still gives the schedule; the package's tasks, stamped as
its runner stamps them and matched by ``task_id``, carry what its verifier
needs. Nothing of a task's ground truth reaches the agent: the environment
holds it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import anyio.to_thread
import httpx

from mw_errors import ConfigError, ProviderRefused

from ._play import WM_TOOL, Played
from ._scenario import Task

__all__ = ["EPISODE_ATTEMPTS", "SlbScenario", "manual_of", "slb_available", "slb_missing"]

EPISODE_ATTEMPTS = 4  # as the benchmark's runner: an episode failed by infrastructure is rerun


def importable(name: str) -> bool:
    """Whether package ``name`` can be imported here (found, not imported)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def slb_available() -> bool:
    """Whether the ``servelearnbench`` package can be imported here."""
    return importable("servelearnbench")


# Where users install the benchmark from: the seed's line, in this one place.
SLB_INSTALL = "git+https://github.com/Infini-AI-Lab/ServeLearnBench"


def slb_missing(scenario: str, what: str = "scenario") -> ConfigError:
    """The error for a real scenario (or a benchmark method) on a machine without the package."""
    here = f"Python {sys.version_info.major}.{sys.version_info.minor}"
    runs = "environment and verifier" if what == "scenario" else "method interface"
    return ConfigError(
        f"{what} {scenario!r} runs in ServeLearnBench's own {runs}, and "
        f"the servelearnbench package cannot be imported here ({here})",
        hint=f"install it into a Python >= 3.12 environment (pip install {SLB_INSTALL}) "
        "and run mw from there; offline, use synthetic_l1",
    )


class _Stopped(Exception):
    """The episode was cancelled; its thread stops at its next model call."""


class _BudgetBlocked(Exception):
    """The meter refused the request: the allocation cannot cover it."""


class _Completions:
    """``client.chat.completions`` that stops when told and never retries a refused budget."""

    def __init__(self, real: Any, stop: threading.Event, timer: list[float]) -> None:
        self._real, self._stop, self._timer = real, stop, timer

    def create(self, **kwargs: Any) -> Any:
        if self._stop.is_set():
            raise _Stopped
        import openai

        sent = time.perf_counter()
        try:
            stream = self._real.create(**kwargs)
        except openai.RateLimitError as exc:
            if getattr(exc, "code", None) == "budget_blocked":
                raise _BudgetBlocked(str(exc)) from None
            raise
        finally:
            self._timer[0] += time.perf_counter() - sent
        return _Timed(stream, self._timer)


class _Timed:
    """A stream whose reading time is counted as provider time."""

    def __init__(self, stream: Any, timer: list[float]) -> None:
        self._stream, self._timer = stream, timer
        self.response = stream.response

    def __iter__(self) -> Any:
        iterator = iter(self._stream)
        while True:
            began = time.perf_counter()
            try:
                chunk = next(iterator)
            except StopIteration:
                return
            finally:
                self._timer[0] += time.perf_counter() - began
            yield chunk

    def close(self) -> None:
        self._stream.close()


class _Client:
    def __init__(self, completions: _Completions) -> None:
        self.chat = type("Chat", (), {"completions": completions})()


def _jsonable(value: Any) -> Any:
    """``value`` as the runner writes it (``json.dumps(default=str)``), as plain JSON."""
    return json.loads(json.dumps(value, ensure_ascii=False, default=str))


def manual_of(bundle: Any) -> str:
    """What ``read_docs`` serves the host of a scenario: its policy and its workflow guide."""
    return "\n\n".join(bundle.get(doc) or "" for doc in ("policy_md", "workflow_md"))


class SlbScenario:
    """A scenario's bundle from the package, with every task stamped as its runner does."""

    def __init__(self, name: str) -> None:
        if not slb_available():
            raise slb_missing(name)
        from servelearnbench import agent, llm, protocol, scenarios, scoring

        try:
            self.bundle = scenarios.get_bundle(name, fresh=True)
        except KeyError as exc:
            raise ConfigError(f"servelearnbench has no scenario {name!r}: {exc}") from None
        self.agent, self.llm, self.protocol, self.scoring = agent, llm, protocol, scoring
        self.name = name
        self.domain: str = self.bundle["meta"]["domain"]
        self.system_prompt: str = self.bundle["meta"]["system_prompt"]
        self.manual: str = manual_of(self.bundle)
        self.serving = list(self.bundle["serving"])
        protocol.stamp_serving(self.serving)
        self._tasks: dict[str, Any] = {task.task_id: task for task in self.serving}
        for window in range(scenarios.n_windows(self.bundle)):
            tests = self.bundle["test_set"](window)
            protocol.stamp_test(tests, self.bundle["serving"], window)
            self._tasks.update({task.task_id: task for task in tests})
        self._openai: Any = None
        self._model: Any = None

    def task(self, task_id: str) -> Any:
        """The package's task ``task_id``.

        Raises:
            ConfigError: the package has no such task (the export is another version).
        """
        task = self._tasks.get(task_id)
        if task is None:
            raise ConfigError(
                f"servelearnbench's bundle has no task {task_id!r}",
                hint="export the dataset with the same servelearnbench version (slb export-data)",
            )
        return task

    def labels(self, task_id: str) -> dict[str, Any]:
        """``tier``, ``family``, ``slice`` and ``category`` of a task, as the runner's row."""
        z = self.task(task_id).z or {}
        return {
            "tier": z.get("tier"),
            "family": z.get("family"),
            "slice": z.get("slice"),
            "category": self.scoring.category(self.domain, z.get("slice")),
        }

    @contextlib.asynccontextmanager
    async def connected(
        self,
        meter_port: int,
        model: str,
        reasoning_effort: str | None,
        judge: Any = None,
        max_tokens: int | None = None,
    ) -> AsyncIterator[None]:
        """Episodes reach ``model`` through the host meter on ``meter_port`` while open.

        ``judge`` (a ``JudgeLink``) is where the package's Pitch judge is pointed: its
        own meter, so every judge request is metered and capped. Without one the
        package's judge stays unconfigured, and a verifier that calls it fails
        instead of reaching a provider unmetered.
        """
        self.connect(f"http://127.0.0.1:{meter_port}/v1", model, reasoning_effort, max_tokens)
        if judge is not None:
            self._connect_judge(judge)
        try:
            yield
        finally:
            client, self._openai = self._openai, None
            await anyio.to_thread.run_sync(client.close)

    def _connect_judge(self, judge: Any) -> None:
        url = f"http://127.0.0.1:{judge.meter_port}/v1"
        self.llm.set_judge(
            self.llm.ModelConfig(
                model=judge.model,
                base_url=url,
                api_key="mw-meter",  # the judge meter injects the provider's key
                reasoning_effort=judge.reasoning_effort,
            )
        )
        # Its requests fail fast on the meter's budget_blocked, as the agent's do; a
        # judge call belongs to no one episode, so it is never stopped midway.
        completions = self.llm.judge().client.chat.completions
        self.llm.judge().client = _Client(_Completions(completions, threading.Event(), [0.0]))

    def connect(
        self,
        meter_url: str,
        model: str,
        reasoning_effort: str | None,
        max_tokens: int | None = None,
    ) -> None:
        """Point the acting loop's client at the host meter (``meter_url`` ends in ``/v1``).

        ``max_tokens`` is each call's limit (None: the package's own default).
        """
        import openai

        self._openai = openai.OpenAI(
            base_url=meter_url,
            api_key="mw-meter",  # the meter injects the provider's key; this one goes nowhere
            timeout=httpx.Timeout(connect=15.0, read=240.0, write=60.0, pool=60.0),
            max_retries=0,
        )
        limit = {} if max_tokens is None else {"max_tokens": max_tokens}
        self._model = self.llm.ModelConfig(
            model=model, base_url=meter_url, api_key="mw-meter", reasoning_effort=reasoning_effort,
            **limit,
        )  # fmt: skip

    async def play(self, task: Task, extra_system: str, wm: Callable[[str], str] | None) -> Played:
        """One episode of ``task`` through the benchmark's loop, on a worker thread.

        A ``wm`` tool rides beside the benchmark's tools when ``wm`` is given.

        Raises:
            ProviderRefused: every attempt failed for infrastructure reasons.
        """
        stop = threading.Event()
        wm_tool = WM_TOOL if wm is not None else None
        try:
            return await anyio.to_thread.run_sync(
                self._play, task.task_id, extra_system, wm_tool, wm, stop, abandon_on_cancel=True
            )
        finally:
            stop.set()  # a cancelled episode's thread stops at its next call

    def _play(
        self,
        task_id: str,
        extra_system: str,
        wm_tool: dict[str, Any] | None,
        wm: Callable[[str], str] | None,
        stop: threading.Event,
    ) -> Played:
        if self._openai is None:
            raise ConfigError("the scenario is not connected to a host meter")
        task = self.task(task_id)
        timer = [0.0]
        # The benchmark's client, its __init__ skipped: it would open a pool per episode.
        # complete() reads only cfg and client.chat.completions.create.
        model = self.llm.LLM.__new__(self.llm.LLM)
        model.cfg = self._model
        model.client = _Client(_Completions(self._openai.chat.completions, stop, timer))
        last: BaseException | None = None
        for _ in range(EPISODE_ATTEMPTS):
            try:
                return self._attempt(model, task, extra_system, wm_tool, wm, timer)
            except Exception as exc:  # the runner reruns an episode whatever failed in it
                cause = exc.__cause__ if isinstance(exc, self.llm.InfraError) else exc
                if isinstance(cause, _Stopped):  # abandoned by its task: nobody reads this
                    raise _Stopped from None
                if isinstance(cause, _BudgetBlocked):
                    return Played(
                        status="budget_blocked", reward=0.0, trace=[],
                        tokens=self.llm.agent_usage(), provider_seconds=timer[0],
                    )  # fmt: skip
                last = exc
        raise ProviderRefused(
            f"{task_id}: {EPISODE_ATTEMPTS} attempts failed: {type(last).__name__}: {last}",
            hint="check the host meter's ledger and the provider; the task was not scored",
        )

    def _attempt(
        self,
        model: Any,
        task: Any,
        extra_system: str,
        wm_tool: dict[str, Any] | None,
        wm: Callable[[str], str] | None,
        timer: list[float],
    ) -> Played:
        agent = self.agent
        if wm_tool is None or wm is None:
            reward, trace, usage, judge = agent.run_episode(
                model, self.bundle, task, extra_system=extra_system
            )
        else:  # run_episode, with one more tool: the same Env, specs and loop
            from servelearnbench.engine.types import FINISH_ACTION_NAME, Action

            self.llm.usage_reset()
            meta = self.bundle["meta"]
            system = meta["system_prompt"] + ("\n\n" + extra_system if extra_system else "")
            messages = [
                {"role": "system", "content": system},
                {"role": "user", "content": task.instruction},
            ]
            env = agent.new_env(self.bundle)
            env.reset(task)
            specs = [*agent.tool_specs(env.tools_info, meta["domain"]), wm_tool]
            wm_name = wm_tool["function"]["name"]

            def execute(name: str, args: dict[str, Any]) -> str:
                if name == wm_name:
                    return wm(str(args.get("query", "")))
                if name not in env.tools_map:
                    raise agent.UnknownTool(agent.MSG_UNKNOWN.format(name=name))
                return str(env.step(Action(name=name, kwargs=args)).observation)

            trace = agent.run_turns(
                model, messages, specs, execute,
                on_finish=lambda args: env.step(Action(name=FINISH_ACTION_NAME, kwargs=args)),
            )  # fmt: skip
            reward = env.compute_reward()
            usage, judge = self.llm.agent_usage(), self.llm.judge_usage()
        ends = {"finish": "finished", "capped": "budget_exhausted"}
        last_kind = trace[-1].get("kind") if trace else None
        return Played(
            status=ends.get(str(last_kind), "no_finish"),
            reward=float(reward.reward),
            trace=_jsonable(trace),
            tokens=dict(usage),
            judge_tokens=dict(judge),
            answer_detail=_jsonable(reward.answer_detail),
            provider_seconds=timer[0],
        )
