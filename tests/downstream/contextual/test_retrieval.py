"""clozeforge retrieve (issue 44): translation retrieval's accuracy exact where the answer is known (a translation
identical to its source is found, one swapped with another pair's is not, whatever the model), the binomial SE, the
two directions scored apart, texts the model reads alike never credited, the per-side dedupe counted, a seeded
sample that does not move with prep's sharding, an XLM model fed its language ids (its vectors change with them) and
never token type ids, the tiny BERT, ELECTRA, RoBERTa and XLM models all scored, and bad input in one line. Texts
are this machine's gettext catalogs, read by prep's own catalog reader."""

from __future__ import annotations

import glob
import json
import math
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

transformers = pytest.importorskip("transformers")

from clozeforge import main as clozeforge_main
from downstream.contextual import retrieval
from downstream.contextual.encoder import Encoder
from pipelines.documents.normalize import NormalizeConfig
from pipelines.documents.parallel import Pair, catalog_pairs, clean_pair
from schemas.parallel import parallel_pair_schema
from tests.downstream.contextual.contextual_assets import tiny_export

LOCALE = "/usr/share/locale"
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def catalog(language: str, name: str, count: int, max_chars: int = 60) -> list[tuple[str, str]]:
    """The first `count` pairs of a catalog as prep keeps them, short and distinct on each side even to an uncased,
    accent-stripping vocabulary."""
    path = f"{LOCALE}/{language}/LC_MESSAGES/{name}.mo"
    if not os.path.exists(path):
        pytest.skip(f"no {path} on this machine")
    with open(path, "rb") as f:
        records = [clean_pair(r, NormalizeConfig()) if isinstance(r, Pair) else r for r in catalog_pairs(f.read(), path)]
    seen, out = set(), []
    for r in records:
        if isinstance(r, Pair) and len(r.source) <= max_chars and len(r.target) <= max_chars and "\t" not in r.source + r.target:
            keys = (r.source.lower(), r.target.lower())
            if not seen & set(keys):
                seen.update(keys)
                out.append((r.source, r.target))
    assert len(out) >= count, (path, len(out))
    return out[:count]


def write_tsv(path, rows) -> str:
    path.write_text("".join(f"{a}\t{b}\n" for a, b in rows), encoding="utf-8")
    return str(path)


def wordpiece(texts: list[str], specials: list[str] = SPECIALS):
    from tokenizers import (
        Tokenizer,
        models,
        normalizers,
        pre_tokenizers,
        processors,
        trainers,
    )

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer, tok.pre_tokenizer = normalizers.BertNormalizer(lowercase=True), pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(texts, trainers.WordPieceTrainer(vocab_size=400, special_tokens=specials))
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=[
        ("[CLS]", tok.token_to_id("[CLS]")), ("[SEP]", tok.token_to_id("[SEP]"))])
    return tok


def tiny_xlm(directory: str, texts: list[str], *, with_types: bool = False, lang2id=None) -> str:
    """A transformers XLMWithLMHeadModel (random weights, language embeddings for lang2id) beside a WordPiece fast
    tokenizer that returns input_ids and attention_mask (token_type_ids too with `with_types`, and [CLS] as token 0:
    XLM's padding row is zero, so zeros as token types would add nothing if token 0 were [PAD])."""
    tok = wordpiece(texts, ["[CLS]", *(t for t in SPECIALS if t != "[CLS]")] if with_types else SPECIALS)
    names = ["input_ids", "token_type_ids", "attention_mask"] if with_types else ["input_ids", "attention_mask"]
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                         sep_token="[SEP]", mask_token="[MASK]", model_max_length=128,
                                         model_input_names=names).save_pretrained(directory)
    lang2id = lang2id or {"en": 0, "de": 1}
    torch.manual_seed(0)
    config = transformers.XLMConfig(vocab_size=tok.get_vocab_size(), emb_dim=32, n_layers=2, n_heads=2, dropout=0.0,
                                    attention_dropout=0.0, max_position_embeddings=128, use_lang_emb=True,
                                    n_langs=len(lang2id), lang2id=lang2id, id2lang={v: k for k, v in lang2id.items()},
                                    pad_index=tok.token_to_id("[PAD]"), unk_index=tok.token_to_id("[UNK]"),
                                    bos_index=tok.token_to_id("[CLS]"), eos_index=tok.token_to_id("[SEP]"),
                                    mask_token_id=tok.token_to_id("[MASK]"), pad_token_id=tok.token_to_id("[PAD]"))
    transformers.XLMWithLMHeadModel(config).save_pretrained(directory)
    return directory


