"""ModernBERT (issue 61): the `modernbert` row of schemas/families.py and its own network. Our network gives transformers'
ModernBertForMaskedLM's logits on the tensors export writes, under both attention kernels transformers picks on a CPU
(sdpa, eager), with rows longer than the local window; the unpadded batch form gives the padded form's; config.json
round-trips; --init-from a transformers-made ModernBertForMaskedLM gives its own logits at step 0. End to end: prep
(byte-level BPE, packed rows), real DeepSpeed training at ZeRO 0 on one rank and ZeRO 2 on two, export --verify,
transformers reloading it with the trainer's logits (1e-5), fill-mask, and finetune (every task kind) and embed on it."""

from __future__ import annotations

import json
import os
import shutil
from types import SimpleNamespace

import pytest
import torch

from schemas import families
from trainer.model import ModelConfig, ModernBertForPretraining, build
from trainer.model import modernbert as modernbert_names

transformers = pytest.importorskip("transformers")
if families.transformers_problem("modernbert", transformers.__version__):  # the floors run's 4.56 (tests/trainer/test_families.py)
    pytest.skip(f"transformers {transformers.__version__} reads ModernBERT exports otherwise", allow_module_level=True)
TOLERANCE = 1e-5


def _config(**overrides) -> ModelConfig:
    fields = dict(family="modernbert", pad_token_id=1, num_layers=4, local_window=8, global_attention_every=2)
    return ModelConfig.preset("tiny", vocab_size=300, **{**fields, **overrides})


def _moved(model):
    """Random weights moved off their init (norm weights too), so every tensor's place is checked."""
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())) * 0.05)
    return model.eval()


def _reference(config: ModelConfig, model, implementation: str):
    body = {k: v for k, v in config.to_hf_config().items() if k not in ("architectures", "model_type")}
    hf_config = transformers.ModernBertConfig(**body)
    hf_config._attn_implementation = implementation
    reference = transformers.ModernBertForMaskedLM(hf_config)
    missing, unexpected = reference.load_state_dict(modernbert_names.to_transformers(model.state_dict(), config), strict=False)
    assert missing == ["decoder.weight"] and unexpected == []  # the tied decoder, re-tied by transformers
    reference.tie_weights()
    return reference.eval()


def _batch() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 300, (3, 30), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 21:] = 0
    mask[2, 9:] = 0
    return {"input_ids": ids.masked_fill(mask == 0, 1), "attention_mask": mask}


def test_the_row_and_its_shapes():
    from schemas import families

    row = families.family("modernbert")
    assert (row.network, row.tokenizer, row.hf_pretraining_class, row.nsp) == ("modernbert", "bpe", "ModernBertForMaskedLM", False)
    tiny = ModelConfig.preset("tiny", vocab_size=300, family="modernbert")
    assert (tiny.intermediate_size, tiny.layer_norm_eps, tiny.hidden_dropout, tiny.max_position_embeddings) == (341, 1e-5, 0.0, 8192)
    base = ModelConfig.preset("modernbert-base", vocab_size=50368, family="modernbert", pad_token_id=50283)
    assert (base.num_layers, base.hidden_size, base.intermediate_size) == (22, 768, 1152)
    # ModernBERT-base's parameter count (149M in its model card) from our network's shapes, without any memory
    with torch.device("meta"):
        assert round(ModernBertForPretraining(base).num_parameters() / 1e6) == 150  # 149.6M: the card's rounding down
    model = build(tiny)
    assert isinstance(model, ModernBertForPretraining)
    assert not any(n.endswith(".bias") for n, _ in model.named_parameters() if n != "decoder.bias")  # no biases but the decoder's
    with pytest.raises(ValueError, match="pre-norm by construction"):
        ModelConfig.preset("tiny", vocab_size=300, family="modernbert", use_sbo=True)


