"""experiments/adapt.py's scorer (held-out MLM accuracy by `clozeforge score`'s scorer, with transformers) on a tiny export and real man-page prose: the
masks are BERT's 15% of each line's non-special tokens (at least one), the same for every model of the vocabulary and
on every call, and a model scored against itself gains exactly 0."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("transformers")

from experiments import adapt  # noqa: E402
from downstream.export import export_hf  # noqa: E402
from downstream.finetune.builtin.man_sections import paragraphs, read_page  # noqa: E402
from tests.helpers import learned_vocab_dir  # noqa: E402
from trainer.model import BertForPretraining, ModelConfig  # noqa: E402


@pytest.fixture(scope="module")
def lines(tmp_path_factory) -> str:
    """Prose paragraphs of one real man page (ls(1)), one a line."""
    page = next(p for p in ("/usr/share/man/man1/ls.1.gz", "/usr/share/man/man1/cp.1.gz") if os.path.exists(p))
    text = [p for p in paragraphs(read_page(page), min_words=6)][:12]
    path = tmp_path_factory.mktemp("lines") / "heldout.txt"
    path.write_text("\n".join(text) + "\n", encoding="utf-8")
    return str(path)


def _export(path, vocab: str, seed: int) -> str:
    shape = ModelConfig(vocab_size=300, hidden_size=32, num_layers=1, num_heads=2, intermediate_size=48, max_position_embeddings=64)
    export_hf(BertForPretraining(shape, seed=seed).state_dict(), shape, vocab, str(path))
    return str(path)


def test_the_scorer_masks_15_percent_the_same_way_every_time_and_pairs_models(lines, tmp_path):
    with open(lines, encoding="utf-8") as f:
        texts = f.read().splitlines()
    vocab = learned_vocab_dir(tmp_path / "vocab", texts, vocab_size=300)
    a, b = _export(tmp_path / "a", vocab, 1), _export(tmp_path / "b", vocab, 2)
    first = adapt.score([a, b], lines, seed=0)
    assert first == adapt.score([a, b], lines, seed=0)  # the same masks and figures on every call
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(a)
    ids = tokenizer(texts, truncation=True, max_length=tokenizer.model_max_length)["input_ids"]
    expected = sum(max(1, round(0.15 * (len(x) - 2))) for x in ids)  # [CLS] and [SEP] are never selected
    assert first["lines"] == len(texts) == 12 and first["masked_tokens"] == expected
    assert abs(first["gain"]["mlm_acc"] - (first["models"][b]["mlm_acc"] - first["models"][a]["mlm_acc"])) <= 1e-4
    itself = adapt.score([a, a], lines, seed=0)
    assert itself["gain"] == {"of": a, "over": a, "mlm_acc": 0.0, "se": 0.0}
    assert adapt.score([a], lines, seed=1)["masked_tokens"] == expected  # another seed: other positions, the same count
