"""Continued pretraining's learning rate: what `train --init-from SOURCE` trains at when --lr is not given, and why.

In:  the source's width (`hidden_size` of its architecture) and, where the source records it, the training config it
     was trained with: a clozeforge RUN's checkpoint holds it (`train_config`); a clozeforge export holds it in its
     model card (README.md, the "Train config" table downstream/export.py writes), read here by `card_training`.
Out: a Rate: the value, and the reason `clozeforge train` prints in one line at start (trainer/pretrain.py).

The rule, in order:
  1. The rate the source's own training used (its peak `lr`), where the RUN or the export's card records it: it is
     the rate that trained that model, at its size, with this trainer's optimizer and schedule.
  2. Otherwise (a HuggingFace directory, an export whose card is gone) `1e-4 x 768 / hidden_size`: BERT-base's rate
     (Devlin et al. 2019: 1e-4 at width 768) scaled as 1/width, the µP rule for Adam's hidden weights (Yang et
     al. 2022, "Tensor Programs V") applied to the whole model. Published per-size rates fall the same way:
     RoBERTa's base and large (768 and 1,024 wide) pretrained at 6e-4 and 4e-4 (Liu et al. 2019, Table 9), GPT-3's
     models from 6e-4 at width 768 to 0.6e-4 at 12,288 (Brown et al. 2020, Table 2.1). BERT-large itself used
     1e-4, where the rule says 7.5e-5. It gives: tiny (128 wide) 6e-4, mini (256) 3e-4, small (512) 1.5e-4,
     base (768) 1e-4, large (1,024) 7.5e-5. Checked on tiny and mini continued on man pages: held-out MLM accuracy
     +0.057 and +0.044 in 1,500 steps, against +0.024 and +0.019 at 1e-4 and +0.096 and +0.102 at the rates they
     were trained at (trainer/start/README.md): the rule is the conservative fallback, the record comes first.
A resumed --init-from run keeps the rate it started with (RUN/train_config.json), as its schedule does.
"""

from __future__ import annotations

import dataclasses
import math
import posixpath

BASE_WIDTH, BASE_LR = 768, 1e-4
"""BERT-base's width and the rate it pretrained at: the point the width rule scales from."""
CARD_FILE = "README.md"
CARD_SECTION = "## Train config"
"""The heading of the table of the run's TrainConfig in an export's model card (downstream/export.py `_model_card`
titles each card key: "train_config" -> "Train config")."""


@dataclasses.dataclass(frozen=True)
class Rate:
    """A learning rate and why it was chosen."""

    value: float
    why: str

    def line(self) -> str:
        """What start-up prints: `lr 0.0006: <why>`."""
        return f"lr {self.value:g}: {self.why}"


def by_width(hidden_size: int) -> float:
    """1e-4 x 768 / hidden_size, to 3 significant digits (BERT-base: exactly 1e-4)."""
    return float(f"{BASE_LR * BASE_WIDTH / hidden_size:.3g}")


def width_rate(hidden_size: int, missing: str) -> Rate:
    """The width rule's rate, `missing` saying why the source's own rate is not used."""
    return Rate(by_width(hidden_size), f"{missing}; the width rule 1e-4 x 768 / hidden_size ({hidden_size}) (BERT-base's "
                                      "rate scaled as 1/width, µP-style: trainer/start/rate.py)")


def recorded_rate(training: dict | None) -> float | None:
    """The peak `lr` a recorded training config holds (a number, or the text a card table shows), or None."""
    if not training or "lr" not in training:
        return None
    try:
        value = float(training["lr"])
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) and value > 0 else None


def for_source(hidden_size: int, training: dict | None, where: str | None) -> Rate:
    """Rule 1 when `training` (read from `where`) records a usable rate, else rule 2 (see the module)."""
    value = recorded_rate(training)
    if value is not None:
        return Rate(value, f"the rate the source's own training used ({where})")
    missing = (f"{where} records no usable lr" if training else
               "the source records no training rate (a clozeforge run or export does)")
    return width_rate(hidden_size, missing)


def card_training(text: str) -> dict[str, str] | None:
    """The rows of a model card's "Train config" table (`| key | value |`, values as the card shows them), or None
    when the card has no such table (a card that clozeforge did not write, an export of an older version)."""
    lines = text.splitlines()
    try:
        start = lines.index(CARD_SECTION)
    except ValueError:
        return None
    rows: dict[str, str] = {}
    for line in lines[start + 1:]:
        if line.startswith("#"):
            break
        line = line.strip()
        if not (line.startswith("|") and line.endswith("|")):
            continue
        key, _, value = line[1:-1].partition("|")  # a key has no "|"; a JSON value may
        key, value = key.strip(), value.strip()
        if key and key != "key" and not set(key) <= {"-"}:
            rows[key] = value
    return rows or None


def read_card(fs, root: str, url: str) -> tuple[dict[str, str] | None, str | None]:
    """(the training config of the model card in directory `root` of `fs`, where it was read), or (None, None)."""
    try:
        text = fs.cat_file(posixpath.join(root, CARD_FILE)).decode("utf-8", errors="replace")
    except (FileNotFoundError, IsADirectoryError):
        return None, None
    training = card_training(text)
    return (training, f"{url}/{CARD_FILE}, its train config") if training else (None, None)
