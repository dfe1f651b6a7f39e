"""Money is exact: Decimal US dollars, written as plain decimal strings (never 7E-7)."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

from mw_errors import ConfigError

__all__ = ["MAX_USD", "USD_PLACES", "parse_usd", "usd"]

# Every amount of money mw reads is bounded: a billion dollars, to the nano-dollar. Past
# that a Decimal still holds it, but sums and prices of it overflow the context.
MAX_USD = Decimal(10) ** 9
USD_PLACES = 9


def usd(value: Decimal) -> str:
    """``value`` as a plain decimal string: ``Decimal("7E-7")`` -> ``"0.0000007"``."""
    return format(value, "f")


def parse_usd(text: str, what: str = "--allocation") -> Decimal:
    """An amount in USD that ``what`` (a flag, a field) gave as text.

    Raises:
        ConfigError: it is not a finite amount >= 0.
    """
    hint = "--allocation 5 allows $5 of provider spend"
    try:
        if len(text) > 64:
            raise InvalidOperation
        amount = Decimal(text.strip())
    except InvalidOperation:
        raise ConfigError(f"{what} {text[:64]!r} is not an amount in USD", hint=hint) from None
    if not amount.is_finite() or amount < 0 or amount > MAX_USD:
        raise ConfigError(f"{what} {text} must be an amount from 0 to {MAX_USD:,} USD", hint=hint)
    exponent = amount.normalize().as_tuple().exponent
    if isinstance(exponent, int) and exponent < -USD_PLACES:
        raise ConfigError(f"{what} {text} has more than {USD_PLACES} decimal places", hint=hint)
    return amount
