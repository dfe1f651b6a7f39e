"""A 16-cell grid three ways, in one run: one cell after another, local, Ray.

    python bench/grid.py [--split N] [--latency ttft=S,tps=N] [--parallel N] [--no-ray]

The baseline is what users do without ``mw grid``: each cell's campaign run
alone, one after another (``run_campaign``, as ``mw serve-learn run`` does).
Beside it, the same 16 cells (8 synthetic scenarios x 2 methods) as a grid on
the local executor N at a time, then on a local Ray cluster (N CPUs) N at a
time. The provider emulates a remote model's latency (``--latency``, by default
0.5 s to the first token and 50 tokens/s), so cells spend their time waiting on
it, as real ones do.

Each way runs in a fresh process of its own, so its peak memory is its own:
the driver's (for Ray, the workers' memory is not the driver's). Per cell, an
executor's overhead is how long the driver saw the cell run (its ``cell_started``
to its ``cell_ended`` in the grid's journal) less how long the cell's campaign
ran (its journal's first record to its last): scheduling, a worker's start,
shipping the spec, reading the outcome. Every way must give the same
leaderboard and cost.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mw_actors.grid import (  # noqa: E402
    GRID_RECORDS,
    GridPlace,
    LocalExecutor,
    RayExecutor,
    cell_flags,
    grid_outcomes,
    leaderboard_csv,
    load_grid,
    run_grid,
)
from mw_actors.grid.records import CellEnded, CellStarted  # noqa: E402
from mw_actors.journal import read_journal  # noqa: E402
from mw_actors.kinds import GridContext  # noqa: E402
from mw_actors.metering import BUDGET_RECORDS  # noqa: E402
from mw_actors.serve_learn import (  # noqa: E402
    CAMPAIGN_RECORDS,
    ensure_synthetic,
    launch_spec,
    run_campaign,
)

ENVIRON = {"PATH": "/usr/bin:/bin"}
SCENARIOS = [f"synthetic_{name}" for name in "abcdefgh"]


def grid_file(folder: Path, split: int, latency: str) -> Path:
    path = folder / "grid.json"
    grid = {
        "tag": "bench",
        "scenarios": SCENARIOS,
        "methods": ["mwm-local", "blind"],
        "models": ["local/scripted"],
        "train_split": split,
        "provider_latency": latency,
        "allocation": 50,
    }
    path.write_text(json.dumps(grid))
    return path


async def by_hand(path: Path, runs: Path) -> None:
    """Each cell alone, one after another, into the grid's layout (so it reads the same)."""
    grid = load_grid(path)
    place = GridPlace(runs, grid.tag)
    for cell in grid.cells:
        spec = launch_spec(cell_flags(grid, cell), ENVIRON, place.cells, cell.tag)
        ensure_synthetic(spec.dataset, spec.scenario)
        await run_campaign(spec)


def campaign_seconds(root: Path) -> float:
    entries = read_journal(root / "journal", CAMPAIGN_RECORDS)
    return entries[-1].t - entries[0].t


def overheads(place: GridPlace) -> list[float]:
    """Per cell: the driver's view of its run less its campaign's own."""
    began: dict[str, float] = {}
    seen = []
    for entry in read_journal(place.journal, (*GRID_RECORDS, *BUDGET_RECORDS)):
        if isinstance(entry.rec, CellStarted):
            began[entry.rec.cell] = entry.t
        elif isinstance(entry.rec, CellEnded):
            driver = entry.t - began[entry.rec.cell]
            seen.append(driver - campaign_seconds(place.cells / entry.rec.cell))
    return seen


def one_way(way: str, path: Path, runs: Path, parallel: int) -> dict[str, object]:
    """Run the grid one way, here; what it measured."""
    started = time.perf_counter()
    place = GridPlace(runs, "bench")
    cell_overheads: list[float] = []
    if way == "hand":
        anyio.run(by_hand, path, runs)
        wall = time.perf_counter() - started
    else:
        executor: LocalExecutor | RayExecutor
        if way == "ray":
            import ray

            ray.init(num_cpus=parallel, include_dashboard=False, log_to_driver=False)
            executor = RayExecutor(parallel)
        else:
            executor = LocalExecutor(parallel)
        grid = load_grid(path)
        anyio.run(lambda: run_grid(grid, runs, GridContext(ENVIRON), executor=executor))
        wall = time.perf_counter() - started
        if way == "ray":
            import ray

            ray.shutdown()
        cell_overheads = overheads(place)
    campaigns = [campaign_seconds(place.cells / c.tag) for c in load_grid(path).cells]
    return {
        "wall_s": wall,
        "campaign_s": sum(campaigns),
        "overheads_s": cell_overheads,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "leaderboard": leaderboard_csv(grid_outcomes(load_grid(path), place)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--split", type=int, default=12)
    parser.add_argument("--latency", default="ttft=0.5,tps=50")
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--no-ray", action="store_true")
    parser.add_argument("--way", help=argparse.SUPPRESS)  # run one way, in this process
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.way:
        folder = Path(args.folder)
        result = one_way(args.way, folder / "grid.json", folder / args.way, args.parallel)
        print(json.dumps(result))
        return
    ways = [("hand", "one cell after another (baseline)")]
    ways.append(("local", f"grid, local executor, {args.parallel} at a time"))
    if not args.no_ray:
        ways.append(
            ("ray", f"grid, ray executor ({args.parallel} CPUs), {args.parallel} at a time")
        )
    results = {}
    with tempfile.TemporaryDirectory() as temp:
        grid_file(Path(temp), args.split, args.latency)
        for way, _ in ways:
            argv = [sys.executable, __file__, "--way", way, "--folder", temp]
            argv += ["--parallel", str(args.parallel)]
            done = subprocess.run(argv, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                sys.exit(f"the {way} run failed:\n{done.stderr[-2000:]}")
            results[way] = json.loads(done.stdout.splitlines()[-1])
    base = results["hand"]
    cells = len(SCENARIOS) * 2
    print(f"{cells} cells (8 scenarios x 2 methods), split {args.split}, latency {args.latency}")
    head = f"  {'way':<46} {'wall':>8} {'vs base':>8} {'overhead/cell':>14} {'max':>7}"
    print(f"{head} {'driver peak':>12}")
    for way, name in ways:
        r = results[way]
        spent = r["overheads_s"]
        overhead = f"{statistics.mean(spent):.2f} s" if spent else "-"
        worst = f"{max(spent):.2f} s" if spent else "-"
        print(
            f"  {name:<46} {r['wall_s']:7.1f}s {r['wall_s'] / base['wall_s']:7.2f}x "
            f"{overhead:>14} {worst:>7} {r['peak_rss_mib']:8.0f} MiB"
        )
    if "ray" in results:
        ratio = results["ray"]["wall_s"] / results["local"]["wall_s"]
        mean = statistics.mean(results["ray"]["overheads_s"])
        print(f"  ray wall-clock / local wall-clock at {args.parallel} at a time: {ratio:.2f}")
        print(
            f"  goals: ray overhead per cell <= 1 s: {mean <= 1}; ray <= 1.1x local: {ratio <= 1.1}"
        )
    same = all(r["leaderboard"] == base["leaderboard"] for r in results.values())
    print(f"  leaderboards and costs identical to the baseline's: {same}")
    print(base["leaderboard"], end="")
    if not same:
        for way, r in results.items():
            print(f"{way}:\n{r['leaderboard']}", end="")
        sys.exit(1)


if __name__ == "__main__":
    main()
