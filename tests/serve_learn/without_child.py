"""``mw`` as if a package were not installed: its import finds nothing.

Run as: python -m tests.serve_learn.without_child PACKAGE MW-ARGS...
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from collections.abc import Sequence
from typing import Any

from bin.mw import main


class Missing(importlib.abc.MetaPathFinder):
    def __init__(self, name: str) -> None:
        self.name = name

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: Any = None) -> None:
        if fullname == self.name or fullname.startswith(self.name + "."):
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)


def without(name: str) -> None:
    """Imports of ``name`` fail, and ``importlib.util.find_spec`` finds nothing for it."""
    sys.meta_path.insert(0, Missing(name))
    find_spec = importlib.util.find_spec

    def hidden(fullname: str, package: str | None = None) -> Any:
        if fullname == name or fullname.startswith(name + "."):
            return None
        return find_spec(fullname, package)

    importlib.util.find_spec = hidden


if __name__ == "__main__":
    without(sys.argv[1])
    sys.exit(main(sys.argv[2:]))
