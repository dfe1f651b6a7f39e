"""``mw``: the command line. Parses flags and environment once, then calls one function."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, TypeAlias

from mw_errors import ConfigError

from ._common import absolute_path, bwrap_override, editing_options, git_commit, run_command

DEFAULT_RUNS = "~/code/metaworld-runs"


def _runs_dir(flag: str | Path | None) -> Path:
    """``--runs``, else MW_RUNS, else the default: absolute, against the caller's directory."""
    return absolute_path(str(flag or os.environ.get("MW_RUNS") or DEFAULT_RUNS))


class _DaemonProcess:
    """The demo's daemon: a real process, started and stopped as the commands do it."""

    def start(self, runs: Path) -> str:
        from mw_actors.daemon import start_detached

        return start_detached(runs, *_daemon_command(runs)).describe()

    def stop(self, runs: Path) -> str:
        return _stopped(runs)


def _demo(args: argparse.Namespace) -> int:
    from mw_actors.demo import run_demo

    return run_demo(_runs_dir(args.runs), backend=args.backend, daemon=_DaemonProcess())


def _journal_check(args: argparse.Namespace) -> int:
    from mw_actors.daemon import CAMPAIGN_RECORDS
    from mw_actors.demo import DemoEvidence
    from mw_actors.grid import GRID_RECORDS
    from mw_actors.journal import journal_summary

    # Every record kind mw writes: the runtime's, the demo's, the budget's, both campaigns',
    # a grid driver's.
    kinds: list[type[Any]] = [DemoEvidence, *CAMPAIGN_RECORDS, *GRID_RECORDS]
    summary = journal_summary(Path(args.path), kinds)
    print(json.dumps(summary, indent=2, sort_keys=True))
    return 0


def _sandbox_self_test(args: argparse.Namespace) -> int:
    import anyio
    import msgspec

    from sandbox import self_test

    report = anyio.run(partial(self_test, args.backend, bwrap=bwrap_override()))
    if args.json:
        print(msgspec.json.encode(report).decode())
    else:
        print(f"{report.backend}: {'ok' if report.ok else 'FAILED'} (isolated: {report.isolated})")
        for name, held in report.checks.items():
            print(f"  {'ok  ' if held else 'FAIL'} {name}")
        print(f"  layers: {', '.join(report.layers)}")
    return 0 if report.ok else 1


def _sandbox_exec(args: argparse.Namespace) -> int:
    import anyio
    import msgspec

    from sandbox import ExecResult, Limits, SandboxConfig, open_sandbox

    command = args.command_argv[1:] if args.command_argv[:1] == ["--"] else args.command_argv
    if not command:
        raise ConfigError("no command given", hint="put the command after --")
    limits = Limits()
    changes: dict[str, object] = {}
    if args.timeout is not None:
        changes["wall_seconds"] = args.timeout
    if args.memory is not None:
        changes["address_space"] = args.memory
    limits = limits.replace(**changes) if changes else limits
    if not args.scratch.parent.is_dir():  # one new directory, never a tree made as root
        raise ConfigError(
            f"scratch directory {args.scratch}: {args.scratch.parent} is not a directory",
            hint="give a new directory inside one that exists",
        )
    config = SandboxConfig(scratch=args.scratch, inputs=tuple(args.input), limits=limits)
    box = open_sandbox(args.backend, config, bwrap=bwrap_override())

    async def run() -> ExecResult:
        async with box:
            return await box.exec(command)

    result = anyio.run(run)
    if args.json:
        print(msgspec.json.encode(result).decode())
        return 0
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    for stream in result.truncated:
        print(f"mw: {stream} was cut at {limits.output_bytes} bytes", file=sys.stderr)
    return result.shell_status


def _announce(line: str) -> None:
    print(line, flush=True)


def _port(port: int) -> int:
    """``--port``: a TCP port, or 0 for any free one.

    Raises:
        ConfigError: outside 0-65535.
    """
    if not 0 <= port <= 65535:
        raise ConfigError(f"--port {port} is not a TCP port", hint="use 1-65535, or 0 for any")
    return port


def _tag(tag: str) -> str:
    from mw_actors import check_tag

    return check_tag(tag)


Command = Callable[[argparse.Namespace], int]


