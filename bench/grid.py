"""A grid against its cells run one after another by hand, in one run.

    python bench/grid.py [--split N] [--latency ttft=S] [--no-ray]

The baseline is what users do without ``mw grid``: each cell's campaign run
alone, one after another (``run_campaign``, as ``mw serve-learn run`` does).
Beside it, the same cells as a grid: the local executor one cell at a time (the
grid's own overhead: one budget, the driver's journal, the checks), then two at
a time, then on a local Ray cluster (2 CPUs) two at a time. Every way must give
the same leaderboard and the same cost; the wall-clock times are printed side
by side. The provider emulates a remote model's latency (``--latency``), so
cells spend their time waiting on it, as real ones do.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mw_actors.grid import (  # noqa: E402
    GridPlace,
    LocalExecutor,
    RayExecutor,
    grid_outcomes,
    leaderboard_csv,
    load_grid,
    run_grid,
)
from mw_actors.grid._run import _flags  # noqa: E402
from mw_actors.serve_learn import ensure_synthetic, launch_spec, run_campaign  # noqa: E402

ENVIRON = {"PATH": "/usr/bin:/bin"}


def grid_file(folder: Path, split: int, latency: str) -> Path:
    path = folder / "grid.yaml"
    path.write_text(
        "tag: bench\nscenarios: [synthetic_l1, synthetic_l2]\nmethods: [mwm-local, blind]\n"
        f"models: [local/scripted]\ntrain_split: {split}\nprovider_latency: {latency}\n"
        "allocation: 50\n"
    )
    return path


async def by_hand(path: Path, runs: Path) -> str:
    """Each cell alone, one after another; the leaderboard of what they wrote."""
    grid = load_grid(path)
    place = GridPlace(runs, grid.tag)  # the same layout, so the leaderboard reads them
    for cell in grid.cells:
        spec = launch_spec(_flags(grid, cell), ENVIRON, place.cells, cell.tag)
        ensure_synthetic(spec.dataset, spec.scenario)
        await run_campaign(spec)
    return leaderboard_csv(grid_outcomes(grid, place))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--split", type=int, default=48)
    parser.add_argument("--latency", default="ttft=0.2,tps=200")
    parser.add_argument("--no-ray", action="store_true")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as temp:
        folder = Path(temp)
        path = grid_file(folder, args.split, args.latency)
        started = time.perf_counter()
        baseline = anyio.run(by_hand, path, folder / "hand")
        rows.append(("by hand, one after another (baseline)", time.perf_counter() - started))
        boards = {}
        ways: list[tuple[str, object]] = [
            ("grid, local, 1 at a time", LocalExecutor(1)),
            ("grid, local, 2 at a time", LocalExecutor(2)),
        ]
        ray = None
        if not args.no_ray:
            import ray as ray_module

            ray_module.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
            ray = RayExecutor(2)
            ways.append(("grid, ray (2 CPUs), 2 at a time", ray))
        for i, (name, executor) in enumerate(ways):
            grid = load_grid(path)
            started = time.perf_counter()
            outcomes = anyio.run(
                lambda g=grid, e=executor, n=i: run_grid(g, folder / f"w{n}", ENVIRON, executor=e)
            )
            rows.append((name, time.perf_counter() - started))
            boards[name] = leaderboard_csv(outcomes)
        if ray is not None:
            import ray as ray_module

            ray_module.shutdown()
    base = rows[0][1]
    print(f"4 cells (2 scenarios x 2 methods), split {args.split}, latency {args.latency}")
    for name, wall in rows:
        print(f"  {name:<40} {wall:7.1f} s  ({wall / base:.2f}x)")
    same = all(board == baseline for board in boards.values())
    print(f"  leaderboards and costs identical to the baseline's: {same}")
    print(baseline, end="")
    if not same:
        for name, board in boards.items():
            print(f"{name}:\n{board}", end="")
        sys.exit(1)


if __name__ == "__main__":
    main()
