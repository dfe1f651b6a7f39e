"""A grid file, read and checked: scenarios x methods x models, and what every cell shares.

::

    tag: g1                      # the grid's tag; each cell's tag is derived from it
    scenarios: [synthetic_l1]
    methods: [mwm-local, blind]
    models: [local/scripted]     # host models
    learner_models: [...]        # optional: one per host model (default: the same)
    train_split: 48              # any launch-config field applies to every cell
    allocation: 5                # USD, for the whole grid

``kind: editing`` makes a weight-editing grid instead (students x arms x seeds,
see ._editing); ``._grid_file`` reads a file and hands it to the kind it names.

A cell is one ordinary serve-and-learn campaign. Its tag is
``<grid>.<scenario>.<method>.<model>`` (the method's and the model's names with
each run of characters a tag cannot hold as ``-``: ``slb:rag`` is ``slb-rag``),
so the same grid file always names the same cells.
"""

from __future__ import annotations

import hashlib
import re
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

import msgspec

from mw_errors import ConfigError

from .._tags import check_scenario, check_tag

__all__ = ["CELL_FIELDS", "Cell", "GridSpec", "cell_tag", "serve_learn_grid", "slug"]

# The launch-config fields a grid may give every cell (the names of `mw serve-learn run`'s
# flags, as serve_learn.Flags holds them).
CELL_FIELDS = (
    "config",
    "dataset",
    "train_split",
    "concurrency",
    "waiter",
    "schedule",
    "provider_latency",
    "reasoning_effort",
    "max_tokens",
    "learner_backend",
    "judge_model",
)


class _GridFile(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    tag: str
    allocation: str | int | float
    kind: Literal["serve-learn", "editing"] = "serve-learn"
    scenarios: list[str] | None = None
    methods: list[str] | None = None
    models: list[str] | None = None
    # an editing grid's (see ._editing): its config is then a wsm benchmark config
    arms: list[str] | None = None
    seeds: list[int] | None = None
    students: list[str] | None = None
    learner_models: list[str] | None = None
    runs: str | None = None  # storage every node shares (an executor's cells write there)
    max_parallel: int | None = None
    config: str | None = None
    dataset: str | None = None  # a ServeLearnBench dataset/ folder (slb export-data)
    train_split: int | None = None
    concurrency: int | None = None
    waiter: str | None = None
    schedule: str | None = None
    provider_latency: str | None = None
    reasoning_effort: str | None = None
    max_tokens: int | None = None
    learner_backend: str | None = None
    judge_model: str | None = None


class Cell(msgspec.Struct, frozen=True):
    """One campaign of the grid."""

    tag: str
    scenario: str
    method: str
    model: str
    learner_model: str


class GridSpec(msgspec.Struct, frozen=True, kw_only=True):
    """A grid, checked: its cells in a stable order, and what each campaign is given."""

    tag: str
    cells: list[Cell]
    allocation_usd: Decimal
    settings: dict[str, Any]  # CELL_FIELDS given, as serve_learn.Flags keywords (paths: str)
    runs: str | None = None  # absolute (grid.json holds plain strings)
    max_parallel: int | None = None
    kind: Literal["serve-learn"] = "serve-learn"

    def identity(self) -> dict[str, Any]:
        """What a resume must find unchanged: the cells, the settings, the allocation."""
        return {
            "cells": [c.tag for c in self.cells],
            "settings": msgspec.to_builtins(self.settings),
            "allocation_usd": str(self.allocation_usd),
        }


_NOT_IN_TAG = re.compile(r"[^A-Za-z0-9._-]+")


def slug(name: str, fallback: str) -> str:
    """``name`` with every run of characters a tag cannot hold as one ``-``."""
    return _NOT_IN_TAG.sub("-", name).strip("-.") or fallback


def stable_tag(parts: list[str]) -> str:
    """``parts`` joined by ``.``: a valid run name, over 128 characters cut with a digest."""
    tag = ".".join(parts)
    if len(tag) > 128:  # still stable, and still distinct: a digest of the whole name
        digest = hashlib.sha256(tag.encode()).hexdigest()[:12]
        tag = f"{tag[:115]}.{digest}"
    return check_tag(tag)


def cell_tag(grid: str, scenario: str, method: str, model: str, learner_model: str) -> str:
    """The cell's tag: stable for the same grid and cell, and a valid run name."""
    name = model if learner_model == model else f"{model}.{learner_model}"
    return stable_tag([grid, scenario, slug(method, "method"), slug(name, "model")])


def _names(value: list[str], field: str) -> list[str]:
    if not value:
        raise ConfigError(f"the grid's {field} list is empty", hint=f"name at least one of {field}")
    bad = [v for v in value if not isinstance(v, str) or not v]
    if bad or len(set(value)) != len(value):
        raise ConfigError(
            f"the grid's {field} must be distinct names", hint=f"fix {field}: {value!r}"
        )
    return value


def serve_learn_grid(raw: _GridFile, source: str, base: Path, allocation: Decimal) -> GridSpec:
    """The serve-and-learn grid ``raw`` names (its paths relative to ``base``), checked.

    Raises:
        ConfigError: a field of the other kind, a missing axis, two cells with one tag.
    """
    grid = check_tag(raw.tag)
    editing = [f for f in ("arms", "seeds", "students") if getattr(raw, f) is not None]
    if editing:
        raise ConfigError(
            f"{source}: {', '.join(editing)} belong to an editing grid",
            hint="add kind: editing for a grid of wsm benchmark runs, or remove them",
        )
    if raw.scenarios is None or raw.methods is None or raw.models is None:
        missing = [f for f in ("scenarios", "methods", "models") if getattr(raw, f) is None]
        raise ConfigError(
            f"{source}: a serve-and-learn grid needs {', '.join(missing)}",
            hint="name the scenarios, methods and models the cells are the product of",
        )
    scenarios = [check_scenario(s) for s in _names(raw.scenarios, "scenarios")]
    methods = _names(raw.methods, "methods")
    models = _names(raw.models, "models")
    learners = models if raw.learner_models is None else raw.learner_models
    if len(learners) != len(models):
        raise ConfigError(
            f"{source}: learner_models has {len(learners)} names for {len(models)} models",
            hint="give one learner model per host model, in the same order, or none",
        )
    cells = [
        Cell(cell_tag(grid, s, m, host, learner), s, m, host, learner)
        for s in scenarios
        for m in methods
        for host, learner in zip(models, learners, strict=True)
    ]
    tags = [c.tag for c in cells]
    if len(set(tags)) != len(tags):
        raise ConfigError(
            f"{source}: two cells get the same tag", hint="name the methods and models distinctly"
        )
    settings = {name: getattr(raw, name) for name in CELL_FIELDS if getattr(raw, name) is not None}
    for name in ("config", "dataset"):  # a path in the grid file is relative to the file
        if name in settings:
            settings[name] = str(base / settings[name])
    return GridSpec(
        tag=grid,
        cells=cells,
        allocation_usd=allocation,
        settings=settings,
        runs=str(base / raw.runs) if raw.runs else None,
        max_parallel=raw.max_parallel,
    )
