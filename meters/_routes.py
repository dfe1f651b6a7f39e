"""What a meter forwards: an allow-list of endpoints, each with its metering rule.

A request reaches the upstream only through one of these routes, matched
exactly on its method and its checked path. The target is checked once,
here: a path with a fragment, a dot segment, an empty segment (a trailing
slash among them), a percent-encoded character, or a byte that is not
printable ASCII is refused with 400 before anything else looks at it, so no
spelling of a path can reach the upstream under a name the meter does not
meter. Everything else is refused with 404. The query string, if any, is
forwarded as it came.
"""

from __future__ import annotations

from typing import Literal

__all__ = ["ROUTES", "BadTarget", "Rule", "route_listing", "split_target"]

# chat / responses: priced, reserved by their worst case, settled by their usage.
# free: reserved at $0 (so refused while the allocation is overdrawn), charged $0.
Rule = Literal["chat", "responses", "free"]

ROUTES: dict[tuple[str, str], Rule] = {
    ("POST", "/v1/chat/completions"): "chat",
    ("POST", "/v1/responses"): "responses",
    ("GET", "/v1/models"): "free",  # the key probe of SDKs and Codex CLI
}


class BadTarget(ValueError):
    """A request target that is not one plain path (the message says why)."""


def split_target(target: str) -> tuple[str, str]:
    """The checked path of ``target`` and its query (``""`` if none).

    Raises:
        BadTarget: not an origin-form target, or a path spelled in a way that
            could name one endpoint as another.
    """
    if not target.startswith("/"):
        raise BadTarget("the target must be a path that starts with /")
    if not (target.isascii() and target.isprintable()):
        raise BadTarget("the target holds a control or non-ASCII character")
    if "#" in target:
        raise BadTarget("the target holds a fragment (#)")
    path, _, query = target.partition("?")
    if "%" in path:
        raise BadTarget("the path holds a percent-encoded character")
    segments = path.split("/")[1:]
    if "" in segments:
        raise BadTarget("the path holds an empty segment or ends with /")
    if "." in segments or ".." in segments:
        raise BadTarget("the path holds a dot segment")
    return path, query


def route_listing() -> str:
    """The allow-list, for an error message."""
    return ", ".join(f"{method} {path}" for method, path in ROUTES)
