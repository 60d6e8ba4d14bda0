"""Export a trained clozeforge run as a HuggingFace directory that transformers loads with no project code, as the
transformers class of its family (schemas/families.py) or of its objective (schemas/objectives.py: ELECTRA's).

In: a consolidated fp32 state dict of the run's network (trainer/model: BertForPretraining in every family,
ElectraForPretraining for --objective electra), its `ModelConfig`, and the prep run's vocab directory
(schemas/vocab.py; any fsspec URL). Out, in `output_dir`:

    config.json              the family's transformers config (BertConfig, RobertaConfig, XLMRobertaConfig, XLMConfig;
                             ElectraConfig), architectures [its pretraining class: BertForPreTraining,
                             RobertaForMaskedLM, XLMRobertaForMaskedLM, XLMWithLMHeadModel; ElectraForPreTraining]
    model.safetensors        fp32, transformers' names; the tied decoder entries are left out, as save_pretrained does
    tokenizer files          as the vocabulary's kind writes them (TOKENIZER_FILES: WordPiece's vocab.txt,
                             byte-level BPE's vocab.json + merges.txt, Unigram's tokenizer.json), the family's
                             tokenizer class, and model_max_length: the longest sequence the run
                             trained on (its checkpoint's trained_seq_len), where transformers truncates by default
    special_tokens_map.json
    README.md                model card (downstream/export_card.py): shape (trained length beside max positions),
                             objectives, training config, data fingerprint, final metrics
    generator/               ELECTRA only: the generator as ElectraForMaskedLM (downstream/export_electra.py)

Project-only weights (the heads trainer/heads.py does not export: SBO's `sbo.*`, a head's own module `heads.*`) are
dropped and the card says so; a pre-LayerNorm model is refused (transformers' classes are post-LN). The whole
directory is written as a hidden sibling, then swapped in for `output_dir` (an earlier export is replaced whole; any
other non-empty directory needs --overwrite), with the modes of the user's umask.
`verify_export` reloads the directory with transformers and measures how far its logits are from ours.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

import torch

from downstream import export_electra
from downstream.export_card import model_card
from downstream.export_dir import check_destination, replace_directory
from process.exits import fail
from process.logs import quiet_startup
from process.outputs import OutputDirError
from schemas import ContractError, Manifest, families, hf_tokenizers
from schemas import encoder_layout
from schemas import run_dir as run_layout
from schemas import vocab as vocab_files
from schemas.tokenizer_formats import TOKENIZER_FORMATS, format_of
from trainer.checkpoint import store
from trainer.model import EMBEDDINGS, WEIGHT_WRITERS, BertForPretraining, ModelConfig, build
from trainer.model import electra as electra_names
from trainer.model.families import spelling_of
from trainer.model.hf_names import (  # noqa: F401 (exported_keys: export's API)
    PROJECT_ONLY_PREFIXES,
    TIED_KEYS,
    WeightsError,
    exported_keys,
    to_transformers,
)


class ExportError(ValueError):
    """The inputs cannot make a faithful transformers export (the message says which and why)."""


OWN_EXPORTS = {"electra": export_electra}
"""Networks (schemas/objectives.py's `network`) whose export is not their family's, by the module that writes it:
its `tensors` (the main directory's and a generator's), `write_generator`, `verify`, and the card's CARD_HEADS and CARD_LOSS."""


def hf_state_dict(state_dict: dict[str, torch.Tensor], model_config: ModelConfig) -> dict[str, torch.Tensor]:
    """The consolidated state dict reduced to transformers' tensors (trainer/model/hf_names.py, the table
    `--init-from` reads back through): fp32, contiguous, owning their memory."""
    if model_config.pre_layernorm:
        raise ExportError("cannot export a pre-LayerNorm model: transformers' BertForPreTraining is post-LN only "
                          "(train with pre_layernorm=False to get an exportable model)")
    for tied, source in TIED_KEYS.items():
        if tied in state_dict and source in state_dict and not torch.equal(state_dict[tied], state_dict[source]):
            raise ExportError(f"state dict has {tied} != {source}; they must be tied (one tensor) to export")
    try:
        out = WEIGHT_WRITERS[model_config.network](state_dict, model_config)
    except ValueError as e:  # WeightsError, or a network's own writer's
        raise ExportError(str(e)) from None
    want_vocab = (model_config.vocab_size, model_config.hidden_size)
    embeddings = tuple(state_dict[EMBEDDINGS[model_config.network]].shape)
    if embeddings != want_vocab:
        raise ExportError(f"word embeddings are {embeddings}, ModelConfig says {want_vocab}")
    return out


def _wordpiece_files(vocab_dir: str, max_length: int, row=None) -> dict[str, str]:
    """WordPiece: the vocabulary file copied, tokenizer.json and tokenizer_config.json written by the functions that
    wrote prep's (schemas/vocab.py), from the normalization recorded in vocab_config.json (or in the tokenizer.json of
    a directory without one). A family without token types (XLM's, whose class would add token type ids to the
    input as word embeddings) gets a tokenizer that returns none."""
    inputs = ["input_ids", "token_type_ids", "attention_mask"] if row is None or row.token_types else ["input_ids", "attention_mask"]
    tokens = vocab_files.read_tokens(vocab_dir)
    settings = vocab_files.read_config(vocab_dir)
    normalization = vocab_files.normalization_of(settings if settings is not None else vocab_files.tokenizer_json_settings(vocab_dir))
    extra = {"model_max_length": max_length, "clean_up_tokenization_spaces": False,
             "model_input_names": inputs}
    return {
        vocab_files.VOCAB_FILE: vocab_files.encode_tokens(tokens).decode("utf-8"),
        vocab_files.TOKENIZER_FILE: vocab_files.tokenizer_json(tokens, normalization),
        vocab_files.TOKENIZER_CONFIG_FILE: vocab_files.tokenizer_config_json(normalization, **extra),
    }


def _bpe_files(vocab_dir: str, max_length: int, row=None) -> dict[str, str]:
    """Byte-level BPE (RoBERTa's): tokenizer.json, vocab.json + merges.txt, tokenizer_config.json (schemas/hf_tokenizers.py),
    naming the family's tokenizer class where it is not RoBERTa's (ModernBERT's PreTrainedTokenizerFast, which reads
    tokenizer.json and returns no token types)."""
    bpe = hf_tokenizers.read_bpe(vocab_dir)
    own = {} if row is None or row.hf_tokenizer_class == TOKENIZER_FORMATS["bpe"].tokenizer_class else {
        "tokenizer_class": row.hf_tokenizer_class, "model_input_names": ["input_ids", "attention_mask"]}
    return {vocab_files.TOKENIZER_FILE: bpe.tokenizer_json(), "vocab.json": bpe.vocab_json(), "merges.txt": bpe.merges_txt(),
            vocab_files.TOKENIZER_CONFIG_FILE: bpe.tokenizer_config_json(model_max_length=max_length, **own)}


def _unigram_files(vocab_dir: str, max_length: int, _row=None) -> dict[str, str]:
    """SentencePiece Unigram (XLM-R's): tokenizer.json and tokenizer_config.json (schemas/hf_tokenizers.py)."""
    model = hf_tokenizers.read_unigram(vocab_dir)
    return {vocab_files.TOKENIZER_FILE: model.tokenizer_json(),
            vocab_files.TOKENIZER_CONFIG_FILE: model.tokenizer_config_json(model_max_length=max_length)}


TOKENIZER_FILES = {"wordpiece": _wordpiece_files, "bpe": _bpe_files, "unigram": _unigram_files}
"""How each tokenizer kind (schemas/tokenizer_formats.py) is written into an export, with its model_max_length (and
the family's row: which inputs its tokenizer returns)."""


def _tokenizer_files(vocab_dir: str, model_config: ModelConfig, max_length: int) -> dict[str, str]:
    """The tokenizer files of the export, as its kind writes them (TOKENIZER_FILES), and special_tokens_map.json; the
    vocabulary checked against the model (its size, its padding id) and against the family (its tokenizer)."""
    kind = format_of(vocab_dir)
    row = model_config.row
    if kind.name != row.tokenizer:
        raise ExportError(f"{vocab_dir} holds a {kind.name} vocabulary; a {row.name} model's is {row.tokenizer}")
    tokens = vocab_files.read_tokens(vocab_dir)
    try:
        ids = kind.special_ids(tokens)
    except ContractError as e:
        raise ExportError(f"{vocab_dir}: {e}") from None
    if len(tokens) > model_config.vocab_size:
        raise ExportError(f"{vocab_dir} has {len(tokens)} tokens, more than the model's vocab_size {model_config.vocab_size}")
    pad = kind.roles["pad_token"]
    if ids[pad] != model_config.pad_token_id:
        raise ExportError(f"{pad} is id {ids[pad]} in {vocab_dir} but pad_token_id {model_config.pad_token_id} in ModelConfig")
    files = TOKENIZER_FILES[kind.name](vocab_dir, max_length, row)
    files["special_tokens_map.json"] = json.dumps(kind.roles, indent=2) + "\n"
    return files


def export_hf(state_dict: dict[str, torch.Tensor], model_config: ModelConfig, vocab_dir: str, output_dir: str,
              *, card: dict[str, Any] | None = None, overwrite: bool = False, trained_seq_len: int | None = None) -> None:
    """Write the HuggingFace directory described in the module docstring as `output_dir` (a local path), whole:
    see replace_directory. `trained_seq_len` (default: every position) becomes the tokenizer's model_max_length."""
    from safetensors.torch import save_file

    generator, own = None, OWN_EXPORTS.get(model_config.network)
    if own is not None:  # ELECTRA's: the discriminator here, the generator in its own directory
        (tensors, generator), dropped = own.tensors(state_dict, model_config), {}
    else:
        tensors = hf_state_dict(state_dict, model_config)  # refuses pre-LN before anything is written
        dropped = {p: sum(v.numel() for k, v in state_dict.items() if k.startswith(p)) for p in PROJECT_ONLY_PREFIXES}
    max_length = trained_seq_len or model_config.max_position_embeddings
    if not 0 < max_length <= model_config.max_position_embeddings:
        raise ExportError(f"trained sequence length {max_length} is outside the model's {model_config.max_position_embeddings} positions")
    texts = _tokenizer_files(vocab_dir, model_config, max_length)
    texts["config.json"] = json.dumps(model_config.to_hf_config(), indent=2) + "\n"
    texts["README.md"] = model_card(model_config, sum(v.numel() for v in tensors.values()), dropped, card or {}, max_length, own)

    def write(staging: str) -> None:
        save_file(tensors, os.path.join(staging, "model.safetensors"), metadata={"format": "pt"})
        for name, text in texts.items():
            with open(os.path.join(staging, name), "w", encoding="utf-8") as f:
                f.write(text)
        if generator is not None:
            own.write_generator(staging, model_config, generator, texts)

    replace_directory(output_dir, write, overwrite=overwrite)


def verify_export(hf_dir: str, model: BertForPretraining, batch: dict[str, torch.Tensor]) -> dict[str, float]:
    """Max |ours - transformers| of the MLM logits (real tokens only), and of the NSP logits in a family with NSP, on
    `batch`, both in eval mode, transformers loading the family's class (BertForPreTraining, RobertaForMaskedLM, ...).

    `batch` needs input_ids, token_type_ids and attention_mask (batch, seq), and position_ids where the rows restart
    them (TLM's); both models get what the family's network takes (its `hf_inputs`: XLM's `langs` are our token
    types), other keys are ignored. `model` must hold whole (not ZeRO-3-partitioned) parameters; transformers runs
    in fp32 on the same device."""
    try:
        import transformers
    except ImportError:
        raise ExportError("transformers is not installed (pip install 'transformers>=4.56')") from None
    transformers.utils.logging.disable_progress_bar()  # its "Loading weights" bars are not for the user of export
    problem = families.transformers_problem(model.config.row.hf_model_type, transformers.__version__)
    if problem:
        raise ExportError(problem)
    own = OWN_EXPORTS.get(model.config.network)
    if own is not None:
        return own.verify(transformers, hf_dir, model, batch)
    row = model.config.row
    device = next(model.parameters()).device
    reference = getattr(transformers, row.hf_pretraining_class).from_pretrained(hf_dir).to(device).eval()
    names = [(ours, theirs) for ours, theirs in spelling_of(model.config).hf_inputs if ours in batch]
    inputs = {ours: batch[ours].to(device) for ours, _ in names}
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            sequence_output, pooled, _ = model.encode(**inputs)
            ours_mlm = model.dense_mlm_logits(sequence_output).float()  # (batch, seq, vocab)
            theirs = reference(**{their: inputs[ours] for ours, their in names})
    finally:
        model.train(was_training)
    real = inputs["attention_mask"].bool()  # logits at padding are not part of either model's contract
    their_mlm = theirs.prediction_logits if row.nsp else theirs.logits
    diffs = {"mlm_max_abs_diff": (ours_mlm - their_mlm.float())[real].abs().max().item()}
    if row.nsp:
        with torch.no_grad():
            ours_nsp = model.cls.seq_relationship(pooled).float()  # (batch, 2)
        diffs["nsp_max_abs_diff"] = (ours_nsp - theirs.seq_relationship_logits.float()).abs().max().item()
    return diffs


def load_run_model(run_dir: str, tag: str | None = None) -> tuple[BertForPretraining, dict, str, dict]:
    """The project's model with a checkpoint's consolidated fp32 weights, its client state and tag."""
    state, client, tag = store.consolidated_state_dict(run_dir, tag)
    model_config = ModelConfig.from_dict(client["model_config"])
    model = build(model_config)
    missing, unexpected = model.load_state_dict(state, strict=False)
    tied = ("cls.predictions.decoder.weight", *electra_names.TIED)  # the word embeddings under another name
    missing = [k for k in missing if k not in tied]
    if missing or unexpected:
        raise ContractError(f"{run_dir}/{tag}: checkpoint does not fit the model (missing {missing[:3]}, unexpected {unexpected[:3]})")
    return model.eval(), client, tag, state


def validation_batch(train_config: dict, rows: int = 16) -> dict[str, torch.Tensor]:
    """A few rows of the run's data (validation split if there is one), collated as their row format says, without
    masking."""
    import fsspec
    import numpy as np
    import pyarrow as pa

    from trainer.data.collate import ROW_COLLATORS

    manifest = Manifest.read(train_config["data"])
    split = "validation" if manifest.split_shards("validation") else "train"
    shard = manifest.split_shards(split)[0]
    with fsspec.open(manifest.resolve(shard.path), "rb") as f:
        table = pa.ipc.open_file(pa.BufferReader(f.read())).read_all().slice(0, rows).combine_chunks()
    batch = table.to_batches()[0]
    languages = {code: i for i, code in enumerate(train_config.get("languages") or ())} or None  # XLM's token types
    arrays = ROW_COLLATORS[manifest.row_format.kind]([(batch, np.arange(batch.num_rows))], manifest, 1, languages)
    return {k: torch.from_numpy(v) for k, v in arrays.items() if k != "special_mask"}


def export_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="clozeforge export", description="Export a run's checkpoint as a HuggingFace directory.")
    ap.add_argument("run", help="run directory of clozeforge train (its checkpoints/, vocab/ and train_config.json)")
    ap.add_argument("--output", required=True, metavar="HF_DIR",
                    help="HuggingFace directory to write; written whole beside it, then swapped in for an earlier export")
    ap.add_argument("--overwrite", action="store_true", help="replace HF_DIR even when it holds files that are not a clozeforge export")
    ap.add_argument("--tag", default=None, help="checkpoint tag (default: the latest)")
    ap.add_argument("--verbose", action="store_true", help="also show third-party start-up messages (DeepSpeed's accelerator detection)")
    ap.add_argument("--verify", action="store_true", help="reload the export with transformers and compare its MLM and NSP logits with ours (fails above 1e-4)")
    return ap