def _named_scenario(command: Command) -> Command:
    """``command``, refusing a scenario argument that is no name before anything uses it.

    A scenario names folders and files, and the default tag starts with it.
    """

    def checked(args: argparse.Namespace) -> int:
        from mw_actors import check_scenario

        check_scenario(args.scenario)
        return command(args)

    return checked


def _smollm2_cache() -> Path:
    """Where the smollm2 engine keeps its safetensors snapshot: the user's cache."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "mw" / "smollm2-135m-instruct"


def _provider(args: argparse.Namespace) -> int:
    import anyio
    import msgspec

    from meters import serve_until_signal
    from mw_actors.provider import FaultPlan, Latency, Provider, make_engine, serve_provider

    engine = make_engine(
        args.engine,
        script=args.script,
        model_dir=args.model_dir or _smollm2_cache(),
        max_new_tokens=args.max_new_tokens,
    )
    api_key = None
    if args.api_key_env:
        api_key = os.environ.get(args.api_key_env)
        if not api_key:
            raise ConfigError(
                f"{args.api_key_env} is not set; --api-key-env names the key this provider expects",
                hint=f"export {args.api_key_env}=..., or drop --api-key-env",
            )
    faults = FaultPlan.from_file(args.faults) if args.faults else FaultPlan()
    if args.latency:
        latency = Latency.parse(args.latency, "--latency", base=faults.latency)
        faults = msgspec.structs.replace(faults, latency=latency)
    provider = Provider(engine, faults, api_key=api_key)
    serve = partial(serve_provider, provider, port=_port(args.port))
    anyio.run(partial(serve_until_signal, serve, announce=_announce))
    return 0


def _meter(args: argparse.Namespace) -> int:
    import anyio

    from meters import MeterConfig, load_prices, parse_usd, serve_until_signal

    key = os.environ.get(args.key_env)
    if key is None:
        raise ConfigError(
            f"environment variable {args.key_env} is not set",
            hint=f"export {args.key_env}=... (the meter reads the upstream key from it)",
        )
    allocation = None if args.allocation is None else parse_usd(args.allocation)
    config = MeterConfig(
        role=args.role,
        upstream=args.upstream,
        prices=load_prices(args.prices),
        ledger_dir=Path(args.ledger_dir),
        api_key=key or None,
        allocation_usd=allocation,
        adapt_responses=args.adapt_responses,
    )
    from mw_actors.metering import run_meter

    # With an allocation, the budget is journaled beside the ledger: a restart spends
    # nothing twice.
    journal = None if allocation is None else Path(args.ledger_dir) / "journal"
    serve = partial(run_meter, config, journal=journal, port=_port(args.port))
    anyio.run(partial(serve_until_signal, serve, announce=_announce))
    return 0


def _plan(args: argparse.Namespace) -> int:
    import tempfile

    import msgspec

    from mw_actors.serve_learn import (
        dataset_for,
        ensure_synthetic,
        plan,
        read_scenario,
        train_split,
    )

    with tempfile.TemporaryDirectory() as temp:  # a synthetic scenario is generated there
        dataset = ensure_synthetic(
            dataset_for(args.scenario, args.dataset, Path(temp)), args.scenario
        )
        schedule = plan(
            read_scenario(dataset, args.scenario),
            train_split(args.train_split, os.environ),
            schedule=args.schedule,
        )
    if args.json:
        print(msgspec.json.encode(schedule).decode())
        return 0
    print(schedule.describe())
    return 0


def _flags(args: argparse.Namespace) -> Any:
    """The campaign flags the command was given (those it has not are None)."""
    from mw_actors.serve_learn import Flags

    given = {name: getattr(args, name, None) for name in Flags.__struct_fields__}
    return Flags(scenario=args.scenario, **{k: v for k, v in given.items() if k != "scenario"})


def _serve_learn_run(args: argparse.Namespace) -> int:
    import time

    import anyio

    from mw_actors.serve_learn import (
        check_campaign,
        describe_launch,
        ensure_synthetic,
        launch_spec,
        run_campaign,
    )

    runs = _runs_dir(args.runs)
    tag = _tag(
        args.tag or os.environ.get("MW_TAG") or time.strftime(f"{args.scenario}-%Y%m%d-%H%M%S")
    )
    spec = launch_spec(_flags(args), os.environ, runs, tag, resume=args.resume)
    ensure_synthetic(spec.dataset, spec.scenario)
    if args.check:
        print(describe_launch(spec, check_campaign(spec)))
        return 0
    print(anyio.run(run_campaign, spec).summary())
    return 0


def _serve_learn_test(args: argparse.Namespace) -> int:
    import anyio

    from mw_actors.serve_learn import ensure_synthetic, manual_spec, run_manual_tests

    runs = _runs_dir(args.runs)
    tag = args.tag or os.environ.get("MW_TAG")
    if not tag:
        raise ConfigError("which campaign? no --tag and no MW_TAG", hint="pass --tag TAG")
    _tag(tag)
    spec = manual_spec(_flags(args), os.environ, runs, tag)
    ensure_synthetic(spec.dataset, spec.scenario)
    print(anyio.run(run_manual_tests, spec).describe())
    return 0


def _status(args: argparse.Namespace) -> int:
    from mw_actors.daemon import campaign_tags, status_line
    from mw_actors.daemon import statuses as read_statuses

    runs = _runs_dir(args.runs)
    tags = [_tag(args.tag)] if args.tag else sorted(campaign_tags(runs))
    statuses = read_statuses(runs, tags)
    if args.json:
        print(json.dumps(statuses[0] if args.tag else statuses))
        return 0
    for status in statuses:
        print(status_line(status))
    if not statuses:
        print(f"no campaign under {runs}")
    return 0


def _editing_options() -> Any:
    from mw_actors.editing import CampaignOptions

    return CampaignOptions(
        bwrap=bwrap_override(),
        omp_num_threads=os.environ.get("OMP_NUM_THREADS"),
        git_commit=git_commit(),
    )


def _daemon_run(args: argparse.Namespace) -> int:
    """The daemon in the foreground (``mw daemon start`` runs this detached)."""
    from mw_actors.daemon import Daemon, DaemonOptions, serve_in_foreground

    options = DaemonOptions(kinds={"editing": _editing_options()}, secret=os.environ.get)
    serve_in_foreground(Daemon(_runs_dir(args.runs), options))
    return 0


def _daemon_command(runs: Path) -> tuple[list[str], dict[str, str]]:
    """How ``mw daemon start`` runs the daemon: ``mw daemon run``, and its environment.

    mw's source goes first on its path, and not the working directory (-P: nothing
    under the runs directory is imported).
    """
    source = Path(__file__).resolve().parents[1]
    path = os.pathsep.join(filter(None, [str(source), os.environ.get("PYTHONPATH")]))
    command = [sys.executable, "-P", "-m", "bin.mw", "daemon", "run", "--runs", str(runs)]
    return command, {**os.environ, "PYTHONPATH": path}


def _daemon_start(args: argparse.Namespace) -> int:
    from mw_actors.daemon import start_detached

    runs = _runs_dir(args.runs)
    print(start_detached(runs, *_daemon_command(runs), timeout=args.timeout).describe())
    return 0


def _stopped(runs: Path) -> str:
    from mw_actors.daemon import stop_detached

    pid = stop_detached(runs)
    return f"mw daemon: none runs for {runs}" if pid is None else f"mw daemon: stopped (pid {pid})"


def _daemon_stop(args: argparse.Namespace) -> int:
    print(_stopped(_runs_dir(args.runs)))
    return 0


def _daemon_status(args: argparse.Namespace) -> int:
    from mw_actors.daemon import ListCampaigns, ask, daemon_pid, daemon_running

    runs = _runs_dir(args.runs)
    if not daemon_running(runs):
        print(f"mw daemon: none runs for {runs}")
        return 3
    (campaigns,) = ask(runs, [ListCampaigns()])
    print(f"mw daemon: pid {daemon_pid(runs)} serves {runs}; {len(campaigns)} campaigns")
    for c in campaigns:
        print(f"  {c['tag']}: {c['kind']}, {c['state']}")
    return 0


def _serve_learn_submit(args: argparse.Namespace) -> int:
    from mw_actors.daemon import Submit, ask
    from mw_actors.serve_learn import Submission, campaign_settings

    runs = _runs_dir(args.runs)
    tag = _tag(args.tag or os.environ.get("MW_TAG") or f"{args.scenario}-{os.getpid()}")
    settings = campaign_settings(_flags(args), os.environ)
    submission = Submission.from_settings(args.scenario, args.dataset, settings)
    # The keys stay in the daemon's memory, never its registry.
    submit = Submit(
        kind="serve-learn", tag=tag, spec=submission.wire(), secrets=settings["secrets"]
    )
    (result,) = ask(runs, [submit])
    print(f"submitted {result['tag']} to the daemon for {runs}; watch it: mw status {tag}")
    return 0


def _attach(args: argparse.Namespace) -> int:
    import anyio

    from mw_actors.daemon import attach_campaign, campaign_tags

    runs = _runs_dir(args.runs)
    tag = None if args.tag is None else _tag(args.tag)
    if tag is None:
        found = campaign_tags(runs)
        if not found:
            raise ConfigError(f"no campaign under {runs}", hint="pass --runs or a TAG")
        tag = found[-1]  # the newest
    try:
        state = anyio.run(
            partial(attach_campaign, runs, tag, once=args.once, until_done=args.until_done)
        )
    except KeyboardInterrupt:
        print(f"detached from {tag}; it keeps running")
        return 0
    print(f"{tag}: {state}")
    return 0


def _report(args: argparse.Namespace) -> int:
    from mw_actors import serve_learn

    report = serve_learn.build_run_report(args.run, figures_only=args.figures_only)
    if args.html:
        print(serve_learn.render_run_html(report), end="")
    elif args.json:
        print(serve_learn.render_run_json(report), end="")
    else:
        print(serve_learn.render_run_markdown(report), end="")
    return 0


def _probe(args: argparse.Namespace) -> int:
    import msgspec

    from mw_actors.serve_learn import probe_run, render_probe

    report, run = probe_run(args.run, dataset=args.dataset)
    if args.json:
        print(msgspec.json.encode(report).decode())
    else:
        print(render_probe(report, run), end="")
    return 0


def _export_inspect(args: argparse.Namespace) -> int:
    from mw_actors.serve_learn import export_inspect

    for path in export_inspect(args.run, args.output):
        print(f"wrote {path} (open it with: inspect view --log-dir {path.parent})")
    return 0


def _score(args: argparse.Namespace) -> int:
    import msgspec

    from mw_actors.serve_learn import score_file, score_table

    scores = [score_file(Path(path)) for path in args.results]
    if args.json:  # one object per results file, in the order given
        print(msgspec.json.encode(scores).decode())
        return 0

    print(score_table(scores))
    return 0


def _grid_run(args: argparse.Namespace) -> int:
    import anyio
    import msgspec

    from meters import parse_usd
    from mw_actors.grid import (
        GridPlace,
        LocalExecutor,
        RayExecutor,
        describe_run,
        load_grid,
        run_grid,
    )
    from mw_actors.kinds import GridContext

    grid = load_grid(args.grid)
    if args.allocation is not None:
        grid = msgspec.structs.replace(grid, allocation_usd=parse_usd(args.allocation))
    settings = _GRID_SETTINGS.get(str(grid.kind), _no_grid_settings)(args, grid)
    runs = _runs_dir(args.runs or grid.runs)
    run = partial(run_grid, grid, runs, GridContext(os.environ, settings))
    parallel = args.max_parallel or grid.max_parallel or 1
    if args.executor == "ray":
        ray = RayExecutor(parallel, address=args.address)
        ray.connect()  # in the main thread: Ray installs signal handlers
        try:
            outcomes = anyio.run(partial(run, executor=ray))
        finally:
            ray.close()
    else:
        if args.address:
            raise ConfigError("--address names a Ray cluster", hint="add --executor ray")
        outcomes = anyio.run(partial(run, executor=LocalExecutor(parallel)))
    text, all_ended = describe_run(outcomes, GridPlace(runs, grid.tag).leaderboard)
    print(text)
    return 0 if all_ended else 1


def _no_grid_settings(args: argparse.Namespace, grid: Any) -> Any:
    if args.local_trusted:
        raise ConfigError(f"--local-trusted is not for a {grid.kind} grid", hint="drop it")


def _editing_grid_settings(args: argparse.Namespace, grid: Any) -> Any:
    """An editing grid's cells run as `wsm benchmark run` runs them."""
    from mw_actors.editing import load_config

    return editing_options(args.local_trusted, load_config(Path(grid.config)))


