"""`clozeforge score` (downstream/score.py) on tiny real exports and real text, the prose of ls(1): where the model's
prediction is known, the accuracy and the pseudo-perplexity equal a hand computation; the masks are the trainer's
(BERT's budget per line) and the same on every call; every line read is accounted for; bad input is one line."""

from __future__ import annotations

import gzip
import json
import math
import os

import pytest
import torch

pytest.importorskip("transformers")

from downstream.export import export_hf  # noqa: E402
from downstream.finetune.builtin.man_sections import paragraphs, read_page  # noqa: E402
from downstream.score import figures, score_lines  # noqa: E402
from tests.helpers import learned_vocab_dir, run_cli  # noqa: E402
from trainer.model import BertForPretraining, ModelConfig  # noqa: E402

SHAPE = dict(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=48, max_position_embeddings=64)
BOOST = 6.0
"""The log-odds the known model gives its favourite token over every other."""


def budget(n: int) -> int:
    """BERT's masked tokens in a line of n ordinary tokens, as trainer/masking.py's docstring states it."""
    return max(1, math.floor(0.15 * n + 0.5))


@pytest.fixture(scope="module")
def text():
    """Prose paragraphs of one real man page, one a line."""
    page = next(p for p in ("/usr/share/man/man1/ls.1.gz", "/usr/share/man/man1/cp.1.gz") if os.path.exists(p))
    return [p for p in paragraphs(read_page(page), min_words=6)][:16]


@pytest.fixture(scope="module")
def vocab(text, tmp_path_factory):
    return learned_vocab_dir(tmp_path_factory.mktemp("vocab") / "vocab", text, vocab_size=300)


def _export(path, vocab: str, edit=None) -> str:
    shape = ModelConfig(vocab_size=300, **SHAPE)
    state = BertForPretraining(shape, seed=1).state_dict()
    if edit:
        edit(state)
    export_hf(state, shape, vocab, str(path))
    return str(path)


@pytest.fixture(scope="module")
def known(text, vocab, tmp_path_factory):
    """(an export whose masked-LM head ignores its input and predicts one fixed distribution q, with its tokenizer,
    its favourite token, log q): the transform's LayerNorm is zeroed, so the logits are the decoder's bias, log q up
    to a constant, whatever the line says."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(vocab)
    special = set(tokenizer.all_special_ids)
    words = [t for line in text for t in tokenizer(line)["input_ids"] if t not in special]
    # the favourite: a whole word of the text, in as few of its lines as can be, so most real lines do not hold it
    whole = [t for t in set(words) if not tokenizer.convert_ids_to_tokens(t).startswith("##")]
    favourite = min(whole, key=lambda t: (sum(t in tokenizer(line)["input_ids"] for line in text), t))
    bias = torch.zeros(300)
    bias[favourite] = BOOST

    def edit(state):
        for name in ("cls.predictions.transform.LayerNorm.weight", "cls.predictions.transform.LayerNorm.bias"):
            state[name] = torch.zeros_like(state[name])
        state["cls.predictions.bias"] = bias.clone()
        state["cls.predictions.decoder.bias"] = bias.clone()

    return _export(tmp_path_factory.mktemp("known") / "hf", vocab, edit), tokenizer, favourite, bias.log_softmax(-1)


@pytest.mark.integration  # the command in a child process, as a user runs it
def test_the_figures_of_a_known_model_are_the_hand_computed_ones(known, text, tmp_path):
    """Lines of the favourite word alone (every masked token of them is predicted right) and real lines without it
    (none is): accuracy = their masked tokens' share, each line's count BERT's budget; pseudo-perplexity =
    exp(-mean log q) over every ordinary token. Read from a gzip file by URL, with blank lines in between."""
    model, tokenizer, favourite, log_q = known
    special = set(tokenizer.all_special_ids)
    word = tokenizer.convert_ids_to_tokens(favourite)
    own = [" ".join([word] * n) for n in (3, 7, 14, 20)]
    real = [line for line in text if favourite not in tokenizer(line)["input_ids"]]
    assert len(real) >= 8, real  # the text gives a real contrast
    lines = [line for pair in zip(own + real, [""] * len(own + real)) for line in pair]  # a blank after each
    path = tmp_path / "lines.txt.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    ordinary = [[t for t in tokenizer(line)["input_ids"] if t not in special] for line in own + real]
    masked_own = sum(budget(len(ids)) for ids in ordinary[:len(own)])
    masked = sum(budget(len(ids)) for ids in ordinary)
    tokens = [t for ids in ordinary for t in ids]
    pppl = math.exp(-sum(float(log_q[t]) for t in tokens) / len(tokens))

    out = tmp_path / "score.json"
    done = run_cli("score", model, "--input", f"file://{path}", "--output", str(out), "--seed", "3", "--batch-size", "5")
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == json.loads(out.read_text(encoding="utf-8"))
    assert report["lines"] == {"read": 2 * len(own + real), "scored": len(own + real), "dropped": {"blank": len(own + real), "no_token": 0},
                               "truncated": 0}
    assert report["masked_tokens"] == masked and report["pseudo_perplexity_tokens"] == len(tokens)
    assert report["mlm_accuracy"] == pytest.approx(masked_own / masked, abs=1e-4)
    assert report["pseudo_perplexity"] == pytest.approx(pppl, rel=1e-4)
    assert report["seed"] == 3


def test_the_masks_are_the_same_on_every_call_and_a_line_cut_at_the_models_length_counts(vocab, text, tmp_path):
    """The same figures on every call; each line's masked tokens are BERT's budget, whatever the seed; a line longer
    than the export's 64 positions is cut and counted, not dropped."""
    a = _export(tmp_path / "a", vocab)
    long = " ".join(text)  # far more than 64 tokens
    first = score_lines(a, [*text, long], seed=0)
    again = score_lines(a, [*text, long], seed=0)
    assert first == again
    assert first.truncated == 1 and first.line_numbers == list(range(len(text) + 1))
    assert first.tokens[-1] == 64 - 2  # [CLS] and [SEP] around what fits
    assert first.masked == [budget(n) for n in first.tokens]
    other = score_lines(a, [*text, long], seed=1)
    assert other.masked == first.masked and other.log_likelihood == first.log_likelihood  # pseudo-likelihood: no masks
    assert figures(first)["masked_tokens"] == sum(first.masked)


@pytest.mark.integration
def test_bad_input_is_one_line_with_status_2(vocab, tmp_path):
    a = _export(tmp_path / "a", vocab)
    for args, says in (((a, "--input", str(tmp_path / "missing.txt")), "--input"),
                       ((str(tmp_path / "nowhere"), "--input", str(tmp_path / "missing.txt")), "no such model directory"),
                       ((vocab, "--input", str(tmp_path / "missing.txt")), "no config.json")):
        done = run_cli("score", *args)
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and says in lines[0] and "Traceback" not in done.stderr, done.stderr
        assert lines[0].startswith("clozeforge score: error:")
