"""The optional seccomp layer: a filter bubblewrap installs before the program starts.

It refuses ``socket(AF_UNIX, ...)`` (no talking to host daemons through a
socket that slipped in), ``io_uring`` (a large kernel attack surface) and
``ptrace``. It needs libseccomp, reached through ``pyseccomp``; without
them the layer is reported inactive, and the other layers still hold.
"""

from __future__ import annotations

import errno
import functools
import os
import socket

__all__ = ["BLOCKED", "seccomp_program"]

BLOCKED = ("af_unix_sockets", "io_uring", "ptrace")


@functools.cache
def seccomp_program() -> bytes | None:
    """The compiled BPF program, or None when libseccomp is not available here."""
    try:
        import pyseccomp as seccomp

        rules = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
        for name in ("ptrace", "io_uring_setup", "io_uring_enter", "io_uring_register"):
            rules.add_rule(seccomp.ERRNO(errno.EPERM), name)
        rules.add_rule(
            seccomp.ERRNO(errno.EAFNOSUPPORT), "socket", seccomp.Arg(0, seccomp.EQ, socket.AF_UNIX)
        )
        read_end, write_end = os.pipe()
        with os.fdopen(write_end, "wb") as out:
            rules.export_bpf(out)
        with os.fdopen(read_end, "rb") as source:
            return source.read()
    except (ImportError, OSError, RuntimeError, ValueError):
        return None
