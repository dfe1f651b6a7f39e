"""The mwm learner's ``codex`` backend: ``codex exec`` in the sandbox, on the world-model files.

As the seeds run it: Codex CLI is the learner session. Its workspace is the
sandbox's scratch, holding

- ``evidence.md``: the block's evidence, as the built-in loop shows it
  (its episodes' records; never an evaluator, never a serving task);
- ``evidence.json``: every served episode so far, for the fitting script;
- ``fit_adapter``: trains the adapter on ``evidence.json`` and writes
  ``adapter.safetensors`` and ``card.md`` (the world model, ``worldmodel.py``,
  sits beside it);
- ``.codex/``: Codex's home; its provider is the learner meter, reached through
  the sandbox's one forward (:class:`sandbox.Forward`), named on Codex's command
  line; it speaks Responses.

Codex's own sandbox is off (``danger-full-access``): ours holds (its own
network namespace, read-only system, no Unix sockets, dropped privileges). Its
API key is a placeholder: the learner meter injects the real one, which never
enters the sandbox. After the session, ``card.md`` and ``adapter.safetensors``
are read back into the new version; the scratch stays under
``learner/sessions/block-K/`` (Codex's rollout included) as the session's
record. Usage comes from ``codex exec --json`` (``turn.completed``); the
learner meter's ledger has every request.
"""

from __future__ import annotations

import json
import shutil
import sys
from decimal import Decimal
from pathlib import Path

import anyio
import msgspec

import meters
import sandbox
from mw_errors import ProviderRefused

from ._learner import LearnerEndpoint, LearnerUsage, ensure_card, evidence_text
from ._worldmodel import Served

__all__ = ["CodexInstall", "CodexSession", "find_codex", "run_codex_session"]

PROMPT = """\
You maintain the world model of a deployment. This directory holds it: \
card.md (what it believes, markdown; the agent reads it in its system prompt) \
and adapter.safetensors (what answers queries about which action scores best \
for a case). The records of the latest block's served episodes are below and \
in evidence.md.

1. Run ./fit_adapter to train the adapter on every served episode so far (it \
rewrites card.md).
2. Add to card.md what the latest block taught.
3. Say that the world model is updated.

Use one command per turn.

"""

FIT_ADAPTER = """\
#!{python}
\"\"\"Train the world model's adapter on evidence.json; write adapter.safetensors, card.md.\"\"\"
import json
import sys
from pathlib import Path

here = Path(__file__).resolve().parent
sys.path.insert(0, str(here))
import msgspec  # noqa: E402
from worldmodel import Served, fit  # noqa: E402

served = msgspec.json.decode((here / "evidence.json").read_bytes(), type=list[Served])
manual = (here / "manual.md").read_text() if (here / "manual.md").exists() else ""
fit(served, now={block}, manual=manual).save(here, {version})
print(f"adapter trained on {{len(served)}} episodes; card.md rewritten")
"""


class CodexInstall(msgspec.Struct, frozen=True):
    """Where Codex CLI's native binary lives, and what it needs beside it."""

    binary: str
    root: str  # the package directory, bound read-only into the sandbox
    path: tuple[str, ...] = ()  # directories for PATH inside (its rg)


class CodexSession(msgspec.Struct, frozen=True):
    """How the campaign runs Codex: the install, the sandbox backend, where sessions go."""

    install: CodexInstall
    meter_port: int  # the learner meter, on the host's loopback
    sessions: str  # a directory; block K's scratch is sessions/block-K
    backend: str = "bwrap"
    python: str = sys.executable  # the Python (with torch) that runs fit_adapter
    timeout: float = 1800.0


def find_codex(on_path: str | None) -> CodexInstall | None:
    """Codex's native binary, from the ``codex`` found on PATH (npm's shim or the binary).

    npm installs a JavaScript shim; the binary is in the platform package beside it
    (``@openai/codex-linux-x64/vendor/<triple>/bin/codex``), which runs without node.
    """
    if on_path is None:
        return None
    found = Path(on_path).resolve()
    if found.is_file() and found.read_bytes()[:4] == b"\x7fELF":
        return CodexInstall(binary=str(found), root=str(found.parent))
    package = found.parent.parent  # .../@openai/codex (bin/codex.js)
    for candidates in (package.parent, package / "node_modules" / "@openai"):
        for binary in sorted(candidates.glob("codex-linux-*/vendor/*/bin/codex")):
            vendor = binary.parent.parent
            extra = vendor / "codex-path"
            return CodexInstall(
                binary=str(binary),
                root=str(vendor),
                path=(str(extra),) if extra.is_dir() else (),
            )
    return None


