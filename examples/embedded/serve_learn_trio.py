"""Embed a serve-and-learn campaign in your own trio program: no daemon.

python examples/embedded/serve_learn_trio.py RUNS_DIR [SERVING_CASES]
"""

from __future__ import annotations

import sys
from pathlib import Path

import trio

from mw_actors.serve_learn import CampaignSpec, run_campaign, score_file, write_synthetic


async def main(runs: Path, split: int) -> None:
    dataset = write_synthetic(runs / "dataset")
    spec = CampaignSpec(
        tag="embedded-trio",
        scenario="synthetic_l1",
        dataset=dataset,
        runs=runs,
        train_split=split,
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.sleep_forever)  # your own tasks keep running beside it
        run = await run_campaign(spec)
        nursery.cancel_scope.cancel()
    score = score_file(run.results)
    print(
        f"trio: {run.root}: hidden {score.hidden:.1f}, fully specified {score.fully_specified:.1f}"
    )


if __name__ == "__main__":
    trio.run(main, Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 24)
