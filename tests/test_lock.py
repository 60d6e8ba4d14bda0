"""The lock (constraints.txt) agrees with pyproject.toml, and everything that installs clozeforge installs through it.

In:  constraints.txt (made by .ci/lock), pyproject.toml, .ci/torch.txt, the README's set-up commands, .ci/run, the
     Dataflow and DeepSpeed Dockerfiles, and the environment these tests run in.
Out: every dependency of every extra pinned, inside its range; the README's commands (and so CI) and both images
     install with the lock; the packages installed here are the lock's (unless .ci/deps installed other ends of the
     ranges on purpose: CLOZEFORGE_UNLOCKED).
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import tomllib
from pathlib import Path

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
LOCK = "constraints.txt"


def lock_pins(text: str) -> list[tuple[str, Version, Marker | None]]:
    """(name, version, marker) per `name==version [; marker]` line of a uv-compiled requirements file."""
    found = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        requirement = Requirement(line)
        (spec,) = requirement.specifier
        assert spec.operator == "==", line
        found.append((canonicalize_name(requirement.name), Version(spec.version), requirement.marker))
    return found


def project_requirements(pyproject: dict) -> dict[str, list[Requirement]]:
    """{"dependencies" or the extra's name: its requirements}, less the extras' references to clozeforge itself."""
    project = pyproject["project"]
    groups = {"dependencies": project["dependencies"], **project["optional-dependencies"]}
    return {name: [r for r in map(Requirement, specs) if canonicalize_name(r.name) != "clozeforge"] for name, specs in groups.items()}


def disagreements(lock: str, pyproject: dict) -> list[str]:
    """One line per requirement of pyproject.toml that the lock leaves out, or pins outside its range."""
    pins = lock_pins(lock)
    found = []
    for group, requirements in project_requirements(pyproject).items():
        for requirement in requirements:
            name = canonicalize_name(requirement.name)
            versions = [version for pinned, version, _ in pins if pinned == name]
            if not versions:
                found.append(f"{group}: {requirement} is not in {LOCK}")
            for version in versions:
                if not requirement.specifier.contains(version, prereleases=True):
                    found.append(f"{group}: {requirement} but {LOCK} pins {name}=={version}")
    return found


def test_the_lock_pins_every_dependency_of_every_extra_inside_its_range():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert disagreements((ROOT / LOCK).read_text(), pyproject) == []
    torch = Requirement(next(line for line in (ROOT / ".ci/torch.txt").read_text().splitlines() if line and not line.startswith("#")))
    assert [v for name, v, _ in lock_pins((ROOT / LOCK).read_text()) if name == "torch"] == [Version(next(iter(torch.specifier)).version)]
    assert (ROOT / LOCK).read_text().splitlines()[1].strip("# ") == ".ci/lock", "made by .ci/lock, the one command that refreshes it"


def test_a_lock_that_misses_a_dependency_or_pins_outside_its_range_is_found():
    """The check above can fail: pyproject.toml moved on and the lock did not."""
    pyproject = {"project": {"dependencies": ["pyarrow>=15"], "optional-dependencies": {
        "prep": ["apache-beam>=2.55,<2.78", "zstandard>=0.21"], "demo": ["clozeforge[prep]", "transformers>=4.40"]}}}
    lock = "apache-beam==2.78.0\n    # via clozeforge\npyarrow==25.0.1\ntransformers==4.39.0 ; python_full_version >= '3.10'\n"
    assert disagreements(lock, pyproject) == [
        f"prep: apache-beam<2.78,>=2.55 but {LOCK} pins apache-beam==2.78.0",
        f"prep: zstandard>=0.21 is not in {LOCK}",
        f"demo: transformers>=4.40 but {LOCK} pins transformers==4.39.0",
    ]


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    setup = text.split("## Set up (two commands)", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(python3 -m venv .*)\n```", setup)


def test_the_readme_commands_and_ci_install_through_the_lock():
    demo, suite = readme_commands()
    for command in (demo, suite):
        assert f"-c {LOCK} " in command, command
    assert demo.endswith("clozeforge demo") and "'.[demo]'" in demo
    ci = [line for line in (ROOT / ".ci/run").read_text().splitlines() if line.startswith("python3 -m venv")]
    assert ci == [suite], "CI runs the README's second command, verbatim"


def dockerfile_runs(path: Path) -> tuple[list[str], list[str]]:
    """(COPY sources, RUN commands) of a Dockerfile, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", "\n".join(line for line in path.read_text().splitlines() if not line.lstrip().startswith("#")))
    lines = [line.strip() for line in text.splitlines()]
    copied = [source for line in lines if line.startswith("COPY ") for source in line.split()[1:-1]]
    return copied, [line[4:] for line in lines if line.startswith("RUN ")]


@pytest.mark.parametrize("image", ["dataflow", "deepspeed"])
def test_the_images_install_through_the_lock(image):
    dockerfile = ROOT / "deploy" / image / "Dockerfile"
    copied, runs = dockerfile_runs(dockerfile)
    assert LOCK in copied
    installs = [part for run in runs for part in run.split("&&") if "pip install" in part]
    assert installs and all(f"--constraint {LOCK}" in part for part in installs), installs
    ignore = (ROOT / "deploy" / image / "Dockerfile.dockerignore").read_text().splitlines()
    assert f"!{LOCK}" in ignore, "the lock is copied, so the build context must hold it"


def test_the_dataflow_image_defaults_to_the_locked_beam():
    """The worker's SDK must be the submitting machine's Beam; both come from the lock."""
    text = (ROOT / "deploy/dataflow/Dockerfile").read_text()
    default = re.search(r"^ARG BEAM_VERSION=(\S+)$", text, re.M).group(1)
    assert [str(v) for name, v, _ in lock_pins((ROOT / LOCK).read_text()) if name == "apache-beam"] == [default]


@pytest.mark.skipif(bool(os.environ.get("CLOZEFORGE_UNLOCKED")), reason=".ci/deps installed another end of the ranges")
def test_what_is_installed_here_is_the_locked_release():
    """The suite runs on the lock: every installed distribution the lock names is at its pinned release (torch's
    local build label, `+cpu`, aside)."""
    pins = {name: version for name, version, marker in lock_pins((ROOT / LOCK).read_text()) if marker is None or marker.evaluate()}
    installed = {canonicalize_name(d.metadata["Name"]): Version(d.version) for d in importlib.metadata.distributions()}
    assert pins["apache-beam"] and pins["torch"]
    moved = {name: f"{pins[name]} locked, {version} installed" for name, version in installed.items()
             if name in pins and Version(version.public) != pins[name]}
    assert moved == {}
