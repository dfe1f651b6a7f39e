"""Embed a serve-and-learn campaign in your own asyncio program: no daemon.

python examples/embedded/serve_learn_asyncio.py RUNS_DIR [SERVING_CASES]
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from mw_actors.serve_learn import CampaignSpec, run_campaign, score_file, write_synthetic


async def main(runs: Path, split: int) -> None:
    dataset = write_synthetic(runs / "dataset")
    spec = CampaignSpec(
        tag="embedded-asyncio",
        scenario="synthetic_l1",
        dataset=dataset,
        runs=runs,
        train_split=split,
    )
    heartbeat = asyncio.create_task(asyncio.sleep(3600))  # your own tasks keep running
    run = await run_campaign(spec)
    heartbeat.cancel()
    score = score_file(run.results)
    print(
        f"asyncio: {run.root}: hidden {score.hidden:.1f}, fully specified "
        f"{score.fully_specified:.1f}"
    )


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 24))