@pytest.mark.parametrize("implementation", ["sdpa", "eager"])
def test_the_network_gives_transformers_logits_under_each_cpu_kernel(implementation):
    config = _config()
    model = _moved(build(config, seed=1))
    reference = _reference(config, model, implementation)
    batch = _batch()
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        ours = model.dense_mlm_logits(model.encode(**batch)[0])
        theirs = reference(**batch).logits
    difference = (ours - theirs)[real].abs().max().item()
    print(f"|ours - transformers ({implementation})| = {difference:.2e}")
    assert difference <= TOLERANCE
    # the local window matters at this length: a global-only network differs
    wide = _reference(_config(global_attention_every=1), model, implementation)
    with torch.no_grad():
        assert (wide(**batch).logits - theirs)[real].abs().max().item() > 1e-3


def test_the_unpadded_batch_form_gives_the_padded_forms_logits():
    config = _config()
    model = _moved(build(config, seed=2))
    batch = _batch()
    real = batch["attention_mask"].bool()
    lengths = real.sum(1)
    cu = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])
    positions = torch.cat([torch.arange(int(n)) for n in lengths])
    with torch.no_grad():
        padded = model.dense_mlm_logits(model.encode(**batch)[0])[real]
        packed = model.dense_mlm_logits(model.encode(batch["input_ids"][real], cu_seqlens=cu, position_ids=positions)[0])
    assert (padded - packed).abs().max().item() <= TOLERANCE


def test_config_json_round_trips_and_a_config_we_cannot_reproduce_is_one_line():
    from schemas import ContractError

    config = _config(global_rope_theta=20_000.0, local_window=16)
    body = config.to_hf_config()
    assert body["layer_types"] == ["full_attention", "sliding_attention"] * 2 and body["local_attention"] == 16
    fields = ModelConfig.architecture_of_hf(body, "config.json")
    again = ModelConfig(**fields, nsp_weight=0.0)
    for name in ("num_layers", "hidden_size", "intermediate_size", "global_attention_every", "local_window",
                 "global_rope_theta", "local_rope_theta", "layer_norm_eps", "pad_token_id"):
        assert getattr(again, name) == getattr(config, name), name
    # the Hub's older spelling: global_attn_every_n_layers and the two rotary bases as plain keys
    old = {"model_type": "modernbert", "num_hidden_layers": 6, "global_attn_every_n_layers": 3, "global_rope_theta": 80_000.0}
    fields = ModelConfig.architecture_of_hf(old, "config.json")
    assert (fields["global_attention_every"], fields["global_rope_theta"], fields["local_rope_theta"]) == (3, 80_000.0, 10_000.0)
    with pytest.raises(ContractError, match=r"^config.json: mlp_bias True: a clozeforge ModernBERT has mlp_bias False$"):
        ModelConfig.architecture_of_hf({**body, "mlp_bias": True}, "config.json")


def test_init_from_a_transformers_modernbert_gives_its_own_logits_at_step_0(tmp_path):
    from downstream.export import verify_export
    from schemas.pairs import PACKED_ROWS
    from trainer.builders import build_model
    from trainer.config import TrainConfig
    from trainer.start.sources import ARCHITECTURE, open_source

    hf_config = transformers.ModernBertConfig(vocab_size=300, hidden_size=32, num_hidden_layers=4, num_attention_heads=2,
                                              intermediate_size=40, pad_token_id=1, global_attn_every_n_layers=2,
                                              local_attention=8, global_rope_theta=5_000.0, norm_eps=1e-6,
                                              max_position_embeddings=256, bos_token_id=None, eos_token_id=None,
                                              cls_token_id=None, sep_token_id=None)
    torch.manual_seed(3)
    source = _moved(transformers.ModernBertForMaskedLM(hf_config))
    source.save_pretrained(str(tmp_path / "src"))
    manifest = SimpleNamespace(vocab={"size": 300}, special_id={"pad_token": 1}.__getitem__, row_format=PACKED_ROWS,
                               max_seq_len=64)
    opened = open_source(str(tmp_path / "src"))
    config = TrainConfig(data="unused", output="unused", init_from=str(tmp_path / "src"), family="modernbert", dropout=0.0)
    lines: list[str] = []
    model = build_model(config, manifest, source=opened, architecture={k: opened.architecture[k] for k in ARCHITECTURE},
                        log=lines.append)
    assert isinstance(model, ModernBertForPretraining) and "fresh from --seed: none" in lines[0]
    assert (model.config.global_rope_theta, model.config.local_window, model.config.layer_norm_eps) == (5_000.0, 8, 1e-6)
    diffs = verify_export(str(tmp_path / "src"), model, _batch())
    print("step-0 |ours - transformers| (ModernBertForMaskedLM source):", diffs)
    assert diffs["mlm_max_abs_diff"] <= TOLERANCE


