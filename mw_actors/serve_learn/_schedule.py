"""The serve-and-learn schedule: which block each served case is in, and each window's test version.

Two schedules:

- ``mw`` (the seed's): blocks of 12 across the stream. Serving case i
  (0-based) runs against v(i // 12), the version learned from i // 12 blocks.
  Window w is tested on v(floor(p_w / 12)), where p_w is the stream position
  (1-based) of w's last serving case; up to 11 of its cases may be unlearned
  then. A last partial block is served and not learned.
- ``slb`` (ServeLearnBench's runner's): blocks restart at each window, so a
  window's last block may be short, and every block is learned; window w is
  tested on the version learned from every block up to its last one.

Block k's cases always run against v(k). ``train_split`` keeps a prefix of the
stream for smoke runs.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from mw_errors import ConfigError

from ._scenario import Scenario, Task

__all__ = ["BLOCK_SIZE", "SCHEDULES", "Plan", "Schedule", "WindowPlan", "plan"]

Schedule = Literal["mw", "slb"]
SCHEDULES: tuple[Schedule, ...] = ("mw", "slb")

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
    schedule: Schedule = "mw"
    # Where each block ends in the served prefix (exclusive, 0-based), in order: the
    # last partial block of the mw schedule included (it is served, not learned).
    block_ends: list[int] = []

    @property
    def blocks(self) -> int:
        """Blocks the learner turns into versions (mw: a last partial block is not learned)."""
        if not self.learns:
            return 0
        if self.schedule == "slb":
            return len(self.block_ends)
        return self.serving_total // self.block_size

    def describe(self) -> str:
        """The plan as ``mw serve-learn plan`` prints it: a line, then one per window."""
        lines = [
            f"{self.scenario}: {self.serving_total} serving cases in {len(self.block_ends)} "
            f"blocks of up to {self.block_size} ({self.schedule} schedule), "
            f"{self.test_total} test cases"
        ]
        lines += [
            f"  window {w.window}: {w.serving} serving, {w.test} test, last position "
            f"{w.last_position}, tested on v{w.test_version} ({w.unlearned} unlearned)"
            for w in self.windows
        ]
        return "\n".join(lines)

    def block_start(self, block: int) -> int:
        """The index (0-based) in the stream of block ``block``'s first case."""
        return self.block_ends[block - 1] if block else 0

    def serving_version(self, index: int) -> int:
        """The version serving case ``index`` (0-based) runs against: its block's number."""
        return next(k for k, end in enumerate(self.block_ends) if index < end)


def _block_ends(serving: list[Task], block_size: int, schedule: Schedule) -> list[int]:
    if schedule == "mw":
        return [min(end, len(serving)) for end in range(block_size, len(serving) + block_size,
                                                        block_size)]  # fmt: skip
    ends, start = [], 0
    for window in dict.fromkeys(t.window for t in serving):
        mine = sum(t.window == window for t in serving)
        ends += [min(start + i + block_size, start + mine) for i in range(0, mine, block_size)]
        start += mine
    return ends


def plan(
    scenario: Scenario,
    train_split: int | None = None,
    block_size: int = BLOCK_SIZE,
    *,
    learns: bool = True,
    schedule: Schedule = "mw",
) -> Plan:
    """The ``schedule`` of ``scenario``, on the first ``train_split`` serving cases if given.

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
    ends = _block_ends(serving, block_size, schedule) if learns else []
    windows = []
    for window in sorted(w.window for w in scenario.windows):
        mine = [t for t in serving if t.window == window]
        if not mine:
            continue
        last = max(t.timestamp for t in mine)
        if not learns:
            version = 0
        elif schedule == "slb":  # every block up to the window's last one
            version = sum(1 for end in ends if end <= last)
        else:
            version = last // block_size
        learned = ends[version - 1] if version else 0
        windows.append(
            WindowPlan(
                window=window,
                serving=len(mine),
                test=sum(t.window == window for t in scenario.test),
                last_position=last,
                test_version=version,
                unlearned=last - learned if learns else 0,
            )
        )
    return Plan(
        scenario=scenario.name,
        block_size=block_size,
        serving_total=len(serving),
        test_total=sum(w.test for w in windows),
        windows=windows,
        learns=learns,
        schedule=schedule,
        block_ends=ends,
    )
