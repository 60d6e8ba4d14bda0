"""A free TCP port on the loopback interface, for the rendezvous of ranks started on this machine (and tests).

The port comes from below the kernel's ephemeral range (net.ipv4.ip_local_port_range, 32768-60999 by default).
A port the kernel hands out for `bind(("", 0))` is one it also hands to outgoing connections: between our pick
and the rank 0 that binds it, a gloo or TCPStore connection of another job on this host could take it (seen as
EADDRINUSE in a test suite running several two-rank jobs at once). Ports below that range are never given to an
outgoing connection, so the only race left is another process picking the same port at random in that instant.
"""

from __future__ import annotations

import random
import socket

EPHEMERAL_RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
LOWEST = 10000
"""The lowest port picked: below are the well-known and registered ports that services tend to take."""


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range for outgoing connections (Linux's default where the file cannot be read)."""
    try:
        with open(EPHEMERAL_RANGE_FILE) as f:
            low, high = (int(part) for part in f.read().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(tries: int = 64) -> int:
    """A port nothing listens on right now, from below the ephemeral range; the kernel's pick if none is free."""
    low, _ = ephemeral_range()
    if low - LOWEST >= tries:
        for port in random.Random().sample(range(LOWEST, low), tries):  # seeded from the OS, not the job's seed
            if _bindable(port):
                return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
