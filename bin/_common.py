"""What every entry point shares: logging to stderr, and the environment it reads."""

from __future__ import annotations

import argparse
import errno
import logging
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from mw_errors import ConfigError

if TYPE_CHECKING:
    from mw_actors.editing import CampaignOptions, Loaded

__all__ = [
    "absolute_path",
    "bwrap_override",
    "configure_logging",
    "editing_options",
    "git_commit",
    "run_command",
]


def configure_logging(verbose: bool) -> None:
    """Structlog events go to stderr, so stdout carries only a command's answer.

    Tracebacks are plain: a frame's local variables (a request's headers and
    body, a config's key) never reach a log.
    """
    level = logging.DEBUG if verbose else logging.WARNING
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso"),
            structlog.dev.ConsoleRenderer(
                colors=False, exception_formatter=structlog.dev.plain_traceback
            ),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )


def absolute_path(value: str) -> Path:
    """A path flag, made absolute once, at parse time, against the caller's directory.

    What a command hands on (to a daemon, a campaign, a child process, a journal)
    is this path, so it means the same wherever that runs.
    """
    return Path(os.path.abspath(os.path.expanduser(value)))


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


def _first_leaf(group: BaseExceptionGroup[Any]) -> Any:
    leaf: BaseException = group
    while isinstance(leaf, BaseExceptionGroup):
        leaf = leaf.exceptions[0]
    return leaf


_PATH_HINTS = {
    errno.ENOTDIR: "a file stands where a directory is expected; pick another path",
    errno.ENOENT: "a directory on the way does not exist; create it or pick another path",
    errno.ENAMETOOLONG: "a name in the path is too long (255 bytes at most); use a shorter one",
    errno.EISDIR: "a directory stands where a file is expected; pick another path",
    errno.EEXIST: "something is already there; pick another path",
    errno.EROFS: "the file system is read-only; pick a path on a writable one",
    errno.ENOSPC: "the disk is full; free space, then run again (a campaign resumes)",
}


def path_error(exc: OSError) -> str:
    """An OSError about a path, as one line: the path, what the system said, what to do."""
    where = str(exc.filename)
    if len(where) > 120:
        where = where[:60] + "..." + where[-40:]
    hint = _PATH_HINTS.get(exc.errno or 0, "check the path and its permissions")
    return f"error[path_unusable]: {where}: {exc.strerror or exc} (hint: {hint})"


def run_command(prog: str, parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> int:
    """Parse, run the chosen command, and turn an MwError into one line and exit status 2."""
    from mw_errors import MwError

    args = parser.parse_args(argv)
    configure_logging(args.verbose)
    try:
        status: int = args.func(args)
    except MwError as exc:
        print(f"{prog}: {exc.render()}", file=sys.stderr)
        return 2
    except ExceptionGroup as group:  # a task group's: say its first error of ours, once
        matched, rest = group.split(MwError)
        if matched is None or rest is not None:  # a bug beside it is not hidden
            raise
        print(f"{prog}: {_first_leaf(matched).render()}", file=sys.stderr)
        return 2
    except PermissionError as exc:  # another user's runs, socket or file
        where = exc.filename or "a file"
        print(
            f"{prog}: error[permission_denied]: {where}: permission denied "
            "(hint: run as the user who owns it, or pick another --runs)",
            file=sys.stderr,
        )
        return 2
    except BrokenPipeError:  # the reader went away (`| head`): stop quietly, as on SIGPIPE
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except OSError as exc:  # a path that cannot be used; one without a path is a bug
        if exc.filename is None:
            raise
        print(f"{prog}: {path_error(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return status


def editing_options(local_trusted: bool = False, loaded: Loaded | None = None) -> CampaignOptions:
    """A weight-editing run's options; the policy's credential is read from its named variable.

    Raises:
        ConfigError: the policy's credential variable is not set.
    """
    from mw_actors.editing import CampaignOptions, load_policy

    secrets = {}
    ref = loaded.config.runtime.policy if loaded is not None else None
    if loaded is not None and ref is not None:
        name = load_policy(loaded.resolve(ref.path)).credential_env
        value = os.environ.get(name)
        if value is None:
            raise ConfigError(
                f"environment variable {name} is not set; the editing policy's requests need it",
                hint=f"export {name}=... (the wire meter injects it; it is never written down)",
            )
        secrets[name] = value
    return CampaignOptions(
        local_trusted=local_trusted,
        bwrap=bwrap_override(),
        omp_num_threads=os.environ.get("OMP_NUM_THREADS"),
        git_commit=git_commit(),
        secrets=secrets,
    )
