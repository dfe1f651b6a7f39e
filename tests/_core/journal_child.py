"""A process that appends evidence until it is killed; it prints each acknowledgement.

Run as: python -m tests._core.journal_child DIR BACKEND WRITERS
"""

from __future__ import annotations

import sys

import anyio
import structlog

import mw_actors as mw


class Evidence(mw.journal.Record, tag="test.evidence"):
    writer: int
    index: int
    payload: str


async def main(directory: str, writers: int) -> None:
    out = sys.stdout

    async def writer(w: int, journal: mw.journal.Journal) -> None:
        for i in range(10**9):
            seq = await journal.append(Evidence(writer=w, index=i, payload="x" * (i % 200)))
            out.write(f"ack {seq} {w} {i}\n")
            out.flush()

    async with (
        mw.journal.open_journal(directory, record_types=[Evidence], segment_bytes=64 * 1024) as j,
        anyio.create_task_group() as tg,
    ):
        for w in range(writers):
            tg.start_soon(writer, w, j)


if __name__ == "__main__":
    # stdout carries only acknowledgements; the journal's own events go to stderr
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
    anyio.run(main, sys.argv[1], int(sys.argv[3]), backend=sys.argv[2])
