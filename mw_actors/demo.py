"""``mw demo``: the main job, offline, on embedded defaults.

1. The runtime: a tree under a journal, a worker that crashes twice and is
   restarted, real subprocess jobs (one fails once); every actor run has one
   terminal record.
2. Serve-and-learn: the synthetic scenario with ``mwm-local``, ``mwm`` (an LLM
   learner session per block, through its own learner meter) and ``blind``,
   through the host meter and the local provider; per-window test scores, the
   learning curve, the spend of each meter.
3. Weight editing: the benchmark fixture in the bwrap sandbox; the report.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import anyio

from mw_errors import ActorExited

from ._core import (
    Actor,
    ActorContext,
    Backoff,
    ChildSpec,
    ProcessActor,
    Record,
    SupervisionView,
    SupervisorSpec,
    open_runtime,
    read_journal,
    rebuild,
    replay,
    supervisor,
)

__all__ = ["DaemonControl", "DemoEvidence", "run_demo"]

CRASH_ON = frozenset({3, 7})
ITEMS = 10


METHODS = ("mwm-local", "mwm", "blind")  # the torch world model, the LLM learner, none


class DemoEvidence(Record, tag="demo.evidence", frozen=True):
    """One processed work item: acknowledged only once it is on disk."""

    item: int
    worker: str
    attempt: int
    value: int


class _Squarer(Actor[int]):
    """Squares numbers; crashes the first time it meets an item in CRASH_ON."""

    def __init__(self, crashed: set[int]) -> None:
        self.crashed = crashed

    async def init(self, ctx: ActorContext) -> object:
        self.ctx = ctx
        return None

    async def handle(self, item: int) -> object:
        if item in CRASH_ON and item not in self.crashed:
            self.crashed.add(item)
            raise RuntimeError(f"demo crash on item {item}")
        journal = self.ctx.journal
        assert journal is not None
        record = DemoEvidence(
            item=item, worker=self.ctx.name, attempt=self.ctx.attempt, value=item * item
        )
        return await journal.append(record)


def _job_spec(workdir: Path) -> ChildSpec:
    # Job "flaky" exits 3 the first time (no marker yet) and succeeds when restarted.
    def start(name: str) -> Actor[Any]:
        marker = workdir / f"{name}.ran-once"
        script = f"test -e {marker} || {{ touch {marker}; exit 3; }}; sleep 0.1"
        return ProcessActor(["sh", "-c", script if name == "flaky" else "sleep 0.1"], grace=1)

    return ChildSpec(id="job", start=start, restart="transient", shutdown=2)


async def _demo(run_dir: Path, say: Callable[[str], None]) -> int:
    journal_dir = run_dir / "journal"
    crashed: set[int] = set()
    root = SupervisorSpec(
        strategy="one_for_one",
        intensity=5,
        period=5,
        backoff=Backoff(initial=0.05, maximum=0.5, jitter=0.1, reset_after=1),
        children=[
            ChildSpec(id="squarer", start=lambda: _Squarer(crashed)),
            supervisor(
                "jobs",
                SupervisorSpec(strategy="simple_one_for_one", children=[_job_spec(run_dir)]),
            ),
        ],
    )
    async with open_runtime(journal=journal_dir, root=root, record_types=[DemoEvidence]) as rt:
        squarer = await rt.root.child("squarer")
        for item in range(ITEMS):
            while True:
                try:
                    seq = await squarer.ask(item, timeout=10)
                except ActorExited as exc:
                    say(f"  item {item}: {exc.actor} crashed ({exc.reason}); sent again")
                    continue
                say(f"  item {item}: squared, journaled as record {seq} (fsynced)")
                break
        jobs = await rt.root.child_supervisor("jobs")
        refs = [await jobs.start_child(None, name) for name in ("steady", "flaky", "quick")]
        while any(ref.alive for ref in refs) or len(await jobs.which_children()) > 0:
            await anyio.sleep(0.05)
        say("  3 subprocess jobs finished under root/jobs (simple_one_for_one)")
    return _report(journal_dir, say)


def _report(journal_dir: Path, say: Callable[[str], None]) -> int:
    entries = read_journal(journal_dir, [DemoEvidence])
    views = rebuild(SupervisionView(), entries)
    say("")
    say(f"  {'actor':<22} {'runs':>4} {'restarts':>8}  last exit")
    for name in sorted(views):
        view = views[name]
        say(f"  {name:<22} {view.runs:>4} {view.restarts:>8}  {view.last_exit}")
    runs = sum(len(v.terminal_per_run) for v in views.values())
    terminals = sum(sum(v.terminal_per_run.values()) for v in views.values())
    one_each = all(count == 1 for v in views.values() for count in v.terminal_per_run.values())
    evidence = sorted(r.item for r in replay(entries, DemoEvidence))
    say("")
    say(f"  journal: {journal_dir} ({len(entries)} records, CRC-checked on read)")
    say(f"  actor runs: {runs}; terminal records: {terminals}; one per run: {one_each}")
    say(f"  evidence records: {len(evidence)} of {ITEMS} items, each acknowledged after fsync")
    return 0 if one_each and evidence == list(range(ITEMS)) else 1


async def _campaigns_via_daemon(
    run_dir: Path, daemon: DaemonControl, say: Callable[[str], None]
) -> list[dict[str, Any]]:
    """Start the daemon, submit both campaign kinds, watch them to the end, stop it."""
    from .daemon import ListCampaigns, Submit, connect
    from .editing import write_fixture

    say("")
    say("mw demo: both campaign kinds through a daemon")
    config = write_fixture(run_dir / "editing-inputs")
    say(f"  {await anyio.to_thread.run_sync(daemon.start, run_dir)}")
    try:
        async with connect(run_dir) as control:
            for method in METHODS:
                spec = {"scenario": "synthetic_l1", "method": method}
                await control.request(
                    Submit(kind="serve-learn", tag=f"serve-learn-{method}", spec=spec)
                )
            await control.request(
                Submit(kind="editing", tag="editing", spec={"config": str(config)})
            )
            tags = ", ".join(f"serve-learn-{method}" for method in METHODS)
            say(f"  submitted: {tags}, editing")
            shown: dict[str, str] = {}
            while True:
                statuses: list[dict[str, Any]] = await control.request(ListCampaigns())
                for s in statuses:
                    line = _progress_line(s)
                    if shown.get(s["tag"]) != line:
                        shown[s["tag"]] = line
                        say(f"    {line}")
                if all(s["state"] != "running" for s in statuses):
                    break
                await anyio.sleep(0.5)
    finally:
        say(f"  {await anyio.to_thread.run_sync(daemon.stop, run_dir)}")
    return statuses


def _progress_line(status: dict[str, Any]) -> str:
    p = status.get("progress") or {}
    if status["kind"] == "serve-learn":
        done = (
            f"{p.get('cases_served', 0)} cases served, {p.get('blocks_learned', 0)} blocks "
            f"learned, {p.get('windows_tested', 0)} windows tested"
        )
    else:
        done = f"{p.get('trials_done', 0)} trials done"
    return f"{status['tag']}: {status['state']}; {done}"


def _serve_learn_summary(run_dir: Path, say: Callable[[str], None]) -> bool:
    from .serve_learn import RunDir, build_run_report, render_run_html, score_file

    say("")
    say("mw demo: serve-and-learn on the synthetic scenario (offline, labelled synthetic)")
    scores = {}
    for method in METHODS:
        run = RunDir(run_dir, f"serve-learn-{method}", "synthetic_l1", method)
        scores[method] = score_file(run.results)
        ledger = json.loads((run.root / "wire_ledger.json").read_text())
        learner = json.loads((run.root / "meta_wire_ledger.json").read_text())
        say(f"  {method}: {run.root}")
        for line in run.test_log.read_text().splitlines():
            say(f"    {line}")
        say(f"    host spend: ${ledger['cost_usd']} over {ledger['requests']} metered requests")
        if learner["requests"]:
            say(
                f"    learner spend: ${learner['cost_usd']} over {learner['requests']} "
                "metered requests (an LLM learner session per block)"
            )
        report = build_run_report(run.root)
        (run.root / "report.html").write_text(render_run_html(report))
        say(f"    page: {run.root / 'report.html'} (mw report {run.root} --html)")
        if method == "mwm-local":
            say("    learning curve (serving reward per block; | marks a policy change):")
            window = report.blocks[0].window if report.blocks else 0
            for b in report.blocks:
                mark, window = ("|" if b.window != window else " "), b.window
                bar = "#" * round(b.reward / 5)
                say(f"    {mark} block {b.block:2d} {bar:<20} {b.reward:5.1f}")
    for method, score in scores.items():
        say(f"  {method}: hidden {score.hidden:.1f}, fully specified {score.fully_specified:.1f}")
    mwm, blind = scores["mwm-local"].hidden or 0, scores["blind"].hidden or 0
    llm = scores["mwm"].hidden or 0
    say(f"  mwm-local beats blind on hidden tasks: {mwm > blind}")
    say(f"  mwm (LLM learner) beats blind on hidden tasks: {llm > blind}")
    return mwm > blind and llm > blind


def _editing_summary(run_dir: Path, say: Callable[[str], None]) -> bool:
    from .editing import build_report, render_html, render_markdown

    say("")
    say("mw demo: weight editing on the benchmark fixture (bwrap sandbox)")
    run = run_dir / "editing"
    report = build_report(run)
    (run / "report.md").write_text(render_markdown(report))
    (run / "report.html").write_text(render_html(report))
    say(f"  run directory: {run} (report: {run / 'report.md'})")
    say(f"  page: {run / 'report.html'}: plots, and a step-through of each trial")
    for arm, summary in report.arms.items():
        say(
            f"    {arm:<9} task loss {summary.mean_task_loss:.4f}, "
            f"regression loss {summary.mean_regression_loss:.4f}"
        )
    say(f"  scripted edit worse than baseline: {report.checks.scripted_worse_than_baseline}")
    say(f"  agent's undo restores the baseline: {report.checks.agent_restores_baseline}")
    return bool(
        report.checks.scripted_worse_than_baseline and report.checks.agent_restores_baseline
    )


class DaemonControl(Protocol):
    """How the demo starts and stops a daemon process (``bin/`` provides it)."""

    def start(self, runs: Path) -> str: ...

    def stop(self, runs: Path) -> str: ...


async def _all(run_dir: Path, daemon: DaemonControl | None, say: Callable[[str], None]) -> int:
    status = await _demo(run_dir, say)
    if daemon is None:
        return status
    statuses = await _campaigns_via_daemon(run_dir, daemon, say)
    finished = all(s["state"] == "completed" for s in statuses)
    learned = _serve_learn_summary(run_dir, say)
    edited = _editing_summary(run_dir, say)
    say("")
    say(f"  every campaign completed with all its terminal records: {finished}")
    return status or (0 if learned and edited and finished else 1)


def run_demo(
    runs_dir: Path,
    *,
    backend: str = "asyncio",
    say: Callable[[str], None] = print,
    daemon: DaemonControl | None = None,
) -> int:
    """Run the demo under ``runs_dir`` on ``backend``; return the process exit status.

    ``daemon`` starts and stops the daemon the campaigns run in (None: the runtime part only).
    """
    run_dir = runs_dir / time.strftime("demo-%Y%m%d-%H%M%S")
    run_dir.mkdir(parents=True, exist_ok=False)
    say("mw demo: a supervised actor tree over a durable journal")
    say(f"  run directory: {run_dir}")
    return anyio.run(_all, run_dir, daemon, say, backend=backend)