# What this program gives each kind's grid cells (GridContext.settings), by kind.
_GRID_SETTINGS: dict[str, Callable[[argparse.Namespace, Any], Any]] = {
    "editing": _editing_grid_settings
}


def _grid_status(args: argparse.Namespace) -> int:
    from mw_actors.grid import describe_status, grid_status_now

    status = grid_status_now(_runs_dir(args.runs), _tag(args.tag))
    print(json.dumps(status) if args.json else describe_status(status))
    return 0


def _grid_report(args: argparse.Namespace) -> int:
    from mw_actors import grid as grids

    runs = _runs_dir(args.runs)
    outcomes = grids.grid_outcomes_now(runs, _tag(args.tag))
    # An editing cell's report is rebuilt from its evidence first: a changed checkpoint,
    # receipt or grade refuses the leaderboard, as `wsm benchmark report` refuses the run.
    grids.verify_cells(grids.GridPlace(runs, args.tag).cells, outcomes)
    if args.html:
        print(grids.leaderboard_html(outcomes, title=f"grid {args.tag}"), end="")
    elif args.markdown:
        print(grids.leaderboard_markdown(outcomes), end="")
    else:
        print(grids.leaderboard_csv(outcomes), end="")
    return 0


def _runs_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--runs",
        type=absolute_path,
        help=f"runs directory (default $MW_RUNS or {DEFAULT_RUNS}; relative to where you are)",
    )


