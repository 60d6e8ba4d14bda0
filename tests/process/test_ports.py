"""process/ports.py: a rendezvous port that no outgoing connection of this host can take."""

from __future__ import annotations

import socket

from process import ports


def test_the_port_is_free_and_below_the_ephemeral_range():
    low, high = ports.ephemeral_range()
    assert 1024 <= low < high
    picked = {ports.free_port() for _ in range(20)}
    assert all(ports.LOWEST <= p < low for p in picked)
    assert len(picked) > 1  # picked at random, not one fixed port every job shares
    port = picked.pop()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))  # free when picked


def test_a_port_in_use_is_not_picked(monkeypatch):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        monkeypatch.setattr(ports, "LOWEST", busy)
        monkeypatch.setattr(ports, "ephemeral_range", lambda: (busy + 2, busy + 100))
        assert {ports.free_port(tries=2) for _ in range(5)} == {busy + 1}


def test_without_room_below_the_range_the_kernel_picks(monkeypatch):
    monkeypatch.setattr(ports, "ephemeral_range", lambda: (ports.LOWEST + 1, 60999))
    port = ports.free_port()
    assert port >= ports.LOWEST
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
