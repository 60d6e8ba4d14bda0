"""A double-array trie in darts-clone's layout: what a SentencePiece `precompiled_charsmap` holds (and `tokenizers`'
Precompiled normalizer reads).

In:  keys (byte strings without NUL) with their values (< 2**31).
Out: the array of 32-bit units, where a lookup walks as darts-clone's does:
         pos = offset(unit[0]); for each byte c: pos ^= c; unit = array[pos]; stop unless label(unit) == c;
         pos ^= offset(unit); if has_leaf(unit): array[pos] holds the value of the key read so far.
     A unit holds its label in bits 0-7, has_leaf in bit 8, its offset in bits 10-30 (shifted left 8 when bit 9 is
     set); a value unit holds value | 1 << 31, so its label never equals a byte.

Each node's children sit at base ^ label for a base no other node uses (the value at base ^ 0); bases are found
first-fit from the lowest free unit, so the same keys give the same array. The array is a whole number of 256-unit
blocks, so no walk leaves it (pos ^ c stays in the block of pos).
"""

from __future__ import annotations

from collections import deque

_LEAF = 1 << 8
_VALUE = 1 << 31
_MAX_OFFSET = 1 << 21


def _trie(keys: list[tuple[bytes, int]]) -> tuple[list[dict[int, int]], list[int | None]]:
    children: list[dict[int, int]] = [{}]
    values: list[int | None] = [None]
    for key, value in keys:
        if not key or 0 in key:
            raise ValueError(f"a key must be non-empty and hold no NUL byte: {key!r}")
        if not 0 <= value < _VALUE:
            raise ValueError(f"a value must be in [0, 2**31): {value}")
        node = 0
        for byte in key:
            child = children[node].get(byte)
            if child is None:
                child = len(children)
                children.append({})
                values.append(None)
                children[node][byte] = child
            node = child
        values[node] = value
    return children, values


def build(keys: list[tuple[bytes, int]]) -> list[int]:
    """The units of the double array holding `keys` (see the module docstring)."""
    children, values = _trie(keys)
    units = [0] * 256
    used = bytearray(256)
    used[0] = 1  # the root
    bases: set[int] = set()
    free = 1  # no unit below this one is free

    def grow(limit: int) -> None:
        while len(units) <= limit:
            units.extend([0] * 256)
            used.extend(bytes(256))

    queue = deque([(0, 0)])  # (node, its unit)
    while queue:
        node, at = queue.popleft()
        labels = ([0] if values[node] is not None else []) + sorted(children[node])
        if not labels:
            continue
        free = used.find(0, free)  # bytearray.find: the next free unit at C speed
        if free < 0:
            free = len(used)
        candidate = free
        while True:
            grow(candidate)
            base = candidate ^ labels[0]
            grow(base | 0xFF)
            if base not in bases and all(not used[base ^ label] for label in labels):
                break
            candidate = used.find(0, candidate + 1)
            if candidate < 0:
                candidate = len(used)
        offset = at ^ base
        if offset >= _MAX_OFFSET:
            raise ValueError("double array too large for a plain offset")
        bases.add(base)
        units[at] |= offset << 10
        if values[node] is not None:
            units[at] |= _LEAF
            units[base] = values[node] | _VALUE
            used[base] = 1
        for label, child in sorted(children[node].items()):
            units[base ^ label] = label
            used[base ^ label] = 1
            queue.append((child, base ^ label))
    return units


def lookup(units: list[int], key: bytes) -> list[int]:
    """Every value of a key that is a prefix of `key`, shortest first (darts-clone's commonPrefixSearch)."""
    found = []
    pos = (units[0] >> 10) << ((units[0] & (1 << 9)) >> 6)
    for c in key:
        pos ^= c
        unit = units[pos]
        if unit & (_VALUE | 0xFF) != c:
            break
        pos ^= (unit >> 10) << ((unit & (1 << 9)) >> 6)
        if unit & _LEAF:
            found.append(units[pos] & (_VALUE - 1))
    return found
