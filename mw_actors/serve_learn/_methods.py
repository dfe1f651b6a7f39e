"""Learning methods: what the host is given (context, a ``wm`` tool), and how a block is learned.

Every method has one interface (:class:`Method`): the campaign asks it, per
episode, for the text appended to the system prompt on a version
(``context``), the ``wm`` tool of that version, and the fields it adds to the
episode's row; after each block it asks it to ``learn`` the next version from
the served episodes' records.

- ``mwm-local`` (offline default): a small world model of rules (:mod:`._worldmodel`)
  fitted after every block on the records of every served episode so far,
  recent blocks weighing more. Its checkpoint is an adapter plus a card; an
  episode on version v gets the MWM context and v's card, and a ``wm`` tool that
  answers from v's adapter.
- ``mwm``: an LLM learner session (:mod:`._learner`), through the learner
  meter, fits the adapter and edits the card with its tools. The campaign
  hands it its learner session with each lesson.
- ``blind``: the reference that learns nothing: no context, no ``wm`` tool.
- ``slb:NAME`` or ``module:Class``: a ServeLearnBench ``Method`` (:class:`SlbMethod`).

A method declares what the campaign must provide it (:attr:`Method.learner`,
:attr:`Method.requires`): the campaign and its checks ask that, never its name.

A learner reads served episodes' records (:class:`~._worldmodel.Served`); it
never sees an evaluator, a category or a window, and never plays a serving task.
"""

from __future__ import annotations

import copy
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import anyio
import msgspec

from mw_errors import ConfigError

from ._worldmodel import Served

if TYPE_CHECKING:
    from ._learner import LearnerUsage

__all__ = [
    "METHODS",
    "Blind",
    "Learner",
    "Lesson",
    "Method",
    "Mwm",
    "MwmLocal",
    "SlbMethod",
    "learner_of",
    "make_method",
]

MWM_CONTEXT = """\
# World model (MWM)
A world model learned from this deployment's past serving is available as the
wm tool. Actual practice may differ from the manual: before you act, ask the wm
tool which action scores best for a case like this one (describe the case in
your query). What it has learned so far is summarised below."""


# Who learns a method's versions: an LLM session (through the learner meter), mw's code, nobody.
Learner = Literal["llm", "local"] | None

# A learner session: (served, block, out, manual) -> its usage, through the learner meter.
Session = Callable[[list[Served], int, Path, str], Awaitable["LearnerUsage"]]


class Lesson(msgspec.Struct, frozen=True, kw_only=True):
    """What a method learns version ``block + 1`` from, and where it writes it."""

    served: list[Served]  # every served episode of blocks 0..block, by their records
    block: int
    previous: Path  # version ``block``'s directory
    out: Path  # the new version's directory (empty)
    session: Session | None = None  # the campaign's learner session, where it has a meter
    manual: str = ""  # the documents the host may read (the scenario's policy and workflow)


class Method:
    """What the campaign asks of a method; the defaults are a method that does nothing."""

    name = "method"  # the results file is <scenario>_<name>.jsonl
    learns = False  # False: no serving stream, every window tested on v0
    # Who learns a version: an LLM session the campaign runs through its learner meter
    # ("llm": the campaign starts the meter and the learner model), mw's own code in
    # the campaign's process ("local"), or nobody (None).
    learner: Learner = None
    requires: tuple[str, ...] = ()  # modules it imports: checked before anything starts
    block_size = 12  # served episodes per update
    benchmark_only = False  # True: runs on the benchmark's own scenarios only

    def bind(self, scenario: Any) -> None:
        """Called once with the scenario's player (see :mod:`._players`)."""

    def refuse_synthetic(self) -> ConfigError:
        """Why a benchmark-only method cannot run on mw's synthetic scenario."""
        return ConfigError(
            f"method {getattr(self, 'spelled', self.name)!r} runs on the benchmark's own "
            "scenarios, not on mw's synthetic one",
            hint="use a real scenario (banking_l1, ...) or mw's own methods",
        )

    def context(self, version_dir: Path, task_id: str, phase: str, window: int) -> str:
        """Text appended to the episode's system prompt, on that version."""
        return ""

    def wm(self, version_dir: Path) -> Callable[[str], str] | None:
        """The version's ``wm`` tool, or None to offer none."""
        return None

    def row_extra(self, version_dir: Path, task_id: str, phase: str, window: int) -> dict[str, Any]:
        """Fields the method adds to the episode's row."""
        return {}

    def config(self) -> dict[str, Any]:
        """The method's part of the results file's config line."""
        return {"method": self.name}

    async def learn(self, lesson: Lesson) -> LearnerUsage | None:
        """Write version ``lesson.block + 1`` into ``lesson.out``; an LLM session's usage.

        Work that blocks (fitting, files) belongs on a worker thread: the campaign
        keeps serving on the event loop meanwhile.
        """
        raise AssertionError(f"{self.name} does not learn: the campaign serves it nothing")


