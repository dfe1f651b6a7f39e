"""Child and supervisor specifications: frozen, validated at construction.

Bad input (an unknown strategy, a negative intensity, a permanent significant
child, duplicate ids) fails here with a :class:`~mw_errors.ConfigError`, not at
the first failure hours into a campaign.
"""

from __future__ import annotations

import enum
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from mw_errors import ConfigError

if TYPE_CHECKING:
    from ._actor import Actor

__all__ = [
    "BRUTAL_KILL",
    "AutoShutdown",
    "Backoff",
    "ChildSpec",
    "Restart",
    "RetryLater",
    "Strategy",
    "SupervisorSpec",
]

BRUTAL_KILL: Literal["brutal_kill"] = "brutal_kill"

E = TypeVar("E", bound=enum.Enum)


class Strategy(enum.Enum):
    ONE_FOR_ONE = "one_for_one"
    ONE_FOR_ALL = "one_for_all"
    REST_FOR_ONE = "rest_for_one"
    SIMPLE_ONE_FOR_ONE = "simple_one_for_one"


class Restart(enum.Enum):
    PERMANENT = "permanent"  # always restarted
    TRANSIENT = "transient"  # restarted only after an abnormal exit (error, killed)
    TEMPORARY = "temporary"  # never restarted


class AutoShutdown(enum.Enum):
    NEVER = "never"
    ANY_SIGNIFICANT = "any_significant"
    ALL_SIGNIFICANT = "all_significant"


def _coerce(enum_type: type[E], value: E | str, what: str) -> E:
    if isinstance(value, enum_type):
        return value
    try:
        return enum_type(value)
    except ValueError:
        names = ", ".join(str(m.value) for m in enum_type)
        raise ConfigError(f"unknown {what} {value!r}; use one of: {names}") from None