def export_main(argv: list[str] | None = None) -> int:
    args = export_parser().parse_args(argv)
    quiet_startup(args.verbose)
    output, run = os.path.realpath(args.output), os.path.realpath(args.run)
    if output == run or run.startswith(output + os.sep) or output.startswith(run + os.sep):
        return fail("export", f"--output {args.output}: the run directory {args.run} or inside it; export elsewhere")
    try:
        check_destination(args.output, overwrite=args.overwrite)  # before the checkpoint is read
        model, client, tag = export_checkpoint(args.run, args.tag, args.output, overwrite=args.overwrite)
    except (FileNotFoundError, ContractError, ExportError, OutputDirError) as e:
        return fail("export", str(e))
    except OSError as e:  # the destination: no permission, a full disk
        return fail("export", f"--output {args.output}: {e.strerror or e} ({e.filename or args.output})")
    print(f"exported {args.run} ({tag}, step {client.get('step')}) -> {args.output}")
    if args.verify:
        try:
            diffs = verify_export(args.output, model, validation_batch(client["train_config"]))
        except (FileNotFoundError, ContractError, ExportError) as e:
            return fail("export", f"--verify: {e}")
        print("verify: max |ours - transformers|  " + "  ".join(f"{k.split('_')[0]} {v:.2e}" for k, v in diffs.items()))
        if max(diffs.values()) > 1e-4:
            print("verify: FAILED (tolerance 1e-4)", file=sys.stderr)
            return 1
    return 0


