"""The campaign kinds this program runs, by name: the one registry of them.

The daemon, ``mw status``, the status a daemon serves and the grids look a kind
up here (:func:`kind_of`) and ask it (``mw_actors._campaign_kind.CampaignKind``); a
new kind implements that protocol in its own package and adds one line here. Its
runner runs under the lifecycle every kind shares (:func:`run_kind`, given the
kind's :class:`Lifecycle`: lock, resume or start, run, stop meters, end record,
outputs).
"""

from __future__ import annotations

from mw_errors import ConfigError

from ._campaign_kind import (
    Bar,
    CampaignKind,
    CellRunner,
    Context,
    Grid,
    GridContext,
    GridKind,
    Outcome,
    Runner,
    Section,
    State,
    Summary,
    View,
)
from ._core import Record
from ._lifecycle import Lifecycle, Stage, run_kind
from ._reserver import BUDGET_RECORDS
from .editing import EDITING
from .serve_learn import SERVE_LEARN

__all__ = [
    "KINDS",
    "Bar",
    "CampaignKind",
    "CellRunner",
    "Context",
    "Grid",
    "GridContext",
    "GridKind",
    "Lifecycle",
    "Outcome",
    "Runner",
    "Section",
    "Stage",
    "State",
    "Summary",
    "View",
    "campaign_records",
    "kind_of",
    "run_kind",
]

KINDS: dict[str, CampaignKind] = {kind.name: kind for kind in (SERVE_LEARN, EDITING)}


def kind_of(name: str) -> CampaignKind:
    """The kind called ``name``.

    Raises:
        ConfigError: no kind of that name is registered.
    """
    kind = KINDS.get(name)
    if kind is None:
        raise ConfigError(
            f"unknown campaign kind {name!r}", hint=f"use one of: {', '.join(sorted(KINDS))}"
        )
    return kind


def campaign_records() -> list[type[Record]]:
    """Every record a campaign journal of any registered kind may hold."""
    found: list[type[Record]] = [*BUDGET_RECORDS]
    for kind in KINDS.values():
        found += [r for r in kind.records if r not in found]
    return found
