"""One synthetic serve-and-learn campaign, run three ways in one run.

    python bench/serve_learn.py [--shape synthetic_l1|banking_l1] [--split N] [--ttft S] [--tps N]
    python bench/serve_learn.py --engine slb [--windows 0,1,2,3] [--methods blind,rag]

``--engine slb`` runs the real banking_l1 (its export in tests/data) through the
servelearnbench package with the benchmark's own methods, three ways against
one provider process and one deterministic player: ``slb run`` itself (8
workers), mw pipelined (its own schedule), and mw with ``--schedule slb``. It
prints each one's wall-clock, whether its per-task rewards equal slb run's,
its cost (priced from the rows' tokens; mw's also from its wire ledger) and
mw's overhead per episode, and the floor: the episodes' summed durations over
8 workers, which no order of them 8 at a time can beat. Goal: mw <= 0.75x slb
run's wall-clock at identical rewards and cost.

The local provider emulates a realistic latency (0.5 s to the first token, 50
tokens/s). Orders:
  (a) the seed launcher's: all serving and learning, then all tests;
  (b) ServeLearnBench's runner: serve window w, test window w, then the next;
  (c) mw's pipelined order: each window's tests start as soon as its version exists.
Scores and cost must be identical across the three.
The provider runs in a process of its own (`mw provider --engine synthetic-host`),
reached as a remote `vllm/` backend through the host meter, as a real provider
is; `--provider inline` runs it in the campaign's event loop instead.
Shapes: synthetic_l1 (4 windows of 36 serving and 12 test cases) or banking_l1
(the real export's proportions: 4 windows of 84 serving cases and 45 tests,
where banking_l1 has 41-48), both played by the synthetic scenario offline.
Goals: (c) <= 0.75x the wall-clock of (b) and <= 0.5x that of (a); the runtime's
own overhead <= 5 ms per episode, provider time excluded.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import meters  # noqa: E402
from mw_actors.journal import read_journal  # noqa: E402
from mw_actors.metering import BUDGET_RECORDS  # noqa: E402
from mw_actors.provider import LOCAL_PRICES, Latency  # noqa: E402
from mw_actors.serve_learn import (  # noqa: E402
    SERVE_LEARN_RECORDS,
    CampaignSpec,
    Endpoint,
    EpisodeEnded,
    EpisodeStarted,
    run_campaign,
    score_file,
    write_synthetic,
)

SHAPES = {
    "synthetic_l1": {"serving_per_window": 36, "test_per_window": 12},
    "banking_l1": {"serving_per_window": 84, "test_per_window": 45},
}
ORDERS = {
    "a: all serving, then tests": "after_training",
    "b: window by window": "window_by_window",
    "c: pipelined (mw)": "pipelined",
}


MODEL = "vllm/synthetic-host"


@contextlib.contextmanager
def provider_process(ttft: float, tps: float) -> Iterator[dict[str, Any]]:
    """``mw provider`` in its own process; the spec fields that reach it as a remote model."""
    process = subprocess.Popen(
        [sys.executable, "-m", "bin.mw", "provider", "--engine", "synthetic-host",
         "--latency", f"ttft={ttft},tps={tps}"],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip().removeprefix("listening on ")
        local = meters.load_prices(LOCAL_PRICES)
        prices = meters.PriceTable(
            schema_version=1, date=local.date, models={MODEL: local.price("local/scripted")}
        )
        endpoint = Endpoint(model=MODEL, base_url=f"{url}/v1", wire_model="synthetic-host")
        yield {"model": MODEL, "endpoints": {MODEL: endpoint}, "prices": prices}
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)


def _priced(rows: list[dict[str, Any]]) -> Decimal:
    """The rows' cost at the local model's price, from their token counts."""
    table = meters.load_prices(LOCAL_PRICES)
    total = Decimal(0)
    for row in rows:
        tokens = row["tokens"]
        usage = meters.Usage(input_tokens=int(tokens["input"]),
                             cached_input_tokens=int(tokens.get("cache_input", 0)),
                             output_tokens=int(tokens["output"]))  # fmt: skip
        total += table.cost("local/scripted", usage)
    return total


def _episodes(path: Path) -> dict[tuple[str, str], float]:
    rows = [json.loads(line) for line in path.read_text().splitlines()][1:]
    return {(r["phase"], r["task_id"]): r["reward"] for r in rows}


def _episode_seconds(journal: Path) -> tuple[float, int]:
    """The episodes' summed wall-clock durations, and the most in flight at once."""
    began: dict[tuple[str, str], float] = {}
    total = 0.0
    peak = 0
    for entry in read_journal(journal, [*BUDGET_RECORDS, *SERVE_LEARN_RECORDS]):
        rec = entry.rec
        if isinstance(rec, EpisodeStarted):
            began[(rec.phase, rec.task_id)] = entry.t
            peak = max(peak, len(began))
        elif isinstance(rec, EpisodeEnded) and (rec.phase, rec.task_id) in began:
            total += entry.t - began.pop((rec.phase, rec.task_id))
    return total, peak