class MwmLocal(Method):
    name = "mwm-local"
    learns = True
    learner: Learner = "local"

    def __init__(self) -> None:
        self._answers: dict[Path, Callable[[str], str]] = {}
        self._contexts: dict[Path, str] = {}

    def context(self, version_dir: Path, task_id: str, phase: str, window: int) -> str:
        if version_dir not in self._contexts:
            card = version_dir / "card.md"
            learned = card.read_text() if card.is_file() else "(nothing learned yet)\n"
            self._contexts[version_dir] = f"{MWM_CONTEXT}\n\n{learned}"
        return self._contexts[version_dir]

    def wm(self, version_dir: Path) -> Callable[[str], str] | None:
        if version_dir not in self._answers:
            from ._worldmodel import WorldModel

            if (version_dir / "adapter.safetensors").is_file():
                self._answers[version_dir] = WorldModel.load(version_dir).answer
            else:  # v0: nothing learned yet
                self._answers[version_dir] = lambda query: "no knowledge yet"
        return self._answers[version_dir]

    async def learn(self, lesson: Lesson) -> LearnerUsage | None:
        from ._worldmodel import fit

        def fit_and_save() -> None:
            model = fit(lesson.served, now=lesson.block, manual=lesson.manual)
            model.save(lesson.out, lesson.block + 1)

        await anyio.to_thread.run_sync(fit_and_save)
        return None


class Mwm(MwmLocal):
    """The LLM learner: the same adapter answers ``wm``, but a learner session makes it.

    The session (mw's own loop or Codex CLI, through the learner meter) is the
    campaign's, handed over with each lesson.
    """

    name = "mwm"
    learner: Learner = "llm"

    async def learn(self, lesson: Lesson) -> LearnerUsage | None:
        if lesson.session is None:
            raise ConfigError("the mwm learner has no learner meter to reach its model")
        return await lesson.session(lesson.served, lesson.block, lesson.out, lesson.manual)


class Blind(Method):
    name = "blind"


METHODS: dict[str, type[Method]] = {"mwm-local": MwmLocal, "mwm": Mwm, "blind": Blind}


def learner_of(name: str) -> Learner:
    """Who learns for the method called ``name`` (:attr:`Method.learner`), without making it.

    A benchmark method (``slb:NAME``, ``module:Class``) learns in the campaign's process.
    """
    method = METHODS.get(name)
    return method.learner if method is not None else "local" if ":" in name else None


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
            "slb:blind, slb:oracle, slb:rag, or module:Class (a servelearnbench Method)",
            hint="mwm-local is the offline default; mwm runs an LLM learner; blind learns nothing",
        ) from None


