"""The learning-rate schedule: warm-up as a fraction of --max-steps by default, --warmup-steps as an explicit
override, the decay after it, and the one-line warning when an explicit warm-up leaves no decay."""

from __future__ import annotations

import pytest

from tests.helpers import run_cli
from trainer.builders import lr_lambda
from trainer.config import TrainConfig, TrainError


def config(**kw) -> TrainConfig:
    return TrainConfig(data="pairs", output="run", **kw)


@pytest.mark.parametrize("max_steps", [10, 100, 600, 5000])
def test_default_warmup_is_a_fraction_of_the_run(max_steps):
    c = config(max_steps=max_steps)
    assert c.warmup == round(c.warmup_ratio * max_steps)
    factor = lr_lambda(c)
    peak = max(range(max_steps), key=factor)
    assert peak == max(c.warmup - 1, 0)  # the peak is where warm-up ends, whatever the run length
    assert factor(max_steps - 1) < 0.5 * factor(peak)  # and the run decays after it
    assert c.schedule_warning() is None


def test_warmup_steps_overrides_the_ratio():
    c = config(max_steps=1000, warmup_steps=10, warmup_ratio=0.5)
    assert c.warmup == 10
    factor = lr_lambda(c)
    assert [factor(s) for s in (0, 4, 9)] == [0.1, 0.5, 1.0]
    assert factor(10) == 1.0 and factor(505) == pytest.approx(0.5)


def test_warmup_ratio_zero_starts_at_the_peak():
    factor = lr_lambda(config(max_steps=100, warmup_ratio=0.0))
    assert factor(0) == 1.0 and factor(50) == pytest.approx(0.5)


@pytest.mark.parametrize("warmup, max_steps, word", [(100, 100, "at"), (100, 50, "before")])
def test_explicit_warmup_without_decay_is_warned_in_one_line(warmup, max_steps, word):
    warning = config(max_steps=max_steps, warmup_steps=warmup).schedule_warning()
    assert warning is not None and "\n" not in warning
    assert f"--warmup-steps {warmup} >= --max-steps {max_steps}" in warning and f"ends {word} its peak" in warning


def test_constant_schedule_has_nothing_to_warn_about():
    assert config(max_steps=10, warmup_steps=20, schedule="constant").schedule_warning() is None


@pytest.mark.parametrize("kw, message", [({"warmup_ratio": 1.0}, "--warmup-ratio must be in [0, 1)"),
                                         ({"warmup_ratio": -0.1}, "--warmup-ratio must be in [0, 1)"),
                                         ({"warmup_steps": -1}, "--warmup-steps must be >= 0")])
def test_bad_warmup_is_refused(kw, message):
    with pytest.raises(TrainError, match=message.replace("[", r"\[").replace(")", r"\)")):
        config(**kw)


def test_old_run_files_with_warmup_steps_still_load():
    """A train_config.json written before --warmup-ratio existed names warmup_steps, and means exactly that."""
    old = config(max_steps=500).to_dict() | {"warmup_steps": 100}
    old.pop("warmup_ratio")
    assert TrainConfig.from_dict(old).warmup == 100


@pytest.mark.integration
def test_the_warning_is_printed_at_start(prepped, tmp_path):
    result = run_cli("train", "--data", f"{prepped}/pairs", "--output", str(tmp_path / "run"), "--max-steps", "2",
                     "--warmup-steps", "5", "--batch-size", "4", "--eval-every", "0", "--eval-batches", "1", "--num-workers", "0")
    assert result.returncode == 0, result.stderr[-2000:]
    lines = [line for line in result.stdout.splitlines() if line.startswith("warning: --warmup-steps")]
    assert lines == [("warning: --warmup-steps 5 >= --max-steps 2: the learning rate never decays (the run ends before its peak); "
                      "use --warmup-ratio or fewer --warmup-steps")]
