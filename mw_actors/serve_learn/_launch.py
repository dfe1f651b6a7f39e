"""The launch config: a campaign's settings in one YAML (or JSON) file.

``examples/servelearnbench/mwm/<scenario>.yaml`` is what the launcher reads.
Every field is optional; a command-line flag or an environment variable
(``MW_MODEL``, ``MW_EVOLVER_MODEL``, ...) overrides it. The format::

    schema_version: 1
    scenario: retail_l3
    method: mwm                      # mwm | mwm-local | blind | slb:rag | module:Class
    schedule: mw                     # mw | slb (blocks restart per window, as slb run)
    host_model: fireworks/accounts/fireworks/models/...
    learner_model: fireworks/accounts/fireworks/models/...
    learner_backend: codex           # builtin | codex (default: codex when on PATH)
    concurrency: 8
    waiter: after_training           # pipelined | after_training | window_by_window
    allocation_usd: "40"
    backends:                        # extends fireworks/ and vllm/
      fireworks: {base_url: https://api.fireworks.ai/inference/v1,
                  api_key_env: FIREWORKS_API_KEY}
    prices:                          # meters' price format, by the full model name
      schema_version: 1
      date: "2026-11-30"
      models:
        fireworks/accounts/fireworks/models/...: {input_per_mtok: "0.22", ...}

Keys are never in the file: a backend names the variable that holds its key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import msgspec

import meters
from mw_errors import ConfigError

from ._backends import Backend

__all__ = ["LAUNCH_SCHEMA_VERSION", "LaunchConfig", "load_launch_config"]

LAUNCH_SCHEMA_VERSION = 1


class LaunchConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """A checked launch config (see the module's docstring); ``source`` is its file."""

    schema_version: int = LAUNCH_SCHEMA_VERSION
    scenario: str | None = None
    method: str | None = None  # checked when the campaign is: see make_method
    host_model: str | None = None
    learner_model: str | None = None
    judge_model: str | None = None  # a Pitch scenario's LLM judge
    learner_backend: Literal["builtin", "codex"] | None = None
    concurrency: int | None = None
    train_split: int | None = None
    waiter: Literal["pipelined", "after_training", "window_by_window"] | None = None
    schedule: Literal["mw", "slb"] | None = None
    allocation_usd: str | None = None
    max_tokens: int | None = None  # per model call, as the benchmark's ModelConfig.max_tokens
    backends: dict[str, Backend] = {}
    prices: meters.PriceTable | None = None
    source: str = ""


def load_launch_config(path: Path) -> LaunchConfig:
    """Read and check a launch config (``.yaml``, ``.yml`` or ``.json``).

    Raises:
        ConfigError: the file cannot be read, is malformed, or has a field of the wrong kind.
    """
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read launch config {path}: {exc.strerror}") from None
    try:
        if path.suffix in (".yaml", ".yml"):
            raw = msgspec.yaml.decode(data, type=LaunchConfig)
        else:
            raw = msgspec.json.decode(data, type=LaunchConfig)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ConfigError(
            f"launch config {path}: {exc}",
            hint="see the format in docs/design/serve_learn.md",
        ) from None
    if raw.schema_version != LAUNCH_SCHEMA_VERSION:
        raise ConfigError(
            f"launch config {path}: schema_version {raw.schema_version} is not "
            f"{LAUNCH_SCHEMA_VERSION}",
            hint="convert the file to the current schema",
        )
    if raw.concurrency is not None and raw.concurrency < 1:
        raise ConfigError(f"launch config {path}: concurrency must be >= 1")
    if raw.max_tokens is not None and raw.max_tokens < 1:
        raise ConfigError(f"launch config {path}: max_tokens must be >= 1")
    prices = (  # checked as a prices file is: dates, units, ceilings
        meters.parse_prices(msgspec.json.encode(raw.prices), f"launch config {path}: prices")
        if raw.prices is not None
        else None
    )
    return msgspec.structs.replace(raw, prices=prices, source=str(path))