def _campaign_options(parser: argparse.ArgumentParser, *, tag: str, manual: bool = False) -> None:
    """The options of ``serve-learn run``, ``submit`` and ``test``.

    A flag overrides the environment, which overrides the launch config (--config).
    """
    parser.add_argument("scenario")
    parser.add_argument("--dataset", type=absolute_path, help="a ServeLearnBench dataset/ folder")
    _runs_option(parser)
    parser.add_argument("--tag", help=tag)
    parser.add_argument(
        "--config", type=absolute_path, help="a launch config (YAML): models, backends, prices"
    )
    parser.add_argument(
        "--model", help="the host model, <backend>/<model id> (default $MW_MODEL, local/scripted)"
    )
    parser.add_argument("--train-split", type=int, help="serve only this prefix (MW_TRAIN_SPLIT)")
    parser.add_argument(
        "--concurrency",
        type=int,
        help="episodes in flight in all, serving and tests together (default 4); "
        "a freed slot goes to a waiting serving episode first, tests take the rest",
    )
    parser.add_argument(
        "--provider-latency", help="the local provider's latency: ttft=S,tps=N (benchmarks, tests)"
    )
    if manual:
        parser.add_argument("--allocation", help="this test run's own allocation in USD (5)")
        return
    parser.add_argument("--allocation", help="the cumulative allocation in USD (default 5)")
    parser.add_argument(
        "--method",
        help="mwm-local (default), mwm or blind; slb:blind, slb:oracle or slb:rag (the "
        "benchmark's own), or module:Class (a servelearnbench Method subclass)",
    )
    parser.add_argument(
        "--waiter",
        choices=["pipelined", "after_training", "window_by_window"],
        help="when windows are tested (default pipelined)",
    )
    parser.add_argument(
        "--judge-model",
        help="a Pitch scenario's LLM judge, through its own wire meter ($MW_JUDGE_MODEL; "
        "default local/scripted beside a local host, else the paper's "
        "fireworks/accounts/fireworks/models/glm-5p3-flash)",
    )
    parser.add_argument(
        "--schedule",
        choices=["mw", "slb"],
        help="mw (default): blocks of 12 across the stream, window w tested on "
        "v(floor(p_w/12)); slb: blocks restart at each window and a window is tested after "
        "its last block, as slb run does",
    )
    parser.add_argument(
        "--reasoning-effort",
        help="sent to the host model as reasoning_effort, as slb run sends it "
        "(default high; 'none' omits it)",
    )
    parser.add_argument(
        "--max-tokens",
        type=int,
        help="each host call's max_tokens, as the benchmark's ModelConfig.max_tokens "
        "(default 65536; lower it for a small local model)",
    )
    parser.add_argument(
        "--learner-backend",
        choices=["builtin", "codex"],
        help="mwm's learner session: the built-in loop, or Codex CLI in the sandbox "
        "(default $MW_LEARNER_BACKEND, else codex when it is on PATH)",
    )