def export_checkpoint(run_dir: str, tag: str | None, output_dir: str, *, overwrite: bool = False
                      ) -> tuple[BertForPretraining, dict, str]:
    """A run's checkpoint (`tag`, or the latest intact one) as the HuggingFace directory `output_dir`, with its model
    card (training config, step, final metrics, data fingerprint, what a continued pretraining continued) and the
    trained length as model_max_length: what `clozeforge export` writes, and how finetune exports a RUN's
    checkpoints. Returns (the project's model with those weights, the checkpoint's client state, its tag)."""
    model, client, tag, state = load_run_model(run_dir, tag)
    metrics = client.get("metrics") or _final_metrics(run_dir, up_to_step=client.get("step"))
    card = {"train_config": client.get("train_config", {}), "step": client.get("step"), "metrics": metrics,
            "data_fingerprint": _data_fingerprint(run_dir), "checkpoint": tag, **_data_kind(run_dir, client)}
    source = (client.get("train_config") or {}).get("init_from")
    if source:  # a continued pretraining says what it continued (the run's train_config.json records it too)
        objectives = model.config.objectives_text()
        card = {"description": f"A {model.config.family} encoder continued from {source} with clozeforge ({objectives}) "
                               "on a corpus of its own.", "continued_from": source, **card}
        pooling = _recorded(run_dir).get(encoder_layout.RUN_KEY)
        if pooling:  # a sentence-transformers source's pooling: what `embed` on the export uses by default
            card[encoder_layout.CARD_KEY] = pooling
    length = trained_length(client)
    if length is None:
        print(f"clozeforge export: note: {tag} does not record its trained sequence length and its manifests cannot "
              f"be read; model_max_length is the model's {model.config.max_position_embeddings} positions", file=sys.stderr)
    export_hf(state, model.config, os.path.join(run_dir, "vocab"), output_dir, card=card, overwrite=overwrite,
              trained_seq_len=length)
    return model, client, tag