QUICK = ("--batch-size", "8", "--log-every", "2", "--eval-every", "4", "--eval-batches", "2", "--num-workers", "0",
         "--precision", "fp32", "--save-every", "4", "--max-steps", "4")


@pytest.fixture(scope="module")
def prepped_bpe(corpus_dir, tmp_path_factory) -> str:
    from tests.helpers import run_cli

    path = str(tmp_path_factory.mktemp("modernbert"))
    result = run_cli("prep", "--input", f"docs={corpus_dir}/part-0.jsonl", "--output", path, "--tokenizer", "bpe",
                     "--packing", "full-sentences", "--vocab-size", "800", "--max-seq-len", "64", "--validation-fraction", "0.1")
    assert result.returncode == 0, result.stderr[-3000:]
    return path


@pytest.mark.integration
@pytest.mark.parametrize("zero, nproc", [(0, 1), (2, 2)])
def test_modernbert_trains_exports_and_loads_in_transformers_with_the_trainers_logits(prepped_bpe, tmp_path, zero, nproc):
    from downstream.export import load_run_model, validation_batch
    from tests.helpers import run_cli

    run, hf = str(tmp_path / "run"), str(tmp_path / "hf")
    result = run_cli("train", "--data", os.path.join(prepped_bpe, "pairs"), "--output", run, "--family", "modernbert",
                     "--zero-stage", str(zero), "--nproc-per-node", str(nproc), "--batch-warmup-ratio", "0.5", *QUICK)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert "family: modernbert (mlm; modernbert's recipe: --mask-prob 0.3, --schedule wsd, --dropout 0," in result.stdout
    exported = run_cli("export", run, "--output", hf, "--verify")
    assert exported.returncode == 0, exported.stdout + exported.stderr
    config = json.load(open(os.path.join(hf, "config.json")))
    assert (config["model_type"], config["architectures"]) == ("modernbert", ["ModernBertForMaskedLM"])
    tokenizer = transformers.AutoTokenizer.from_pretrained(hf)
    assert tokenizer.model_max_length == 64 and "token_type_ids" not in tokenizer("a list")

    ours, client, _, _ = load_run_model(run)
    batch = validation_batch(client["train_config"])
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask")}
    real = inputs["attention_mask"].bool()
    with torch.no_grad():
        mine = ours.dense_mlm_logits(ours.encode(**inputs)[0])
        for implementation in ("sdpa", "eager"):
            theirs = transformers.ModernBertForMaskedLM.from_pretrained(hf, attn_implementation=implementation).eval()
            assert (mine - theirs(**inputs).logits)[real].abs().max().item() <= TOLERANCE, implementation
    fill = transformers.pipeline("fill-mask", model=hf)
    assert len(fill(f"Return the {tokenizer.mask_token} of the list.", top_k=3)) == 3
    if zero:
        return
    _downstream_commands_run_on_the_export(hf, tmp_path)