# A parser's subcommands, where each command adds its own parser.
Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def _add_demo(commands: Commands) -> None:
    demo = commands.add_parser("demo", help="run the offline demo end to end")
    _runs_option(demo)
    demo.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    demo.set_defaults(func=_demo)


def _add_sandbox(commands: Commands) -> None:
    box = commands.add_parser("sandbox", help="the isolation for untrusted programs")
    box_commands = box.add_subparsers(dest="sandbox_command", required=True)
    selftest = box_commands.add_parser("self-test", help="prove the isolation holds here")
    selftest.add_argument("--backend", default="bwrap", help="bwrap (default) or local-trusted")
    selftest.add_argument("--json", action="store_true", help="print one JSON object")
    selftest.set_defaults(func=_sandbox_self_test)
    run = box_commands.add_parser("exec", help="run a command in a sandbox")
    run.add_argument("--backend", default="bwrap", help="bwrap (default) or local-trusted")
    run.add_argument(
        "--scratch", type=absolute_path, required=True, help="an empty (or new) scratch directory"
    )
    run.add_argument(
        "--input",
        type=absolute_path,
        action="append",
        default=[],
        help="a read-only input directory",
    )
    run.add_argument("--timeout", type=float, help="wall-clock limit in seconds")
    run.add_argument("--memory", type=int, help="address-space limit in bytes")
    run.add_argument("--json", action="store_true", help="print the ExecResult as JSON")
    run.add_argument("command_argv", nargs=argparse.REMAINDER, metavar="-- CMD ARGS...")
    run.set_defaults(func=_sandbox_exec)


