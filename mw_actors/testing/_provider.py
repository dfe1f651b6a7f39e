"""A real provider on loopback for the length of a block."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import msgspec

from ..provider import Engine, FaultPlan, Provider, serve_provider

__all__ = ["LocalProvider", "local_provider"]


class LocalProvider(msgspec.Struct, frozen=True):
    """A provider being served: the object (its statistics, its engine) and its base URL."""

    provider: Provider
    url: str  # http://127.0.0.1:PORT/v1, as an OpenAI client's base_url
    port: int


@asynccontextmanager
async def local_provider(
    engine: Engine | None = None,
    faults: FaultPlan | None = None,
    *,
    api_key: str | None = None,
) -> AsyncIterator[LocalProvider]:
    """Serve a provider on a free loopback port until the block ends.

    ``engine`` defaults to the scripted one; ``api_key`` makes the provider answer 401
    to a request without it, as a hosted one does.
    """
    provider = Provider(engine, faults, api_key=api_key)
    async with anyio.create_task_group() as tg:
        port = await tg.start(serve_provider, provider)
        yield LocalProvider(provider, f"http://127.0.0.1:{port}/v1", port)
        tg.cancel_scope.cancel()
