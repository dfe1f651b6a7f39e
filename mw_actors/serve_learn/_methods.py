"""Learning methods: what the host is given (context, a ``wm`` tool), and how a block is learned.

- ``mwm-local`` (offline default): a small torch world model (:mod:`._worldmodel`)
  trained after every block on all serving evidence so far, recent evidence
  weighing more. Its checkpoint is an adapter plus a card.
- ``mwm``: an LLM learner session (:mod:`._learner`), through the learner
  meter, fits the adapter and edits the card with its tools; the host's ``wm``
  tool answers from the adapter it fitted. The campaign connects it to its
  learner meter before the first block.
- ``blind``: the reference that learns nothing: no context, no ``wm`` tool.

A learner reads evidence files (tool calls, their results, the score line);
it never sees an evaluator and never plays a serving task.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from mw_errors import ConfigError

__all__ = [
    "METHODS",
    "Blind",
    "Method",
    "Mwm",
    "MwmLocal",
    "SlbMethod",
    "make_method",
    "observations",
]

MWM_CONTEXT = """\
# World model (MWM)
A world model learned from this deployment's past serving is available as the
wm tool. Actual practice may differ from the manual: before a decision, ask the
wm tool which decision scores best for this kind of case."""


class Method(Protocol):
    name: str  # the results file is <scenario>_<name>.jsonl
    learns: bool  # False: no serving stream, every window tested on v0

    def context(self) -> str | None: ...

    def wm(self, version_dir: Path) -> Callable[[str], str] | None: ...

    def learn(self, evidence: list[dict[str, Any]], block: int, out: Path) -> None:
        """Write the version learned from blocks 0..``block`` into ``out``."""


def observations(evidence: list[dict[str, Any]]) -> list[Any]:
    """(block, kind, decision, reward) of each served episode, read from its trace."""
    from ._worldmodel import Observation

    found = []
    for item in evidence:
        kind = decision = None
        for step in item.get("trace", []):
            if step.get("kind") != "tool":
                continue
            if step.get("name") == "get_case":
                try:
                    kind = json.loads(step.get("obs") or "{}").get("kind")
                except (ValueError, AttributeError):
                    kind = None
            elif step.get("name") == "decide" and decision is None:
                decision = (step.get("args") or {}).get("decision")
        if kind and decision:
            found.append(Observation(item["block"], kind, decision, float(item["reward"])))
    return found


class MwmLocal:
    name = "mwm-local"
    learns = True

    def __init__(self) -> None:
        self._cache: dict[Path, Callable[[str], str]] = {}

    def context(self) -> str | None:
        return MWM_CONTEXT

    def wm(self, version_dir: Path) -> Callable[[str], str] | None:
        if version_dir not in self._cache:
            from ._worldmodel import WorldModel

            if (version_dir / "adapter.safetensors").is_file():
                self._cache[version_dir] = WorldModel.load(version_dir).answer
            else:  # v0: nothing learned yet
                self._cache[version_dir] = lambda query: "no knowledge yet"
        return self._cache[version_dir]

    def learn(self, evidence: list[dict[str, Any]], block: int, out: Path) -> None:
        from ._worldmodel import fit

        fit(observations(evidence), now=block).save(out, block + 1)


class Mwm(MwmLocal):
    """The LLM learner: the same adapter answers ``wm``, but a learner session makes it."""

    name = "mwm"

    def __init__(self) -> None:
        super().__init__()
        self.endpoint: Any = None  # a LearnerEndpoint, set by the campaign
        self.codex: Any = None  # a CodexSession when Codex CLI is the learner session
        self.last_usage: Any = None  # the last session's LearnerUsage

    def learn(self, evidence: list[dict[str, Any]], block: int, out: Path) -> None:
        from ._learner import run_learner_session

        if self.endpoint is None:
            raise ConfigError("the mwm learner has no learner meter to reach its model")
        if self.codex is not None:  # on a worker thread: Codex runs in the sandbox, async
            import anyio.from_thread

            from ._codex import run_codex_session

            self.last_usage = anyio.from_thread.run(
                run_codex_session, self.codex, self.endpoint, evidence, block, out
            )
            return
        self.last_usage = run_learner_session(self.endpoint, evidence, block, out)


class Blind:
    name = "blind"
    learns = False

    def context(self) -> str | None:
        return None

    def wm(self, version_dir: Path) -> Callable[[str], str] | None:
        return None

    def learn(self, evidence: list[dict[str, Any]], block: int, out: Path) -> None:
        raise AssertionError("blind does not learn: the campaign serves it nothing")


METHODS: dict[str, Callable[[], Method]] = {"mwm-local": MwmLocal, "mwm": Mwm, "blind": Blind}


def make_method(name: str) -> Method:
    """The method called ``name``.

    Raises:
        ConfigError: no such method here.
    """
    if ":" in name:
        from ._slb import slb_available, slb_missing

        if not slb_available():
            raise slb_missing(name, what="method")
        return _slb_method(name)
    try:
        return METHODS[name]()
    except KeyError:
        raise ConfigError(
            f"method {name!r} is not available; use one of: {', '.join(METHODS)}, "
            "slb:blind, slb:oracle, or module:Class (a servelearnbench Method)",
            hint="mwm-local is the offline default; mwm runs an LLM learner; blind learns nothing",
        ) from None


class SlbMethod:
    """A ServeLearnBench ``Method`` (its own, or a user's subclass) under mw.

    mw calls its hooks as the benchmark's runner does: ``setup(bundle)`` once,
    ``context(task, phase, window)`` before each episode (appended to the system
    prompt) and ``row_extra`` after it. Methods that learn (``update`` per
    block) are not run yet: they are refused by name, before anything starts.
    """

    def __init__(self, spelled: str, method: Any) -> None:
        self.spelled = spelled
        self.method = method
        self.name = str(method.name)
        self.learns = bool(method.learns)
        self._bound = False

    def bind(self, bundle: dict[str, Any]) -> None:
        """``setup(bundle)``, once, with the package's bundle of the scenario."""
        if not self._bound:
            self.method.setup(bundle)
            self._bound = True

    def context(self) -> str | None:
        return None  # per episode: see episode_context

    def episode_context(self, task: Any, phase: str, window: int) -> str:
        return str(self.method.context(task, phase, window) or "")

    def row_extra(self, task: Any, phase: str, window: int) -> dict[str, Any]:
        return dict(self.method.row_extra(task, phase, window) or {})

    def config(self) -> dict[str, Any]:
        return dict(self.method.config())

    def wm(self, version_dir: Path) -> Callable[[str], str] | None:
        return None

    def learn(self, evidence: list[dict[str, Any]], block: int, out: Path) -> None:
        raise AssertionError("a learning ServeLearnBench method is refused before it starts")


def _slb_method(name: str) -> SlbMethod:
    """``slb:blind|oracle|rag`` (the package's own) or ``module:Class`` (any Method subclass)."""
    import importlib

    module_name, _, attribute = name.partition(":")
    try:
        if module_name == "slb":
            from servelearnbench.methods import METHODS as SLB_METHODS

            factory = SLB_METHODS[attribute]
        else:
            factory = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError, KeyError) as exc:
        raise ConfigError(
            f"method {name!r} cannot be loaded: {type(exc).__name__}: {exc}",
            hint="slb:blind, slb:oracle, or module:Class naming a servelearnbench Method "
            "subclass importable here",
        ) from None
    from servelearnbench.methods import Method as SlbBase

    if not (isinstance(factory, type) and issubclass(factory, SlbBase)):
        raise ConfigError(
            f"method {name!r} is not a servelearnbench.methods.Method subclass",
            hint="see the benchmark's docs/methods.md for the interface",
        )
    method = SlbMethod(name, factory())
    if method.learns:
        raise ConfigError(
            f"method {name!r} learns (update per block); mw does not run the benchmark's "
            "learning methods yet",
            hint="use slb:blind or slb:oracle, or mw's own mwm-local / mwm",
        )
    return method
