"""Plain data (a submitted spec, a registry entry) as a typed Struct, or one clear error."""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from mw_errors import ConfigError

__all__ = ["convert"]

T = TypeVar("T")


def convert(value: Any, type_: type[T], what: str, hint: str) -> T:
    """``value`` as ``type_``, checked by msgspec (unknown, missing, mistyped fields).

    Raises:
        ConfigError: ``what`` does not fit ``type_``; msgspec's words name the field.
    """
    try:
        return msgspec.convert(value, type_)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{what}: {exc}", hint=hint) from None
