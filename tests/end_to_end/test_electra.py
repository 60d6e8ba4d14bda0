"""ELECTRA (issue 46): `train --objective electra` as a row of schemas/objectives.py. The network's discriminator and
generator give transformers' ElectraForPreTraining's and ElectraForMaskedLM's logits exactly; a step samples at the
masked positions only and labels replaced tokens as the paper does; end to end on the machine's text: prep (NSP pairs,
the bert family's default), real DeepSpeed training, export --verify, the two directories reloaded by transformers
with the trainer's logits within 1e-5, fill-mask on the generator and finetune on the discriminator; refusals in one
line."""

from __future__ import annotations

import json
import os

import pytest
import torch

from trainer.model import ElectraForPretraining, ModelConfig, build
from trainer.model import electra as electra_names

transformers = pytest.importorskip("transformers")


def _config(**overrides) -> ModelConfig:
    return ModelConfig.preset("tiny", vocab_size=300, objective="electra", hidden_dropout=0.0, attention_dropout=0.0,
                              **overrides)


def _batch(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 300, (3, 12), generator=g)
    ids[1, 8:] = 0
    ids[2, 5:] = 0
    types = torch.zeros_like(ids)
    types[0, 6:] = 1
    return {"input_ids": ids, "token_type_ids": types, "attention_mask": (ids != 0).long()}


def test_the_objective_is_a_row_and_its_shapes_follow_the_fraction():
    from schemas import objectives

    assert list(objectives.OBJECTIVES) == ["mlm", "electra"]
    row = objectives.objective("electra")
    assert (row.network, row.families, row.discriminator_weight, row.generator_fraction) == ("electra", ("bert",), 50.0, 0.25)
    config = _config()
    assert config.nsp_weight == 0 and config.discriminator_weight == 50.0
    assert config.generator_shape() == {"hidden_size": 32, "num_heads": 1, "intermediate_size": 128}  # tiny: 128/2/512
    assert _config(generator_fraction=0.5).generator_shape() == {"hidden_size": 64, "num_heads": 1, "intermediate_size": 256}
    assert isinstance(build(config), ElectraForPretraining)
    with pytest.raises(ValueError, match="trains the bert family, not roberta"):
        ModelConfig.preset("tiny", vocab_size=300, objective="electra", family="roberta")
    with pytest.raises(ValueError, match="choose another --generator-fraction"):
        _config(generator_fraction=0.001)  # hidden 0
    with pytest.raises(ValueError, match="choose another --generator-fraction"):
        ModelConfig.preset("mini", vocab_size=300, objective="electra", generator_fraction=0.55)  # 141 hidden, 2 heads

@pytest.mark.parametrize("fraction", [0.25, 1.0])
def test_both_networks_give_transformers_logits_exactly(fraction):
    """Random weights moved off their init; our discriminator and generator against transformers' classes loaded from
    the tensors export writes (fraction 1: the generator reads the embeddings unprojected)."""
    config = _config(generator_fraction=fraction)
    model = build(config, seed=3).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())) * 0.02)
    discriminator_tensors, generator_tensors = electra_names.to_transformers(model.state_dict())
    assert ("generator_lm_head.weight" not in generator_tensors and "electra.embeddings.word_embeddings.weight" in generator_tensors)
    assert ("electra.embeddings_project.weight" in generator_tensors) == (fraction != 1.0)

    def hf(body: dict, cls):
        kwargs = {k: v for k, v in body.items() if k not in ("architectures", "model_type")}
        model = getattr(transformers, cls)(transformers.ElectraConfig(**kwargs)).eval()
        return model

    disc = hf(config.to_hf_config(), "ElectraForPreTraining")
    gen = hf(config.generator_hf_config(), "ElectraForMaskedLM")
    assert disc.load_state_dict(discriminator_tensors, strict=True)
    missing, unexpected = gen.load_state_dict(generator_tensors, strict=False)
    assert missing == ["generator_lm_head.weight"] and unexpected == []
    gen.tie_weights()
    batch = _batch()
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        sequence, pooled, _ = model.encode(**batch)
        rtd = model.discriminator_logits(sequence) - disc(**batch).logits
        mlm = model.generator_logits(model.generator_hidden(**batch)) - gen(**batch).logits
    assert pooled is None and rtd[real].abs().max().item() <= 1e-5 and mlm[real].abs().max().item() <= 1e-5
    assert electra_names.from_transformers(discriminator_tensors, generator_tensors).keys() == (
        set(model.state_dict()) - set(electra_names.TIED))


