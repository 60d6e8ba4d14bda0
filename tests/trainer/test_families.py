"""The BERT family's rows (schemas/families.py), in process: every row's network gives its transformers class's logits
(the export and --init-from name maps, both ways), an --init-from of a transformers-made RobertaForMaskedLM or
XLMRobertaForMaskedLM gives its own logits before any update, the family a run trains is the data's (or refused in
one line), and packed rows collate as `<s> row </s>` with the document separator never masked. The DeepSpeed runs and
exports of each family are tests/end_to_end/test_roberta_xlmr.py."""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")

from downstream.export import verify_export  # noqa: E402
from schemas import ContractError, Manifest, ShardInfo, families  # noqa: E402
from schemas.pairs import PACKED_ROWS  # noqa: E402
from schemas.tokenizer_formats import WordBoundary  # noqa: E402
from trainer.builders import build_model  # noqa: E402
from trainer.config import TrainConfig, TrainError  # noqa: E402
from trainer.data.collate import collate_single  # noqa: E402
from trainer.masking import Masker, MaskingConfig  # noqa: E402
from trainer.model import BertForPretraining, ModelConfig  # noqa: E402
from trainer.model.families import spelling_of  # noqa: E402
from trainer.model.hf_names import from_transformers, to_transformers  # noqa: E402
from trainer.start.sources import ARCHITECTURE, open_source  # noqa: E402
from trainer.start.steps import family_of  # noqa: E402

TOLERANCE = 1e-5
VOCAB = 300


LANGUAGES = ("de", "en", "ja")


