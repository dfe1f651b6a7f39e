"""Each package's public face: a sorted, complete ``__all__``."""

from __future__ import annotations

import importlib
import types

import pytest

PACKAGES = [
    "meters",
    "mw_actors",
    "mw_actors.daemon",
    "mw_actors.editing",
    "mw_actors.serve_learn",
    "mw_errors",
    "sandbox",
]


@pytest.mark.parametrize("name", PACKAGES)
def test_all_is_sorted_and_complete(name: str) -> None:
    module = importlib.import_module(name)
    exported = list(module.__all__)
    # isort style, as ruff's RUF022 keeps it: CONSTANTS, then Classes, then functions
    assert exported == sorted(exported, key=lambda s: (not s.isupper(), not s[0].isupper(), s))
    public = {
        attr
        for attr, value in vars(module).items()
        if not attr.startswith("_")
        and not isinstance(value, types.ModuleType)
        and attr not in ("annotations",)
    }
    assert public == set(exported), sorted(public ^ set(exported))


def test_error_tree_has_one_root() -> None:
    import mw_errors

    for attr in mw_errors.__all__:
        cls = getattr(mw_errors, attr)
        assert issubclass(cls, mw_errors.MwError)
        assert cls.code and cls.hint
        assert attr in (mw_errors.__doc__ or ""), f"{attr} is not drawn in the tree"