def test_a_step_replaces_only_masked_positions_and_labels_what_changed(monkeypatch):
    """The discriminator reads the sampled tokens at the masked positions and the input elsewhere; a sample equal to
    the original is labelled original; the loss is mlm + 50 x rtd; every parameter gets a gradient."""
    config = _config()
    model = build(config, seed=1).train()
    batch = _batch(1)
    original = batch["input_ids"].clone()
    positions = torch.tensor([[1, 4, 7], [2, 3, 0], [1, 0, 0]])
    labels = torch.stack([original[i, positions[i]] for i in range(3)])
    labels[1, 2] = labels[2, 1] = labels[2, 2] = -100  # padding entries of the masker
    masked = original.clone()
    for i in range(3):
        for j, p in enumerate(positions[i]):
            if labels[i, j] != -100:
                masked[i, p] = 4  # [MASK]
    # the generator "samples" the original at the first masked position of row 0, token 9 elsewhere
    samples = torch.tensor([labels[0, 0].item(), 9, 9, 9, 9, 9, 9, 9, 9])
    monkeypatch.setattr(torch, "multinomial", lambda probs, n: samples[:probs.shape[0], None].clone())
    seen = {}
    encode = model.encode

    def spy(input_ids, *args, **kwargs):
        seen["input"] = input_ids.clone()
        return encode(input_ids, *args, **kwargs)

    monkeypatch.setattr(model, "encode", spy)
    out = model(masked, batch["token_type_ids"], batch["attention_mask"], positions, labels)
    want = original.clone()
    want[0, 4] = want[0, 7] = want[1, 2] = want[1, 3] = want[2, 1] = 9
    assert torch.equal(seen["input"], want)
    replaced = sum(int(original[i, p] != 9) for i, p in ((0, 4), (0, 7), (1, 2), (1, 3), (2, 1)))
    assert out["rtd_replaced"].item() == replaced and out["rtd_count"].item() == int(batch["attention_mask"].sum())
    assert out["mlm_count"].item() == 6
    assert out["loss"].item() == pytest.approx(out["mlm_loss"].item() + 50 * out["rtd_loss"].item(), rel=1e-6)
    out["loss"].backward()
    assert all(p.grad is not None for p in model.parameters())


@pytest.mark.integration
def test_electra_trains_exports_and_reloads_with_the_trainers_logits(prepped, tmp_path):
    from downstream.export import load_run_model, validation_batch
    from downstream.finetune.command import finetune_main
    from tests.helpers import run_cli

    from tests.downstream.finetune.finetune_assets import classify_rows, write_jsonl

    run, hf = str(tmp_path / "run"), str(tmp_path / "hf")
    result = run_cli("train", "--data", os.path.join(prepped, "pairs"), "--output", run, "--objective", "electra",
                     "--batch-size", "8", "--log-every", "2", "--eval-every", "4", "--eval-batches", "2", "--num-workers",
                     "0", "--precision", "fp32", "--save-every", "4", "--max-steps", "4")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert "family: bert (electra: generator 0.25 of the width, mlm + 50 x replaced-token detection)" in result.stdout
    records = [json.loads(line) for line in open(os.path.join(run, "metrics.jsonl"))]
    valid = [r for r in records if r.get("split") == "validation"]
    assert valid and all("rtd_acc" in r and "mlm_acc" in r for r in valid)
    exported = run_cli("export", run, "--output", hf, "--verify")
    assert exported.returncode == 0, exported.stdout + exported.stderr
    assert "verify: max |ours - transformers|  rtd" in exported.stdout
    config = json.load(open(os.path.join(hf, "config.json")))
    generator = json.load(open(os.path.join(hf, "generator", "config.json")))
    assert (config["model_type"], config["architectures"], config["embedding_size"], config["hidden_size"]) == (
        "electra", ["ElectraForPreTraining"], 128, 128)
    assert (generator["architectures"], generator["embedding_size"], generator["hidden_size"]) == (["ElectraForMaskedLM"], 128, 32)

    ours, client, _, _ = load_run_model(run)
    batch = validation_batch(client["train_config"])
    inputs = {k: batch[k] for k in ("input_ids", "token_type_ids", "attention_mask")}
    real = inputs["attention_mask"].bool()
    disc = transformers.ElectraForPreTraining.from_pretrained(hf).eval()
    gen = transformers.ElectraForMaskedLM.from_pretrained(os.path.join(hf, "generator")).eval()
    with torch.no_grad():
        sequence, _, _ = ours.encode(**inputs)
        assert (ours.discriminator_logits(sequence) - disc(**inputs).logits)[real].abs().max().item() <= 1e-5
        assert (ours.generator_logits(ours.generator_hidden(**inputs)) - gen(**inputs).logits)[real].abs().max().item() <= 1e-5
    tokenizer = transformers.AutoTokenizer.from_pretrained(os.path.join(hf, "generator"))
    fill = transformers.pipeline("fill-mask", model=os.path.join(hf, "generator"))
    assert len(fill(f"Return the {tokenizer.mask_token} of the list.", top_k=3)) == 3

    # clozeforge's own readers: embed (the discriminator's vectors), fill-mask (the generator's predictions)
    with open(tmp_path / "texts.txt", "w") as f:
        f.write("Return a new list.\nRaise an error if the file does not exist.\n")
    embedded = run_cli("embed", hf, "--input", str(tmp_path / "texts.txt"), "--output", str(tmp_path / "v.npy"))
    assert embedded.returncode == 0, embedded.stderr[-2000:]
    import numpy as np

    assert np.load(tmp_path / "v.npy").shape == (2, 128)
    filled = run_cli("fill-mask", hf, "Return the [MASK] of the list.", "--top-k", "3")
    assert filled.returncode == 0, filled.stderr
    ours_top = [part.split(" (")[0] for part in filled.stdout.splitlines()[1].split(": ", 1)[1].split("  ")]
    assert ours_top == [r["token_str"] for r in fill("Return the [MASK] of the list.", top_k=3)]  # the generator's

    # --init-from the export: every tensor from it (generator included), the step-0 logits the export's (1e-5)
    continued, again = str(tmp_path / "continued"), str(tmp_path / "again")
    result = run_cli("train", "--data", os.path.join(prepped, "pairs"), "--output", continued, "--objective", "electra",
                     "--init-from", hf, "--max-steps", "1", "--lr", "1e-12", "--batch-size", "8", "--num-workers", "0",
                     "--precision", "fp32", "--dropout", "0")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert "fresh from --seed: none" in result.stdout + result.stderr
    assert run_cli("export", continued, "--output", again).returncode == 0
    with torch.no_grad():
        rtd = disc(**inputs).logits - transformers.ElectraForPreTraining.from_pretrained(again).eval()(**inputs).logits
        mlm = gen(**inputs).logits - transformers.ElectraForMaskedLM.from_pretrained(os.path.join(again, "generator")).eval()(**inputs).logits
    assert rtd[real].abs().max().item() <= 1e-5 and mlm[real].abs().max().item() <= 1e-5
    refused = run_cli("train", "--data", os.path.join(prepped, "pairs"), "--output", str(tmp_path / "mlm"), "--init-from", hf,
                      "--max-steps", "1")
    assert refused.returncode == 2 and refused.stderr.strip().endswith(
        "it was trained with --objective electra, this run's is mlm (the networks differ: pass --objective electra)")

    data = write_jsonl(tmp_path / "topics.jsonl", classify_rows())
    assert finetune_main([hf, "--task", "classify", "--train", data, "--validation", data, "--output", str(tmp_path / "ft"),
                          "--seeds", "1", "--epochs", "1", "--lr", "1e-3"]) == 0
    with open(tmp_path / "ft" / "results.json") as f:
        assert json.load(f)["pretrained"]["lr"] == 1e-3
    assert transformers.AutoModelForSequenceClassification.from_pretrained(str(tmp_path / "ft" / "model")).config.model_type == "electra"


