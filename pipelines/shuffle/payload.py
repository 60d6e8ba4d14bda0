"""The bytes of a value in a shuffle run file: msgpack, with prep's record types spelled out, never pickle.

In:  a value a prep shuffle carries: None, bool, int, float, str, bytes, tuples/lists and dicts of them,
     the records of pipelines/documents/records.py, and numeric numpy arrays (MinHash signatures).
Out: bytes (`encode`), and the value back (`decode`); tuples and lists both come back as tuples.

Run files live under --output, which may be a shared bucket: whoever can write there during a run could
hand a worker a crafted file. Decoding here builds only the types listed below, field by field, so a
crafted file can at worst be unreadable, and then `decode` raises a one-line PrepError naming the file.
"""

from __future__ import annotations

import dataclasses
import threading

import msgpack
import numpy as np

from pipelines.documents.records import Doc, Drop, Pair, RawDoc, TokenizedDoc
from pipelines.errors import PrepError

_RECORDS = (RawDoc, Doc, TokenizedDoc, Drop, Pair)  # a record's code is its place here: append only
_CODES = {cls: code for code, cls in enumerate(_RECORDS, start=1)}
_ARRAY = 0x20
_DTYPES = frozenset(np.dtype(t).str for t in ("u1", "u2", "u4", "u8", "i1", "i2", "i4", "i8", "f4", "f8", "?"))
_FIELDS = {cls: tuple(f.name for f in dataclasses.fields(cls)) for cls in _RECORDS}


def _default(value):
    code = _CODES.get(type(value))
    if code is not None:
        return msgpack.ExtType(code, _packers().inner.pack([getattr(value, name) for name in _FIELDS[type(value)]]))
    if isinstance(value, np.ndarray) and value.dtype.str in _DTYPES and value.ndim == 1:
        return msgpack.ExtType(_ARRAY, _packers().inner.pack([value.dtype.str, value.tobytes()]))
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"a shuffle cannot carry a {type(value).__name__}")


def _ext(code: int, data: bytes):
    if code == _ARRAY:
        dtype, raw = msgpack.unpackb(data, use_list=False)
        if dtype not in _DTYPES:
            raise ValueError(f"array of dtype {dtype!r}")
        return np.frombuffer(raw, dtype=dtype).copy()
    if not 1 <= code <= len(_RECORDS):
        raise ValueError(f"unknown record type {code}")
    cls = _RECORDS[code - 1]
    return cls(*msgpack.unpackb(data, use_list=False, ext_hook=_ext))


def encode(value) -> bytes:
    return _packers().outer.pack(value)


_local = threading.local()


def _packers() -> threading.local:
    """This thread's two Packers: `outer` for a value, `inner` for a record's fields inside it (a Packer is not
    re-entrant, and a record's fields hold no record). NOTE: reused because packb builds a Packer, with a
    1 MB buffer, for every call: a third of the cost of encoding a document."""
    if not hasattr(_local, "outer"):
        _local.outer = msgpack.Packer(default=_default, use_bin_type=True)
        _local.inner = msgpack.Packer(use_bin_type=True)
    return _local


def decode(data: bytes, where: str = "a shuffle run file under --output/.tmp-*"):
    """The value `encode` made; a PrepError naming `where` for anything else."""
    try:
        return msgpack.unpackb(data, use_list=False, ext_hook=_ext, raw=False)
    except (ValueError, TypeError, msgpack.UnpackException, msgpack.ExtraData) as e:
        raise PrepError(f"{where}: not a record this version of prep wrote ({type(e).__name__}: {e}); was it "
                        "changed by another program? Remove the run's .tmp-* directory and run again") from None
