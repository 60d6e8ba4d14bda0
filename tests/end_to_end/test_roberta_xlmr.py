"""RoBERTa and XLM-R end to end, as a user runs them (issue 43): prep with the family's tokenizer and packing, real
DeepSpeed training at ZeRO 0 on one rank and ZeRO 2 on two (CPU, gloo), export, and transformers' own class reloading
the export with the trainer's MLM logits (within 1e-5 on real tokens) and running `pipeline("fill-mask")`; NSP pairs
refused for RoBERTa in one line before any rank starts."""

from __future__ import annotations

import json
import os

import pytest
import torch

transformers = pytest.importorskip("transformers")

from tests.helpers import run_cli  # noqa: E402

pytestmark = pytest.mark.integration  # starts processes (prep's Beam workers, DeepSpeed ranks)
QUICK = ("--batch-size", "8", "--log-every", "2", "--eval-every", "4", "--eval-batches", "2", "--num-workers", "0",
         "--precision", "fp32", "--save-every", "4", "--max-steps", "4")
RECIPES = {"roberta": ("bpe", "full-sentences"), "xlm-roberta": ("unigram", "doc-sentences")}


@pytest.fixture(scope="module")
def prepped_families(corpus_dir, tmp_path_factory) -> dict[str, str]:
    out = {}
    for family, (tokenizer, packing) in RECIPES.items():
        path = str(tmp_path_factory.mktemp(family))
        result = run_cli("prep", "--input", f"docs={corpus_dir}/part-0.jsonl", "--output", path, "--tokenizer", tokenizer,
                         "--packing", packing, "--vocab-size", "800", "--max-seq-len", "64", "--validation-fraction", "0.1")
        assert result.returncode == 0, result.stderr[-3000:]
        out[family] = path
    return out


@pytest.mark.parametrize("family, zero, nproc", [("roberta", 0, 1), ("roberta", 2, 2), ("xlm-roberta", 0, 1),
                                                 ("xlm-roberta", 2, 2)])
def test_a_family_trains_exports_and_loads_in_transformers_with_the_trainers_logits(prepped_families, tmp_path, family,
                                                                                     zero, nproc):
    from downstream.export import load_run_model, validation_batch
    from schemas import families

    row = families.family(family)
    run, hf = str(tmp_path / "run"), str(tmp_path / "hf")
    result = run_cli("train", "--data", os.path.join(prepped_families[family], "pairs"), "--output", run,
                     "--zero-stage", str(zero), "--nproc-per-node", str(nproc), "--masking", "wwm", *QUICK)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert f"family: {family} (mlm)" in result.stdout
    exported = run_cli("export", run, "--output", hf, "--verify")
    assert exported.returncode == 0, exported.stdout + exported.stderr
    config = json.load(open(os.path.join(hf, "config.json")))
    assert (config["model_type"], config["architectures"], config["type_vocab_size"]) == (row.hf_model_type, [row.hf_pretraining_class], 1)
    tokenizer = transformers.AutoTokenizer.from_pretrained(hf)
    assert isinstance(tokenizer, getattr(transformers, row.hf_tokenizer_class)) and tokenizer.model_max_length == 64

    ours, client, _, _ = load_run_model(run)
    theirs = getattr(transformers, row.hf_pretraining_class).from_pretrained(hf).eval()
    batch = validation_batch(client["train_config"])
    inputs = {k: batch[k] for k in ("input_ids", "token_type_ids", "attention_mask")}
    with torch.no_grad():
        sequence, _, _ = ours.encode(**inputs)
        difference = (ours.dense_mlm_logits(sequence) - theirs(**inputs).logits)[inputs["attention_mask"].bool()]
    assert difference.abs().max().item() <= 1e-5
    fill = transformers.pipeline("fill-mask", model=hf)
    assert len(fill(f"Return the {tokenizer.mask_token} of the list.", top_k=3)) == 3
    with open(os.path.join(hf, "README.md")) as f:
        card = f.read()
    assert f"{family}: exported as transformers' `{row.hf_pretraining_class}`" in card and RECIPES[family][1] in card


def test_nsp_pairs_are_refused_for_roberta_in_one_line(prepped, tmp_path):
    result = run_cli("train", "--data", os.path.join(prepped, "pairs"), "--output", str(tmp_path / "r"), "--family", "roberta",
                     "--nproc-per-node", "2", *QUICK)
    assert result.returncode == 2 and not os.path.exists(tmp_path / "r")
    assert result.stderr.strip() == ("clozeforge train: error: --family roberta trains on full-sentences or doc-sentences rows; "
                                     "this data is nsp (prep --packing full-sentences)")
