"""Write the offline weight-editing benchmark fixture: ``--output DIR`` (new or empty)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mw_actors.editing import write_fixture
from mw_errors import MwError


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--output", required=True, type=Path)
    parser.add_argument(
        "--student",
        type=Path,
        help="a model snapshot (wsm model import-smollm2): a smoke campaign of the scripted arms",
    )
    args = parser.parse_args()
    try:
        config = write_fixture(args.output, student=args.student)
    except MwError as exc:
        print(f"benchmark_fixture: {exc.render()}", file=sys.stderr)
        return 2
    print(config)
    return 0


if __name__ == "__main__":
    sys.exit(main())
