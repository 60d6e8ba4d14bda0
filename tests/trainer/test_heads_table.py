"""The table of pretraining outputs (trainer/heads.py): a new head is one row and one module, and its loss reaches
metrics.jsonl, the progress line and curves.png with no other edit; ELECTRA's rtd is on the line and the curves."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.helpers import HANG_S, ROOT

from trainer import heads
from trainer.heads import HEADS, IGNORE_INDEX, Head, Target

TOY = Head("toy", "mlm_labels", 0.5, (Target("mlm_positions", position=True), Target("mlm_labels", fill=IGNORE_INDEX)),
           "whether each masked token's id is even", exported=False, module="tests.trainer.toy_head")
"""The test's one row; its module is tests/trainer/toy_head.py."""


def test_the_table_names_every_shipped_head_and_its_fill():
    assert list(HEADS) == ["mlm", "nsp", "sbo", "rtd"]
    assert heads.loss_keys() == ("loss", "mlm_loss", "nsp_loss", "sbo_loss", "rtd_loss")
    targets = heads.prediction_targets()
    assert {k: t.fill for k, t in targets.items() if t.fill} == {"mlm_labels": IGNORE_INDEX, "sbo_labels": IGNORE_INDEX}
    assert sorted(k for k, t in targets.items() if t.position) == ["mlm_positions", "sbo_left", "sbo_right"]
    assert heads.project_only_prefixes() == ("sbo.", "heads.")


def test_span_masking_declares_the_sbo_head_and_the_network_follows_it():
    from trainer.config import RESUME_RULES
    from trainer.masking import MASKING_STRATEGIES

    assert {name: s.heads for name, s in MASKING_STRATEGIES.items()} == {"bert": (), "wwm": (), "span": ("sbo",)}
    rule = next(r for r in RESUME_RULES if r.setting == "masking_family")
    assert rule.value({"masking": {"strategy": "span"}}) and not rule.value({"masking": {"strategy": "wwm"}})


def test_the_progress_line_and_the_curves_carry_electras_rtd(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    from trainer.metrics import MetricsLog

    record = {"step": 1, "loss": 21.0, "mlm_loss": 6.0, "rtd_loss": 0.3, "lr": 1e-3, "tokens_per_s": 100.0}
    with MetricsLog(str(tmp_path), 2, log=lambda _: None) as log:
        log.write(record)
        log.progress(record)
        log.write({"step": 1, "split": "validation", "mlm_loss": 6.1, "mlm_acc": 0.1, "rtd_loss": 0.4, "rtd_acc": 0.9})
    assert "(mlm 6.000 rtd 0.300)" in capsys.readouterr().out
    assert {"train rtd", "valid rtd", "valid rtd accuracy"} <= drawn_labels(tmp_path)


def drawn_labels(run_dir) -> set[str]:
    """The legend entries trainer/metrics.py's plot_curves draws for RUN (what curves.png shows)."""
    import matplotlib.figure

    from trainer.metrics import plot_curves

    seen: set[str] = set()
    save = matplotlib.figure.Figure.savefig

    def record(fig, *args, **kwargs):
        seen.update(t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts())
        return save(fig, *args, **kwargs)

    matplotlib.figure.Figure.savefig = record
    try:
        assert plot_curves(str(run_dir)) == os.path.join(str(run_dir), "curves.png")
    finally:
        matplotlib.figure.Figure.savefig = save
    return seen


TRAIN = """
import sys
from process import cpu_sharing
cpu_sharing.apply()
if sys.argv[1] == "toy":  # the row, registered as a user's code would before training
    from tests.trainer.test_heads_table import TOY
    from trainer.heads import HEADS
    HEADS["toy"] = TOY
from trainer.pretrain import main
sys.exit(main(sys.argv[2:]))
"""
"""One training process (DeepSpeed keeps its process group for the life of a process: one run each)."""


def _train(prepped: str, run: str, registered: bool) -> str:
    """Four steps of the tiny model on one rank, evaluated at steps 2 and 4; its stdout."""
    argv = ["--data", f"{prepped}/pairs", "--output", run, "--max-steps", "4", "--batch-size", "4", "--log-every", "1",
            "--eval-every", "2", "--eval-batches", "2", "--num-workers", "0", "--zero-stage", "0", "--precision", "fp32"]
    result = subprocess.run([sys.executable, "-c", TRAIN, "toy" if registered else "-", *argv], cwd=ROOT,
                            capture_output=True, text=True, timeout=HANG_S)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return result.stdout


@pytest.mark.integration  # starts training processes
@pytest.mark.parametrize("registered", [True, False])
def test_a_toy_head_is_one_row_and_one_module(prepped, tmp_path, monkeypatch, registered):
    """With the row, the toy loss is in metrics.jsonl (training and validation), on the progress line and in
    curves.png's legend; without it (the check that this test can fail), in none of them."""
    pytest.importorskip("matplotlib")
    if registered:
        monkeypatch.setitem(HEADS, "toy", TOY)
    run = str(tmp_path / "run")
    printed = _train(prepped, run, registered)
    with open(os.path.join(run, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f if line.strip()]
    train = [r for r in records if "split" not in r]
    valid = [r for r in records if r.get("split") == "validation"]
    assert len(train) == 4 and len(valid) == 2 and os.path.exists(os.path.join(run, "curves.png"))
    progress = [line for line in printed.splitlines() if line.startswith("step ")]
    assert len(progress) == 4
    labels = drawn_labels(run)
    if registered:
        assert all("toy_loss" in r for r in train) and all("toy_acc" in r and "toy_loss" in r for r in valid)
        assert all(" toy " in line for line in progress)
        assert {"train toy", "valid toy", "valid toy accuracy"} <= labels
        # the weighted sum holds it: loss = mlm + nsp + 0.5 x toy
        r = train[-1]
        assert abs(r["loss"] - (r["mlm_loss"] + r["nsp_loss"] + 0.5 * r["toy_loss"])) < 1e-4
    else:
        assert not any("toy_loss" in r for r in records)
        assert not any(" toy " in line for line in progress)
        assert not any("toy" in label for label in labels) and "train mlm" in labels
