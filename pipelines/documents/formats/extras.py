"""The optional packages a reader needs, imported when a file of its format is read."""

from __future__ import annotations

import importlib

from pipelines.errors import PrepError


def require(module: str, extra: str, path: str):
    """`module` imported, or a PrepError naming the extra that brings it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise PrepError(f"{path}: reading it needs {module}: pip install 'clozeforge[{extra}]'") from None
