"""Provider faults as a table: what the meter must record for each, and what it charges."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Charge = Literal["zero", "actual", "reserved"]


@dataclass(frozen=True)
class WireFault:
    fault: str  # the provider's fault for this request (mw_actors.provider.FAULTS)
    stream: bool
    status: str  # the ledger status the meter must write
    charge: Charge
    client_error: bool  # whether the client sees an error


WIRE_FAULTS = [
    WireFault("none", stream=False, status="ok", charge="actual", client_error=False),
    WireFault("none", stream=True, status="ok", charge="actual", client_error=False),
    WireFault(
        "rate_limited", stream=False, status="upstream_error", charge="zero", client_error=True
    ),
    WireFault(
        "server_error", stream=True, status="upstream_error", charge="reserved", client_error=True
    ),
    WireFault("reset_mid_stream", stream=True, status="cut", charge="reserved", client_error=True),
    WireFault(
        "cut_before_usage", stream=True, status="unmetered", charge="reserved", client_error=False
    ),
    WireFault("slow_drip", stream=True, status="ok", charge="actual", client_error=False),
    # The last event, then the body held open (no end): the answer and its line come at
    # once; the meter stops reading the rest within a second (the client waits 20 s at most).
    WireFault("hold_after_done", stream=False, status="ok", charge="actual", client_error=False),
    WireFault("hold_after_done", stream=True, status="ok", charge="actual", client_error=False),
    # A whole answer is fetched as a stream: a chunk that is not JSON breaks it (502), and
    # the usage that still came is what it is charged.
    WireFault("malformed_json", stream=False, status="ok", charge="actual", client_error=True),
    WireFault("malformed_json", stream=True, status="ok", charge="actual", client_error=True),
]

# Chunk-size lines another HTTP reader takes differently than Python's int(x, 16) does
# (request smuggling's material): each is a 400 and a closed connection.
BAD_CHUNK_SIZES = [b"-1", b"0x3", b"1_0", b" +3", b"0" * 17]
