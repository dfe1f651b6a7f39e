"""A grid file, read: its ``kind`` says which kind's grid it is, and that kind checks it.

Every grid file has a ``tag``, an ``allocation`` (USD, for the whole grid), and
may say where its cells run (``runs``) and how many at once (``max_parallel``);
``kind`` (default ``serve-learn``) names the campaign kind whose cells it holds,
and that kind's :class:`~mw_actors.kinds.GridKind` reads the rest.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from meters import parse_usd
from mw_errors import ConfigError

from ..kinds import KINDS, GridKind

__all__ = ["AnyGrid", "grid_kind", "load_grid"]

AnyGrid = Any  # a grid of any kind: its kind's GridKind.grid_type (see kinds.Grid)
DEFAULT_KIND = "serve-learn"
COMMON = ("tag", "kind", "allocation", "runs", "max_parallel")  # every grid file's fields


def grid_kind(name: str) -> GridKind:
    """The grid side of the campaign kind ``name``.

    Raises:
        ConfigError: no kind of that name runs in grids.
    """
    kind = KINDS.get(name)
    if kind is None or kind.grid is None:
        names = sorted(n for n, k in KINDS.items() if k.grid is not None)
        raise ConfigError(
            f"no campaign kind {name!r} runs in grids", hint=f"kind: one of {', '.join(names)}"
        )
    return kind.grid


def load_grid(path: Path) -> AnyGrid:
    """The grid in ``path`` (YAML or JSON), checked.

    Raises:
        ConfigError: it cannot be read, is not a grid, or names something twice.
    """
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(
            f"cannot read grid file {path}: {exc.strerror}", hint="check the path"
        ) from None
    try:
        raw = msgspec.json.decode(data) if path.suffix == ".json" else msgspec.yaml.decode(data)
    except msgspec.DecodeError as exc:
        raise ConfigError(f"{path} is not YAML or JSON: {exc}", hint="fix its syntax") from None
    return _grid(raw, str(path), path.resolve().parent)


def _grid(raw: Any, source: str, base: Path) -> AnyGrid:
    if not isinstance(raw, dict):
        raise ConfigError(
            f"{source} is not a grid: it holds no mapping of fields",
            hint="a grid file names its tag, allocation and cells (see docs/design/grid.md)",
        )
    name = raw.get("kind", DEFAULT_KIND)
    kind = grid_kind(str(name))
    _no_foreign_fields(raw, str(name), kind, source)
    if "allocation" not in raw:
        raise ConfigError(f"{source}: a grid needs allocation", hint="allocation: USD for it all")
    allocation = parse_usd(str(raw["allocation"]), "allocation")
    parallel = raw.get("max_parallel")
    if isinstance(parallel, int) and parallel < 1:
        raise ConfigError(f"{source}: max_parallel {parallel}", hint="use 1 or more")
    return kind.grid({**raw, "kind": name}, source, base, allocation)


def _no_foreign_fields(raw: dict[str, Any], name: str, kind: GridKind, source: str) -> None:
    """Fields another kind's grid has and this one's has not: a grid of the wrong kind."""
    own = {*COMMON, *kind.fields}
    for other_name, other in sorted(KINDS.items()):
        if other_name == name or other.grid is None:
            continue
        foreign = [f for f in raw if f not in own and f in other.grid.fields]
        if foreign:
            raise ConfigError(
                f"{source}: {', '.join(foreign)} belong to {other.grid.title}, not kind: {name}",
                hint=f"add kind: {other_name} for {other.grid.title}, or remove them",
            )
