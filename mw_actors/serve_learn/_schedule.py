"""The serve-and-learn schedule: blocks of 12 in stream order, and each window's test version.

Serving case i (0-based) runs against v(i // 12), the version learned from
i // 12 blocks. Window w is tested on v(floor(p_w / 12)), where p_w is the
stream position (1-based) of w's last serving case; up to 11 of its cases may
be unlearned then. ``train_split`` keeps a prefix of the stream for smoke runs.
"""

from __future__ import annotations

import msgspec

from mw_errors import ConfigError

from ._scenario import Scenario, Task

__all__ = ["BLOCK_SIZE", "Plan", "WindowPlan", "plan"]

BLOCK_SIZE = 12


class WindowPlan(msgspec.Struct, frozen=True):
    window: int
    serving: int
    test: int
    last_position: int
    test_version: int
    unlearned: int


class Plan(msgspec.Struct, frozen=True):
    scenario: str
    block_size: int
    serving_total: int
    test_total: int
    windows: list[WindowPlan]
    # A method that does not learn serves nothing: every window is tested on v0.
    learns: bool = True

    @property
    def blocks(self) -> int:
        """Blocks the learner turns into versions (a last partial block is not learned)."""
        return self.serving_total // self.block_size if self.learns else 0

    def serving_version(self, index: int) -> int:
        """The version serving case ``index`` (0-based) runs against."""
        return index // self.block_size


def plan(
    scenario: Scenario,
    train_split: int | None = None,
    block_size: int = BLOCK_SIZE,
    *,
    learns: bool = True,
) -> Plan:
    """The schedule of ``scenario``, on the first ``train_split`` serving cases if given.

    For a method that does not ``learns``, the stream's windows are tested on v0
    and nothing is served, as ServeLearnBench's runner does.

    Raises:
        ConfigError: ``train_split`` is not a positive number of cases.
    """
    serving: list[Task] = scenario.serving
    if train_split is not None:
        if train_split < 1:
            raise ConfigError(f"train split {train_split} must be a positive number of cases")
        serving = serving[:train_split]
    windows = []
    for window in sorted(w.window for w in scenario.windows):
        mine = [t for t in serving if t.window == window]
        if not mine:
            continue
        last = max(t.timestamp for t in mine)
        version = last // block_size if learns else 0
        windows.append(
            WindowPlan(
                window=window,
                serving=len(mine),
                test=sum(t.window == window for t in scenario.test),
                last_position=last,
                test_version=version,
                unlearned=last - version * block_size if learns else 0,
            )
        )
    return Plan(
        scenario=scenario.name,
        block_size=block_size,
        serving_total=len(serving),
        test_total=sum(w.test for w in windows),
        windows=windows,
        learns=learns,
    )
