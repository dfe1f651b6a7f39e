"""Every async test runs on asyncio and on trio, under a watchdog that dumps
the tasks of a hung test instead of hanging CI."""

from __future__ import annotations

import functools
import inspect
import os
import random
import sys
import traceback
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import anyio
import pytest

ASYNC_TEST_TIMEOUT = float(os.environ.get("MW_TEST_TIMEOUT", "60"))
SLOW_TEST_TIMEOUT = 600  # seconds; a slow test's hang guard unless it names its own
# Every limit is a hang guard, never a measure of speed: a busy machine (both cores
# loaded beside `make test`'s three workers) runs a test several times slower than an
# idle one did when its limit was set, and must not fail it for that.
HANG_GUARD_SCALE = float(os.environ.get("MW_TEST_HANG_SCALE", "3"))
WATCHDOG_MARGIN = 30.0  # seconds pytest-timeout waits past an async test's watchdog


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def seed(request: pytest.FixtureRequest) -> int:
    """A random seed, printed so a failure can be replayed with MW_TEST_SEED."""
    value = int(os.environ.get("MW_TEST_SEED", random.randrange(2**32)))
    print(f"\n{request.node.nodeid}: seed={value} (replay with MW_TEST_SEED={value})")
    return value


def _asyncio_stacks() -> Iterator[str]:
    import asyncio

    for task in asyncio.all_tasks():
        frames = task.get_stack(limit=50)
        lines = traceback.format_list(traceback.extract_stack(frames[-1])[-1:]) if frames else []
        coro_lines = []
        coro: Any = task.get_coro()
        while coro is not None:  # walk the await chain, innermost last
            frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
            if frame is not None:
                coro_lines.append(
                    f"  {frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_name}\n"
                )
            coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
        yield f"task {task.get_name()}:\n" + "".join(coro_lines or lines)


def _trio_stacks() -> Iterator[str]:
    import trio

    def walk(task: trio.lowlevel.Task) -> Iterator[str]:
        frames = [f for f, _ in task.iter_await_frames()]
        where = "".join(traceback.format_stack(frames[-1], limit=1)) if frames else " (no frames)\n"
        yield f"task {task.name}:\n{where}"
        for nursery in task.child_nurseries:
            for child in nursery.child_tasks:
                yield from walk(child)

    yield from walk(trio.lowlevel.current_root_task())


def task_dump() -> str:
    stacks = _trio_stacks() if "trio" in sys.modules and _on_trio() else _asyncio_stacks()
    return "\n".join(stacks)


def _on_trio() -> bool:
    import sniffio

    return sniffio.current_async_library() == "trio"


def _watchdog(
    fn: Callable[..., Coroutine[Any, Any, None]], limit: float
) -> Callable[..., Coroutine[Any, Any, None]]:
    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> None:
        dump: list[str] = []

        async def watch(scope: anyio.CancelScope) -> None:
            await anyio.sleep(limit)
            dump.append(task_dump())
            scope.cancel()

        error: BaseException | None = None
        async with anyio.create_task_group() as tg:
            tg.start_soon(watch, tg.cancel_scope)
            try:
                await fn(*args, **kwargs)
            except BaseException as exc:  # re-raised outside the task group, unwrapped
                error = exc
            finally:
                tg.cancel_scope.cancel()
        if dump:
            pytest.fail(f"test hung for {limit} s; its tasks:\n{dump[0]}")
        if error is not None:
            raise error

    return wrapper


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("slow") and not item.get_closest_marker("timeout"):
            # A slow test does minutes of real work on a busy machine: its limit is a hang
            # guard, never a measure of speed (bench/ measures that).
            item.add_marker(pytest.mark.timeout(SLOW_TEST_TIMEOUT))
        named = item.get_closest_marker("timeout")  # a slow test names its own limit
        is_async = isinstance(item, pytest.Function) and inspect.iscoroutinefunction(item.obj)
        default = ASYNC_TEST_TIMEOUT if is_async else float(config.getini("timeout"))
        limit = (float(named.args[0]) if named and named.args else default) * HANG_GUARD_SCALE
        # An async test's own watchdog fires first, with its tasks' dump; pytest-timeout after.
        guard = limit + WATCHDOG_MARGIN if is_async else limit
        item.add_marker(pytest.mark.timeout(guard), append=False)
        if is_async:
            assert item.get_closest_marker("anyio"), f"{item.nodeid}: mark the module anyio"
            item.obj = _watchdog(item.obj, limit)
