"""Money is exact: Decimal US dollars, written as plain decimal strings (never 7E-7)."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

from mw_errors import ConfigError

__all__ = ["parse_usd", "usd"]


def usd(value: Decimal) -> str:
    """``value`` as a plain decimal string: ``Decimal("7E-7")`` -> ``"0.0000007"``."""
    return format(value, "f")


def parse_usd(text: str, what: str = "--allocation") -> Decimal:
    """An amount in USD that ``what`` (a flag, a field) gave as text.

    Raises:
        ConfigError: it is not a finite amount >= 0.
    """
    try:
        amount = Decimal(text)
    except InvalidOperation:
        raise ConfigError(f"{what} {text!r} is not an amount in USD") from None
    if not amount.is_finite() or amount < 0:
        raise ConfigError(
            f"{what} {text} must be a finite amount >= 0 USD",
            hint="--allocation 5 allows $5 of provider spend",
        )
    return amount
