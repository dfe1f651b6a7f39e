"""Dated, versioned price tables. Money is exact: Decimal US dollars, never floats.

The file format (``prices.json``)::

    {"schema_version": 1, "date": "YYYY-MM-DD",
     "models": {"<model id as sent>": {"input_per_mtok": "0.10",
                                       "cached_input_per_mtok": "0.05",
                                       "output_per_mtok": "0.40",
                                       "max_output_tokens": 8192}}}

Prices are USD per million tokens, written as decimal strings. A model that
is not in the table is refused, never counted as $0.
"""

from __future__ import annotations

import datetime
import functools
import re
from decimal import Decimal, InvalidOperation
from pathlib import Path

import msgspec

from mw_errors import ConfigError, UnpricedModel

from ._usage import Usage

__all__ = [
    "PRICES_SCHEMA_VERSION",
    "ModelPrice",
    "PriceTable",
    "load_prices",
    "parse_prices",
]

PRICES_SCHEMA_VERSION = 1
MILLION = Decimal(1_000_000)
# No real model costs less than this per million tokens unless it is free: a smaller
# non-zero number is a per-token price typed where a per-million price belongs.
SMALLEST_PER_MTOK = Decimal("0.001")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


class ModelPrice(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    input_per_mtok: str
    cached_input_per_mtok: str
    output_per_mtok: str
    max_output_tokens: int

    def decimal(self, field: str) -> Decimal:
        return Decimal(getattr(self, field))

    def rates(self) -> tuple[Decimal, Decimal, Decimal]:
        """Input, cached input and output USD per million tokens (parsed once per price)."""
        return _rates(self)


@functools.lru_cache(maxsize=1024)
def _rates(price: ModelPrice) -> tuple[Decimal, Decimal, Decimal]:
    return (
        Decimal(price.input_per_mtok),
        Decimal(price.cached_input_per_mtok),
        Decimal(price.output_per_mtok),
    )


class PriceTable(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A checked price table. Use :func:`load_prices` or :func:`parse_prices`."""

    schema_version: int
    date: str
    models: dict[str, ModelPrice]

    def price(self, model: str) -> ModelPrice:
        """The price of ``model`` exactly as the request names it.

        Raises:
            UnpricedModel: the table has no price for it.
        """
        try:
            return self.models[model]
        except KeyError:
            known = ", ".join(sorted(self.models)) or "none"
            raise UnpricedModel(
                f"model {model!r} has no price in the table dated {self.date} (priced: {known})"
            ) from None

    def cost(self, model: str, usage: Usage) -> Decimal:
        """Exact USD cost of ``usage``. Cached input is part of input, charged at its own price."""
        input_rate, cached_rate, output_rate = self.price(model).rates()
        uncached = usage.input_tokens - usage.cached_input_tokens
        total = (
            uncached * input_rate
            + usage.cached_input_tokens * cached_rate
            + usage.output_tokens * output_rate
        )
        return total / MILLION

    def output_ceiling(self, model: str, requested: int | None) -> int:
        """The output tokens a request is reserved for: its own limit, else the model's.

        Raises:
            UnpricedModel: the table has no price for ``model``.
        """
        return self.price(model).max_output_tokens if requested is None else requested

    def worst_case(self, model: str, input_tokens: int, output_tokens: int | None) -> Decimal:
        """The most a request can cost: all input uncached, output at its ceiling."""
        price = self.price(model)
        input_rate, _, output_rate = price.rates()
        ceiling = price.max_output_tokens if output_tokens is None else output_tokens
        return (input_tokens * input_rate + ceiling * output_rate) / MILLION

    def encode(self) -> bytes:
        return msgspec.json.format(msgspec.json.encode(self), indent=2) + b"\n"


def _check(table: PriceTable, source: str) -> PriceTable:
    if table.schema_version != PRICES_SCHEMA_VERSION:
        raise ConfigError(
            f"{source}: prices schema_version {table.schema_version} is not "
            f"{PRICES_SCHEMA_VERSION}",
            hint="convert the file to the current schema",
        )
    try:
        if not _DATE.match(table.date):
            raise ValueError
        datetime.date.fromisoformat(table.date)
    except ValueError:
        raise ConfigError(f"{source}: date {table.date!r} is not YYYY-MM-DD") from None
    if not table.models:
        raise ConfigError(f"{source}: no models are priced")
    for model, price in table.models.items():
        for field in ("input_per_mtok", "cached_input_per_mtok", "output_per_mtok"):
            where = f"{source}: {model}.{field}"
            try:
                value = price.decimal(field)
            except InvalidOperation:
                raise ConfigError(f"{where} = {getattr(price, field)!r} is not a decimal") from None
            if not value.is_finite() or value < 0:
                raise ConfigError(f"{where} = {value} must be a finite price >= 0")
            if 0 < value < SMALLEST_PER_MTOK:
                raise ConfigError(
                    f"{where} = {value} looks like a price per token, not per million tokens",
                    hint=f"write USD per million tokens: {value * MILLION} for this one",
                )
        if price.max_output_tokens < 1:
            raise ConfigError(f"{source}: {model}.max_output_tokens must be >= 1")
    return table


def parse_prices(data: bytes, source: str = "prices") -> PriceTable:
    """Decode and check a prices file.

    Raises:
        ConfigError: the file is malformed, a price has the wrong unit, or a field is missing.
    """
    try:
        table = msgspec.json.decode(data, type=PriceTable)
    except msgspec.DecodeError as exc:
        raise ConfigError(
            f"{source}: {exc}", hint="see the prices format in docs/design/meters.md"
        ) from None
    return _check(table, source)


def load_prices(path: str | Path) -> PriceTable:
    """Read and check a prices file.

    Raises:
        ConfigError: as :func:`parse_prices`, or the file cannot be read.
    """
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read prices file {path}: {exc.strerror}") from None
    return parse_prices(data, str(path))
