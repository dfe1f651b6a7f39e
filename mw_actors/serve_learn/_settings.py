"""A campaign's settings, resolved: a flag, else the environment, else the launch config.

What ``mw serve-learn run``, ``submit`` and ``test`` were given (:class:`Flags`)
and an environment mapping go in; a :class:`~._spec.CampaignSpec` (or its
keywords) comes out. These are pure functions of the two: only ``bin/`` reads
``os.environ``, and passes it here. Every remote model's endpoint is resolved
and its key read from that mapping; the key goes nowhere but the spec's memory.

On ``--resume`` the journal holds the settings the campaign started with: a flag
that differs from it is refused, naming the flag; the keys are read again.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any

import msgspec

from meters import parse_usd
from mw_errors import ConfigError

from ..provider import Latency
from ._backends import keys_for, resolve_endpoint
from ._checks import read_journaled
from ._codex import find_codex
from ._launch import LaunchConfig, load_launch_config
from ._methods import learner_of
from ._protocol import MAX_TOKENS
from ._schedule import Plan
from ._spec import CampaignSpec, models_reached
from ._synthetic import dataset_for

__all__ = [
    "RESUME_FLAGS",
    "Flags",
    "campaign_settings",
    "describe_launch",
    "launch_spec",
    "manual_spec",
    "train_split",
]

# The paper's judge of a Pitch verifier, next to a remote host.
PAPER_JUDGE = "fireworks/accounts/fireworks/models/glm-5p3-flash"


class Flags(msgspec.Struct, frozen=True, kw_only=True):
    """What the command line gave; None: not given."""

    scenario: str
    dataset: Path | None = None
    config: Path | None = None
    method: str | None = None
    model: str | None = None
    learner_model: str | None = None  # no flag of its own: MW_EVOLVER_MODEL; a grid sets it
    judge_model: str | None = None
    train_split: int | None = None
    concurrency: int | None = None
    allocation: str | None = None
    allocation_add: str | None = None
    waiter: str | None = None
    schedule: str | None = None
    provider_latency: str | None = None
    reasoning_effort: str | None = None
    max_tokens: int | None = None
    learner_backend: str | None = None


# A flag of ``serve-learn run`` and the campaign setting it names, as a resume compares them.
RESUME_FLAGS = {
    "method": "method",
    "model": "model",
    "learner_model": "learner_model",
    "train_split": "train_split",
    "concurrency": "concurrency",
    "allocation": "allocation_usd",
    "waiter": "waiter",
    "schedule": "schedule",
    "judge_model": "judge_model",
    "provider_latency": "latency",
    "learner_backend": "learner_backend",
    "reasoning_effort": "reasoning_effort",
    "max_tokens": "max_tokens",
}


def _first(*values: Any) -> Any:
    """The first value that is not None (a flag of 0 is a value, not an absence)."""
    return next(v for v in values if v is not None)


def _environ_int(environ: Mapping[str, str], name: str, what: str, hint: str) -> int | None:
    """``environ[name]`` as a whole number (None: unset or empty)."""
    value = environ.get(name)
    if not value:
        return None
    try:
        return int(value)
    except ValueError:
        raise ConfigError(f"{name}={value!r} is not {what}", hint=hint) from None


def train_split(flag: int | None, environ: Mapping[str, str]) -> int | None:
    """``--train-split``, else MW_TRAIN_SPLIT (a prefix of the stream for smoke runs)."""
    if flag is not None:
        return flag
    hint = "unset it, or set it to e.g. 24 for a two-block smoke run"
    return _environ_int(environ, "MW_TRAIN_SPLIT", "a number of serving cases", hint)


def _wm_port(environ: Mapping[str, str]) -> int | None:
    """WM_PORT: the host meter's port (the learner's is WM_PORT+1); unset: any free pair."""
    hint = "unset it for any free pair, or set the host meter's port"
    return _environ_int(environ, "WM_PORT", "a port number", hint)


# The efforts OpenAI-compatible providers accept (OpenAI's list; others take a subset).
REASONING_EFFORTS = ("minimal", "low", "medium", "high", "xhigh")


def _reasoning_effort(text: str | None) -> str | None:
    """``--reasoning-effort``: sent as-is, as ``slb run`` sends it (default high; none omits it)."""
    if text is None:
        return "high"
    if text in ("", "none", "default"):
        return None
    if text not in REASONING_EFFORTS:
        raise ConfigError(
            f"--reasoning-effort {text[:40]!r} is not an effort a provider knows",
            hint=f"use one of {', '.join(REASONING_EFFORTS)}, or none to omit it",
        )
    return text


def _learner_backend(flags: Flags, config: LaunchConfig, environ: Mapping[str, str]) -> Any:
    """Mwm's learner session: a flag, MW_LEARNER_BACKEND, the config, else Codex if on PATH."""
    codex = find_codex(shutil.which("codex", path=environ.get("PATH")))
    chosen = (
        flags.learner_backend
        or environ.get("MW_LEARNER_BACKEND")
        or config.learner_backend
        or ("codex" if codex is not None else "builtin")
    )
    if chosen not in ("builtin", "codex"):
        raise ConfigError(
            f"MW_LEARNER_BACKEND={chosen!r} is not a learner backend", hint="use builtin or codex"
        )
    return {"learner_backend": chosen, "codex": codex}


