"""A serve-and-learn grid: scenarios x methods x models, each cell one campaign.

::

    tag: g1                      # the grid's tag; each cell's tag is derived from it
    scenarios: [synthetic_l1]
    methods: [mwm-local, blind]
    models: [local/scripted]     # host models
    learner_models: [...]        # optional: one per host model (default: the same)
    train_split: 48              # any launch-config field applies to every cell
    allocation: 5                # USD, for the whole grid

A cell is one ordinary serve-and-learn campaign, exactly what ``mw serve-learn
run`` runs for it. Its tag is ``<grid>.<scenario>.<method>.<model>`` (the
method's and the model's names with each run of characters a tag cannot hold
as ``-``: ``slb:rag`` is ``slb-rag``), so the same grid file always names the
same cells. How a cell reads (its outcome, the leaderboard) is in ``._grid_board``.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

import msgspec

import meters
from mw_errors import ConfigError

from .._campaign_kind import GridContext, Section
from .._cells import slug, stable_tag
from .._tags import check_scenario, check_tag
from ._campaign import run_campaign
from ._checks import check_campaign
from ._grid_board import (
    Cell,
    CellOutcome,
    cell_lines,
    cells_html,
    cells_section,
    leaderboard_rows,
    read_cell,
    status_line,
)
from ._settings import Flags, launch_spec
from ._spec import CampaignSpec
from ._synthetic import ensure_synthetic

__all__ = ["CELL_FIELDS", "SERVE_LEARN_GRID", "Cell", "GridSpec", "cell_flags", "cell_tag"]

# The launch-config fields a grid may give every cell (the names of `mw serve-learn run`'s
# flags, as Flags holds them).
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
    kind: Literal["serve-learn"] = "serve-learn"
    scenarios: list[str] | None = None
    methods: list[str] | None = None
    models: list[str] | None = None
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


class GridSpec(msgspec.Struct, frozen=True, kw_only=True):
    """A grid, checked: its cells in a stable order, and what each campaign is given."""

    tag: str
    cells: list[Cell]
    allocation_usd: Decimal
    settings: dict[str, Any]  # CELL_FIELDS given, as Flags keywords (paths: str)
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


def cell_flags(grid: GridSpec, cell: Cell) -> Flags:
    """The flags a cell's campaign runs with: the grid's settings, the cell's axes."""
    settings = dict(grid.settings)
    for name in ("config", "dataset"):  # kept as strings in grid.json
        if name in settings:
            settings[name] = Path(settings[name])
    return Flags(
        scenario=cell.scenario,
        method=cell.method,
        model=cell.model,
        learner_model=cell.learner_model,
        # Each cell may spend up to the grid's whole allocation; the grid's one budget,
        # which every cell reserves from, holds them all to it together.
        allocation=meters.usd(grid.allocation_usd),
        **settings,
    )


@dataclasses.dataclass(frozen=True)
class ServeLearnJob:
    """A cell's campaign, as ``mw serve-learn run`` would run it."""

    spec: CampaignSpec

    async def run(self, budget: meters.Reserver) -> None:
        spec = self.spec
        # On a worker the cell's directory may exist from an attempt the driver never
        # saw begin (a node lost mid-start): it is resumed, never begun twice.
        if not spec.resume and (spec.runs / spec.tag).exists():
            spec = dataclasses.replace(spec, resume=True)
        await run_campaign(spec, budget=budget)


class ServeLearnGrid:
    title: str = "a serve-and-learn grid"
    fields: tuple[str, ...] = ("scenarios", "methods", "models", "learner_models", *CELL_FIELDS)
    names: int = 2  # model, method
    grid_type: type[Any] = GridSpec

    def grid(
        self, raw: Mapping[str, Any], source: str, base: Path, allocation: Decimal
    ) -> GridSpec:
        """The serve-and-learn grid ``raw`` names (its paths relative to ``base``), checked.

        Raises:
            ConfigError: a missing axis, a bad name, two cells with one tag.
        """
        try:
            file = msgspec.convert(raw, _GridFile)
        except msgspec.ValidationError as exc:
            names = ", ".join(["tag", "scenarios", "methods", "models", "allocation", *CELL_FIELDS])
            raise ConfigError(
                f"{source} is not a grid: {exc}", hint=f"a serve-and-learn grid's fields: {names}"
            ) from None
        grid = check_tag(file.tag)
        if file.scenarios is None or file.methods is None or file.models is None:
            missing = [f for f in ("scenarios", "methods", "models") if getattr(file, f) is None]
            raise ConfigError(
                f"{source}: a serve-and-learn grid needs {', '.join(missing)}",
                hint="name the scenarios, methods and models the cells are the product of",
            )
        scenarios = [check_scenario(s) for s in _names(file.scenarios, "scenarios")]
        methods = _names(file.methods, "methods")
        models = _names(file.models, "models")
        learners = models if file.learner_models is None else file.learner_models
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
                f"{source}: two cells get the same tag",
                hint="name the methods and models distinctly",
            )
        settings = {n: getattr(file, n) for n in CELL_FIELDS if getattr(file, n) is not None}
        for name in ("config", "dataset"):  # a path in the grid file is relative to the file
            if name in settings:
                settings[name] = str(base / settings[name])
        return GridSpec(
            tag=grid,
            cells=cells,
            allocation_usd=allocation,
            settings=settings,
            runs=str(base / file.runs) if file.runs else None,
            max_parallel=file.max_parallel,
        )

    def check(self, grid: GridSpec, context: GridContext) -> None:
        """Every cell checked as ``mw serve-learn run --check`` checks it.

        In a scratch runs directory: a grid refused for one bad cell leaves nothing behind.
        """
        with tempfile.TemporaryDirectory(prefix="mw-grid-check-") as scratch:
            for cell in grid.cells:
                spec = launch_spec(cell_flags(grid, cell), context.environ, Path(scratch), cell.tag)
                ensure_synthetic(spec.dataset, spec.scenario)
                check_campaign(spec)

    def lay_out(self, grid: GridSpec, root: Path) -> None:
        """Nothing beyond the cells' own directories: each campaign lays out its own."""

    def job(
        self,
        grid: GridSpec,
        cell: Cell,
        root: Path,
        cells: Path,
        *,
        resume: bool,
        context: GridContext,
    ) -> ServeLearnJob:
        spec = launch_spec(cell_flags(grid, cell), context.environ, cells, cell.tag, resume=resume)
        ensure_synthetic(spec.dataset, spec.scenario)
        return ServeLearnJob(spec)

    def outcome(self, grid: GridSpec, cells: Path, cell: Cell) -> CellOutcome:
        return read_cell(cells, cell)

    def lines(self, grid: GridSpec, cells: Path, cell: Cell) -> list[meters.LedgerLine]:
        return cell_lines(cells / cell.tag)

    def leaderboard(
        self, outcomes: Sequence[CellOutcome]
    ) -> tuple[list[str], list[dict[str, str]]]:
        return leaderboard_rows(outcomes)

    def section(self, cells: Sequence[Mapping[str, Any]]) -> Section:
        return cells_section(cells)

    def status_line(self, cell: Mapping[str, Any]) -> str:
        return status_line(cell)

    def html(
        self, outcomes: Sequence[CellOutcome], columns: list[str], rows: list[dict[str, str]]
    ) -> str:
        return cells_html(outcomes)

    def verify(self, cells: Path, outcomes: Sequence[CellOutcome]) -> None:
        """Nothing to check beyond what reading the cells checked."""


SERVE_LEARN_GRID = ServeLearnGrid()
