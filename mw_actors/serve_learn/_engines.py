"""The engine that plays a scenario's episodes (its interface: :class:`~._play.Engine`).

- a real scenario (banking_l1, retail_l3, ...) in ServeLearnBench's own
  package and acting loop (:class:`~._slb.SlbScenario`);
- the synthetic scenario (``synthetic_*``) in mw's own loop, from its export
  (:class:`~._synthetic_play.SyntheticScenario`).
"""

from __future__ import annotations

from pathlib import Path

from ._play import Engine
from ._synthetic import is_synthetic

__all__ = ["is_synthetic", "make_engine"]


def make_engine(dataset: Path, scenario: str) -> Engine:
    """The engine that plays ``scenario``.

    Raises:
        ConfigError: a real scenario without the package, or one it does not have.
    """
    if is_synthetic(scenario):
        from ._synthetic_play import SyntheticScenario

        return SyntheticScenario(dataset, scenario)
    from ._slb import SlbScenario

    return SlbScenario(scenario)
