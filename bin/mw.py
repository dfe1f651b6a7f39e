"""``mw``: the command line. Parses flags and environment once, then calls one function."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import structlog

from mw_errors import MwError

DEFAULT_RUNS = "~/code/metaworld-runs"


def _configure_logging(verbose: bool) -> None:
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


def _runs_dir(flag: str | None) -> Path:
    return Path(flag or os.environ.get("MW_RUNS") or DEFAULT_RUNS).expanduser()


def _demo(args: argparse.Namespace) -> int:
    from mw_actors.demo import run_demo

    return run_demo(_runs_dir(args.runs), backend=args.backend)


def _journal_check(args: argparse.Namespace) -> int:
    from mw_actors import SupervisionView, read_journal, rebuild
    from mw_actors.demo import DemoEvidence

    entries = read_journal(args.path, [DemoEvidence])
    views = rebuild(SupervisionView(), entries)
    open_runs = {name: v.open_runs for name, v in views.items() if v.open_runs}
    summary = {
        "path": str(args.path),
        "records": len(entries),
        "last_seq": entries[-1].seq if entries else 0,
        "actors": len(views),
        "runs_without_terminal_record": open_runs,
    }
    print(json.dumps(summary, indent=2, sort_keys=True))
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mw", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="log runtime events")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = commands.add_parser("demo", help="run the offline demo end to end")
    demo.add_argument("--runs", help=f"runs directory (default $MW_RUNS or {DEFAULT_RUNS})")
    demo.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    demo.set_defaults(func=_demo)

    journal = commands.add_parser("journal", help="inspect a campaign journal")
    journal_commands = journal.add_subparsers(dest="journal_command", required=True)
    check = journal_commands.add_parser("check", help="verify every line and summarise")
    check.add_argument("path", type=Path, help="the journal directory")
    check.set_defaults(func=_journal_check)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    _configure_logging(args.verbose)
    try:
        status: int = args.func(args)
    except MwError as exc:
        print(f"mw: {exc.render()}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return status


if __name__ == "__main__":
    sys.exit(main())
