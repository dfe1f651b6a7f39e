"""The control socket's protocol: a versioned handshake, then length-prefixed msgspec frames.

Every frame is a 4-byte big-endian length and a msgspec JSON body. The client
opens with :class:`Hello` (``role`` is ``control`` for requests, ``events``
for the read-only event subscription); the daemon answers :class:`Welcome`
or :class:`Refused`. On a control connection each request gets one reply:
:class:`Ok` or :class:`Failed`.
"""

from __future__ import annotations

import struct
from typing import Any, Literal

import anyio.abc
import msgspec

from mw_errors import ConfigError

__all__ = [
    "FRAME_SECONDS",
    "PROTOCOL_VERSION",
    "Cancel",
    "Event",
    "Failed",
    "Hello",
    "ListCampaigns",
    "Ok",
    "Refused",
    "Request",
    "Resume",
    "Shutdown",
    "Status",
    "Submit",
    "Tail",
    "Welcome",
    "encode_frame",
    "read_frame",
    "write_frame",
]

PROTOCOL_VERSION = 1
MAX_FRAME = 8 << 20


class Hello(msgspec.Struct, frozen=True, tag=True):
    version: int
    role: Literal["control", "events"]


class Welcome(msgspec.Struct, frozen=True, tag=True):
    version: int
    pid: int


class Refused(msgspec.Struct, frozen=True, tag=True):
    reason: str


class Submit(msgspec.Struct, frozen=True, tag=True):
    kind: str  # a registered campaign kind (mw_actors.kinds): serve-learn, editing
    tag: str
    spec: dict[str, Any]  # written to the daemon's registry: never a key
    # Provider keys by variable name, held in the daemon's memory for this campaign only.
    secrets: dict[str, str] = {}

    def __repr__(self) -> str:
        return f"Submit(kind={self.kind!r}, tag={self.tag!r}, spec={self.spec!r})"


class ListCampaigns(msgspec.Struct, frozen=True, tag=True):
    pass


class Status(msgspec.Struct, frozen=True, tag=True):
    tag: str


class Cancel(msgspec.Struct, frozen=True, tag=True):
    tag: str


class Resume(msgspec.Struct, frozen=True, tag=True):
    tag: str


class Tail(msgspec.Struct, frozen=True, tag=True):
    tag: str
    records: int = 20


class Shutdown(msgspec.Struct, frozen=True, tag=True):
    pass


Request = Submit | ListCampaigns | Status | Cancel | Resume | Tail | Shutdown


class Ok(msgspec.Struct, frozen=True, tag=True):
    result: Any = None


class Failed(msgspec.Struct, frozen=True, tag=True):
    code: str
    message: str
    hint: str = ""


class Event(msgspec.Struct, frozen=True, tag=True):
    """One thing that happened; ``lagged`` counts events this subscriber missed before it."""

    tag: str
    what: str
    detail: dict[str, Any] = {}
    lagged: int = 0


Message = Hello | Welcome | Refused | Request | Ok | Failed | Event
_decoder = msgspec.json.Decoder(Message)
_encoder = msgspec.json.Encoder()


def encode_frame(message: Any) -> bytes:
    """One frame: a 4-byte big-endian length, then the message as msgspec JSON."""
    body = _encoder.encode(message)
    return struct.pack(">I", len(body)) + body


async def write_frame(stream: anyio.abc.ByteSendStream, message: Any) -> None:
    await stream.send(encode_frame(message))


async def _exactly(stream: anyio.abc.ByteReceiveStream, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        data += await stream.receive(size - len(data))
    return bytes(data)


# A frame that has begun arrives whole within this many seconds (a client may wait as
# long as it likes between frames, never within one).
FRAME_SECONDS = 10.0


async def read_frame(
    stream: anyio.abc.ByteReceiveStream, *, frame_seconds: float = FRAME_SECONDS
) -> Any:
    """The next message; once its first byte is here, the rest within ``frame_seconds``.

    Raises:
        anyio.EndOfStream: the peer closed the connection.
        TimeoutError: a frame begun and not finished in time (the caller hangs up).
        ConfigError: a frame too large or not a message.
    """
    first = await stream.receive(4)
    with anyio.fail_after(frame_seconds):
        (size,) = struct.unpack(">I", first + await _exactly(stream, 4 - len(first)))
        if size > MAX_FRAME:
            raise ConfigError(f"a control frame of {size} bytes is over the {MAX_FRAME} limit")
        body = await _exactly(stream, size)
    try:
        return _decoder.decode(body)
    except msgspec.DecodeError as exc:
        raise ConfigError(f"not a control message: {exc}") from None
