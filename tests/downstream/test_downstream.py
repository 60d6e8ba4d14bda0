"""downstream and its CLI: fill-mask and embeddings from an export agree with transformers on the same files.

The fixture trains a tiny model for a few seconds on a handful of sentences (so its predictions mean something),
exports it with `export_hf`, and every test reads that directory back, with our loader and with transformers.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")
pa = pytest.importorskip("pyarrow")

from downstream.embed import embed_main, embed_texts, write_embeddings  # noqa: E402
from downstream.export import export_hf  # noqa: E402
from downstream.fill_mask import fill_mask, fill_mask_main, mask_windows  # noqa: E402
from downstream.load import load_exported  # noqa: E402
from schemas.vocab import SPECIAL_TOKENS  # noqa: E402
from tests.helpers import learned_vocab_dir  # noqa: E402
from trainer.data.collate import collate_pairs  # noqa: E402
from trainer.masking import Masker, MaskingConfig  # noqa: E402
from trainer.model import BertForPretraining, ModelConfig  # noqa: E402

SENTENCES = [
    "Paris is the capital of France.",
    "Berlin is the capital of Germany.",
    "Rome is the capital of Italy.",
    "The quick brown fox jumps over the lazy dog.",
    "A small model learns to fill the masked word from both sides.",
    "The museum in Madrid opens at nine o'clock every morning.",
]
TEXTS = ["Paris is the capital of France.", "The fox jumps.", "A museum opens at nine every morning in Rome."]
TRAIN_STEPS = 80  # "capital" at p=0.90 for the Rome sentence after 80 steps, 0.81 after 40


def _train(model: BertForPretraining, tokenizer: tokenizers.Tokenizer, steps: int) -> None:
    """`steps` MLM+NSP steps on SENTENCES (sentence i paired with i + 1), so the model fills [MASK] sensibly."""
    ids = {t: tokenizer.token_to_id(t) for t in SPECIAL_TOKENS}
    encoded = [np.asarray(e.ids, np.int64) for e in tokenizer.encode_batch(SENTENCES, add_special_tokens=False)]
    batch = collate_pairs(encoded, encoded[1:] + encoded[:1], np.zeros(len(encoded), bool), cls_id=ids["[CLS]"],
                          sep_id=ids["[SEP]"], pad_id=ids["[PAD]"], max_seq_len=64)
    special = batch.pop("special_mask")
    masker = Masker(MaskingConfig(mask_prob=0.3), vocab_size=model.config.vocab_size, special_ids=list(ids.values()),
                    mask_id=ids["[MASK]"])
    rng = np.random.default_rng(0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(steps):
        masked = masker(batch["input_ids"], special, rng)
        inputs = {k: torch.from_numpy(v) for k, v in {**batch, **masked}.items() if k in (
            "input_ids", "token_type_ids", "attention_mask", "mlm_positions", "mlm_labels", "next_sentence_label")}
        loss = model(**inputs)["loss"]
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    model.eval()


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    root = tmp_path_factory.mktemp("downstream")
    vocab = learned_vocab_dir(root / "vocab", SENTENCES)  # as prep writes it, the same ids on every run
    prep_tokenizer = tokenizers.Tokenizer.from_file(os.path.join(vocab, "tokenizer.json"))
    cfg = ModelConfig.preset("tiny", vocab_size=prep_tokenizer.get_vocab_size(), hidden_dropout=0.0,
                             attention_dropout=0.0, max_position_embeddings=64)
    model = BertForPretraining(cfg, seed=1)
    _train(model, prep_tokenizer, TRAIN_STEPS)
    out = str(root / "hf")
    export_hf(model.state_dict(), cfg, vocab, out)
    return {"dir": out, "model": model, "cfg": cfg, "root": root}


@pytest.fixture(scope="module")
def loaded(export):
    return load_exported(export["dir"])


def _hf_inputs(hf_dir: str, texts: list[str]) -> dict[str, torch.Tensor]:
    tokenizer = transformers.AutoTokenizer.from_pretrained(hf_dir)
    return dict(tokenizer(texts, padding=True, return_tensors="pt"))


def test_load_exported_round_trips_weights_and_logits(export, loaded):
    model, tokenizer = loaded
    assert not model.training
    original = export["model"].state_dict()
    for key, value in model.state_dict().items():
        torch.testing.assert_close(value, original[key], rtol=0, atol=0, msg=key)
    # the decoder is still tied after loading: one tensor, not a copy that would drift when fine-tuned
    assert model.cls.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight
    inputs = _hf_inputs(export["dir"], TEXTS)
    assert (inputs["attention_mask"] == 0).any()
    with torch.no_grad():
        ours = model.dense_mlm_logits(model.encode(**inputs)[0])
        reference = export["model"].dense_mlm_logits(export["model"].encode(**inputs)[0])
    torch.testing.assert_close(ours, reference, rtol=0, atol=1e-6)
    assert tokenizer.encode("Paris, Rome").ids == transformers.AutoTokenizer.from_pretrained(export["dir"])(
        "Paris, Rome")["input_ids"]


def test_fill_mask_matches_the_transformers_pipeline(export, loaded):
    model, tokenizer = loaded
    pipe = transformers.pipeline("fill-mask", model=export["dir"], device="cpu")
    for text in ("Berlin is the [MASK] of Germany.", "The [MASK] brown fox jumps over the [MASK] dog."):
        ours = fill_mask(model, tokenizer, text, top_k=4)
        theirs = pipe(text, top_k=4)
        theirs = [theirs] if isinstance(theirs[0], dict) else theirs  # one mask: a flat list
        assert len(ours) == len(theirs) == text.count("[MASK]")
        for options, reference in zip(ours, theirs):
            assert len(options) == 4
            probs = [p for _, p in options]
            assert probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1 + 1e-6
            assert [tokenizer.token_to_id(tok) for tok, _ in options] == [r["token"] for r in reference]
            np.testing.assert_allclose(probs, [r["score"] for r in reference], rtol=0, atol=1e-5)


def test_trained_model_fills_the_word_it_saw(loaded):
    model, tokenizer = loaded
    (options,) = fill_mask(model, tokenizer, "Rome is the [MASK] of Italy.", top_k=3)
    assert options[0][0] == "capital", options


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_sentence_embeddings_equal_transformers_bert_model(export, loaded, pooling):
    model, tokenizer = loaded
    vectors = embed_texts(model, tokenizer, TEXTS, pooling=pooling)
    assert isinstance(vectors, np.ndarray) and vectors.shape == (len(TEXTS), export["cfg"].hidden_size)
    inputs = _hf_inputs(export["dir"], TEXTS)
    with torch.no_grad():
        hidden = transformers.BertModel.from_pretrained(export["dir"]).eval()(**inputs).last_hidden_state
    if pooling == "cls":
        expected = hidden[:, 0]
    else:
        mask = inputs["attention_mask"].unsqueeze(-1).float()  # (batch, seq, 1)
        expected = (hidden * mask).sum(1) / mask.sum(1)
    np.testing.assert_allclose(vectors, expected.numpy(), rtol=0, atol=1e-4)
    # batching (and so padding) does not change a text's vector
    np.testing.assert_allclose(embed_texts(model, tokenizer, TEXTS, pooling=pooling, batch_size=1), vectors,
                               rtol=0, atol=1e-5)


def test_token_embeddings_are_the_mean_of_the_last_four_hidden_states(export, loaded):
    model, tokenizer = loaded
    rows = embed_texts(model, tokenizer, TEXTS, pooling="tokens", batch_size=2)
    inputs = _hf_inputs(export["dir"], TEXTS)
    with torch.no_grad():
        out = transformers.BertModel.from_pretrained(export["dir"]).eval()(**inputs, output_hidden_states=True)
    assert len(out.hidden_states) == export["cfg"].num_layers + 1  # tiny has 3 states: "last four" takes them all
    last4 = torch.stack(out.hidden_states[-4:]).mean(0)  # (batch, seq, hidden)
    lengths = inputs["attention_mask"].sum(1).tolist()
    assert [r.shape for r in rows] == [(n, export["cfg"].hidden_size) for n in lengths]
    assert len(set(lengths)) > 1  # ragged, so the rows really are cut at each text's own length
    for row, reference, n in zip(rows, last4, lengths):
        np.testing.assert_allclose(row, reference[:n].numpy(), rtol=0, atol=1e-4)


def _read_arrow(path) -> list[np.ndarray]:
    with pa.memory_map(str(path)) as source:
        table = pa.ipc.open_file(source).read_all()
    return [np.asarray(v, np.float32).reshape(s) for v, s in zip(table.column("embedding").to_pylist(),
                                                                 table.column("shape").to_pylist())]


def test_write_embeddings_round_trips_npy_and_arrow(loaded, tmp_path):
    model, tokenizer = loaded
    vectors = embed_texts(model, tokenizer, TEXTS, pooling="mean")
    write_embeddings(vectors, str(tmp_path / "v.npy"))
    np.testing.assert_array_equal(np.load(tmp_path / "v.npy"), vectors)
    write_embeddings(vectors, str(tmp_path / "v.arrow"))
    np.testing.assert_array_equal(np.stack(_read_arrow(tmp_path / "v.arrow")), vectors)
    rows = embed_texts(model, tokenizer, TEXTS, pooling="tokens")
    write_embeddings(rows, str(tmp_path / "t.arrow"))
    back = _read_arrow(tmp_path / "t.arrow")
    assert len(back) == len(rows)
    for a, b in zip(back, rows):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="ragged"):
        write_embeddings(rows, str(tmp_path / "t.npy"))
    with pytest.raises(ValueError, match=r"\.npy or \.arrow"):
        write_embeddings(vectors, str(tmp_path / "v.csv"))


def test_errors_name_what_is_wrong(export, loaded, tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_exported(str(tmp_path / "absent"))
    partial = tmp_path / "partial"
    partial.mkdir()
    with open(os.path.join(export["dir"], "config.json")) as f:
        (partial / "config.json").write_text(f.read())
    with pytest.raises(FileNotFoundError, match="model.safetensors"):
        load_exported(str(partial))
    model, tokenizer = loaded
    with pytest.raises(ValueError, match="no \\[MASK\\]"):
        fill_mask(model, tokenizer, "Paris is the capital of France.")
    for texts in (TEXTS, []):  # refused before any work, whatever the input
        with pytest.raises(ValueError, match="pooling must be one of cls, mean, max, mean_sqrt_len_tokens, tokens, got 'weightedmean'"):
            embed_texts(model, tokenizer, texts, pooling="weightedmean")


def test_no_texts_give_empty_embeddings(export, loaded):
    model, tokenizer = loaded
    assert embed_texts(model, tokenizer, [], pooling="mean").shape == (0, export["cfg"].hidden_size)
    assert embed_texts(model, tokenizer, [], pooling="tokens") == []


def test_fill_mask_cli(export, loaded, capsys):
    assert fill_mask_main([export["dir"], "Rome is the [MASK] of Italy.", "[MASK] is the capital of France.",
                           "--top-k", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "Rome is the [MASK] of Italy." and out[2] == "[MASK] is the capital of France."
    model, tokenizer = loaded
    (expected,) = fill_mask(model, tokenizer, "Rome is the [MASK] of Italy.", top_k=2)
    assert out[1] == "  [MASK] 1: " + "  ".join(f"{tok} ({p:.3f})" for tok, p in expected)


def test_cli_errors_are_one_line_and_exit_2(export, tmp_path, capsys):
    missing = str(tmp_path / "no-such-model")
    assert fill_mask_main([missing, "a [MASK]."]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and captured.err.startswith("clozeforge fill-mask: error: ")
    assert "config.json" in captured.err
    assert fill_mask_main([export["dir"], "no mask here"]) == 2
    assert capsys.readouterr().err.startswith("clozeforge fill-mask: error: no [MASK]")
    texts = tmp_path / "texts.txt"
    texts.write_text("one line\n")
    assert embed_main([missing, "--input", str(texts), "--output", str(tmp_path / "e.npy")]) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and captured.err.startswith("clozeforge embed: error: ")
    assert not (tmp_path / "e.npy").exists()


@pytest.mark.parametrize("pooling,suffix", [("cls", "npy"), ("tokens", "arrow")])
def test_embed_cli_writes_what_embed_texts_returns(export, loaded, tmp_path, capsys, pooling, suffix):
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(TEXTS[:2]) + "\n\n" + TEXTS[2] + "\n")  # a blank line is skipped
    output = tmp_path / f"e.{suffix}"
    assert embed_main([export["dir"], "--input", str(texts), "--output", str(output), "--pooling", pooling]) == 0
    assert f"embedded {len(TEXTS)} texts ({pooling})" in capsys.readouterr().out
    model, tokenizer = loaded
    expected = embed_texts(model, tokenizer, TEXTS, pooling=pooling)
    back = np.load(output) if suffix == "npy" else _read_arrow(output)
    assert len(back) == len(expected)
    for a, b in zip(back, expected):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
    if suffix == "arrow":  # each row names its text and, per token, the token its vector belongs to
        table = pa.ipc.open_file(str(output)).read_all()
        assert table.column("text").to_pylist() == TEXTS
        tokens = table.column("tokens").to_pylist()
        assert [len(t) for t in tokens] == [len(v) for v in expected]
        assert tokens[0][0] == "[CLS]" and tokens[0][-1] == "[SEP]" and "paris" in tokens[0]


def test_embed_reads_tables_through_the_one_reader_and_reports_every_record(export, loaded, tmp_path, capsys):
    """A .tsv in GLUE's layout (a text opening with a quote, a stray tab), JSONL and Parquet: each text is
    embedded whole, each record is kept or dropped with a count, and the .arrow rows name their lines."""
    import pyarrow.parquet as pq

    tsv = tmp_path / "texts.tsv"
    tsv.write_text(f"id\tsentence\n1\t\"{TEXTS[0]}\n2\ta stray\ttab\n3\t{TEXTS[1]}\n4\t\n")
    output = tmp_path / "e.arrow"
    flags = [export["dir"], "--input", str(tsv), "--output", str(output), "--text-column", "sentence"]
    assert embed_main(flags) == 2
    assert "texts.tsv:3: 3 fields, the header has 2 (--skip-bad-rows" in capsys.readouterr().err
    assert embed_main([*flags, "--skip-bad-rows"]) == 0
    err = capsys.readouterr().err
    assert "texts.tsv: 4 tsv records read, 2 kept, dropped 2: empty_text 1 (line 5), field_count 1 (line 3)" in err
    table = pa.ipc.open_file(str(output)).read_all()
    assert table.column("text").to_pylist() == [f'"{TEXTS[0]}', TEXTS[1]] and table.column("line").to_pylist() == [2, 4]
    model, tokenizer = loaded
    np.testing.assert_allclose(_read_arrow(output), embed_texts(model, tokenizer, [f'"{TEXTS[0]}', TEXTS[1]]), rtol=0, atol=1e-6)
    jsonl = tmp_path / "texts.jsonl"
    jsonl.write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS) + "\n")
    pq.write_table(pa.Table.from_pylist([{"text": t} for t in TEXTS] + [{"text": None}]), tmp_path / "texts.parquet")
    for path, dropped in ((jsonl, "blank_line 1 (line 4)"), (tmp_path / "texts.parquet", "empty_text 1 (line 4)")):
        assert embed_main([export["dir"], "--input", str(path), "--output", str(output)]) == 0
        assert f"4 {path.suffix[1:]} records read, 3 kept, dropped 1: {dropped}" in capsys.readouterr().err
        assert pa.ipc.open_file(str(output)).read_all().column("text").to_pylist() == TEXTS


def test_readme_example(export, capsys):
    """The README's fill-mask and tokenizer round-trip example runs as written on a real export."""
    import re

    readme = open(os.path.join(os.path.dirname(__file__), "..", "..", "README.md"), encoding="utf-8").read()
    marker = readme.index("test_downstream.py::test_readme_example")
    code = re.search(r"```python\n(.*?)```", readme[marker:], re.S).group(1)
    code = code.replace('MODEL_DIR = "clozeforge-demo/hf"', f"MODEL_DIR = {export['dir']!r}")
    exec(compile(code, "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert len(out.splitlines()) == 1 and out.strip()  # the top prediction for the [MASK], a word of the vocabulary


FILLER = " ".join(["the quick brown fox jumps over the lazy dog."] * 300)  # far more than the fixture's 64 positions


def test_fill_mask_reads_a_long_text_in_a_window_around_each_mask(loaded):
    model, tokenizer = loaded
    notes = []
    middle = fill_mask(model, tokenizer, f"{FILLER} Berlin is the [MASK] of Germany. {FILLER}", top_k=3, warn=notes.append)
    ends = fill_mask(model, tokenizer, f"[MASK] {FILLER} [MASK]", top_k=3, warn=notes.append)
    assert len(middle) == 1 and len(ends) == 2 and all(len(options) == 3 for options in middle + ends)
    assert len(notes) == 2 and all("\n" not in n and len(n) < 300 for n in notes)
    assert "more than the model's 64 positions: each of its 2 [MASK] is predicted from the 62 tokens around it" in notes[1]
    fill_mask(model, tokenizer, "Berlin is the [MASK] of Germany.", warn=notes.append)
    assert len(notes) == 2  # a text that fits is read whole


def test_mask_windows_keep_the_whole_width_at_the_ends_of_a_text():
    assert mask_windows(10, [3, 9], 20) == [(0, 10), (0, 10)]
    assert mask_windows(100, [0, 50, 99], 20) == [(0, 20), (40, 60), (80, 100)]


def test_a_long_text_without_a_mask_is_quoted_short(export, capsys):
    assert fill_mask_main([export["dir"], "word " * 6000]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and len(err) < 200 and "(30,000 characters)" in err
    for k in ("0", "100000"):  # checked at start: no torch error from topk
        assert fill_mask_main([export["dir"], "a [MASK].", "--top-k", k]) == 2
        assert capsys.readouterr().err.count("\n") == 1


def test_embed_decodes_strictly_and_names_the_byte(export, tmp_path, capsys):
    latin, binary, output = tmp_path / "latin.txt", tmp_path / "data.bin", tmp_path / "e.arrow"
    latin.write_bytes("Café au lait\nnaïve\n".encode("latin-1"))
    binary.write_bytes(bytes(range(256)) * 4)
    for path, message in ((latin, "latin.txt:1: invalid UTF-8 at byte column 4; pass --encoding"), (binary, "a binary file")):
        assert embed_main([export["dir"], "--input", str(path), "--output", str(output)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err and not output.exists()
    assert embed_main([export["dir"], "--input", str(latin), "--output", str(output), "--encoding", "nope"]) == 2
    assert "--encoding: unknown encoding 'nope'" in capsys.readouterr().err
    assert embed_main([export["dir"], "--input", str(latin), "--output", str(output), "--encoding", "latin-1"]) == 0
    assert pa.ipc.open_file(str(output)).read_all().column("text").to_pylist() == ["Café au lait", "naïve"]


def test_embed_names_the_texts_cut_at_the_model_positions(export, tmp_path, capsys):
    texts = tmp_path / "texts.txt"
    texts.write_text(f"{TEXTS[0]}\n{FILLER}\n")
    assert embed_main([export["dir"], "--input", str(texts), "--output", str(tmp_path / "e.npy")]) == 0
    err = capsys.readouterr().err
    assert "note: 1 text(s) longer than the model's 64 positions embedded from their first 62 tokens only (line 2)" in err
