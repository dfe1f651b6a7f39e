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


def check_tag(tag: object) -> str:
    """``tag``, if it is one; else ConfigError.

    Raises:
        ConfigError: not 1 to 128 letters, digits, ``.``, ``_`` or ``-`` starting
            with a letter or a digit.
    """
    if not isinstance(tag, str) or not TAG_PATTERN.fullmatch(tag):
        raise ConfigError(
            f"tag {tag!r} is not a run name",
            hint="a tag is 1-128 letters, digits, '.', '_' or '-', starting with a letter "
            "or a digit",
        )
    return tag


def check_scenario(name: object) -> str:
    """``name``, if it can name a scenario; else ConfigError.

    Raises:
        ConfigError: not a plain path segment, by the rule of :func:`check_tag`.
    """
    if not isinstance(name, str) or not TAG_PATTERN.fullmatch(name):
        raise ConfigError(
            f"scenario {name!r} is not a scenario name",
            hint="a scenario is named as ServeLearnBench names them (banking_l1, pitch_l3) "
            "or synthetic_<name>: letters, digits, '.', '_' or '-'",
        )
    return name
