"""A campaign's settings and where it runs.

:class:`CampaignSpec` is what the caller decides (``bin/`` reads the
environment, not this); :class:`Submission` is the same settings in wire
types, as a daemon receives them and a journal keeps them to resume;
:class:`RunDir` is the run directory's layout, as DESIGN.md lays it out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

import msgspec

import meters
from meters import parse_usd
from mw_errors import ConfigError

from .._convert import convert
from .._reserver import BUDGET_RECORDS
from .._tags import check_scenario, check_tag
from ..provider import (
    Latency,
)
from ._backends import Endpoint
from ._codex import CodexInstall
from ._methods import learner_of
from ._protocol import MAX_TOKENS
from ._schedule import Schedule
from .records import (
    SERVE_LEARN_RECORDS,
)

__all__ = ["CAMPAIGN_RECORDS", "LOCAL_MODELS", "CampaignSpec", "RunDir", "Submission"]


# What the campaign's own provider plays: the host by the synthetic script, the learner
# by the synthetic learner. Any other model is remote (see ._backends).
LOCAL_MODELS = ("local/scripted",)
CAMPAIGN_RECORDS = [*BUDGET_RECORDS, *SERVE_LEARN_RECORDS]  # what a campaign journal holds


@dataclass(frozen=True)
class CampaignSpec:
    """A campaign, decided by the caller (``bin/`` reads the environment, not this)."""

    tag: str
    scenario: str
    dataset: Path
    runs: Path
    method: str = "mwm-local"
    model: str = "local/scripted"
    train_split: int | None = None
    concurrency: int = 4
    allocation_usd: Decimal = Decimal("5")
    # pipelined: tests as soon as their version exists, beside serving (mw's order);
    # after_training: all serving and learning, then all tests (the seed launcher's);
    # window_by_window: serve window w, test it, then serve w+1 (ServeLearnBench's runner).
    waiter: Literal["pipelined", "after_training", "window_by_window"] = "pipelined"
    latency: Latency | None = None  # the local provider's emulated latency
    learner_model: str = "local/scripted"  # the mwm learner's model (MW_EVOLVER_MODEL)
    resume: bool = False
    wm_port: int | None = None  # host meter on WM_PORT, learner's on WM_PORT+1; None: any free
    # Remote models (any backend but local/), by the name the user gives, and their prices
    # (meters' format, by that name). Keys, by variable name, live only in memory.
    endpoints: Mapping[str, Endpoint] = field(default_factory=dict)
    prices: meters.PriceTable | None = None
    secrets: Mapping[str, str] = field(default_factory=dict, repr=False)
    # The mwm learner session: the built-in loop, or Codex CLI (`codex exec`) in the sandbox.
    learner_backend: Literal["builtin", "codex"] = "builtin"
    codex: CodexInstall | None = None
    # On resume only: raise the journal's allocation by this much (journaled, from here on).
    allocation_add: Decimal = Decimal(0)
    # Sent as-is in every host request body, as ServeLearnBench's client does; None omits it.
    reasoning_effort: str | None = "high"
    # Each host call's max_tokens, as the benchmark's ModelConfig.max_tokens (its default).
    max_tokens: int = MAX_TOKENS
    # mw: blocks of 12 across the stream (the seed's); slb: blocks restart at each window,
    # every block is learned, and a window is tested after its last block (slb run's).
    schedule: Schedule = "mw"
    # The LLM judge a Pitch scenario's verifier calls, through its own wire meter.
    judge_model: str = "local/scripted"

    def __post_init__(self) -> None:
        """Refuse what no campaign can run with, before anything is written.

        Raises:
            ConfigError: a tag that is not a run name, a scenario name that is not a
                path segment, or a number out of its range.
        """
        check_tag(self.tag)
        check_scenario(self.scenario)
        if self.concurrency < 1:
            raise ConfigError(
                f"concurrency {self.concurrency} must be at least 1",
                hint="--concurrency N runs N episodes at once",
            )
        parse_usd(str(self.allocation_usd), "allocation")  # bounded, as every amount is
        if self.train_split is not None and self.train_split < 1:
            raise ConfigError(f"train split {self.train_split} must be at least 1 case")
        if self.max_tokens < 1:
            raise ConfigError(
                f"max_tokens {self.max_tokens} must be at least 1",
                hint="--max-tokens N caps each host call's output (default 65536)",
            )
        parse_usd(str(self.allocation_add), "allocation raise")
        if self.allocation_add and not self.resume:
            raise ConfigError(
                "an allocation is raised only on resume",
                hint="start with --allocation, or resume with --allocation-add",
            )

    def wire_model(self, model: str) -> str:
        """The name sent upstream: the model id after the backend, or a local model whole."""
        endpoint = self.endpoints.get(model)
        return endpoint.wire_model if endpoint is not None else model

    @property
    def judged(self) -> bool:
        """Whether the scenario's verifier calls an LLM judge (ServeLearnBench's Pitch)."""
        return judged(self.scenario)

    def models(self) -> list[str]:
        """The models the campaign reaches (see :func:`models_reached`)."""
        return models_reached(
            self.scenario, self.method, self.model, self.learner_model, self.judge_model
        )

    def key(self, endpoint: Endpoint) -> str | None:
        """The key ``endpoint`` is reached with, if it takes one (from memory)."""
        return self.secrets.get(endpoint.api_key_env) if endpoint.api_key_env else None


def judged(scenario: str) -> bool:
    """Whether ``scenario``'s verifier calls an LLM judge (ServeLearnBench's Pitch)."""
    return scenario.startswith("pitch")


def models_reached(
    scenario: str, method: str, model: str, learner_model: str, judge_model: str
) -> list[str]:
    """The models a campaign reaches, each once, in this order.

    The host's; the learner's where an LLM learns (:func:`learner_of`); a Pitch scenario's judge.
    """
    models = [model, learner_model] if learner_of(method) == "llm" else [model]
    return list(dict.fromkeys([*models, judge_model] if judged(scenario) else models))


class Submission(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A serve-and-learn campaign as a daemon receives it (JSON) and keeps it to resume.

    :class:`CampaignSpec`'s settings in wire types, decoded and checked in one
    step (an unknown or mistyped field is refused, named); a field left out
    takes :class:`CampaignSpec`'s default. Keys never travel in it.
    """

    scenario: str
    dataset: str | None = None  # None: a synthetic scenario, written where the daemon keeps them
    method: str | msgspec.UnsetType = msgspec.UNSET
    model: str | msgspec.UnsetType = msgspec.UNSET
    train_split: int | msgspec.UnsetType | None = msgspec.UNSET
    concurrency: int | msgspec.UnsetType = msgspec.UNSET
    allocation_usd: Decimal | msgspec.UnsetType = msgspec.UNSET
    waiter: Literal["pipelined", "after_training", "window_by_window"] | msgspec.UnsetType = (
        msgspec.UNSET
    )
    latency: Latency | msgspec.UnsetType | None = msgspec.UNSET
    learner_model: str | msgspec.UnsetType = msgspec.UNSET
    wm_port: int | msgspec.UnsetType | None = msgspec.UNSET
    endpoints: dict[str, Endpoint] | msgspec.UnsetType = msgspec.UNSET
    prices: dict[str, Any] | msgspec.UnsetType | None = msgspec.UNSET  # meters' prices format
    learner_backend: Literal["builtin", "codex"] | msgspec.UnsetType = msgspec.UNSET
    codex: CodexInstall | msgspec.UnsetType | None = msgspec.UNSET
    reasoning_effort: str | msgspec.UnsetType | None = msgspec.UNSET
    max_tokens: int | msgspec.UnsetType = msgspec.UNSET
    schedule: Schedule | msgspec.UnsetType = msgspec.UNSET
    judge_model: str | msgspec.UnsetType = msgspec.UNSET

    def __post_init__(self) -> None:
        check_scenario(self.scenario)  # it names folders before a CampaignSpec exists

    @classmethod
    def from_spec(cls, spec: CampaignSpec) -> Submission:
        """``spec``'s settings, whole, as they are journaled (no key, no port, no runs)."""
        return cls(
            scenario=spec.scenario,
            dataset=str(spec.dataset),
            method=spec.method,
            model=spec.model,
            train_split=spec.train_split,
            concurrency=spec.concurrency,
            allocation_usd=spec.allocation_usd,
            waiter=spec.waiter,
            latency=spec.latency,
            learner_model=spec.learner_model,
            endpoints=dict(spec.endpoints),
            prices=None if spec.prices is None else msgspec.to_builtins(spec.prices),
            learner_backend=spec.learner_backend,
            codex=spec.codex,
            reasoning_effort=spec.reasoning_effort,
            max_tokens=spec.max_tokens,
            schedule=spec.schedule,
            judge_model=spec.judge_model,
        )

    @classmethod
    def from_settings(
        cls, scenario: str, dataset: Path | None, settings: Mapping[str, Any]
    ) -> Submission:
        """A submission of ``settings`` (:class:`CampaignSpec` keywords) for a daemon.

        ``dataset`` None lets the daemon write a synthetic scenario where it keeps
        them. Keys (``secrets``) never go in: they travel beside, in memory only.
        """
        given = {name: value for name, value in settings.items() if name != "secrets"}
        if isinstance(given.get("prices"), meters.PriceTable):
            given["prices"] = msgspec.to_builtins(given["prices"])
        if given.get("latency") is None:
            given.pop("latency", None)
        return cls(scenario=scenario, dataset=None if dataset is None else str(dataset), **given)

    def wire(self) -> dict[str, Any]:
        """The submission as a daemon's ``Submit.spec`` carries it."""
        spec: dict[str, Any] = msgspec.to_builtins(self)
        return spec

    @classmethod
    def decode(cls, spec: Mapping[str, Any]) -> Submission:
        """A submitted spec, decoded (its prices are checked by :meth:`settings`).

        Raises:
            ConfigError: a field is unknown, missing or of the wrong type.
        """
        hint = "the fields are mw serve-learn run's settings; see `mw serve-learn run -h`"
        return convert(spec, cls, "campaign spec", hint)

    def settings(self) -> dict[str, Any]:
        """The fields given, as :class:`CampaignSpec` keywords (prices as a checked table).

        Raises:
            ConfigError: the prices are malformed or in the wrong unit.
        """
        given = {
            name: value
            for name in self.__struct_fields__
            if name not in ("scenario", "dataset")
            and (value := getattr(self, name)) is not msgspec.UNSET
        }
        if isinstance(given.get("prices"), dict):  # units, dates, every field
            given["prices"] = meters.parse_prices(
                msgspec.json.encode(given["prices"]), "campaign spec prices"
            )
        return given


class RunDir:
    """``$MW_RUNS/$MW_TAG/``, as DESIGN.md lays it out."""

    def __init__(self, runs: Path, tag: str, scenario: str, method: str) -> None:
        self.root = runs / tag
        self.tag = tag
        self.scenario = scenario
        self.journal = self.root / "journal"
        self.run_log = self.root / "run.log"
        self.test_log = self.root / "test.log"
        self.steps = self.root / tag / "steps.jsonl"
        self.checkout = self.root / tag / "checkout"
        self.evidence = self.root / "task" / "evidence"
        self.results = self.root / "task" / "results" / f"{scenario}_{method}.jsonl"

    def summary(self) -> str:
        """What ``mw serve-learn run`` prints when the campaign ends: where, per window, score."""
        from ._score import score_file

        windows = self.test_log.read_text() if self.test_log.exists() else "no window was tested\n"
        return f"run directory: {self.root}\n{windows}{score_file(self.results).line()}"

    def version_dir(self, digest: str) -> Path:
        return self.checkout / "versions" / digest
