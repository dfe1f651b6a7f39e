"""``mw meter`` with a bug planted in its usage reader: the test that its log keeps secrets.

Run as: python -m tests.meters.meter_crash_child METER-FLAGS... (the flags of ``mw meter``)
"""

from __future__ import annotations

import sys
from typing import Any

import meters._usage
from bin.mw import main


def planted(block: Any) -> None:
    raise RuntimeError("a bug planted in the usage reader")


if __name__ == "__main__":
    meters._usage.chat_usage = planted  # type: ignore[assignment]
    sys.exit(main(["meter", *sys.argv[1:]]))