def _collect(scratch: Path, out: Path, block: int) -> None:
    """The new version: the card and the adapter the session left in its workspace."""
    out.mkdir(parents=True, exist_ok=True)
    for name in ("card.md", "adapter.safetensors", "cases.jsonl"):
        if (scratch / name).is_file():
            shutil.copyfile(scratch / name, out / name)
    ensure_card(out, block)


async def run_codex_session(
    session: CodexSession,
    endpoint: LearnerEndpoint,
    served: list[Served],
    block: int,
    out: Path,
    manual: str = "",
) -> LearnerUsage:
    """Learn version ``block + 1`` into ``out`` with ``codex exec`` in the sandbox.

    Raises:
        SandboxUnavailable: the sandbox cannot start (fails closed: no Codex outside it).
        ProviderRefused: Codex ended without a completed turn (its requests failed).
    """
    from .. import _tensorfile
    from . import _rules, _standins, _worldmodel

    scratch = Path(session.sessions) / f"block-{block}"

    def fresh() -> None:  # a session cut by a crash is re-run whole
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.parent.mkdir(parents=True, exist_ok=True)

    await anyio.to_thread.run_sync(fresh)
    limits = sandbox.Limits(
        wall_seconds=session.timeout,
        processes=1024,  # Codex's runtime threads count against the uid's processes
        address_space=64 * 1024**3,  # Codex and torch reserve address space generously
        output_bytes=16 * 1024**2,
    )
    config = sandbox.SandboxConfig(
        scratch=str(scratch), binds=(session.install.root,), limits=limits
    )
    text = await anyio.to_thread.run_sync(evidence_text, served, block, manual)  # it fits rules
    async with sandbox.open_sandbox(session.backend, config) as box:
        await box.write_file("evidence.md", text.encode() + b"\n")
        await box.write_file("evidence.json", msgspec.json.encode(served))
        await box.write_file("manual.md", manual.encode())
        await box.write_file("worldmodel.py", await anyio.Path(_worldmodel.__file__).read_bytes())
        await box.write_file("rules.py", await anyio.Path(_rules.__file__).read_bytes())
        await box.write_file("standins.py", await anyio.Path(_standins.__file__).read_bytes())
        await box.write_file("tensorfile.py", await anyio.Path(_tensorfile.__file__).read_bytes())
        script = FIT_ADAPTER.format(python=session.python, block=block, version=block + 1)
        await box.write_file("fit_adapter", script.encode())
        await anyio.Path(scratch / "fit_adapter").chmod(0o755)
        # Codex wants its home to exist; its provider comes on the command line, where the
        # relay writes the forward's port in for {forward_port}.
        await box.write_file(".codex/config.toml", b"")
        argv = [
            session.install.binary, "exec", "--json", "--skip-git-repo-check",
            "--dangerously-bypass-approvals-and-sandbox", "-m", endpoint.model,
            "-c", "model_provider=mw",
            "-c", "model_providers.mw={name=\"mw learner meter\", "
            "base_url=\"http://127.0.0.1:{forward_port}/v1\", env_key=\"MW_CODEX_KEY\", "
            "wire_api=\"responses\"}",
            PROMPT + text,
        ]  # fmt: skip
        path = ":".join([*session.install.path, str(Path(session.python).parent), "/usr/bin:/bin"])
        result = await box.exec(
            argv,
            input=b"",
            env={
                "HOME": "/scratch",
                "CODEX_HOME": "/scratch/.codex",
                "MW_CODEX_KEY": "injected-by-the-learner-meter",
                "PATH": path,
            },
            forward=sandbox.Forward("127.0.0.1", session.meter_port),
        )
    usage = meters.Usage()
    turns = 0
    for line in result.stdout.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("type") == "turn.completed":
            turns += 1
            counted = event.get("usage") or {}
            usage += meters.Usage(
                input_tokens=int(counted.get("input_tokens", 0)),
                cached_input_tokens=int(counted.get("cached_input_tokens", 0)),
                output_tokens=int(counted.get("output_tokens", 0)),
            )
    await anyio.Path(scratch / "codex.jsonl").write_text(result.stdout)
    if not result.ok or turns == 0:
        raise ProviderRefused(
            f"codex exec ended without a completed turn (exit {result.exit_code}, "
            f"signal {result.signal}): {result.stderr.strip()[-300:]}"
        )
    await anyio.to_thread.run_sync(_collect, scratch, out, block)
    cost = endpoint.prices.cost(endpoint.model, usage) if usage.input_tokens else Decimal(0)
    return LearnerUsage(
        turns=turns,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cost_usd=meters.usd(cost),
        finished=True,
    )
