"""`clozeforge demo`, the README's first command, end to end on a small built-in corpus.

It runs with what the `prep` and `train` extras install and nothing of `dev`: transformers is hidden from
every process of the run (a sitecustomize on PYTHONPATH puts None in sys.modules, which makes `import
transformers` fail and importlib.util.find_spec return None), as on a machine that installed only those.
"""

from __future__ import annotations

import json
import os

import pytest

from downstream.finetune.builtin import DEMO
from tests.helpers import HANG_S, run_cli

pytestmark = pytest.mark.integration  # starts processes (CLI, Beam workers, DeepSpeed ranks, servers)


def test_demo_runs_end_to_end_without_dev_packages(tmp_path):
    shadow = tmp_path / "no-transformers"
    shadow.mkdir()
    (shadow / "sitecustomize.py").write_text("import sys\nsys.modules['transformers'] = None\n")
    work = tmp_path / "demo"
    result = run_cli("demo", "--workdir", str(work), "--corpus-mb", "0.4", "--steps", "12", "--ranks-check-steps", "4",
                     env={"PYTHONPATH": str(shadow)}, timeout=HANG_S)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert "transformers is not installed" in result.stdout
    assert "[MASK] 1:" in result.stdout  # the fill-mask example ran on the export
    assert "precision: " in result.stdout  # the trainer said which arithmetic it chose
    for path in ("prep/report.json", "prep/pairs/manifest.json", "run/metrics.jsonl", "run/curves.png", "run-2-ranks/metrics.jsonl",
                 "hf/config.json", "hf/model.safetensors", "hf/tokenizer.json"):
        assert os.path.exists(work / path), path
    with open(work / "prep" / "report.json") as f:
        report = json.load(f)
    # every built-in task is written before prep, and its validation and test text kept out of pretraining
    tasks = sorted(p.name for p in (work / "tasks").iterdir())
    assert set(DEMO) <= set(tasks) or not os.path.isdir("/usr/share/man/man1")
    assert sorted(report["config"]["decontaminate"]) == sorted(str(work / "tasks" / t / f"{s}.jsonl") for t in tasks
                                                               for s in ("test", "validation"))
    sources = {os.path.basename(path).split("-")[0] for path in report["files"]}  # the documentation, counted per source
    assert {"docstrings", "man", "info"} == sources or not os.path.isdir("/usr/share/man/man1")


def test_a_rerun_reuses_an_identical_prep_and_redoes_a_changed_one(tmp_path, capfd):
    """Issue 26's closing note: every rerun of the demo redid prep (about a minute) to the same bytes. Now a
    finished prep is reused when the corpus bytes, the prep flags and prep's code are what its fingerprint
    recorded and its files still hash as they did; anything else runs prep again (a real prep process here)."""
    from demo.prep_cache import prep as demo_prep
    from pipelines.outputs import fingerprint
    from tests.pipelines.test_prep_promises import write_corpus

    corpus, work = tmp_path / "corpus", tmp_path / "demo"
    corpus.mkdir()
    work.mkdir()
    write_corpus(corpus, 30)
    glob, prep = str(corpus / "*.jsonl"), work / "prep"
    flags = ["--input", f"docstrings={glob}", "--output", str(prep), "--vocab-size", "200", "--progress", "never", "--overwrite"]

    said: list[str] = []

    def prep_ran() -> bool:
        said.append(capfd.readouterr().out)
        assert ("pipelines.prep" in said[-1]) != ("== prep: reusing" in said[-1]), said[-1][-2000:]
        return "pipelines.prep" in said[-1]

    demo_prep(str(work), glob, flags)
    assert prep_ran()
    written = {p: p.stat().st_mtime_ns for p in prep.rglob("*") if p.is_file()}
    demo_prep(str(work), glob, flags)
    assert not prep_ran() and {p: p.stat().st_mtime_ns for p in prep.rglob("*") if p.is_file()} == written
    stamp = str(work / ".prep-fingerprint.json")
    digest = fingerprint.inputs_fingerprint([glob], flags)
    assert fingerprint.stale(stamp, str(prep), digest) is None
    assert fingerprint.stale(stamp, str(prep), fingerprint.inputs_fingerprint([glob], [*flags, "--seed", "7"])) is not None
    shard = next((prep / "pairs").glob("*.arrow"))
    shard.write_bytes(shard.read_bytes() + b"x")
    assert fingerprint.stale(stamp, str(prep), digest) == "its files changed since it was written"
    with open(corpus / "a.jsonl", "a") as f:
        f.write('{"text": "One more document about the river. It has two sentences."}\n')
    demo_prep(str(work), glob, flags)
    assert prep_ran() and "== prep: running again (the corpus, the prep settings or prep's code changed)" in said[-1]
    assert fingerprint.stale(stamp, str(prep), fingerprint.inputs_fingerprint([glob], flags)) is None



def test_demo_seed_is_the_pretraining_seed_and_defaults_to_trains():
    """`clozeforge demo --seed N` reaches both of its training runs' --seed; without it the demo trains from train's own
    default seed (the figures published for the demo)."""
    from demo.command import demo_parser
    from demo.flows import train_command
    from trainer.config import TrainConfig

    def seed_of(argv):
        command = train_command(demo_parser().parse_args(argv), "PAIRS")
        return command[command.index("--seed") + 1]

    assert seed_of(["--seed", "7"]) == "7"
    assert seed_of([]) == str(TrainConfig.__dataclass_fields__["seed"].default)
