"""The tree's layers and its import graph, read from the source with `ast` (nothing is imported or run).

The flow of the house, lowest layer first: schemas/ (the contracts) ← process/ (the plumbing every job's processes
share: launch, signals, precision, threads, locks, outputs, exits) ← pipelines/ and trainer/ (the two halves) ←
downstream/ (what uses a checkpoint) ← demo/ ← clozeforge.py (the command table) ← bench/ and experiments/ (the
timings against peers, and the studies). A module may import its own layer and those below it, never one above;
pipelines/ and trainer/ do not import each other (prep never imports torch, train never imports apache_beam), nor do
bench/ and experiments/; nothing in the product imports either of them. And no import loop between modules, lazy
imports inside functions included: a loop means two modules that cannot be read, tested or moved one without the other.
"""

from __future__ import annotations

import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("schemas", "process", "pipelines", "trainer", "downstream", "demo", "bench", "experiments")
LAYER = {"schemas": 0, "process": 1, "pipelines": 2, "trainer": 2, "downstream": 3, "demo": 4, "clozeforge": 5, "bench": 6,
         "experiments": 6}
"""Each top-level part's layer: an import goes to the same layer or a lower one."""
SIBLINGS_APART = {("pipelines", "trainer"), ("trainer", "pipelines"), ("bench", "experiments"), ("experiments", "bench")}
"""Parts of one layer that never import each other."""
PRODUCT = ("schemas", "process", "pipelines", "trainer", "downstream", "demo", "clozeforge")
"""What a user installs: the parts below bench/ and experiments/."""
KNOWN_LOOPS: list[list[str]] = []
"""Loops left on purpose, each with its way out (none: export_electra's lazy import of export's ExportError went with
the pre-LN check it served, which ModelConfig already makes for ELECTRA)."""


def product_modules() -> dict[str, str]:
    """{dotted module name: path} of every product module (tests and the virtualenv left out)."""
    found = {"clozeforge": os.path.join(ROOT, "clozeforge.py")}
    for package in PACKAGES:
        for folder, dirs, files in os.walk(os.path.join(ROOT, package)):
            dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__pycache__")))
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    parts = os.path.relpath(path, ROOT)[:-3].split(os.sep)
                    if parts[-1] == "__init__":
                        parts = parts[:-1]
                    found[".".join(parts)] = path
    return found


def imports(path: str, module: str, known: dict[str, str]) -> set[str]:
    """The product modules `path` imports anywhere in it (module level, inside functions, under TYPE_CHECKING):
    `from a.b import c` is a.b.c when that is a module, else a.b; relative imports resolved against `module`."""
    tree = ast.parse(open(path, encoding="utf-8").read(), filename=path)
    package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            names.update(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names)
    found = set()
    for name in names:
        while name and name not in known:  # `import a.b.c` of a name defined in a.b, or a third-party module
            name = name.rpartition(".")[0]
        if name and name != module:
            found.add(name)
    return found


def graph() -> dict[str, set[str]]:
    known = product_modules()
    return {module: imports(path, module, known) for module, path in known.items()}


def part(module: str) -> str:
    return module.split(".")[0]


def test_the_tree_is_read_whole():
    """The reader sees every part (a renamed package would otherwise leave the rules below checking nothing)."""
    edges = graph()
    assert {part(m) for m in edges} == set(LAYER)
    assert edges["downstream.finetune.job"] >= {"downstream.finetune.loop", "downstream.finetune.protocol"}
    assert "schemas.run_dir" in edges["trainer.checkpoint.store"]
    assert "process.launch" in edges["trainer.pretrain"]


def test_the_product_never_imports_bench_or_experiments():
    """A timing or a study may import the product; the product imports neither, not even lazily: what a study decides
    becomes a default with a one-line reason and a link to experiments/README.md."""
    assert set(PRODUCT) | {"bench", "experiments"} == set(LAYER)
    wrong = sorted(f"{m} -> {t}" for m, targets in graph().items() if part(m) in PRODUCT for t in targets
                   if part(t) in ("bench", "experiments"))
    assert wrong == []


