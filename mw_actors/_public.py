"""Public objects report the module users import them from (as trio and anyio do)."""

from __future__ import annotations

import types
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

__all__ = ["public_module"]


def public_module(namespace: Mapping[str, Any], names: Iterable[str], module: str) -> None:
    """Each class and function of mw's named in ``names`` reports ``module``.

    ``repr``, documentation and tracebacks then name the public place, not a
    private file; pickle still finds a class, since ``module`` has it by that name.
    A msgspec Struct keeps its own module: msgspec resolves its (postponed)
    annotations in the globals of ``__module__`` when it first decodes one.
    """
    for name in names:
        obj = namespace[name]
        if not isinstance(obj, type | types.FunctionType):
            continue
        if isinstance(obj, type) and issubclass(obj, msgspec.Struct):
            continue
        if obj.__module__.startswith("mw_actors."):
            obj.__module__ = module
