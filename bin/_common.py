"""What every entry point shares: logging to stderr, and the environment it reads."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import structlog

__all__ = ["bwrap_override", "configure_logging", "git_commit"]


def configure_logging(verbose: bool) -> None:
    """Structlog events go to stderr, so stdout carries only a command's answer."""
    level = logging.DEBUG if verbose else logging.WARNING
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso"),
            structlog.dev.ConsoleRenderer(colors=False),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )


def bwrap_override() -> Path | None:
    """MW_BWRAP names a bubblewrap binary to use instead of the one found."""
    value = os.environ.get("MW_BWRAP")
    return Path(value) if value else None


def git_commit() -> str:
    """The commit of the mw source tree this runs from, or ``unknown``."""
    try:
        done = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return done.stdout.strip() if done.returncode == 0 else "unknown"
