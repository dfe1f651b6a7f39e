"""A local OpenAI-compatible provider on loopback, for offline runs, tests and benchmarks.

async with anyio.create_task_group() as tg:
    port = await tg.start(serve_provider, Provider(ScriptedEngine(), FaultPlan()))
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio.abc

from meters import serve_http
from mw_errors import ConfigError

from .._smollm2 import smollm2_gguf
from ._engine import Engine, Reply, ScriptedEngine, ToolCall, Turn
from ._faults import FAULTS, FaultPlan, Latency
from ._openai import Provider, ProviderStatistics
from ._smollm2 import SmolLM2Engine
from ._synthetic_host import SyntheticHost
from ._synthetic_learner import SyntheticLearner
from ._tokenizer import Tokens, smollm2_tokens

LOCAL_PRICES = Path(__file__).with_name("local_prices.json")
"""Synthetic prices for the local provider's models, so offline runs are metered like real ones."""

__all__ = [
    "FAULTS",
    "LOCAL_PRICES",
    "Engine",
    "FaultPlan",
    "Latency",
    "Provider",
    "ProviderStatistics",
    "Reply",
    "ScriptedEngine",
    "SmolLM2Engine",
    "SyntheticHost",
    "SyntheticLearner",
    "Tokens",
    "ToolCall",
    "Turn",
    "make_engine",
    "serve_provider",
    "smollm2_gguf",
    "smollm2_tokens",
]


async def serve_provider(
    provider: Provider,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    task_status: anyio.abc.TaskStatus[Any] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``provider`` until cancelled; report the bound port through ``task_status``."""
    await serve_http(provider, host=host, port=port, task_status=task_status)


ENGINES = ("scripted", "synthetic-host", "synthetic-learner", "smollm2")


def make_engine(
    name: str,
    *,
    script: Path | None = None,
    model_dir: Path | None = None,
    max_new_tokens: int = 128,
) -> Engine:
    """The engine called ``name`` (one of :data:`ENGINES`).

    ``scripted`` plays ``script`` if given; ``smollm2`` loads its safetensors
    snapshot from ``model_dir``.

    Raises:
        ConfigError: an unknown engine, or a script for another engine than ``scripted``.
    """
    if script is not None and name != "scripted":
        raise ConfigError("--script is for the scripted engine", hint="drop --script")
    if name == "scripted":
        return ScriptedEngine.from_file(script) if script is not None else ScriptedEngine()
    if name == "synthetic-host":
        return SyntheticHost()
    if name == "synthetic-learner":
        return SyntheticLearner()
    if name == "smollm2":
        if model_dir is None:
            raise ConfigError("the smollm2 engine needs its snapshot's folder", hint="--model-dir")
        return SmolLM2Engine.load(model_dir, max_new_tokens=max_new_tokens)
    raise ConfigError(f"unknown engine {name!r}", hint=f"use one of {', '.join(ENGINES)}")