def _data_kind(run_dir: str, client: dict) -> dict[str, str]:
    """What the run's data was: its vocabulary's kind (RUN/vocab) and its packing (the manifest, when still there)."""
    kind = {"tokenizer": format_of(os.path.join(run_dir, run_layout.VOCAB)).name}
    try:
        kind["packing"] = Manifest.read(client["train_config"]["data"]).packing["mode"]
    except (KeyError, TypeError, OSError, ContractError):
        pass
    return kind


def trained_length(client: dict) -> int | None:
    """The longest sequence length the checkpoint's run trained on, as the trainer records it; for a checkpoint
    older than that record, worked out from its train config (phase 1's pairs, phase 2's once the step is past
    phase 2's start) by reading the manifests; None when they cannot be read."""
    if client.get("trained_seq_len"):
        return int(client["trained_seq_len"])
    from trainer.config import TrainConfig, TrainError

    try:
        config = TrainConfig.from_dict(client["train_config"], where="the checkpoint's train config")
        ran_phase1 = config.phase2_data is None or config.phase2_begins > 0
        lengths = [Manifest.read(config.data).max_seq_len] if ran_phase1 else []
        if config.phase2_data and (client.get("step") or 0) > config.phase2_begins:
            lengths.append(Manifest.read(config.phase2_data).max_seq_len)
    except (KeyError, TypeError, OSError, ContractError, TrainError):  # a config short of its fields, a manifest gone
        return None
    return max(lengths)


def _recorded(run_dir: str) -> dict:
    """RUN/train_config.json ({} when it is not there)."""
    path = os.path.join(run_dir, run_layout.TRAIN_CONFIG)
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return json.load(f)


def _data_fingerprint(run_dir: str) -> str | None:
    return _recorded(run_dir).get("data_fingerprint")


def _final_metrics(run_dir: str, up_to_step: int | None) -> dict:
    """The last logged train and validation figures at or before `up_to_step` (the exported checkpoint's)."""
    from trainer.metrics import read_metrics

    records = read_metrics(run_dir)
    out = {}
    for r in records:
        if up_to_step is not None and r.get("step", 0) > up_to_step:
            continue
        prefix = "valid_" if r.get("split") == "validation" else "train_"
        out.update({prefix + k: v for k, v in r.items() if k not in ("split",) and isinstance(v, (int, float))})
    return out
