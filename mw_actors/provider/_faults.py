"""Fault injection for the local provider, by configuration.

A plan is a list of faults applied to requests in turn (request n gets
``plan[n % len(plan)]``; ``"none"`` for a healthy answer), plus a latency
profile. Deterministic, so every fault test can name the request it breaks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import msgspec

from mw_errors import ConfigError

__all__ = ["FAULTS", "PAST_LIMIT", "USAGE_LIES", "FaultPlan", "Latency"]

Fault = Literal[
    "none",
    "rate_limited",  # 429 with retry-after
    "server_error",  # 500
    "reset_mid_stream",  # the connection drops halfway through a stream
    "cut_before_usage",  # the stream ends cleanly but without its usage chunk
    "slow_drip",  # one delta every `drip_seconds`
    "hold_after_done",  # the stream's last event, then its body held open (no end) a while
    "malformed_json",  # a body or chunk that is not JSON
    "ignore_max_tokens",  # the answer runs past the request's max_tokens (a provider's bug)
    # Usage that is no usage, as a lenient server may report it:
    "usage_empty",  # usage: {}
    "usage_float",  # the counts as floats (12.0)
    "usage_string",  # the counts as strings ("12")
    "usage_negative",  # the counts negative
    "cached_over_input",  # more cached tokens than input tokens
    "usage_understated",  # one output token reported, whatever was streamed
    # Output past max_tokens in a shape a meter may not count (the SDK still reads it):
    "audio_transcript",  # Chat: each delta as delta.audio.transcript
    "content_parts",  # Chat: each delta's content as a list of text parts
    "renamed_events",  # Responses: deltas under another `event:` name (the data's type is kept)
]
# The faults that answer past the request's output limit.
PAST_LIMIT = frozenset({"ignore_max_tokens", "audio_transcript", "content_parts", "renamed_events"})
USAGE_LIES = frozenset(
    {
        "usage_empty",
        "usage_float",
        "usage_string",
        "usage_negative",
        "cached_over_input",
        "usage_understated",
    }
)
FAULTS: tuple[str, ...] = Fault.__args__  # type: ignore[attr-defined]


_LATENCY_KEYS = {"ttft": "first_token_seconds", "tps": "tokens_per_second", "drip": "drip_seconds"}


class Latency(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Time to first token and tokens per second (0 = no delay)."""

    first_token_seconds: float = 0.0
    tokens_per_second: float = 0.0
    drip_seconds: float = 0.5

    def __post_init__(self) -> None:
        values = (self.first_token_seconds, self.tokens_per_second, self.drip_seconds)
        if not all(0 <= value < 86_400 for value in values):  # inf and nan fail this too
            raise ConfigError(
                f"latency values must be from 0 to 86400, not {values}",
                hint="ttft and drip are seconds, tps tokens per second",
            )

    @classmethod
    def parse(cls, spec: str, what: str = "--latency", base: Latency | None = None) -> Latency:
        """``ttft=0.2,tps=50,drip=0.5`` (each optional) over ``base``'s values.

        Raises:
            ConfigError: an unknown key, a value that is not a number, or one below 0.
        """
        fields = msgspec.structs.asdict(base or cls())
        for part in filter(None, spec.split(",")):
            key, _, value = part.partition("=")
            if key not in _LATENCY_KEYS:
                raise ConfigError(f"{what}: unknown key {key!r}", hint="use ttft=S,tps=N,drip=S")
            try:
                fields[_LATENCY_KEYS[key]] = float(value)
            except ValueError:
                raise ConfigError(f"{what}: {key}={value!r} is not a number") from None
        return cls(**fields)


class FaultPlan(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    plan: list[Fault] = msgspec.field(default_factory=lambda: ["none"])
    retry_after_seconds: int = 1
    latency: Latency = Latency()

    def fault(self, request_number: int) -> str:
        return self.plan[request_number % len(self.plan)] if self.plan else "none"

    @classmethod
    def from_file(cls, path: str | Path) -> FaultPlan:
        """Read a fault plan (JSON).

        Raises:
            ConfigError: not a valid plan; the message names the bad field.
        """
        try:
            return msgspec.json.decode(Path(path).read_bytes(), type=FaultPlan)
        except (OSError, msgspec.DecodeError) as exc:
            raise ConfigError(f"faults {path}: {exc}", hint=f"faults are {FAULTS}") from None
