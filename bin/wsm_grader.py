"""The grader process: one request on stdin, one answer on stdout (see mw_actors.editing)."""

from __future__ import annotations

import sys

from mw_actors.editing import serve_one


def main() -> int:
    sys.stdout.buffer.write(serve_one(sys.stdin.buffer.read()))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