class SlbMethod(Method):
    """A ServeLearnBench ``Method`` (its own, or a user's subclass) under mw.

    mw calls its hooks as the benchmark's runner does: ``setup(bundle)`` on a
    fresh instance, ``context(task, phase, window)`` before each episode
    (appended to the system prompt), ``row_extra`` after it, and, for a method
    that learns, ``update(results)`` after each served block with the block's
    ``EpisodeResult``s, built from the journal.

    A version is the method's state after the updates of blocks 0..v-1. Its
    directory holds ``update.json``: the block's results and the name of the
    version before it, so a version's state is rebuilt after a restart by
    replaying the chain's updates on a fresh instance, and its digest covers
    every update before it. In one process a state is copied from the one
    before it and updated once; a few recent states are kept, one instance per
    version (an episode's ``context`` and ``row_extra`` meet the same one).
    """

    KEPT = 8  # states kept in memory; an older one is rebuilt when asked for
    benchmark_only = True

    def __init__(self, spelled: str, factory: Callable[[], Any]) -> None:
        self.spelled = spelled
        self.factory = factory
        probe = factory()
        self.name = str(probe.name)
        self.learns = bool(probe.learns)
        self.learner = "local" if self.learns else None
        self.block_size = int(probe.block_size)
        self._config = dict(probe.config())
        self._scenario: Any = None
        self._states: OrderedDict[Path, Any] = OrderedDict()
        # A learned state waits here, by its update's digest, until its version's
        # directory (content-addressed, named after the learn) is first asked for.
        self._learned: dict[str, Any] = {}
        # One instance per version: context and row_extra of an episode must meet the
        # same one (a method may carry state from one to the other, as RAG does).
        self._lock = threading.RLock()

    def bind(self, scenario: Any) -> None:
        if getattr(scenario, "bundle", None) is None:
            raise self.refuse_synthetic()
        self._scenario = scenario

    def config(self) -> dict[str, Any]:
        return dict(self._config)

    def context(self, version_dir: Path, task_id: str, phase: str, window: int) -> str:
        task = self._scenario.task(task_id)
        return str(self._state(version_dir).context(task, phase, window) or "")

    def row_extra(self, version_dir: Path, task_id: str, phase: str, window: int) -> dict[str, Any]:
        task = self._scenario.task(task_id)
        return dict(self._state(version_dir).row_extra(task, phase, window) or {})

    async def learn(self, lesson: Lesson) -> LearnerUsage | None:
        await anyio.to_thread.run_sync(
            self._update, lesson.served, lesson.block, lesson.previous, lesson.out
        )
        return None  # the benchmark's method learns in this process, without an LLM

    def _update(self, served: list[Served], block: int, previous: Path, out: Path) -> None:
        results = [
            {
                "task_id": s.task_id,
                "instruction": s.instruction,
                "timestamp": s.timestamp,
                "reward": s.reward,
                "record": s.record,
            }
            for s in served
            if s.block == block
        ]
        state = self._state(previous)
        with self._lock:
            try:
                after = copy.deepcopy(state)
            except Exception:  # a state that cannot be copied (or is in use) is rebuilt
                after = self._replay(previous)
            after.update(self._results(results))
            update = msgspec.json.encode(
                {"previous": previous.name, "block": block, "results": results}
            )
            out.mkdir(parents=True, exist_ok=True)
            (out / "update.json").write_bytes(update)
            self._learned[hashlib.sha256(update).hexdigest()] = after

    # -- states -----------------------------------------------------------------

    def _state(self, version_dir: Path) -> Any:
        with self._lock:
            if version_dir in self._states:
                self._states.move_to_end(version_dir)
                return self._states[version_dir]
            update = version_dir / "update.json"
            learned = None
            if update.is_file():
                learned = self._learned.pop(hashlib.sha256(update.read_bytes()).hexdigest(), None)
            state = learned if learned is not None else self._replay(version_dir)
            self._states[version_dir] = state
            while len(self._states) > self.KEPT:
                self._states.popitem(last=False)
            return state

    def _replay(self, version_dir: Path) -> Any:
        """A fresh instance, set up, then updated with every block up to ``version_dir``."""
        chain = []
        here, seen = version_dir, set()
        while (here / "update.json").is_file():
            update = msgspec.json.decode((here / "update.json").read_bytes())
            chain.append(update["results"])
            previous = str(update["previous"])
            if "/" in previous or previous in ("", ".", "..") or previous in seen:
                raise ConfigError(
                    f"{here / 'update.json'} names {previous!r} as the version before it",
                    hint="the run directory's versions are damaged; start a new tag",
                )
            seen.add(previous)
            here = here.parent / previous
        state = self.factory()
        state.setup(self._scenario.bundle)
        for results in reversed(chain):
            state.update(self._results(results))
        return state

    @staticmethod
    def _results(results: list[dict[str, Any]]) -> list[Any]:
        from servelearnbench.methods import EpisodeResult

        return [EpisodeResult(**r) for r in results]


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
            hint="slb:blind, slb:oracle, slb:rag, or module:Class naming a servelearnbench Method "
            "subclass importable here",
        ) from None
    from servelearnbench.methods import Method as SlbBase

    if not (isinstance(factory, type) and issubclass(factory, SlbBase)):
        raise ConfigError(
            f"method {name!r} is not a servelearnbench.methods.Method subclass",
            hint="see the benchmark's docs/methods.md for the interface",
        )
    return SlbMethod(name, factory)
