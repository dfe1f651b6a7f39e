"""Money is exact: Decimal US dollars, written as plain decimal strings (never 7E-7)."""

from __future__ import annotations

from decimal import Decimal

__all__ = ["usd"]


def usd(value: Decimal) -> str:
    """``value`` as a plain decimal string: ``Decimal("7E-7")`` -> ``"0.0000007"``."""
    return format(value, "f")