def campaign_settings(flags: Flags, environ: Mapping[str, str]) -> dict[str, Any]:
    """The campaign's settings (:class:`CampaignSpec` keywords), the keys among them.

    Raises:
        ConfigError: a value is malformed, or the launch config is another scenario's.
    """
    config = load_launch_config(flags.config) if flags.config else LaunchConfig(source="")
    if config.scenario is not None and config.scenario != flags.scenario:
        raise ConfigError(
            f"launch config {config.source} is for {config.scenario}, not {flags.scenario}",
            hint="pass the scenario's own config, or none",
        )
    method = flags.method or config.method or "mwm-local"
    given = flags.model or environ.get("MW_MODEL") or environ.get("MW_HOST_MODEL")
    model = given or config.host_model or "local/scripted"
    # The seeds' model serves "for acting and learning": a host model given by flag or
    # environment learns too, unless a learner model is given the same way.
    learner_model = (
        flags.learner_model
        or environ.get("MW_EVOLVER_MODEL")
        or given
        or config.learner_model
        or "local/scripted"
    )
    # A Pitch verifier's judge: the paper's scorer next to a remote host, else the local one.
    judge_model = (
        flags.judge_model
        or environ.get("MW_JUDGE_MODEL")
        or config.judge_model
        or ("local/scripted" if model.startswith("local/") else PAPER_JUDGE)
    )
    split = train_split(flags.train_split, environ)
    latency = flags.provider_latency
    settings: dict[str, Any] = {
        "method": method,
        "model": model,
        "learner_model": learner_model,
        "train_split": split if split is not None else config.train_split,
        "concurrency": _first(flags.concurrency, config.concurrency, 4),
        "allocation_usd": parse_usd(
            flags.allocation
            if flags.allocation is not None
            else config.allocation_usd
            if config.allocation_usd is not None
            else "5"
        ),
        "waiter": flags.waiter or config.waiter or "pipelined",
        "schedule": flags.schedule or config.schedule or "mw",
        "latency": Latency.parse(latency, "--provider-latency") if latency else None,
        "prices": config.prices,
        "reasoning_effort": _reasoning_effort(flags.reasoning_effort),
        "max_tokens": _first(flags.max_tokens, config.max_tokens, MAX_TOKENS),
        "judge_model": judge_model,
    }
    endpoints = {}
    for name in models_reached(flags.scenario, method, model, learner_model, judge_model):
        endpoint = resolve_endpoint(name, config.backends, environ)
        if endpoint is not None:
            endpoints[name] = endpoint
    settings["endpoints"] = endpoints
    settings["secrets"] = keys_for(endpoints.values(), environ.get)
    settings.update(_learner_backend(flags, config, environ))
    return settings


def _allocation_add(flags: Flags) -> Decimal:
    """``--allocation-add`` (0 without it)."""
    if flags.allocation_add is None:
        return Decimal(0)
    return parse_usd(flags.allocation_add, "--allocation-add")