def _inputs(pad: int, seed: int = 0, languages: int = 0) -> dict[str, torch.Tensor]:
    """Three rows, one padded; with `languages`, token types are language ids and the rows' positions restart
    halfway through (a TLM pair's second side), as XLM's batches are."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, VOCAB, (3, 20), generator=g)
    ids[2, 14:] = pad  # a padded row
    inputs = {"input_ids": ids, "token_type_ids": torch.zeros_like(ids), "attention_mask": (ids != pad).long()}
    if languages:
        half = torch.arange(20) >= 9
        inputs["token_type_ids"] = torch.where(half, torch.tensor([[1], [2], [0]]), torch.tensor([[0], [1], [2]])) % languages
        inputs["position_ids"] = torch.where(half, torch.arange(20) - 9, torch.arange(20)).expand(3, -1).contiguous()
    return inputs


def _their_inputs(config: ModelConfig, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {theirs: inputs[ours] for ours, theirs in spelling_of(config).hf_inputs if ours in inputs}


BERT_NETWORK = [f.name for f in families.FAMILIES.values() if not f.network]  # modernbert's: tests/end_to_end/test_modernbert.py


def test_a_family_whose_export_needs_a_later_transformers_says_so_in_one_line(tmp_path, capsys, monkeypatch):
    """ModernBERT's export reads as the trainer computes it from transformers 5.17 on (schemas/families.py): an earlier
    release is refused by name, before it loads the export with other logits; other families, and a model_type that
    is no family's, pass on the project's floor."""
    problem = families.transformers_problem("modernbert", "4.56.0")
    assert "transformers>=5.17" in problem and "4.56.0" in problem and "\n" not in problem
    assert families.transformers_problem("modernbert", "5.17.0") == families.transformers_problem("modernbert", "5.25.0") == ""
    assert families.transformers_problem("bert", "4.56.0") == families.transformers_problem("distilbert", "4.56.0") == ""
    from downstream.finetune.command import finetune_main

    export = tmp_path / "export"
    export.mkdir()
    (export / "config.json").write_text(json.dumps({"model_type": "modernbert"}))
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"text": f"row {i}", "label": "xy"[i % 2]}) + "\n" for i in range(8)))
    import transformers

    monkeypatch.setattr(transformers, "__version__", "5.0.0")
    status = finetune_main([str(export), "--task", "classify", "--train", str(rows), "--validation", str(rows),
                            "--output", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert status == 2 and err.count("\n") == 0 and "needs transformers>=5.17" in err and str(export) in err, err


@pytest.mark.parametrize("name", BERT_NETWORK)
def test_every_family_gives_its_transformers_class_logits_both_ways(name):
    row = families.family(name)
    pad = 0 if row.tokenizer == "wordpiece" else 1
    config = ModelConfig.preset("tiny", vocab_size=VOCAB, family=name, pad_token_id=pad, hidden_dropout=0.0,
                                attention_dropout=0.0, max_position_embeddings=64 + row.first_position(pad),
                                languages=LANGUAGES if row.languages else ())
    ours = BertForPretraining(config, seed=3).eval()
    assert (ours.bert.pooler is None) == (not row.nsp) and (ours.cls.seq_relationship is None) == (not row.nsp)
    tensors = to_transformers(ours.state_dict(), config)
    hf_config = transformers.AutoConfig.for_model(**{k: v for k, v in config.to_hf_config().items() if k != "architectures"})
    theirs = getattr(transformers, row.hf_pretraining_class)(hf_config).eval()
    missing, unexpected = theirs.load_state_dict(tensors, strict=False)
    assert not unexpected and all("decoder" in k or k == "pred_layer.proj.weight" for k in missing), (missing, unexpected)
    with torch.no_grad():  # non-trivial LayerNorms and biases, so that a misplaced one shows
        for p in ours.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    tensors = to_transformers(ours.state_dict(), config)
    theirs.load_state_dict(tensors, strict=False)
    inputs = _inputs(pad, languages=len(config.languages))
    with torch.no_grad():
        sequence, pooled, _ = ours.encode(**inputs)
        out = theirs(**_their_inputs(config, inputs))
    real = inputs["attention_mask"].bool()
    mlm = out.prediction_logits if row.nsp else out.logits
    assert (ours.dense_mlm_logits(sequence) - mlm)[real].abs().max() <= TOLERANCE
    if row.nsp:
        assert (ours.cls.seq_relationship(pooled) - out.seq_relationship_logits).abs().max() <= TOLERANCE
    back, lacking, dropped = from_transformers(dict(theirs.state_dict()), config, "theirs")
    assert lacking == [] and all(torch.equal(back[k], v) for k, v in ours.state_dict().items() if k in back)
    assert set(dropped) <= {"cls.predictions.decoder.weight", "cls.predictions.decoder.bias", "lm_head.decoder.weight",
                            "lm_head.decoder.bias", "pred_layer.proj.weight"}


def _roberta_source(path, name: str) -> str:
    """A random transformers masked LM of the family, saved by save_pretrained, with a tokenizer.json beside it."""
    row = families.family(name)
    cls = getattr(transformers, row.hf_pretraining_class)
    config = transformers.AutoConfig.for_model(row.hf_model_type, vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                                                num_attention_heads=2, intermediate_size=48, max_position_embeddings=66,
                                                type_vocab_size=1, pad_token_id=1, layer_norm_eps=1e-5)
    torch.manual_seed(4)
    model = cls(config)
    with torch.no_grad():
        model.lm_head.bias.normal_()  # transformers zeroes it; a random one checks that it is carried over too
    model.save_pretrained(str(path))
    return str(path)


@pytest.mark.parametrize("name", ["roberta", "xlm-roberta"])
def test_init_from_a_transformers_masked_lm_gives_its_own_logits_at_step_0(tmp_path, name):
    source_dir = _roberta_source(tmp_path / "src", name)
    source = open_source(source_dir)
    assert source.architecture["family"] == name and source.architecture["max_position_embeddings"] == 66
    architecture = {k: source.architecture[k] for k in ARCHITECTURE}
    manifest = SimpleNamespace(vocab={"size": VOCAB}, special_id={"pad_token": 1}.__getitem__, row_format=PACKED_ROWS,
                               max_seq_len=64, url="memory://pairs")
    lines: list[str] = []
    config = TrainConfig(data="unused", output="unused", init_from=source_dir, family=name)
    model = build_model(config, manifest, source=source, architecture=architecture, log=lines.append)
    diffs = verify_export(source_dir, model, _inputs(pad=1))
    assert diffs["mlm_max_abs_diff"] <= TOLERANCE and "nsp_max_abs_diff" not in diffs, diffs
    assert "fresh from --seed: none" in lines[0] and model.config.layer_norm_eps == 1e-5


def _manifest(tmp_path, tokenizer: str, mode: str) -> str:
    tokens = {"wordpiece": {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4},
              "bpe": {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, "<mask>": 4}}[tokenizer]
    separator = {"wordpiece": {"token": "[SEP]", "id": 3}, "bpe": {"token": "</s>", "id": 2}}[tokenizer]
    packing = {"nsp": None, "full-sentences": {"mode": mode, "row_format": "packed_rows", "format_version": 2, "separator": separator},
               "doc-sentences": {"mode": mode, "row_format": "packed_rows", "format_version": 2}}[mode]
    manifest = Manifest(vocab={"file": "../vocab/vocab.txt", "sha256": "ab" * 32, "size": 100, "lowercase": False},
                        special_tokens=tokens, max_seq_len=64, tokenizer=tokenizer,
                        shards=(ShardInfo("train-00000-of-00001.arrow", "train", 10, 123, "cd" * 32, {"web": 10}),),
                        **({"packing": packing} if packing else {}))
    directory = str(tmp_path / f"{tokenizer}-{mode}")
    os.makedirs(directory)
    with open(os.path.join(directory, "manifest.json"), "w") as f:
        f.write(manifest.to_json())
    return directory


def test_the_family_is_the_datas_and_another_is_refused_in_one_line(tmp_path):
    nsp, roberta = _manifest(tmp_path, "wordpiece", "nsp"), _manifest(tmp_path, "bpe", "full-sentences")
    bert_packed = _manifest(tmp_path, "wordpiece", "doc-sentences")
    config, notes = family_of(TrainConfig(data=nsp, output="o"), set())
    assert (config.family, config.nsp_weight, notes) == ("bert", 1.0, [])
    config, _ = family_of(TrainConfig(data=roberta, output="o"), set())
    assert (config.family, config.nsp_weight) == ("roberta", 0.0)
    config, _ = family_of(TrainConfig(data=bert_packed, output="o"), set())  # BERT without NSP: RoBERTa's ablation
    assert (config.family, config.nsp_weight) == ("bert", 0.0)
    cases = [
        (TrainConfig(data=nsp, output="o", family="roberta"), set(),
         "--family roberta trains on full-sentences or doc-sentences rows; this data is nsp (prep --packing full-sentences)"),
        (TrainConfig(data=roberta, output="o", family="xlm-roberta"), set(),
         "--family xlm-roberta uses a unigram vocabulary; this data's is bpe (prep --tokenizer unigram)"),
        (TrainConfig(data=roberta, output="o", family="bert"), set(),
         "--family bert uses a wordpiece vocabulary; this data's is bpe (prep --tokenizer wordpiece)"),
        (TrainConfig(data=roberta, output="o", nsp_weight=0.5), {"nsp_weight"}, "--nsp-weight 0.5: --family roberta has no NSP head"),
        (TrainConfig(data=bert_packed, output="o", nsp_weight=0.5), {"nsp_weight"},
         "--nsp-weight 0.5: --data's doc-sentences rows carry no next-sentence label"),
    ]
    for config, given, message in cases:
        with pytest.raises(TrainError) as e:
            family_of(config, given)
        assert str(e.value) == message


def test_xlm_r_samples_languages_at_alpha_0_3_unless_told():
    row = families.family("xlm-roberta")
    assert row.mix_alpha == 0.3 and families.family("roberta").mix_alpha is None and families.family("bert").mix_alpha == 0.7
    with pytest.raises(ContractError, match="unknown family 'electra'"):
        families.family("electra")
    assert families.of_model_type("xlm-roberta", "x").name == "xlm-roberta"


def test_packed_rows_collate_as_cls_row_sep_with_the_separator_special():
    values = np.array([10, 11, 2, 12, 13, 20, 21, 22], dtype=np.int64)  # row 0 holds two documents, separator 2
    out = collate_single(values, np.array([0, 5]), np.array([5, 3]), cls_id=0, sep_id=2, pad_id=1, max_seq_len=8,
                         separator_id=2)
    assert out["input_ids"].tolist() == [[0, 10, 11, 2, 12, 13, 2], [0, 20, 21, 22, 2, 1, 1]]
    assert out["attention_mask"].tolist() == [[1] * 7, [1, 1, 1, 1, 1, 0, 0]]
    assert out["special_mask"].tolist() == [[True, False, False, True, False, False, True],
                                            [True, False, False, False, True, True, True]]
    assert not out["token_type_ids"].any() and out["next_sentence_label"].tolist() == [0, 0]
    with pytest.raises(ValueError, match="row 0 of the batch has 7 tokens with its two special tokens, max_seq_len is 6"):
        collate_single(values, np.array([0, 5]), np.array([5, 3]), cls_id=0, sep_id=2, pad_id=1, max_seq_len=6)


def test_whole_words_of_a_byte_level_vocabulary_start_at_the_space_mark():
    tokens = ["<s>", "<pad>", "</s>", "<unk>", "<mask>", "Ġthe", "Ġun", "believ", "able", "Ġcat", ","]
    continuation = WordBoundary("Ġ", marks_start=True).continuation_flags(tokens, {"<s>", "<pad>", "</s>", "<unk>", "<mask>"})
    masker = Masker(MaskingConfig(strategy="wwm", mask_prob=0.5, max_predictions=None), vocab_size=len(tokens),
                    special_ids=range(5), mask_id=4, continuation=np.asarray(continuation))
    ids = np.array([[0, 7, 8, 5, 6, 7, 8, 9, 10, 2]])  # <s> believ able Ġthe Ġun believ able Ġcat , </s>
    special = np.isin(ids, [0, 1, 2])
    words = {(1, 2), (3,), (4, 5, 6), (7, 8)}  # the first token has no mark and starts a word all the same
    for seed in range(20):
        masked = masker(ids, special, np.random.default_rng(seed))
        chosen = {int(p) for p, label in zip(masked["mlm_positions"][0], masked["mlm_labels"][0]) if label != -100}
        assert chosen and all(set(w) <= chosen or not set(w) & chosen for w in words), (seed, chosen)


def _language_manifest(tmp_path, identified: bool) -> str:
    manifest = Manifest(vocab={"file": "../vocab/vocab.txt", "sha256": "ab" * 32, "size": 100, "lowercase": False},
                        special_tokens={"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4}, max_seq_len=64,
                        tokenizer="wordpiece",
                        shards=(ShardInfo("train-00000-of-00001.arrow", "train", 30, 123, "cd" * 32, {"fr": 10, "de": 20}),),
                        config={"languages": {"identify_languages": identified}})
    directory = str(tmp_path / f"languages-{identified}")
    os.makedirs(directory)
    with open(os.path.join(directory, "manifest.json"), "w") as f:
        f.write(manifest.to_json())
    return directory


def test_sample_languages_makes_a_component_per_language_at_the_familys_alpha(tmp_path):
    data = _language_manifest(tmp_path, identified=True)
    config, notes = family_of(TrainConfig(data=data, output="o", sample_languages=True), set())
    assert config.mix == (f"de={data},source=de", f"fr={data},source=fr") and config.mix_alpha == 0.7
    assert notes == ["--sample-languages: 2 languages (de, fr)", "mix_alpha 0.7 (bert's language sampling)"]
    config, notes = family_of(TrainConfig(data=data, output="o", sample_languages=True, mix_alpha=0.3), set())
    assert config.mix_alpha == 0.3 and len(notes) == 1
    # weighted components keep their weights: the family's alpha is for unweighted ones only
    config, notes = family_of(TrainConfig(data=data, output="o", mix=(f"{data},source=de,weight=1", f"{data},source=fr,weight=3")), set())
    assert config.mix_alpha is None and notes == []
    with pytest.raises(TrainError, match="was not prepared with --identify-languages, so its rows' sources \\(de, fr\\) are inputs"):
        family_of(TrainConfig(data=_language_manifest(tmp_path, identified=False), output="o", sample_languages=True), set())
    with pytest.raises(TrainError, match="--sample-languages makes the --mix components itself"):
        family_of(TrainConfig(data=data, output="o", sample_languages=True, mix=(data,)), set())


def test_xlm_takes_the_datas_languages_and_refuses_one_in_one_line(tmp_path):
    one = _manifest(tmp_path, "wordpiece", "full-sentences")  # one input, `web`: not two languages
    with pytest.raises(TrainError, match="the xlm family embeds two or more languages; --data and --mix hold web"):
        family_of(TrainConfig(data=one, output="o", family="xlm"), set())
    path = os.path.join(one, "manifest.json")
    body = json.load(open(path))
    body["shards"][0]["source_rows"] = {"fr": 4, "de": 6}
    body["sources"] = {"fr": 4, "de": 6}
    with open(path, "w") as f:
        json.dump(body, f)
    config, notes = family_of(TrainConfig(data=one, output="o", family="xlm"), set())
    assert config.languages == ("de", "fr") and notes == ["languages: de, fr (--data's and --mix's)"]
    config, notes = family_of(TrainConfig(data=one, output="o", family="xlm", languages=("fr", "de", "en")), set())
    assert config.languages == ("fr", "de", "en") and notes == []  # given: kept as given, in its order
    with pytest.raises(TrainError, match="--languages: the bert family has no language embeddings"):
        family_of(TrainConfig(data=one, output="o", languages=("de", "fr")), set())
