"""Helpers for testing code that runs on mw: virtual time and a real local provider.

``VirtualClock`` is time that moves only when a test says so (it is also in
``mw_actors``, beside the other clocks). ``local_provider`` serves mw's
OpenAI-compatible provider on loopback for the length of a block: real HTTP,
a scripted or synthetic engine, and the fault plan a test asks for. It is what
mw's own tests stand their meters and loops on.

    async with local_provider(ScriptedEngine([Reply(content="hi")])) as served:
        client = httpx.AsyncClient(base_url=served.url)

This module loads the HTTP stack; ``import mw_actors`` does not.
"""

from __future__ import annotations

from .._core import VirtualClock
from .._public import public_module as _public_module
from ._provider import LocalProvider, local_provider

__all__ = ["LocalProvider", "VirtualClock", "local_provider"]

_public_module(globals(), __all__, __name__)