def launch_spec(
    flags: Flags, environ: Mapping[str, str], runs: Path, tag: str, *, resume: bool = False
) -> CampaignSpec:
    """The campaign to run: a new one, or on ``resume`` the one its journal holds.

    Raises:
        ConfigError: a setting is malformed, or a resume's flag differs from the journal.
    """
    if flags.allocation_add is not None and not resume:
        raise ConfigError(
            "--allocation-add raises a campaign's allocation on --resume",
            hint="start with --allocation, or add --resume",
        )
    spec = _resumed(flags, environ, runs, tag) if resume else None
    if spec is not None:
        return spec
    # A new campaign, or one whose journal holds no settings yet: as given.
    return CampaignSpec(
        tag=tag,
        scenario=flags.scenario,
        dataset=dataset_for(flags.scenario, flags.dataset, runs),
        runs=runs,
        resume=resume,
        wm_port=_wm_port(environ),
        allocation_add=_allocation_add(flags),
        **campaign_settings(flags, environ),  # before anything is written
    )


def manual_spec(flags: Flags, environ: Mapping[str, str], runs: Path, tag: str) -> CampaignSpec:
    """The campaign ``mw serve-learn test`` runs the held-out tests of, by hand.

    Raises:
        ConfigError: a setting is malformed.
    """
    return CampaignSpec(
        tag=tag,
        scenario=flags.scenario,
        dataset=dataset_for(flags.scenario, flags.dataset, runs),
        runs=runs,
        **campaign_settings(flags, environ),
    )


def describe_launch(spec: CampaignSpec, schedule: Plan) -> str:
    """What ``--check`` prints: the cases, the method, the models and where each is reached."""
    lines = [
        f"{spec.scenario}: {schedule.serving_total} serving and {schedule.test_total} test "
        f"cases; method {spec.method}, host {spec.model}"
        + (f", learner {spec.learner_model}" if learner_of(spec.method) == "llm" else "")
    ]
    for name, endpoint in sorted(spec.endpoints.items()):
        key = f", key from {endpoint.api_key_env}" if endpoint.api_key_env else ""
        lines.append(f"  {name}: {endpoint.base_url} as {endpoint.wire_model}{key}")
    return "\n".join(lines)


def _resumed(flags: Flags, environ: Mapping[str, str], runs: Path, tag: str) -> CampaignSpec | None:
    """The campaign as its journal holds it, or None for a journal without its settings.

    A flag given that differs from the journal is refused, naming it; the key is read
    again from the environment; ``--allocation-add`` raises the allocation (journaled).
    """
    submission = read_journaled(runs / tag).submission()
    if submission is None:
        return None  # never started, or journaled before its settings were: as given
    if flags.scenario != submission.scenario:
        raise ConfigError(
            f"resume: campaign {tag} serves {submission.scenario}, not {flags.scenario}",
            hint=f"mw serve-learn run {submission.scenario} --resume --tag {tag}",
        )
    journaled = submission.settings()
    given = {
        flag: getattr(flags, flag) for flag in RESUME_FLAGS if getattr(flags, flag) is not None
    }
    if given or flags.config:
        fresh = campaign_settings(flags, environ)
        for flag, value in given.items():
            name = RESUME_FLAGS[flag]
            if fresh[name] != journaled.get(name):
                raise ConfigError(
                    f"resume: --{flag.replace('_', '-')} {value} differs from the "
                    f"campaign's journal ({name} {msgspec.to_builtins(journaled.get(name))})",
                    hint="drop it: a resume continues the campaign as it started"
                    + (" (raise it with --allocation-add)" if name == "allocation_usd" else ""),
                )
        if flags.config:
            for name in ("endpoints", "prices"):
                if fresh[name] != journaled.get(name, {} if name == "endpoints" else None):
                    raise ConfigError(
                        f"resume: --config {flags.config} gives other {name} than the journal's",
                        hint="drop --config: the journal has the launch config it started with",
                    )
    journaled["secrets"] = keys_for(journaled.get("endpoints", {}).values(), environ.get)
    dataset = Path(submission.dataset) if submission.dataset else None
    if flags.dataset or dataset is None or not dataset.is_dir():
        dataset = dataset_for(flags.scenario, flags.dataset, runs)
    return CampaignSpec(
        tag=tag,
        scenario=flags.scenario,
        dataset=dataset,
        runs=runs,
        resume=True,
        wm_port=_wm_port(environ),
        allocation_add=_allocation_add(flags),
        **journaled,
    )