def tiny_roberta(directory: str, texts: list[str]) -> str:
    """A transformers RobertaForMaskedLM (random weights) with a byte-level BPE tokenizer trained on `texts`."""
    from tokenizers import (
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        processors,
        trainers,
    )

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer, tok.decoder = pre_tokenizers.ByteLevel(add_prefix_space=True), decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=600, special_tokens=["<s>", "<pad>", "</s>", "<unk>"],
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.post_processor = processors.RobertaProcessing(("</s>", tok.token_to_id("</s>")), ("<s>", tok.token_to_id("<s>")))
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                         unk_token="<unk>", cls_token="<s>", sep_token="</s>",
                                         model_max_length=126).save_pretrained(directory)
    torch.manual_seed(0)
    config = transformers.RobertaConfig(vocab_size=tok.get_vocab_size(), hidden_size=32, num_hidden_layers=2,
                                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=128,
                                        pad_token_id=tok.token_to_id("<pad>"))
    transformers.RobertaForMaskedLM(config).save_pretrained(directory)
    return directory


def tiny_electra(directory: str, texts: list[str]) -> str:
    """A clozeforge ELECTRA export (discriminator + generator/) with random weights, as `clozeforge export` writes it."""
    from downstream.export import export_hf
    from tests.helpers import learned_vocab_dir
    from trainer.model import ModelConfig, build

    vocab_dir = learned_vocab_dir(os.path.join(directory, "vocab"), texts, vocab_size=600)
    with open(os.path.join(vocab_dir, "vocab.txt"), encoding="utf-8") as f:
        vocab_size = sum(1 for _ in f)
    config = ModelConfig.preset("tiny", vocab_size=vocab_size, objective="electra", max_position_embeddings=128,
                                hidden_dropout=0.0, attention_dropout=0.0)
    hf = os.path.join(directory, "hf")
    export_hf(build(config).state_dict(), config, vocab_dir, hf)
    return hf


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    root = tmp_path_factory.mktemp("retrieval")
    de, fr = catalog("de", "coreutils", 60), catalog("fr", "apt", 40)
    texts = [t for rows in (de, fr) for pair in rows for t in pair]
    return {"root": root, "de": de, "fr": fr, "bert": tiny_export(str(root / "bert"), texts, positions=128),
            "xlm": tiny_xlm(str(root / "xlm"), texts)}


