"""Each package's public face: a sorted, complete ``__all__``."""

from __future__ import annotations

import importlib
import subprocess
import sys
import types

import pytest

PACKAGES = [
    "meters",
    "mw_actors",
    "mw_actors.daemon",
    "mw_actors.editing",
    "mw_actors.grid",
    "mw_actors.journal",
    "mw_actors.metering",
    "mw_actors.serve_learn",
    "mw_actors.testing",
    "mw_errors",
    "sandbox",
]


@pytest.mark.parametrize("name", PACKAGES)
def test_all_is_sorted_and_complete(name: str) -> None:
    module = importlib.import_module(name)
    exported = list(module.__all__)
    # isort style, as ruff's RUF022 keeps it: CONSTANTS, then Classes, then functions
    assert exported == sorted(exported, key=lambda s: (not s.isupper(), not s[0].isupper(), s))
    public = {
        attr
        for attr, value in vars(module).items()
        if not attr.startswith("_")
        and not isinstance(value, types.ModuleType)
        and attr not in ("annotations",)
    }
    assert public == set(exported), sorted(public ^ set(exported))


def test_error_tree_has_one_root() -> None:
    import mw_errors

    for attr in mw_errors.__all__:
        cls = getattr(mw_errors, attr)
        assert issubclass(cls, mw_errors.MwError)
        assert cls.code and cls.hint
        assert attr in (mw_errors.__doc__ or ""), f"{attr} is not drawn in the tree"


def test_import_mw_actors_loads_no_http_stack() -> None:
    """The actor vocabulary needs no HTTP (asyncio itself brings ssl; structlog, rich)."""
    stack = ("httpx", "httpcore", "h11", "certifi", "meters")
    probe = f"import sys, mw_actors; print(sorted(m for m in {stack!r} if m in sys.modules))"
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.strip() == "[]"


def test_import_mw_actors_loads_no_console_renderer() -> None:
    """structlog (and through it rich and pygments) loads at the first event, not at import."""
    heavy = ("structlog", "rich", "pygments")
    probe = (
        "import sys, mw_actors, mw_actors.journal; "
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({heavy!r})))"
    )
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.strip() == "[]"


def test_a_logger_made_at_import_follows_the_configuration_made_after() -> None:
    """A module's logger is made at import, the host configures structlog later: it is obeyed."""
    probe = (
        "import mw_actors._core as core\n"
        "log = core.get_logger('mw.probe')\n"
        "import structlog\n"
        "from structlog.testing import capture_logs\n"
        "with capture_logs() as seen:\n"
        "    log.bind(run='r1').info('hello', n=3)\n"
        "print(seen)\n"
    )
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert loaded.returncode == 0, loaded.stderr
    assert "'event': 'hello'" in loaded.stdout and "'run': 'r1'" in loaded.stdout


def test_public_objects_report_their_public_module() -> None:
    import mw_actors
    import mw_actors.journal
    import mw_actors.metering
    import mw_actors.testing

    for module in (mw_actors, mw_actors.journal, mw_actors.metering, mw_actors.testing):
        for name in module.__all__:
            obj = getattr(module, name)
            if isinstance(obj, type | types.FunctionType) and obj.__module__.startswith(
                "mw_actors"
            ):
                import msgspec

                if isinstance(obj, type) and issubclass(obj, msgspec.Struct):
                    continue  # msgspec resolves a Struct's annotations in its own module
                # A name in two faces (VirtualClock is a clock and a testing helper) reports
                # the first, the vocabulary's.
                home = "mw_actors" if name in mw_actors.__all__ else module.__name__
                assert obj.__module__ == home, (name, obj.__module__)
    assert repr(mw_actors.ActorRef) == "<class 'mw_actors.ActorRef'>"


def test_a_name_that_moved_says_where_it_went() -> None:
    import mw_actors

    with pytest.raises(
        AttributeError, match=r"mw_actors.read_journal moved: import it from mw_actors.journal"
    ):
        mw_actors.read_journal  # noqa: B018
    with pytest.raises(AttributeError, match=r"from mw_actors\.metering"):
        mw_actors.start_meter  # noqa: B018
    assert mw_actors.metering.start_meter.__module__ == "mw_actors.metering"