@pytest.mark.parametrize("lower", sorted(LAYER, key=LAYER.get))
def test_no_import_runs_up_a_layer(lower):
    """A module imports its own layer or a lower one: schemas/ imports none of the others, trainer/ never imports
    downstream/, and so on; pipelines/ and trainer/ not each other."""
    wrong = sorted(f"{m} -> {t}" for m, targets in graph().items() if part(m) == lower for t in targets
                   if LAYER[part(t)] > LAYER[lower] or (lower, part(t)) in SIBLINGS_APART)
    assert wrong == []


DOWNSTREAM_READS_OF_TRAINER = {
    "trainer": "the package itself, when a module below is imported",
    "trainer.model": "the network it exports, fills masks with, embeds with",
    "trainer.heads": "the network's heads (which an export drops) and the ignored label's value",
    "trainer.masking": "the masking a run trains with, by which `clozeforge score` masks held-out text",
    "trainer.checkpoint": "a run's checkpoints, read to export them",
    "trainer.config": "a run's settings (train_config.json), read beside its checkpoints",
    "trainer.metrics": "a run's metrics.jsonl, whose figures an export's card reports",
    "trainer.data.collate": "the row kinds a run trained on, whose lengths an export's card reports",
    "trainer.optim": "AdamW as both trainings build it (BERT's weight-decay groups, the fused kernel)",
}
"""What downstream/ may read of trainer/: the model and what a run wrote; never process plumbing (process/'s)."""


def test_downstream_reads_the_model_and_the_run_not_the_plumbing():
    """Fine-tuning and export take launching, signals, precision, threads, locks and exits from process/, as the
    trainer does; from trainer/ only the model and the run they read."""
    wrong = sorted(f"{m} -> {t}" for m, targets in graph().items() if part(m) == "downstream" for t in targets
                   if part(t) == "trainer" and not any(t == a or t.startswith(a + ".") for a in DOWNSTREAM_READS_OF_TRAINER
                                                       if a != "trainer") and t != "trainer")
    assert wrong == []


def test_no_import_loop():
    """No two product modules reach each other through imports (Tarjan's strongly connected components), but the
    loops KNOWN_LOOPS names (and those must still be there: one that is gone comes off the list)."""
    edges = graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    loops: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                loops.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    assert sorted(loops) == KNOWN_LOOPS


def test_a_loop_and_an_upward_import_are_seen(tmp_path):
    """The reader finds what the rules forbid: a relative import, a lazy one inside a function, a from-import of a
    module."""
    pkg = tmp_path / "schemas"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("def f():\n    from schemas.a import x\n    import trainer.loop\n")
    known = {"schemas": str(pkg / "__init__.py"), "schemas.a": str(pkg / "a.py"), "schemas.b": str(pkg / "b.py"),
             "trainer.loop": "unused"}
    assert imports(str(pkg / "a.py"), "schemas.a", known) == {"schemas.b"}
    assert imports(str(pkg / "b.py"), "schemas.b", known) == {"schemas.a", "trainer.loop"}


HOUSE_TESTS = {"test_cli.py": "clozeforge.py, the command table", "test_layers.py": "this file: the tree's layers",
               "test_isolation.py": "which half imports what", "test_lock.py": "constraints.txt and pyproject.toml",
               "test_readme.py": "README.md's checkable claims"}
"""The test files at tests/'s root: each checks a file at the repository's root, or the whole house."""
ACROSS_ROOMS = {"end_to_end": "a user's flow through every room: prep, train, export, transformers",
                "assets": "tiny files the tests read"}
"""Folders of tests/ that mirror no one room."""


def test_tests_mirror_the_rooms():
    """tests/ is laid out as the tree is: tests/ROOM/... beside ROOM/... (tests/downstream/finetune/ for
    downstream/finetune/), the house-wide files at its root, and the flows that cross every room in their own folder."""
    stray = []
    for folder, dirs, files in os.walk(os.path.join(ROOT, "tests")):
        dirs[:] = [d for d in dirs if not d.startswith((".", "__pycache__"))]
        relative = os.path.relpath(folder, os.path.join(ROOT, "tests"))
        tests = [f for f in files if f.startswith("test_") and f.endswith(".py")]
        if relative == ".":
            stray += [f for f in tests if f not in HOUSE_TESTS]
        elif relative.split(os.sep)[0] not in ACROSS_ROOMS and tests and not os.path.isdir(os.path.join(ROOT, relative)):
            stray.append(f"tests/{relative}/ (no {relative}/ in the tree)")
    assert stray == []
