"""The demo's table of gains (downstream/finetune/builtin/report.py): per task the paired gain ± SE and the
test bootstrap interval that finetune wrote, then the mean over tasks with its SE."""

from __future__ import annotations

import json
import math

from downstream.finetune.builtin import report


def _results(path, pretrained, scratch, gain, bootstrap=None):
    g = {"mean": gain[0], "se": gain[1], **({"bootstrap": bootstrap} if bootstrap else {})}
    arm = lambda scores, lr: {"mean": sum(scores) / len(scores), "se": 0.5, "lr": lr, "scores": scores}  # noqa: E731
    path.write_text(json.dumps({"metric": "accuracy", "pretrained": arm(pretrained, 1e-3), "baseline": arm(scratch, 3e-3),
                                "gain": g}), encoding="utf-8")
    return str(path)


def test_table_shows_each_gain_with_its_paired_se_and_bootstrap_and_the_mean(tmp_path):
    rows = report.gains({"a": _results(tmp_path / "a.json", [60, 62, 64], [50, 51, 55], (10.0, 1.0), [4.5, 15.25]),
                         "b": _results(tmp_path / "b.json", [40, 41, 42], [38, 40, 40], (1.67, 0.67))})
    assert [r["bootstrap"] for r in rows] == [[4.5, 15.25], None]
    mean, se = report.mean_gain(rows)
    assert math.isclose(mean, (10.0 + 1.67) / 2) and math.isclose(se, math.sqrt(1.0 + 0.67 ** 2) / 2)
    text = report.table(rows)
    assert "| a | accuracy | 62.0 ± 0.5 (lr 0.001) | 52.0 ± 0.5 (lr 0.003) | +10.0 ± 1.0 | [+4.5, +15.2] |" in text
    assert "| b |" in text and text.splitlines()[3].endswith("| +1.7 ± 0.7 | - |")
    assert f"**mean of 2** | | | | **{mean:+.1f} ± {se:.1f}**" in text


def test_a_shared_scratch_arm_gives_the_paired_difference_over_seeds(tmp_path):
    ours = _results(tmp_path / "ours.json", [60, 62, 64], [0, 0, 0], (0.0, 0.0))
    shared = _results(tmp_path / "shared.json", [0, 0, 0], [50, 51, 55], (0.0, 0.0))
    (row,) = report.gains({"a": ours}, {"a": shared})
    assert row["gain"] == 10.0 and math.isclose(row["se"], 1 / math.sqrt(3))  # differences 10, 11, 9 and row["bootstrap"] is None
