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
    args = parser.parse_args()
    try:
        config = write_fixture(args.output)
    except MwError as exc:
        print(f"benchmark_fixture: {exc.render()}", file=sys.stderr)
        return 2
    print(config)
    return 0


if __name__ == "__main__":
    sys.exit(main())