def _positive(value: float, what: str, *, zero_ok: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        raise ConfigError(f"{what} must be a number, got {value!r}")
    if value < 0 or (value == 0 and not zero_ok):
        raise ConfigError(f"{what} must be {'>= 0' if zero_ok else '> 0'}, got {value!r}")


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with jitter between restarts of a failing child.

    The n-th consecutive restart waits ``min(maximum, initial * factor**(n-1))``,
    scaled by a random factor in ``[1 - jitter, 1 + jitter]``. A child that
    stays up for ``reset_after`` seconds starts again from ``initial``.
    """

    initial: float = 0.5
    factor: float = 2.0
    maximum: float = 30.0
    jitter: float = 0.1
    reset_after: float = 60.0
    seed: int | None = None
    _rng: random.Random = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _positive(self.initial, "backoff initial")
        _positive(self.maximum, "backoff maximum")
        _positive(self.reset_after, "backoff reset_after")
        if not isinstance(self.factor, int | float) or self.factor < 1:
            raise ConfigError(f"backoff factor must be >= 1, got {self.factor!r}")
        if not isinstance(self.jitter, int | float) or not 0 <= self.jitter < 1:
            raise ConfigError(f"backoff jitter must be in [0, 1), got {self.jitter!r}")
        object.__setattr__(self, "_rng", random.Random(self.seed))

    def delay(self, attempt: int) -> float:
        """Seconds to wait before restart number ``attempt`` (1-based)."""
        base = min(self.maximum, self.initial * self.factor ** max(0, attempt - 1))
        if self.jitter:
            base *= self._rng.uniform(1 - self.jitter, 1 + self.jitter)
        return base


@dataclass(frozen=True)
class RetryLater:
    """On exceeded restart intensity, wait ``delay`` seconds and start over.

    The alternative to giving up, for campaigns that run for hours.
    """

    delay: float

    def __post_init__(self) -> None:
        _positive(self.delay, "retry delay")


@dataclass(frozen=True)
class ChildSpec:
    """How to start, restart and stop one child.

    ``start`` is called with ``args`` (plus, for ``simple_one_for_one``, the
    arguments given to ``start_child``) and returns a new :class:`Actor` for
    each run. ``shutdown`` is seconds to wait after asking the child to stop
    before cancelling it outright, or ``BRUTAL_KILL``.
    """

    id: str
    start: Callable[..., Actor[Any]]
    args: tuple[Any, ...] = ()
    restart: Restart | str = Restart.PERMANENT
    shutdown: float | Literal["brutal_kill"] = 5.0
    significant: bool = False
    start_timeout: float = 5.0
    mailbox_capacity: int = 1000

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id or "/" in self.id:
            raise ConfigError(f"child id must be a non-empty string without '/', got {self.id!r}")
        if not callable(self.start):
            raise ConfigError(f"child {self.id!r}: start must be callable, got {self.start!r}")
        object.__setattr__(self, "restart", _coerce(Restart, self.restart, "restart type"))
        if self.shutdown != BRUTAL_KILL:
            _positive(self.shutdown, f"child {self.id!r}: shutdown timeout", zero_ok=True)
        _positive(self.start_timeout, f"child {self.id!r}: start_timeout")
        if not isinstance(self.mailbox_capacity, int) or self.mailbox_capacity < 1:
            raise ConfigError(
                f"child {self.id!r}: mailbox_capacity must be an integer >= 1, "
                f"got {self.mailbox_capacity!r}"
            )
        if self.significant and self.restart is Restart.PERMANENT:
            raise ConfigError(
                f"child {self.id!r}: a significant child must be transient or temporary",
                hint="a permanent child is always restarted, so it can never end its supervisor",
            )

    @property
    def restart_type(self) -> Restart:
        assert isinstance(self.restart, Restart)
        return self.restart


@dataclass(frozen=True)
class SupervisorSpec:
    """A supervisor's flags and its (static) children, in start order."""

    strategy: Strategy | str = Strategy.ONE_FOR_ONE
    children: Sequence[ChildSpec] = ()
    intensity: int = 3
    period: float = 5.0
    auto_shutdown: AutoShutdown | str = AutoShutdown.NEVER
    backoff: Backoff | None = None
    on_exhausted: Literal["escalate"] | RetryLater = "escalate"

    def __post_init__(self) -> None:
        object.__setattr__(self, "strategy", _coerce(Strategy, self.strategy, "strategy"))
        object.__setattr__(
            self, "auto_shutdown", _coerce(AutoShutdown, self.auto_shutdown, "auto_shutdown")
        )
        object.__setattr__(self, "children", tuple(self.children))
        if isinstance(self.intensity, bool) or not isinstance(self.intensity, int):
            raise ConfigError(f"restart intensity must be an integer, got {self.intensity!r}")
        if self.intensity < 0:
            raise ConfigError(f"restart intensity must be >= 0, got {self.intensity}")
        _positive(self.period, "restart period")
        if not (self.on_exhausted == "escalate" or isinstance(self.on_exhausted, RetryLater)):
            raise ConfigError(
                f"on_exhausted must be 'escalate' or RetryLater(delay), got {self.on_exhausted!r}"
            )
        if self.backoff is not None and not isinstance(self.backoff, Backoff):
            raise ConfigError(f"backoff must be a Backoff, got {self.backoff!r}")
        for child in self.children:
            if not isinstance(child, ChildSpec):
                raise ConfigError(f"children must be ChildSpec objects, got {child!r}")
        ids = [c.id for c in self.children]
        if len(set(ids)) != len(ids):
            dupes = sorted({i for i in ids if ids.count(i) > 1})
            raise ConfigError(f"duplicate child ids: {', '.join(dupes)}")
        if self.strategy is Strategy.SIMPLE_ONE_FOR_ONE and len(self.children) != 1:
            raise ConfigError(
                "simple_one_for_one takes exactly one child spec, the template for "
                f"dynamic children; got {len(self.children)}"
            )

    @property
    def strategy_kind(self) -> Strategy:
        assert isinstance(self.strategy, Strategy)
        return self.strategy

    @property
    def auto_shutdown_kind(self) -> AutoShutdown:
        assert isinstance(self.auto_shutdown, AutoShutdown)
        return self.auto_shutdown
