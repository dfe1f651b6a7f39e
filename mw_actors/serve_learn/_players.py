"""The player of a scenario's episodes (its interface: :class:`~._play.Player`).

"Player", not "engine": the provider's model engine (``mw_actors.provider``) is the
other thing mw calls an engine.

- a real scenario (banking_l1, retail_l3, ...) in ServeLearnBench's own
  package and acting loop (:class:`~._slb.SlbScenario`);
- the synthetic scenario (``synthetic_*``) in mw's own loop, from its export
  (:class:`~._synthetic_play.SyntheticScenario`).
"""

from __future__ import annotations

from pathlib import Path

from ._play import Player
from ._synthetic import is_synthetic

__all__ = ["is_synthetic", "make_player"]


def make_player(dataset: Path, scenario: str) -> Player:
    """The player of ``scenario``'s episodes.

    Raises:
        ConfigError: a real scenario without the package, or one it does not have.
    """
    if is_synthetic(scenario):
        from ._synthetic_play import SyntheticScenario

        return SyntheticScenario(dataset, scenario)
    from ._slb import SlbScenario

    return SlbScenario(scenario)
