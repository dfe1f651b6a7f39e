"""Bad input fails at construction with a clear, one-line error."""

from __future__ import annotations

import math
from typing import Any

import pytest

import mw_actors as mw


def _actor() -> mw.Actor[Any]:
    return mw.Actor()


OK = mw.ChildSpec(id="ok", start=_actor)

BAD_SUPERVISORS: list[tuple[dict[str, Any], str]] = [
    ({"strategy": "one_for_some"}, "unknown strategy 'one_for_some'; use one of: one_for_one"),
    ({"intensity": -1}, "restart intensity must be >= 0"),
    ({"intensity": 1.5}, "restart intensity must be an integer"),
    ({"period": 0}, "restart period must be > 0"),
    ({"period": math.nan}, "restart period must be a number"),
    ({"auto_shutdown": "sometimes"}, "unknown auto_shutdown 'sometimes'"),
    ({"on_exhausted": "retry"}, "on_exhausted must be 'escalate' or RetryLater"),
    ({"children": [OK, OK]}, "duplicate child ids: ok"),
    ({"children": ["worker"]}, "children must be ChildSpec objects"),
    ({"strategy": "simple_one_for_one"}, "simple_one_for_one takes exactly one child spec"),
    ({"backoff": 3}, "backoff must be a Backoff"),
]


@pytest.mark.parametrize(("kwargs", "message"), BAD_SUPERVISORS)
def test_bad_supervisor_specs(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(mw.ConfigError, match=message.replace("(", r"\(")) as info:
        mw.SupervisorSpec(**kwargs)
    assert "\n" not in info.value.render()


BAD_CHILDREN: list[tuple[dict[str, Any], str]] = [
    ({"id": ""}, "child id must be a non-empty string"),
    ({"id": "a/b"}, "without '/'"),
    ({"start": "Worker"}, "start must be callable"),
    ({"restart": "sometimes"}, "unknown restart type 'sometimes'"),
    ({"shutdown": -1}, "shutdown timeout must be >= 0"),
    ({"shutdown": "gently"}, "shutdown timeout must be a number"),
    ({"start_timeout": 0}, "start_timeout must be > 0"),
    ({"mailbox_capacity": 0}, "mailbox_capacity must be an integer >= 1"),
    ({"significant": True}, "a significant child must be transient or temporary"),
]


@pytest.mark.parametrize(("kwargs", "message"), BAD_CHILDREN)
def test_bad_child_specs(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(mw.ConfigError, match=message):
        mw.ChildSpec(**{"id": "c", "start": _actor, **kwargs})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"initial": 0}, "backoff initial must be > 0"),
        ({"factor": 0.5}, "backoff factor must be >= 1"),
        ({"jitter": 1}, r"backoff jitter must be in \[0, 1\)"),
    ],
)
def test_bad_backoff(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(mw.ConfigError, match=message):
        mw.Backoff(**kwargs)


def test_retry_later_needs_a_positive_delay() -> None:
    with pytest.raises(mw.ConfigError, match="retry delay must be > 0"):
        mw.RetryLater(delay=0)


def test_enum_values_are_accepted_as_strings() -> None:
    spec = mw.SupervisorSpec(strategy="rest_for_one", auto_shutdown="any_significant")
    assert spec.strategy is mw.Strategy.REST_FOR_ONE
    assert mw.ChildSpec(id="x", start=_actor, restart="transient").restart is mw.Restart.TRANSIENT


def test_backoff_delays() -> None:
    backoff = mw.Backoff(initial=1, factor=2, maximum=10, jitter=0.5, seed=7)
    delays = [backoff.delay(n) for n in range(1, 8)]
    for n, delay in enumerate(delays, start=1):
        base = min(10, 2 ** (n - 1))
        assert base * 0.5 <= delay <= base * 1.5
