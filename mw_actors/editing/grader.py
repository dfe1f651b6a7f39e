"""The grader process: one request on stdin, one answer on stdout.

``python -m mw_actors.editing.grader``; the host starts it for every grading
(see :mod:`mw_actors.editing._grading`). A module of the library, so that the
library never launches an entry point of ``bin/``.
"""

from __future__ import annotations

import sys

from ._grading import serve_one


def main() -> int:
    sys.stdout.buffer.write(serve_one(sys.stdin.buffer.read()))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