def test_nsp_beside_electra_is_refused_in_one_line(prepped, tmp_path):
    from tests.helpers import run_cli

    result = run_cli("train", "--data", os.path.join(prepped, "pairs"), "--output", str(tmp_path / "r"), "--objective",
                     "electra", "--nsp-weight", "1", "--max-steps", "2")
    assert result.returncode == 2 and not os.path.exists(tmp_path / "r")
    assert result.stderr.strip() == "clozeforge train: error: --nsp-weight 1: --objective electra has no NSP head"


@pytest.mark.integration
def test_electra_trains_at_zero_2_on_two_ranks_and_exports_exactly(prepped, tmp_path):
    """The shared embeddings and the tied generator decoder under ZeRO 2's partitions, the samples drawn on each rank."""
    from tests.helpers import run_cli

    run, hf = str(tmp_path / "run"), str(tmp_path / "hf")
    result = run_cli("train", "--data", os.path.join(prepped, "pairs"), "--output", run, "--objective", "electra",
                     "--zero-stage", "2", "--nproc-per-node", "2", "--batch-size", "4", "--num-workers", "0",
                     "--precision", "fp32", "--max-steps", "3", "--save-every", "3", "--log-every", "1")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    losses = [json.loads(line) for line in open(os.path.join(run, "metrics.jsonl"))]
    assert [r["step"] for r in losses if "rtd_loss" in r and r.get("split") != "validation"] == [1, 2, 3]
    exported = run_cli("export", run, "--output", hf, "--verify")
    assert exported.returncode == 0, exported.stdout + exported.stderr
    diffs = exported.stdout.split("verify: max |ours - transformers|", 1)[1].split()
    assert diffs[0] == "rtd" and diffs[2] == "mlm" and max(float(diffs[1]), float(diffs[3])) <= 1e-5
    # a run is a source too: its checkpoint's tensors, our names, every part of them
    continued = run_cli("train", "--data", os.path.join(prepped, "pairs"), "--output", str(tmp_path / "continued"),
                        "--objective", "electra", "--init-from", run, "--max-steps", "1", "--batch-size", "4",
                        "--num-workers", "0", "--precision", "fp32")
    assert continued.returncode == 0, continued.stdout[-2000:] + continued.stderr[-3000:]
    assert "tensors loaded; fresh from --seed: none" in continued.stdout + continued.stderr