def _add_provider(commands: Commands) -> None:
    provider = commands.add_parser("provider", help="a local OpenAI-compatible provider")
    provider.add_argument("--port", type=int, default=0)
    provider.add_argument(
        "--engine",
        default="scripted",
        choices=["scripted", "smollm2", "synthetic-host", "synthetic-learner"],
        help="scripted (default), smollm2 (a real small model), or the synthetic scenario's "
        "host or learner",
    )
    provider.add_argument(
        "--script", type=absolute_path, help="a JSON script for the scripted engine"
    )
    provider.add_argument(
        "--api-key-env",
        help="answer 401 unless a request carries the key this variable holds, as a hosted "
        "provider does",
    )
    provider.add_argument(
        "--model-dir",
        type=absolute_path,
        help="smollm2: the safetensors snapshot, imported there once if missing "
        "(default ~/.cache/mw/smollm2-135m-instruct)",
    )
    provider.add_argument(
        "--max-new-tokens", type=int, default=128, help="smollm2: the longest answer"
    )
    provider.add_argument("--faults", type=absolute_path, help="a JSON fault plan")
    provider.add_argument("--latency", help="ttft=SECONDS,tps=TOKENS_PER_S,drip=SECONDS")
    provider.set_defaults(func=_provider)


def _add_meter(commands: Commands) -> None:
    meter = commands.add_parser("meter", help="a wire meter in front of a provider")
    meter.add_argument("--role", choices=["host", "learner", "judge"], required=True)
    meter.add_argument("--port", type=int, default=0)
    meter.add_argument("--upstream", required=True, help="the provider's base URL")
    meter.add_argument("--key-env", required=True, help="the variable holding the upstream key")
    meter.add_argument("--prices", type=absolute_path, required=True, help="the prices file (JSON)")
    meter.add_argument("--ledger-dir", type=absolute_path, required=True)
    meter.add_argument("--allocation", help="the cumulative allocation in USD")
    meter.add_argument(
        "--adapt-responses",
        action="store_true",
        help="the upstream speaks only Chat Completions: translate /v1/responses (Codex CLI)",
    )
    meter.set_defaults(func=_meter)