def _children_cpu() -> float:
    """CPU seconds (user and system) of the child processes that ended and were waited for."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def _startup_cpu() -> float:
    """What ``slb run`` spends before its first episode: Python and the package's imports.

    mw's campaign runs in this process, its imports already paid: ``slb run``'s own
    are taken off its CPU, so that both count the episodes' work alone.
    """
    before = _children_cpu()
    subprocess.run(
        [sys.executable, "-c", "import servelearnbench.cli, servelearnbench.runner, "
         "servelearnbench.llm, servelearnbench.methods, servelearnbench.scenarios"],
        check=True,
    )  # fmt: skip
    return _children_cpu() - before


def bench_slb(args: argparse.Namespace) -> None:
    """banking_l1 with the benchmark's methods: slb run against mw, in one run."""
    dataset = ROOT / "tests" / "data" / "servelearnbench"
    windows = [int(w) for w in args.windows.split(",")]
    serving = [json.loads(x) for x in (dataset / "data" / "banking_l1" / "serving.jsonl")
               .read_text().splitlines()]  # fmt: skip
    split = sum(1 for t in serving if t["window"] <= max(windows))
    table = []
    cpu: dict[str, float] = {}  # per run, CPU ms per episode
    startup = _startup_cpu()
    # The same imports paid here before mw's first campaign is measured (it runs in this
    # process): else the first one counts the package's and the SDK's imports as its own.
    # A py-spy profile of 125 episodes put them at 2.2 s of CPU (17 ms an episode).
    import openai  # noqa: F401
    import servelearnbench.agent
    import servelearnbench.llm
    import servelearnbench.methods
    import servelearnbench.scenarios  # noqa: F401

    with tempfile.TemporaryDirectory() as temp, provider_process(args.ttft, args.tps) as remote:
        url = remote["endpoints"][MODEL].base_url
        for method in args.methods.split(","):
            out = Path(temp) / f"slb_{method}.jsonl"
            began, used = time.perf_counter(), _children_cpu()
            subprocess.run(
                [str(ROOT / ".venv" / "bin" / "slb"), "run", "--scenario", "banking_l1",
                 "--method", method, "--model", "local/scripted", "--base-url", url,
                 "--api-key-env", "", "--windows", args.windows, "--workers", "8",
                 "--out", str(out)],
                check=True, capture_output=True,
            )  # fmt: skip
            wall = time.perf_counter() - began
            theirs = _episodes(out)
            rows = [json.loads(line) for line in out.read_text().splitlines()][1:]
            cpu[f"slb run {method}"] = 1e3 * (_children_cpu() - used - startup) / len(rows)
            table.append((f"slb run {method}", wall, True, _priced(rows), "-", len(rows), "-", "-"))
            for schedule in ("mw", "slb"):
                spec = CampaignSpec(
                    tag=f"{method}-{schedule}", scenario="banking_l1", dataset=dataset,
                    runs=Path(temp), method=f"slb:{method}", train_split=split,
                    concurrency=8, schedule=schedule, **remote,
                )  # fmt: skip
                began, used = time.perf_counter(), time.process_time()
                run = anyio.run(run_campaign, spec)
                wall = time.perf_counter() - began
                rows = [json.loads(line) for line in run.results.read_text().splitlines()][1:]
                # This process's CPU: the campaign, its meters, its journal, the package's
                # loop that it drives, and its outputs (the provider runs in its own).
                cpu[f"mw slb:{method} --schedule {schedule}"] = (
                    1e3 * (time.process_time() - used) / len(rows)
                )
                ledger = json.loads((run.root / "wire_ledger.json").read_text())["cost_usd"]
                finished = json.loads(run.run_log.read_text().splitlines()[-1])["finished"]
                same = _episodes(run.results) == theirs
                overhead = f"{finished['runtime_overhead_ms_mean']:.2f} ms"
                # No run of these episodes at 8 at a time can end sooner than their work / 8.
                # `peak`: the most between their start and end records (at most 8, serving
                # and tests together).
                work, peak = _episode_seconds(run.root / "journal")
                floor = (work / 8, peak)
                label = f"mw slb:{method} --schedule {schedule}"
                table.append((label, wall, same, _priced(rows), ledger, len(rows), overhead, floor))
    print(f"latency: {args.ttft} s to the first token, {args.tps:.0f} tokens/s; banking_l1 "
          f"windows {args.windows}; slb run 8 workers, mw concurrency 8 (pipelined)\n")  # fmt: skip
    print(
        f"| {'run':<32} | {'wall':>8} | {'vs slb':>6} | {'rewards = slb':>13} | "
        f"{'cost (tokens)':>13} | {'cost (ledger)':>13} | {'episodes':>8} | overhead/ep | "
        f"{'work / 8':>8} | {'floor vs slb':>12} | peak |"
    )
    widths = (34, 10, 8, 15, 15, 15, 10, 13, 10, 14, 6)
    print("|" + "|".join("-" * w for w in widths) + "|")
    base = 0.0
    for label, wall, same, cost, ledger, n, overhead, floor in table:
        base = wall if label.startswith("slb run") else base
        bound = "-" if isinstance(floor, str) else f"{floor[0]:7.1f}s"
        versus = "-" if isinstance(floor, str) else f"{floor[0] / base:.2f}x"
        peak = "8" if isinstance(floor, str) else str(floor[1])
        print(f"| {label:<32} | {wall:7.1f}s | {wall / base:5.2f}x | {same!s:>13} | "
              f"{meters.usd(cost):>13} | {ledger:>13} | {n:>8} | {overhead:>11} | "
              f"{bound:>8} | {versus:>12} | {peak:>4} |")  # fmt: skip
    print(f"\nCPU per episode (ms; slb run's without its startup, {1e3 * startup:.0f} ms):")
    for method in args.methods.split(","):
        theirs = cpu[f"slb run {method}"]
        for schedule in ("mw", "slb"):
            ours = cpu[f"mw slb:{method} --schedule {schedule}"]
            print(f"  {method}, mw --schedule {schedule}: {ours:.1f} against slb run's "
                  f"{theirs:.1f}: mw's own {ours - theirs:+.1f} (goal <= 10)")  # fmt: skip
    print(
        "\nwork / 8: the episodes' summed durations over 8 workers, the least wall-clock any"
        " order of them at 8 at a time can take; floor vs slb: that bound over slb run's;"
        " peak: the most episodes between their start and end records in mw's journal"
        " (--concurrency bounds them: an episode holds its slot until its end record is"
        " durable)."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", choices=["synthetic", "slb"], default="synthetic")
    parser.add_argument("--windows", default="0,1,2,3", help="--engine slb: banking_l1's windows")
    parser.add_argument("--methods", default="blind,rag", help="--engine slb: slb's methods")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="synthetic_l1")
    parser.add_argument("--split", type=int, help="serve only this prefix (default: all)")
    parser.add_argument("--ttft", type=float, default=0.5)
    parser.add_argument("--tps", type=float, default=50.0)
    parser.add_argument("--concurrency", type=int, default=12)
    parser.add_argument("--provider", choices=["process", "inline"], default="process")
    args = parser.parse_args()
    if args.engine == "slb":
        bench_slb(args)
        return
    latency = Latency(first_token_seconds=args.ttft, tokens_per_second=args.tps)
    rows = []
    with tempfile.TemporaryDirectory() as temp, contextlib.ExitStack() as stack:
        remote: dict[str, Any] = {}
        if args.provider == "process":
            remote = stack.enter_context(provider_process(args.ttft, args.tps))
        dataset = write_synthetic(Path(temp) / "dataset", **SHAPES[args.shape])
        warm = CampaignSpec(
            tag="warm-up", scenario="synthetic_l1", dataset=dataset, runs=Path(temp), train_split=12
        )
        anyio.run(run_campaign, warm)  # imports torch and loads the tokenizer once
        for label, order in ORDERS.items():
            spec = CampaignSpec(
                tag=order,
                scenario="synthetic_l1",
                dataset=dataset,
                runs=Path(temp),
                train_split=args.split,
                concurrency=args.concurrency,
                waiter=order,
                latency=None if remote else latency,
                **remote,
            )
            began = time.perf_counter()
            run = anyio.run(run_campaign, spec)
            wall = time.perf_counter() - began
            score = score_file(run.results)
            cost = json.loads((run.root / "wire_ledger.json").read_text())["cost_usd"]
            finished = json.loads(run.run_log.read_text().splitlines()[-1])["finished"]
            rows.append((label, wall, score.hidden, score.fully_specified, cost, finished))
    print(
        f"latency: {args.ttft} s to the first token, {args.tps:.0f} tokens/s; "
        f"shape {args.shape}, {args.split or 'all'} serving cases, "
        f"concurrency {args.concurrency}, provider {args.provider}\n"
    )
    print(
        f"| {'order':<28} | {'wall':>8} | {'vs (a)':>6} | {'vs (b)':>6} | {'hidden':>6} "
        f"| {'full':>6} | {'cost USD':>10} | {'overhead/episode mean, p50':>26} |"
    )
    print(f"|{'-' * 30}|{'-' * 10}|{'-' * 8}|{'-' * 8}|{'-' * 8}|{'-' * 8}|{'-' * 12}|{'-' * 28}|")
    wall_a, wall_b = rows[0][1], rows[1][1]
    for label, wall, hidden, full, cost, finished in rows:
        print(
            f"| {label:<28} | {wall:7.1f}s | {wall / wall_a:5.2f}x | {wall / wall_b:5.2f}x "
            f"| {hidden:6.1f} | {full:6.1f} | {cost:>10} | "
            f"{finished['runtime_overhead_ms_mean']:8.2f} ms, "
            f"{finished['runtime_overhead_ms_p50']:8.2f} ms    |"
        )
    same = len({(r[2], r[3], r[4]) for r in rows}) == 1
    print(f"\nscores and cost identical across the three: {same}")


if __name__ == "__main__":
    main()
