"""sandbox: isolation that fails closed (a library of its own; never imports mw_actors).

    async with open_sandbox("bwrap", SandboxConfig(scratch=..., inputs=[...])) as box:
        result = await box.exec(["python3", "edit.py"], timeout=60)
        artifacts = await box.export(["model.safetensors"])

Backends: ``bwrap`` (isolated, the default) and ``local-trusted`` (no
isolation, for ``--local-trusted`` only; every result says so).
``self_test`` proves the isolation before a campaign relies on it.
"""

from mw_errors import (
    OutputLimitExceeded,
    ResourceLimitExceeded,
    SandboxError,
    SandboxEscape,
    SandboxTimeout,
    SandboxUnavailable,
)

from ._backends import BACKENDS, BwrapSandbox, LocalTrustedSandbox, find_bwrap, open_sandbox
from ._contract import SCHEMA_VERSION, Artifact, ExecResult, Limits, Sandbox, SandboxConfig
from ._forward import Forward
from ._selftest import SelfTestReport, self_test

__all__ = [
    "BACKENDS",
    "SCHEMA_VERSION",
    "Artifact",
    "BwrapSandbox",
    "ExecResult",
    "Forward",
    "Limits",
    "LocalTrustedSandbox",
    "OutputLimitExceeded",
    "ResourceLimitExceeded",
    "Sandbox",
    "SandboxConfig",
    "SandboxError",
    "SandboxEscape",
    "SandboxTimeout",
    "SandboxUnavailable",
    "SelfTestReport",
    "find_bwrap",
    "open_sandbox",
    "self_test",
]
