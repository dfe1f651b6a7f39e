"""mw's event loggers, with structlog imported at the first event, not at import.

``import structlog`` loads its console renderer, and with it rich and pygments
when they are installed (about 50 ms): a cost that a program embedding
mw_actors pays at ``import mw_actors`` whether or not it ever logs. A logger
from :func:`get_logger` is structlog's own, made when first used, so it follows
whatever ``structlog.configure`` said before that (the CLI's, or the host
program's).
"""

from __future__ import annotations

from typing import Any

__all__ = ["get_logger"]


class _Logger:
    """A named structlog logger, made at its first use."""

    __slots__ = ("_logger", "_name")

    def __init__(self, name: str) -> None:
        self._name = name
        self._logger: Any = None

    def __getattr__(self, attribute: str) -> Any:
        logger = self._logger
        if logger is None:
            import structlog

            logger = self._logger = structlog.get_logger(self._name)
        return getattr(logger, attribute)

    def __repr__(self) -> str:
        return f"<mw logger {self._name!r}>"


def get_logger(name: str) -> Any:
    """The logger ``name``: ``log.info("event", key=value)``, ``log.bind(...)``, as structlog's."""
    return _Logger(name)