def _downstream_commands_run_on_the_export(hf: str, tmp_path) -> None:
    """finetune (every task kind), embed, similarity and senses read a ModernBERT export."""
    import numpy as np

    from downstream.contextual.senses_command import senses_main
    from downstream.contextual.similarity import similarity_main
    from tests.downstream.contextual.contextual_assets import docstring_lines, wordnet_rows

    from downstream.finetune.command import finetune_main
    from downstream.finetune.tasks import TASK_KINDS
    from tests.downstream.finetune.finetune_assets import classify_rows, pair_rows, span_rows, tag_rows, write_jsonl
    from tests.helpers import run_cli

    with open(tmp_path / "texts.txt", "w") as f:
        f.write("Return a new list.\nRaise an error if the file does not exist.\n")
    embedded = run_cli("embed", hf, "--input", str(tmp_path / "texts.txt"), "--output", str(tmp_path / "v.npy"))
    assert embedded.returncode == 0, embedded.stderr[-2000:]
    assert np.load(tmp_path / "v.npy").shape == (2, 128)
    lines = docstring_lines(80)
    (tmp_path / "pairs.tsv").write_text("word1\tword2\tscore\nfile\tdirectory\t7\nlist\ttuple\t8.5\nerror\texception\t9.5\n"
                                        "read\twrite\t6\ntrue\tfalse\t1\nname\tpath\t3\n")
    (tmp_path / "contexts.txt").write_text("\n".join(lines) + "\n")
    assert similarity_main([hf, "--pairs", str(tmp_path / "pairs.tsv"), "--contexts", str(tmp_path / "contexts.txt"),
                            "--output", str(tmp_path / "similarity"), "--samples", "200"]) == 0
    assert json.loads((tmp_path / "similarity" / "similarity.json").read_text())
    wordnet_rows(str(tmp_path / "wordnet"))
    assert senses_main(["fit", hf, "--train", str(tmp_path / "wordnet" / "train.jsonl"), "--output", str(tmp_path / "senses")]) == 0
    rows = {"classify": classify_rows(), "pair": pair_rows(), "tag": tag_rows(), "span": span_rows()}
    assert set(rows) == set(TASK_KINDS)
    for kind, task_rows in rows.items():
        data = write_jsonl(tmp_path / f"{kind}.jsonl", task_rows)
        out = tmp_path / f"ft-{kind}"
        assert finetune_main([hf, "--task", kind, "--train", data, "--validation", data, "--output", str(out),
                              "--seeds", "1", "--epochs", "1", "--lr", "1e-3"]) == 0, kind
        saved = json.load(open(out / "model" / "config.json"))
        assert saved["model_type"] == "modernbert", kind
    shutil.rmtree(tmp_path / "ft-classify")


@pytest.mark.integration
def test_phase_2_extends_the_context_resumes_and_exports_the_longer_length(corpus_dir, tmp_path):
    """128 → 512 tokens on the tiny shape, the global rotary base raised to phase 2's; stopped inside phase 2 and
    resumed there; the export's model_max_length is 512 and its config.json has the raised base, its logits ours."""
    from tests.helpers import run_cli

    short, longer, run, hf = (str(tmp_path / name) for name in ("p128", "p512", "run", "hf"))
    for out, length, vocab in ((short, "128", ("--vocab-size", "800")), (longer, "512", ("--vocab", f"{short}/vocab"))):
        result = run_cli("prep", "--input", f"docs={corpus_dir}/part-0.jsonl", "--output", out, "--tokenizer", "bpe",
                         "--packing", "full-sentences", "--max-seq-len", length, "--validation-fraction", "0.1", *vocab)
        assert result.returncode == 0, result.stderr[-3000:]
    flags = ("train", "--data", f"{short}/pairs", "--output", run, "--family", "modernbert", "--phase2-data", f"{longer}/pairs",
             "--phase2-start", "2", "--max-steps", "4", "--batch-size", "4", "--num-workers", "0", "--precision", "fp32",
             "--eval-every", "0", "--log-every", "1", "--save-every", "2")
    first = run_cli(*flags, "--stop-after", "3")
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-3000:]
    assert "modernbert's recipe: --mask-prob 0.3, --schedule wsd, --dropout 0, --batch-warmup-ratio 0.05, " \
           "--phase2-rope-theta 160000" in first.stdout
    assert "phase 2 from step 2" in first.stdout and "stopping at step 3 of 4" in first.stdout
    again = run_cli(*flags)
    assert again.returncode == 0 and "resumed from step_00000003 at step 3 (phase 2)" in again.stdout, again.stderr[-3000:]
    exported = run_cli("export", run, "--output", hf, "--verify")
    assert exported.returncode == 0, exported.stdout + exported.stderr
    assert float(exported.stdout.split("mlm ", 1)[1].split()[0]) <= TOLERANCE
    config = json.load(open(os.path.join(hf, "config.json")))
    assert config["rope_parameters"]["full_attention"]["rope_theta"] == 160_000.0
    assert config["rope_parameters"]["sliding_attention"]["rope_theta"] == 10_000.0
    assert transformers.AutoTokenizer.from_pretrained(hf).model_max_length == 512
