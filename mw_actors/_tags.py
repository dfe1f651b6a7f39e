"""A campaign's tag and its scenario's name: path segments, checked in one place.

A tag becomes a directory under the runs directory, a registry entry of the
daemon and a field of every status; so it is one plain path segment, and
every entry point (the CLI, the daemon's requests, a :class:`CampaignSpec`
built by an embedding program) refuses anything else before it touches a file.
A scenario's name names folders of its dataset and the results file, so it
follows the same rule.
"""

from __future__ import annotations

import re

from mw_errors import ConfigError

__all__ = ["TAG_PATTERN", "check_scenario", "check_tag"]

TAG_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def _segment(what: str, value: object, refused: str, hint: str) -> str:
    """``value`` if it is one plain path segment (``TAG_PATTERN``); else ConfigError."""
    if not isinstance(value, str) or not TAG_PATTERN.fullmatch(value):
        raise ConfigError(f"{what} {value!r} {refused}", hint=hint)
    return value


def check_tag(tag: object) -> str:
    """``tag``, if it is one; else ConfigError.

    Raises:
        ConfigError: not 1 to 128 letters, digits, ``.``, ``_`` or ``-`` starting
            with a letter or a digit.
    """
    hint = "a tag is 1-128 letters, digits, '.', '_' or '-', starting with a letter or a digit"
    return _segment("tag", tag, "is not a run name", hint)


def check_scenario(name: object) -> str:
    """``name``, if it can name a scenario; else ConfigError.

    Raises:
        ConfigError: not a plain path segment, by the rule of :func:`check_tag`.
    """
    hint = (
        "a scenario is named as ServeLearnBench names them (banking_l1, pitch_l3) "
        "or synthetic_<name>: letters, digits, '.', '_' or '-'"
    )
    return _segment("scenario", name, "is not a scenario name", hint)