def _add_serve_learn(commands: Commands) -> None:
    serve = commands.add_parser("serve-learn", help="serve-and-learn campaigns")
    serve_commands = serve.add_subparsers(dest="serve_command", required=True)
    plan = serve_commands.add_parser("plan", help="the schedule: blocks and test versions")
    plan.add_argument("scenario")
    plan.add_argument("--dataset", type=absolute_path, help="a ServeLearnBench dataset/ folder")
    plan.add_argument("--train-split", type=int, help="serve only this prefix (MW_TRAIN_SPLIT)")
    plan.add_argument("--schedule", choices=["mw", "slb"], default="mw", help="(default mw)")
    plan.add_argument("--json", action="store_true", help="print one JSON object")
    plan.set_defaults(func=_named_scenario(_plan))
    for add in (_add_serve_learn_run, _add_serve_learn_submit, _add_serve_learn_test):
        add(serve_commands)


def _add_serve_learn_run(commands: Commands) -> None:
    serve_run = commands.add_parser("run", help="run (or --resume) a campaign")
    _campaign_options(serve_run, tag="the run's name (default $MW_TAG, else scenario-time)")
    serve_run.add_argument(
        "--resume", action="store_true", help="continue from the journal, with its settings"
    )
    serve_run.add_argument(
        "--allocation-add",
        metavar="USD",
        help="on --resume: raise the campaign's allocation by this much (journaled)",
    )
    serve_run.add_argument(
        "--check",
        action="store_true",
        help="check every setting (scenario, models, keys, prices, ports), start nothing",
    )
    serve_run.set_defaults(func=_named_scenario(_serve_learn_run))


def _add_serve_learn_submit(commands: Commands) -> None:
    submit = commands.add_parser("submit", help="hand a campaign to the running daemon")
    _campaign_options(submit, tag="the run's name (default $MW_TAG)")
    submit.set_defaults(func=_named_scenario(_serve_learn_submit))


def _add_serve_learn_test(commands: Commands) -> None:
    manual = commands.add_parser(
        "test", help="manual test mode: test the windows whose checkpoint exists now"
    )
    _campaign_options(manual, tag="the campaign to test (default $MW_TAG)", manual=True)
    manual.set_defaults(func=_named_scenario(_serve_learn_test))


def _add_daemon(commands: Commands) -> None:
    daemon = commands.add_parser("daemon", help="run campaigns in the background")
    daemon_commands = daemon.add_subparsers(dest="daemon_command", required=True)
    for name, func, text in (
        ("start", _daemon_start, "start the daemon for a runs directory (detached)"),
        ("stop", _daemon_stop, "stop it; every campaign writes its terminal records"),
        ("status", _daemon_status, "whether it runs, and its campaigns"),
        ("run", _daemon_run, "the daemon in the foreground (what start detaches)"),
    ):
        command = daemon_commands.add_parser(name, help=text)
        _runs_option(command)
        command.set_defaults(func=func)
        if name == "start":
            command.add_argument(
                "--timeout", type=float, default=60, help="seconds to wait for it to listen"
            )


def _add_grid(commands: Commands) -> None:
    grid = commands.add_parser("grid", help="campaign grids: scenarios x methods x models")
    grid_commands = grid.add_subparsers(dest="grid_command", required=True)
    grid_run = grid_commands.add_parser("run", help="run (or resume) every cell of a grid")
    grid_run.add_argument("grid", type=absolute_path, help="the grid file (YAML or JSON)")
    _runs_option(grid_run)
    grid_run.add_argument(
        "--executor",
        choices=["local", "ray"],
        default="local",
        help="where cells run: here (default), or as Ray tasks (pip install 'mw[ray]')",
    )
    grid_run.add_argument("--address", help="ray: the cluster's address (default: a local one)")
    grid_run.add_argument("--max-parallel", type=int, help="cells at once (default 1)")
    grid_run.add_argument("--allocation", metavar="USD", help="the grid's total, over its file's")
    grid_run.add_argument(
        "--local-trusted",
        action="store_true",
        help="an editing grid whose runtime.backend is local: run its edits without isolation",
    )
    grid_run.set_defaults(func=_grid_run)
    for name, func, text in (
        ("status", _grid_status, "each cell's state, progress, scores and spend"),
        ("report", _grid_report, "the leaderboard, rebuilt from the cells (CSV by default)"),
    ):
        command = grid_commands.add_parser(name, help=text)
        command.add_argument("tag", help="the grid's tag")
        _runs_option(command)
        command.set_defaults(func=func)
    grid_commands.choices["status"].add_argument("--json", action="store_true")
    report_as = grid_commands.choices["report"].add_mutually_exclusive_group()
    for form in ("csv", "markdown", "html"):
        report_as.add_argument(f"--{form}", action="store_true", help=f"print it as {form}")