def run(argv, capsys) -> tuple[int, str, str]:
    capsys.readouterr()  # what the test itself printed before (transformers' loading bars)
    code = clozeforge_main(["retrieve", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def known_answer(english: list[str], identical: int) -> list[tuple[str, str]]:
    """`identical` pairs whose translation is the source itself, then the rest with each target the next pair's source
    (a rotation: every text's copy on the other side belongs to another pair). Accuracy: identical / len, both ways."""
    rest = english[identical:]
    return [(t, t) for t in english[:identical]] + [(t, rest[(i + 1) % len(rest)]) for i, t in enumerate(rest)]


@pytest.mark.parametrize("kind", ["bert", "xlm", "electra", "roberta", "scratch"])
def test_a_known_answer_is_scored_exactly_in_both_directions(assets, kind, tmp_path, capsys):
    english = [s for s, _ in assets["de"][:30]]
    model = {"bert": lambda: assets["bert"], "xlm": lambda: assets["xlm"], "scratch": lambda: assets["bert"],
             "electra": lambda: tiny_electra(str(tmp_path / "electra"), english),
             "roberta": lambda: tiny_roberta(str(tmp_path / "roberta"), english)}[kind]()
    tsv = write_tsv(tmp_path / "pairs.tsv", known_answer(english, 12))
    # en-en: an XLM model reads both sides with the same language id, so a text and its copy give one vector
    code, out, err = run([model, "--pairs", tsv, "--languages", "en-en", "--output", str(tmp_path / "r.json"),
                          "--batch-size", "7", *(["--scratch", "5"] if kind == "scratch" else [])], capsys)
    assert code == 0, err
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["weights"] == ("scratch (random, seed 5)" if kind == "scratch" else "trained")
    row = report["language_pairs"]["en-en"]
    assert (row["n"], row["read"], row["dropped"], row["indistinct"]) == (30, 30, {"same_source": 0, "same_target": 0},
                                                                         {"source": 0, "target": 0})
    se = math.sqrt(0.4 * 0.6 / 30)
    for direction in ("source_to_target", "target_to_source"):
        assert row[direction] == {"accuracy": 0.4, "se": round(se, 6), "hits": 12, "n": 30}
    assert row["hits_source_to_target"] == row["hits_target_to_source"] == "1" * 12 + "0" * 18
    assert row["language_ids"] == ({"en": 0} if kind == "xlm" else {"en": None})
    assert f"| en-en | 30 | 40.0 ± {100 * se:.1f} | 40.0 ± {100 * se:.1f} | 40.0 | 30 | 0 | 0 |" in out


def test_a_model_against_another_on_the_same_sample(assets, tmp_path, capsys):
    assert retrieval.paired_difference("1100", "1010") == {"points": 0.0, "se": round(100 * math.sqrt(2 / 3 / 4), 4)}
    assert retrieval.paired_difference("1110", "0000")["points"] == 75.0
    tsv = write_tsv(tmp_path / "de.tsv", assets["de"])
    base = ["--pairs", tsv, "--languages", "en-de", "--max-pairs", "40"]
    assert run([assets["bert"], *base, "--scratch", "1", "--output", str(tmp_path / "scratch.json")], capsys)[0] == 0
    code, out, err = run([assets["bert"], *base, "--against", str(tmp_path / "scratch.json"), "--output",
                          str(tmp_path / "r.json")], capsys)
    assert code == 0, err
    ours, theirs = (json.loads((tmp_path / n).read_text())["language_pairs"]["en-de"] for n in ("r.json", "scratch.json"))
    assert ours["sample_sha256"] == theirs["sample_sha256"] and theirs["hits_source_to_target"] != ours["hits_source_to_target"]
    for key in ("source_to_target", "target_to_source"):
        d = np.array([int(a) - int(b) for a, b in zip(ours[f"hits_{key}"], theirs[f"hits_{key}"])])
        assert ours["against"][key] == {"points": round(100 * d.mean(), 4), "se": round(100 * d.std(ddof=1) / math.sqrt(40), 4)}
        assert round(100 * (ours[key]["accuracy"] - theirs[key]["accuracy"]), 4) == ours["against"][key]["points"]
    assert f"against {assets['bert']} (scratch (random, seed 1)): points, paired SE over pairs\n  en-de: src→tgt " in out
    # another sample (another seed) is no pair: a note, and no difference
    code, _, err = run([assets["bert"], *base, "--seed", "2", "--against", str(tmp_path / "scratch.json")], capsys)
    assert code == 0 and "en-de was not scored on the same sample there" in err
    code, _, err = run([assets["bert"], *base, "--against", tsv], capsys)
    assert (code, err) == (2, f"clozeforge retrieve: error: --against {tsv}: not JSON (Expecting value: line 1 column 1 (char 0))\n")


def test_the_standard_error_and_the_two_directions_apart():
    assert retrieval.binomial_se(0.25, 100) == pytest.approx(math.sqrt(0.25 * 0.75 / 100))
    assert retrieval.binomial_se(1.0, 7) == 0.0 == retrieval.binomial_se(0.0, 7)
    angle = lambda degrees: np.array([[math.cos(math.radians(d)), math.sin(math.radians(d))] for d in degrees])
    # sources at 0, 10, 90 degrees, targets at 4, 40, 85: source 1 (10) finds target 0 (4), a miss; from the target
    # side every one finds its own (4 -> 0, 40 -> 10, 85 -> 90)
    scored = retrieval.retrieval_accuracy(angle([0, 10, 90]) * [[3.0], [0.5], [1.0]], angle([4, 40, 85]))
    assert scored["hits_source_to_target"] == "101" and scored["hits_target_to_source"] == "111"
    assert scored["source_to_target"] == {"accuracy": round(2 / 3, 6), "se": round(math.sqrt(2 / 9 / 3), 6), "hits": 2, "n": 3}
    assert scored["target_to_source"] == {"accuracy": 1.0, "se": 0.0, "hits": 3, "n": 3}
    assert scored["mean"] == round((2 / 3 + 1) / 2, 6)
    with pytest.raises(ValueError, match="two equal sides of >= 2 pairs"):
        retrieval.retrieval_accuracy(np.ones((1, 2)), np.ones((1, 2)))


def test_texts_the_model_reads_alike_cannot_be_singled_out(assets, tmp_path, capsys):
    angle = lambda degrees: np.array([[math.cos(math.radians(d)), math.sin(math.radians(d))] for d in degrees])
    # targets 0 and 1 are one group (one vector, at 2 degrees): no source can single its translation out of it, and
    # from that group both find source 0, the translation of only one of them
    scored = retrieval.retrieval_accuracy(angle([0, 5, 90]), angle([2, 88]), np.arange(3), np.array([0, 0, 1]))
    assert (scored["hits_source_to_target"], scored["hits_target_to_source"]) == ("001", "101")
    # an uncased vocabulary reads a text and its capitals alike: both pairs are misses both ways, the rest are found
    english = [s for s, _ in assets["de"][:11]]
    rows = [(t, t) for t in english] + [(english[10].upper(), english[10].upper())]
    tsv = write_tsv(tmp_path / "case.tsv", rows)
    code, _, err = run([assets["bert"], "--pairs", tsv, "--languages", "en-en", "--output", str(tmp_path / "r.json")], capsys)
    assert code == 0, err
    row = json.loads((tmp_path / "r.json").read_text())["language_pairs"]["en-en"]
    assert (row["n"], row["dropped"], row["indistinct"]) == (12, {"same_source": 0, "same_target": 0}, {"source": 2, "target": 2})
    assert row["hits_source_to_target"] == row["hits_target_to_source"] == "1" * 10 + "00"
    assert err == ("clozeforge retrieve: note: en-en: 2 source and 2 target texts read as the same tokens as another of "
                   "their side: a query whose translation is one of them is a miss\n")


def test_a_text_repeated_on_either_side_is_dropped_and_counted(assets, tmp_path, capsys):
    (a, x), (b, y), (c, z) = assets["de"][:3]
    rows = [(a, x), (a, y), (b, x), (c, z), (a, x), *assets["de"][3:20]]
    kept, dropped = retrieval.distinct_pairs([retrieval.Pair(s, t, "p", i) for i, (s, t) in enumerate(rows)])
    assert [(p.source, p.target) for p in kept] == [(a, x), (c, z), *assets["de"][3:20]]
    assert dropped == {"same_source": 2, "same_target": 1}  # (a, y) and (a, x) again; (b, x)
    tsv = write_tsv(tmp_path / "dup.tsv", rows)
    code, out, err = run([assets["bert"], "--pairs", tsv, "--languages", "en-de", "--output", str(tmp_path / "r.json")], capsys)
    assert code == 0, err
    row = json.loads((tmp_path / "r.json").read_text())["language_pairs"]["en-de"]
    assert (row["read"], row["distinct"], row["n"], row["dropped"]) == (22, 19, 19, {"same_source": 2, "same_target": 1})
    assert "| en-de | 19 |" in out and out.rstrip().endswith(f"| 22 | 2 | 1 |\nwrote {tmp_path / 'r.json'}")


def _write_shards(directory, rows_by_shard) -> str:
    folder = directory / "parallel"
    folder.mkdir(parents=True)
    schema = parallel_pair_schema()
    for i, rows in enumerate(rows_by_shard):
        table = pa.table({name: [r[name] for r in rows] for name in schema.names}, schema=schema)
        pq.write_table(table, folder / f"pairs-{i:05d}-of-{len(rows_by_shard):05d}.parquet")
    return str(directory)


def test_a_prep_output_is_read_per_language_pair_and_sampled_the_same_however_sharded(assets, tmp_path, capsys):
    rows = [{"source_language": "en", "target_language": lang, "source": s, "target": t, "path": f"{lang}.mo", "line": i}
            for lang in ("de", "fr") for i, (s, t) in enumerate(assets[lang], start=1)]
    shuffled = [rows[i] for i in np.random.default_rng(1).permutation(len(rows))]
    one, three = _write_shards(tmp_path / "one", [rows]), _write_shards(tmp_path / "three", [shuffled[i::3] for i in range(3)])
    reports = []
    for directory in (one, os.path.join(three, "parallel")):  # the output directory, or its parallel/
        output = tmp_path / f"{len(reports)}.json"
        code, out, err = run([assets["bert"], "--pairs", directory, "--max-pairs", "25", "--seed", "3", "--output",
                              str(output)], capsys)
        assert code == 0, err
        reports.append(json.loads(output.read_text()))
    first, second = (r["language_pairs"] for r in reports)
    assert list(first) == ["en-de", "en-fr"] and first == second
    assert [(first[k]["read"], first[k]["n"]) for k in first] == [(60, 25), (40, 25)]
    assert reports[0]["layer"] == 1 and reports[0]["num_layers"] == 2 and reports[0]["max_pairs"] == 25
    # the sample: 25 of the pairs, in their order, the same for the same seed and another for another seed
    de = [retrieval.Pair(s, t, "de.mo", i) for i, (s, t) in enumerate(assets["de"], start=1)]
    drawn = retrieval.sample(de, 25, 3, ("en", "de"))
    assert len(set(drawn)) == 25 and drawn == sorted(drawn, key=lambda p: p.line)
    assert drawn == retrieval.sample(de, 25, 3, ("en", "de")) != retrieval.sample(de, 25, 4, ("en", "de"))
    code, _, err = run([assets["bert"], "--pairs", one, "--languages", "en-fr", "--max-pairs", "25", "--seed", "3",
                        "--output", str(tmp_path / "fr.json")], capsys)
    assert code == 0, err
    assert json.loads((tmp_path / "fr.json").read_text())["language_pairs"] == {"en-fr": first["en-fr"]}


def test_an_xlm_model_reads_each_side_with_its_language_id(assets, tmp_path, capsys):
    encoder = Encoder(assets["xlm"])
    assert [encoder.language_id(c) for c in ("en", "de")] == [(0, None), (1, None)]
    assert encoder.language_id("de_AT") == (1, "de_AT is read as de, the model's language 1")
    assert encoder.language_id("fr") == (None, "the model's lang2id has no 'fr' (it has de, en): its texts are embedded "
                                                "without language ids")
    assert Encoder(assets["bert"]).language_id("en") == (None, None)  # no language embeddings: no langs, no note
    texts = [s for s, _ in assets["de"][:10]]
    plain, english, german = (encoder.sentences(texts, 1, language_id=i) for i in (None, 0, 1))
    for a, b in ((plain, english), (plain, german), (english, german)):
        assert np.abs(a - b).min(axis=1).max() > 0 and np.abs(a - b).max() > 1e-3
    # the same as transformers' XLMModel given langs itself, the mean over the attention mask
    tokenizer, model = transformers.AutoTokenizer.from_pretrained(assets["xlm"]), transformers.AutoModel.from_pretrained(assets["xlm"])
    enc = tokenizer(texts, padding=True, return_tensors="pt")
    assert set(enc) == {"input_ids", "attention_mask"}
    with torch.no_grad():
        states = model(**enc, langs=torch.ones_like(enc["input_ids"]), output_hidden_states=True).hidden_states[1]
    mask = enc["attention_mask"].unsqueeze(-1).float()
    np.testing.assert_allclose(german, ((states * mask).sum(1) / mask.sum(1)).numpy(), atol=1e-5)
    code, out, err = run([assets["xlm"], "--pairs", write_tsv(tmp_path / "fr.tsv", assets["fr"]), "--languages", "en-fr",
                          "--output", str(tmp_path / "r.json")], capsys)
    assert code == 0, err
    assert err.strip() == ("clozeforge retrieve: note: the model's lang2id has no 'fr' (it has de, en): its texts are "
                           "embedded without language ids")
    assert json.loads((tmp_path / "r.json").read_text())["language_pairs"]["en-fr"]["language_ids"] == {"en": 0, "fr": None}


def test_token_type_ids_never_reach_an_xlm_model(assets, tmp_path):
    """XLM adds token_type_ids as word embeddings: a tokenizer that returns them must not change the vectors."""
    texts = [s for s, _ in assets["de"][:8]]
    typed = tiny_xlm(str(tmp_path / "typed"), [t for pair in assets["de"] for t in pair], with_types=True)
    tokenizer = transformers.AutoTokenizer.from_pretrained(typed)
    enc = tokenizer(texts, padding=True, return_tensors="pt")
    assert "token_type_ids" in enc
    model = transformers.AutoModel.from_pretrained(typed)
    with torch.no_grad():
        without = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"], output_hidden_states=True)
        with_types = model(**enc, output_hidden_states=True)
    mask = enc["attention_mask"].unsqueeze(-1).float()
    mean = lambda states: ((states[2] * mask).sum(1) / mask.sum(1)).numpy()
    assert np.abs(mean(without.hidden_states) - mean(with_types.hidden_states)).max() > 1e-3  # what they would change
    np.testing.assert_allclose(Encoder(typed).sentences(texts, 2), mean(without.hidden_states), atol=1e-5)


def test_bad_input_is_one_line(assets, tmp_path, capsys):
    good = write_tsv(tmp_path / "good.tsv", assets["de"][:10])
    no_tab = tmp_path / "no_tab.tsv"
    no_tab.write_text("".join(f"{a}\t{b}\n" for a, b in assets["de"][:2]) + f"{assets['de'][2][0]} {assets['de'][2][1]}\n")
    single = write_tsv(tmp_path / "single.tsv", [assets["de"][0], (assets["de"][0][0], assets["de"][1][1])])
    prep_dir = _write_shards(tmp_path / "prep", [[{"source_language": "en", "target_language": "de", "source": s, "target": t,
                                                   "path": "de.mo", "line": i} for i, (s, t) in enumerate(assets["de"][:5])]])
    cases = [
        (["--pairs", str(tmp_path / "none.tsv"), "--languages", "en-de"], f"--pairs {tmp_path / 'none.tsv'}: no such file or directory"),
        (["--pairs", str(no_tab), "--languages", "en-de"], f"{no_tab}:3: expected source<TAB>target, found 0 tabs"),
        (["--pairs", single, "--languages", "en-de"], f"en-de: 1 distinct pair(s) in {single} (read 2, dropped "
                                                       "{'same_source': 1, 'same_target': 0}): retrieval needs at least 2"),
        (["--pairs", good], f"--pairs {good}: a TSV of source<TAB>target needs its languages: --languages SRC-TGT (one pair)"),
        (["--pairs", good, "--languages", "en-de", "--layer", "top"], "--layer top: expected middle, last or a layer number"),
        (["--pairs", good, "--languages", "en-de", "--layer", "3"], "--layer 3: no layer 3 (0 is the embedding output, 1..2 the layers)"),
        (["--pairs", good, "--languages", "en_de"], "--languages en_de: 'en_de' is not SRC-TGT (en-de, en-zh_CN)"),
        (["--pairs", prep_dir, "--languages", "en-de,en-ja"], f"--languages en-ja: not in {prep_dir} (it holds en-de)"),
        (["--pairs", good, "--languages", "en-de", "--max-pairs", "1"], "--max-pairs must be >= 2, got 1"),
    ]
    for argv, message in cases:
        code, out, err = run([assets["bert"], *argv], capsys)
        assert (code, out, err) == (2, "", f"clozeforge retrieve: error: {message}\n"), argv
    code, _, err = run([str(tmp_path / "nomodel"), "--pairs", good, "--languages", "en-de"], capsys)
    assert (code, err) == (2, f"clozeforge retrieve: error: {tmp_path / 'nomodel'}: no such model directory\n")
    pq.write_table(pa.table({"text": ["a"]}), tmp_path / "prep" / "parallel" / "pairs-00001-of-00002.parquet")
    code, _, err = run([assets["bert"], "--pairs", prep_dir], capsys)
    assert code == 2 and err.startswith("clozeforge retrieve: error: ") and "expected parallel_pairs version 1" in err
    assert len(err.splitlines()) == 1


@pytest.mark.integration
def test_held_out_pairs_from_prep_parallel_are_scored(assets, tmp_path):
    """The whole flow as a user runs it: prep --parallel over three catalogs, then retrieve on its output."""
    from tests.helpers import run_cli

    catalogs = [f"{LOCALE}/{lang}/LC_MESSAGES/{name}.mo" for lang, name in (("de", "sed"), ("fr", "sed"), ("ja", "sed"))]
    if not all(os.path.exists(p) for p in catalogs):
        pytest.skip("sed's catalogs are not installed")
    corpus = tmp_path / "c.txt"
    corpus.write_text("".join(f"{s}.\n" for s, _ in assets["de"]))
    out = tmp_path / "prep"
    result = run_cli("prep", "--input", str(corpus), "--output", str(out), "--vocab-size", "300", "--progress", "never",
                     *(a for c in catalogs for a in ("--parallel", c)), "--runner", "FnApiRunner")
    assert result.returncode == 0, result.stderr
    kept = json.loads((out / "report.json").read_text())["parallel"]["directions"]
    result = run_cli("retrieve", assets["bert"], "--pairs", str(out), "--output", str(tmp_path / "r.json"))
    assert result.returncode == 0, result.stderr
    rows = json.loads((tmp_path / "r.json").read_text())["language_pairs"]
    assert sorted(rows) == ["en-de", "en-fr", "en-ja"]
    for name, row in rows.items():
        assert row["read"] == kept[name]["kept"] and row["n"] == min(1000, row["distinct"])
        assert row["distinct"] + sum(row["dropped"].values()) == row["read"]
        assert 0 <= row["source_to_target"]["hits"] <= row["n"] and f"| {name} | {row['n']} |" in result.stdout
    assert glob.glob(str(out / "parallel" / "*.parquet"))


def test_center_and_no_langs_change_what_is_compared_and_are_recorded(assets, tmp_path, capsys):
    """--center subtracts each side's mean vector before the cosine, exactly as computed here from the Encoder's
    vectors; --no-langs embeds an XLM export's both sides without language ids."""
    tsv = write_tsv(tmp_path / "de.tsv", assets["de"][:40])
    encoder = Encoder(assets["xlm"])
    sources, targets = [s for s, _ in assets["de"][:40]], [t for _, t in assets["de"][:40]]
    for flags, ids in (((), (0, 1)), (("--no-langs",), (None, None))):
        s, t = (encoder.sentences(texts, 1, language_id=i) for texts, i in ((sources, ids[0]), (targets, ids[1])))
        expected = retrieval.retrieval_accuracy(s - s.mean(axis=0), t - t.mean(axis=0))
        out = tmp_path / f"r{len(flags)}.json"
        code, _, err = run([assets["xlm"], "--pairs", tsv, "--languages", "en-de", "--layer", "1", "--center", *flags,
                            "--output", str(out)], capsys)
        assert code == 0, err
        report = json.loads(out.read_text())
        row = report["language_pairs"]["en-de"]
        assert report["centered"] is True and report["langs"] is (not flags)
        assert row["language_ids"] == {"en": ids[0], "de": ids[1]}
        assert row["hits_source_to_target"] == expected["hits_source_to_target"]
        assert row["hits_target_to_source"] == expected["hits_target_to_source"]
