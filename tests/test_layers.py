"""The import graph: layers point one way, and no circle crosses a folder.

DESIGN.md's layers are ``bin -> mw_actors -> meters, sandbox -> mw_errors``. The
benchmarks (``bench/``) stand where ``bin`` does: users of the library, through
its public doors like any other program.
Every import counts, at module level or inside a function (a deferred import
is still a dependency), and so does a process the library launches by module
name (``python -m ...``).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("bin", "bench", "mw_actors", "meters", "sandbox", "mw_errors")
# What each top-level package may import of the others.
ALLOWED = {
    "bin": {"mw_actors", "meters", "sandbox", "mw_errors"},
    "bench": {"bin", "mw_actors", "meters", "sandbox", "mw_errors"},  # it runs the CLI too
    "mw_actors": {"meters", "sandbox", "mw_errors"},
    "meters": {"mw_errors"},
    "sandbox": {"mw_errors"},
    "mw_errors": set(),
}
LAUNCHED = re.compile(r'"-m",\s*"([\w.]+)"')  # a child process started as `python -m NAME`


def _modules() -> dict[str, tuple[Path, bool]]:
    """Every module of the project: its dotted name -> (file, whether it is a package)."""
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            package_init = parts[-1] == "__init__"
            found[".".join(parts[:-1] if package_init else parts)] = (path, package_init)
    return found


def _imports(name: str, path: Path, package_init: bool, known: set[str]) -> set[str]:
    """The project's modules that ``name`` imports, or launches with ``-m``."""
    here = name.split(".") if package_init else name.split(".")[:-1]
    targets = []
    source = path.read_text()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = here[: len(here) - node.level + 1] if node.level else []
            prefix = ".".join([*base, *([node.module] if node.module else [])])
            targets += [f"{prefix}.{alias.name}" for alias in node.names]
    targets += LAUNCHED.findall(source)
    out = set()
    for target in targets:
        while target and target not in known:  # `from pkg import name` names pkg's module
            target = target.rpartition(".")[0]
        if target and target != name:
            out.add(target)
    return out


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _imports(name, *where, known) for name, where in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            advanced = False
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return components


def _folder(module: str, modules: dict[str, tuple[Path, bool]]) -> Path:
    return modules[module][0].parent


def test_layers_point_one_way() -> None:
    wrong = [
        f"{name} -> {target}"
        for name, targets in _graph().items()
        for target in targets
        if (top := target.split(".")[0]) != name.split(".")[0]
        and top not in ALLOWED[name.split(".")[0]]
    ]
    assert not wrong, wrong


def test_no_import_circle() -> None:
    """Not across folders, and not inside one either (a deferred import counts)."""
    circles = [
        (component, "crosses folders" if len({_folder(m, modules) for m in component}) > 1 else "")
        for modules in [_modules()]
        for component in _cycles(_graph())
    ]
    assert not circles, circles


def _reaches_a_private(name: str, target: str) -> bool:
    """Whether ``name`` imports ``target`` past a private part that is not its own.

    ``a.b._c.d`` is private to ``a.b``: only modules under ``a.b`` may import it,
    and ``a.b._c.d`` itself (past ``_d`` too) only modules under ``a.b._c``.
    """
    parts = target.split(".")
    return any(
        part.startswith("_")
        and not part.startswith("__")
        and not (name == ".".join(parts[:i]) or name.startswith(".".join(parts[:i]) + "."))
        for i, part in enumerate(parts)
    )


def test_no_module_reaches_into_another_packages_private_files() -> None:
    """The engine room (``mw_actors._core``) is entered by its front door, and a campaign
    package's records by its public ``records`` module: a private file is imported only
    from inside the package it belongs to."""
    reaching = [
        f"{name} -> {target}"
        for name, targets in _graph().items()
        for target in targets
        if _reaches_a_private(name, target)
    ]
    assert not reaching, reaching


@pytest.mark.parametrize(
    ("name", "target", "reaches"),
    [
        ("mw_actors.daemon._status", "mw_actors.serve_learn._records", True),
        ("mw_actors.serve_learn._state", "mw_actors.serve_learn._records", False),
        ("mw_actors.serve_learn._acting", "mw_actors._turns", False),
        ("mw_actors.demo", "mw_actors._core._journal", True),
        ("mw_actors._core._runtime", "mw_actors._core._journal", False),
        ("bin.mw", "mw_actors._tags", True),
        ("bench.grid", "mw_actors.grid._run", True),
    ],
)
def test_the_private_rule(name: str, target: str, reaches: bool) -> None:
    assert _reaches_a_private(name, target) is reaches


@pytest.mark.parametrize(
    ("graph", "circle"),
    [
        ({"a": {"b"}, "b": {"a"}}, True),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, True),
        ({"a": {"b", "c"}, "b": {"c"}, "c": set()}, False),
    ],
)
def test_the_circle_finder_finds_circles(graph: dict[str, set[str]], circle: bool) -> None:
    assert bool(_cycles(graph)) is circle


def test_a_launched_module_counts_as_an_import() -> None:
    source = 'argv = (sys.executable, "-m", "bin.wsm_grader")'
    assert LAUNCHED.findall(source) == ["bin.wsm_grader"]


def _reached(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every module ``start`` imports, directly or through others."""
    seen, todo = set(), [start]
    while todo:
        for target in graph.get(todo.pop(), ()):
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def test_neither_engine_imports_the_other() -> None:
    """The benchmark's engine and mw's synthetic one meet only in the neutral ``_play``."""
    graph = _graph()
    real, synthetic = "mw_actors.serve_learn._slb", "mw_actors.serve_learn._synthetic_play"
    own_loop = {synthetic, "mw_actors.serve_learn._acting", "mw_actors.serve_learn._synthetic"}
    assert not _reached(graph, real) & own_loop, _reached(graph, real) & own_loop
    assert real not in _reached(graph, synthetic)
    assert "mw_actors.serve_learn._play" in _reached(graph, real) & _reached(graph, synthetic)