def _add_status(commands: Commands) -> None:
    status = commands.add_parser("status", help="where a campaign stands (daemon or not)")
    status.add_argument("tag", nargs="?", help="the campaign's tag (default: every campaign)")
    _runs_option(status)
    status.add_argument("--json", action="store_true", help="print JSON")
    status.set_defaults(func=_status)


def _add_attach(commands: Commands) -> None:
    attach = commands.add_parser("attach", help="a live view of a campaign (Ctrl-C detaches)")
    attach.add_argument("tag", nargs="?", help="the campaign (default: the newest)")
    _runs_option(attach)
    attach.add_argument("--once", action="store_true", help="print one frame and exit")
    attach.add_argument("--until-done", action="store_true", help="exit when it ends")
    attach.set_defaults(func=_attach)


def _add_report(commands: Commands) -> None:
    report = commands.add_parser("report", help="a serve-and-learn run's figures and cards")
    report.add_argument("run", type=absolute_path, help="the run directory ($MW_RUNS/TAG)")
    report_form = report.add_mutually_exclusive_group()
    for form in ("markdown", "json", "html"):
        report_form.add_argument(f"--{form}", action="store_true", help=f"print it as {form}")
    report.add_argument(
        "--figures-only",
        action="store_true",
        help="leave out the odd and failed episodes' trajectories (and every task's text)",
    )
    report.set_defaults(func=_report)


def _add_probe(commands: Commands) -> None:
    probe = commands.add_parser(
        "probe", help="what a run's method knows, for $0: each window's tests by a player"
    )
    probe.add_argument("run", type=absolute_path, help="the run directory ($MW_RUNS/TAG)")
    probe.add_argument("--json", action="store_true", help="print one JSON object")
    probe.add_argument(
        "--dataset",
        type=absolute_path,
        help="the scenario's export, where it is not where the run was started from",
    )
    probe.set_defaults(func=_probe)


def _add_export(commands: Commands) -> None:
    export = commands.add_parser("export", help="a run in the formats other tools read")
    export_commands = export.add_subparsers(dest="export_command", required=True)
    inspect_log = export_commands.add_parser(
        "inspect", help="as Inspect AI eval logs, for inspect view (needs mw[inspect])"
    )
    inspect_log.add_argument("run", type=absolute_path, help="the run directory ($MW_RUNS/TAG)")
    inspect_log.add_argument(
        "--output", type=absolute_path, help="where the .eval logs go (default RUN/inspect)"
    )
    inspect_log.set_defaults(func=_export_inspect)


def _add_score(commands: Commands) -> None:
    score = commands.add_parser("score", help="setting scores of results files, as slb score")
    score.add_argument("results", nargs="+", help="results JSONL files")
    score.add_argument("--json", action="store_true", help="print one JSON object")
    score.set_defaults(func=_score)


def _add_journal(commands: Commands) -> None:
    journal = commands.add_parser("journal", help="inspect a campaign journal")
    journal_commands = journal.add_subparsers(dest="journal_command", required=True)
    check = journal_commands.add_parser("check", help="verify every line and summarise")
    check.add_argument("path", type=absolute_path, help="a journal, or a run directory")
    check.set_defaults(func=_journal_check)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mw", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="log runtime events")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (
        _add_demo,
        _add_sandbox,
        _add_provider,
        _add_meter,
        _add_serve_learn,
        _add_daemon,
        _add_grid,
        _add_status,
        _add_attach,
        _add_report,
        _add_probe,
        _add_export,
        _add_score,
        _add_journal,
    ):
        add(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run_command("mw", _parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
