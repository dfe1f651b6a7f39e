"""sandbox: isolation for untrusted programs (a library of its own; never imports mw_actors).

The contract, the bubblewrap and local-trusted backends, and the conformance
suite land here (issue 4). Its errors root at :class:`mw_errors.SandboxError`.
"""

from mw_errors import SandboxError

__all__ = ["SandboxError"]
