"""A grid file, read: its ``kind`` says which grid it is (serve-and-learn or editing)."""

from __future__ import annotations

from pathlib import Path
from typing import TypeAlias

import msgspec

from meters import parse_usd
from mw_errors import ConfigError

from ._editing import EditGridSpec, edit_grid
from ._spec import CELL_FIELDS, GridSpec, _GridFile, serve_learn_grid

__all__ = ["AnyGrid", "load_grid"]

AnyGrid: TypeAlias = GridSpec | EditGridSpec  # a grid of either kind


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
        if path.suffix == ".json":
            raw = msgspec.json.decode(data, type=_GridFile)
        else:
            raw = msgspec.yaml.decode(data, type=_GridFile)
    except msgspec.ValidationError as exc:
        fields = ", ".join(["tag", "scenarios", "methods", "models", "allocation", *CELL_FIELDS])
        raise ConfigError(
            f"{path} is not a grid: {exc}",
            hint=f"a grid's fields: {fields}; kind: editing takes config, arms, seeds, students",
        ) from None
    except msgspec.DecodeError as exc:
        raise ConfigError(f"{path} is not YAML or JSON: {exc}", hint="fix its syntax") from None
    return _grid(raw, str(path), path.resolve().parent)


def _grid(raw: _GridFile, source: str, base: Path) -> AnyGrid:
    allocation = parse_usd(str(raw.allocation), "allocation")
    if raw.max_parallel is not None and raw.max_parallel < 1:
        raise ConfigError(f"{source}: max_parallel {raw.max_parallel}", hint="use 1 or more")
    if raw.kind == "editing":
        return edit_grid(raw, source, base, allocation)
    return serve_learn_grid(raw, source, base, allocation)
