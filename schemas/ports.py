"""A free TCP port on the loopback interface, for the rendezvous of ranks started on this machine (and tests)."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port nothing listens on right now (the OS picks it; a race with another process is possible, and rare)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
