"""What `--init-from SOURCE` names: a HuggingFace directory of a family member (a clozeforge export is one) or a
clozeforge run.

In:  SOURCE as typed: a directory (any fsspec URL) with config.json and model.safetensors, pytorch_model.bin or a
     sharded checkpoint's index (model.safetensors.index.json, pytorch_model.bin.index.json), holding a
     BertForPreTraining, BertForMaskedLM, RobertaForMaskedLM, XLMRobertaForMaskedLM, XLMWithLMHeadModel or a bare
     encoder of one (config.json's model_type names the family: schemas/families.py), or ELECTRA's
     ElectraForPreTraining and its generator/ where there is one (schemas/objectives.py: `train --objective electra`);
     or a sentence-transformers directory of one (modules.json: the encoder in the root or a folder such as
     0_Transformer/, its pooling recorded: schemas/encoder_layout.py); or a run directory of `clozeforge train` (its
     newest intact checkpoint; RUN@STEP for that step's). A config.json that needs trust_remote_code is refused.
Out: a Source: `architecture` (the ModelConfig fields it fixes, its family among them), `vocab_sha256` (of its
     tokens in id order, as prep writes vocab.txt, from vocab.txt or tokenizer.json: compared with the manifest's),
     `masking` (a run's recorded masking; None for a HuggingFace directory),
     `training` (the training config a run's checkpoint or an export's model card records; trainer/start/rate.py),
     `pooling` (a sentence-transformers directory's, which the run records for its export's card),
     `check()` (files and tensor shapes, without loading the weights where a header tells the shapes) and
     `state_dict(model_config)`: our names (trainer/model/hf_names.py), the parts it lacks and the names it drops.
Every problem is one TrainError line naming the file. Pickled files are read only through
trainer/checkpoint/safe_load.py (tensors and plain data; nothing in them runs).

Each kind of source is one class in SOURCE_KINDS; `open_source` asks each, in order, whether SOURCE is one of it.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import posixpath
import re
import struct
from typing import Any, ClassVar

import torch

from schemas import ContractError, encoder_layout, families
from schemas import vocab as vocab_files
from schemas.families import FAMILIES
from schemas.jsonl import file_object
from schemas.objectives import OBJECTIVES
from trainer.config import TrainError
from trainer.model import ModelConfig, electra, weights_of
from trainer.model.hf_names import WeightsError
from trainer.start.rate import read_card

ARCHITECTURE = ("family", "vocab_size", "hidden_size", "num_layers", "num_heads", "intermediate_size", "max_position_embeddings",
                "type_vocab_size", "layer_norm_eps", "initializer_range", "pad_token_id", "pre_layernorm", "languages",
                "global_attention_every", "local_window", "global_rope_theta", "local_rope_theta")  # the last four: ModernBERT's
"""The ModelConfig fields a source fixes; the rest (dropout, loss weights, SBO) are the run's own."""
OBJECTIVE_FIELDS = ("objective", "generator_fraction")
"""What an ELECTRA source fixes besides (schemas/objectives.py); a source without them is a masked LM."""
SUPPORTED = ", ".join([*(f"{f.hf_pretraining_class} ({f.hf_model_type})" for f in FAMILIES.values()),
                       *(f"{o.hf_pretraining_class} ({o.hf_model_type})" for o in OBJECTIVES.values() if o.hf_model_type)])


def _fs(url: str):
    import fsspec

    return fsspec.core.url_to_fs(url)


def canonical_vocab_sha256(data: bytes, url: str) -> str:
    """sha256 of vocab.txt as prep writes it (one token a line, "\\n" endings), so a HuggingFace vocab.txt with
    CRLF endings or a missing last newline still matches the data prepped with it."""
    return hashlib.sha256(vocab_files.encode_tokens(vocab_files.parse_tokens(data, url))).hexdigest()


class Source:
    """One SOURCE; subclasses say how to read their kind."""

    url: str
    kind: str
    architecture: dict[str, Any]
    vocab_sha256: str | None
    vocab_dir: str
    """Where its vocab.txt is: what `prep --vocab` takes to prep data for it."""
    masking: dict | None = None
    training: dict | None = None
    """The training config the source was trained with, where it records one (trainer/start/rate.py reads its lr)."""
    training_where: str | None = None
    lacking: list[str] = []  # noqa: RUF012 (replaced, never changed in place)
    """The parts `state_dict` found the source lacks (they start fresh)."""
    pooling: dict | None = None
    """How a sentence-transformers source pools its sentence vectors (schemas/encoder_layout.py Pooling), else None."""

    @classmethod
    def matches(cls, url: str) -> bool:
        raise NotImplementedError

    def check(self) -> None:
        """Everything but loading the weights: a TrainError for the first problem."""

    def tensors(self) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def state_dict(self, model_config: ModelConfig) -> tuple[dict[str, torch.Tensor], list[str], list[str]]:
        """(our state dict, parts lacking, names dropped) for `model_config` (built from `architecture`)."""
        try:
            state, self.lacking, dropped = weights_of(self.tensors(), model_config, self.weights_where())
        except WeightsError as e:
            raise TrainError(f"--init-from {e}") from None
        return state, self.lacking, dropped

    def weights_where(self) -> str:
        return self.url


class HuggingFaceDirectory(Source):
    """config.json + weights (one file or shards) + vocab.txt, as save_pretrained and `clozeforge export` write them;
    in the root or, for a sentence-transformers directory, in the folder its modules.json names (LAYOUTS' rows)."""

    WEIGHTS: ClassVar[tuple[tuple[str, str], ...]] = (
        ("model.safetensors", "safetensors"), ("model.safetensors.index.json", "safetensors"),
        ("pytorch_model.bin", "pickle"), ("pytorch_model.bin.index.json", "pickle"),
    )
    """Weight files in the order transformers prefers them."""

    @classmethod
    def matches(cls, url: str) -> bool:
        fs, root = _fs(url)
        return any(fs.exists(posixpath.join(root, name)) for name in (encoder_layout.CONFIG_FILE, encoder_layout.MODULES_FILE))

    def __init__(self, url: str):
        self.url = url.rstrip("/")
        self.fs, self.root = _fs(self.url)
        try:
            layout = encoder_layout.read(lambda path: self.fs.cat_file(posixpath.join(self.root, path)), self.url)
        except ContractError as e:
            raise TrainError(f"--init-from {e}") from None
        if layout is not None and layout.encoder_dir:  # the encoder's own files are in its folder
            self.url, self.root = f"{self.url}/{layout.encoder_dir}", posixpath.join(self.root, layout.encoder_dir)
        self.layout = layout.name if layout else "transformers"
        self.pooling = layout.pooling.to_dict() if layout and layout.pooling else None
        where = f"{self.url}/config.json"
        body = file_object(self.fs.cat_file(posixpath.join(self.root, "config.json")), f"--init-from {where}", TrainError)
        try:
            self.architecture = ModelConfig.architecture_of_hf(body, f"--init-from {where}")
            if OBJECTIVES[self.architecture.get("objective", "mlm")].has_generator:  # its generator, when it has one, beside it
                self.generator = self._generator_config()
                fraction = electra.generator_fraction_of(body, self.generator, f"--init-from {self.url}/generator/config.json")
                self.architecture["generator_fraction"] = fraction or ModelConfig.__dataclass_fields__["generator_fraction"].default
        except (ContractError, ValueError) as e:
            raise TrainError(f"{e} (--init-from continues a {SUPPORTED}, or a clozeforge run)") from None
        checks = [("hidden_act", "gelu", "clozeforge's encoders use exact GELU"),
                  ("position_embedding_type", "absolute", "clozeforge's encoders learn absolute positions"),
                  ("is_decoder", False, "clozeforge trains encoders")]
        for key, want, why in checks:
            if body.get(key, want) != want:
                raise TrainError(f"--init-from {where}: {key} {body[key]!r} is not supported ({why}: {want!r})")
        self.kind = "/".join(body.get("architectures") or ["BertModel"])
        if self.layout != "transformers":
            self.kind = f"{self.layout}: {self.kind}" + (f", {layout.pooling.describe()}" if layout.pooling else "")
        self.vocab_dir = self.url
        self.training, self.training_where = read_card(self.fs, self.root, self.url)  # a clozeforge export's card
        vocab_url = f"{self.url}/{vocab_files.VOCAB_FILE}"
        try:
            self.vocab_sha256 = canonical_vocab_sha256(self.fs.cat_file(posixpath.join(self.root, vocab_files.VOCAB_FILE)), vocab_url)
        except FileNotFoundError:  # transformers 5 saves tokenizer.json alone: its tokens in id order, as prep writes them
            try:
                self.vocab_sha256 = hashlib.sha256(vocab_files.encode_tokens(vocab_files.read_tokens(self.url))).hexdigest()
            except ContractError:
                self.vocab_sha256 = None
        except ContractError as e:
            raise TrainError(f"--init-from {e}") from None

    generator: dict | None = None
    """An ELECTRA export's generator/config.json (None: none there, or not ELECTRA)."""

    def _generator_config(self) -> dict | None:
        path = posixpath.join(self.root, "generator", "config.json")
        if not self.fs.exists(path):
            return None
        return file_object(self.fs.cat_file(path), f"--init-from {self.url}/generator/config.json", TrainError)

    def _weights(self, root: str | None = None) -> tuple[str, str]:
        for name, kind in self.WEIGHTS:
            if self.fs.exists(posixpath.join(root or self.root, name)):
                return name, kind
        names = ", ".join(name for name, _ in self.WEIGHTS)
        raise TrainError(f"--init-from {self.url}: no weights file ({names})")

    def _files(self) -> tuple[list[str], str, str]:
        """(the weight files, their format, where to say a tensor came from)."""
        name, kind = self._weights()
        if not name.endswith(".index.json"):
            return [name], kind, f"{self.url}/{name}"
        where = f"{self.url}/{name}"
        try:
            weight_map = json.loads(self.fs.cat_file(posixpath.join(self.root, name)))["weight_map"]
            files = sorted(set(weight_map.values()))
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise TrainError(f"--init-from {where}: not a sharded checkpoint index ({type(e).__name__}: {e})") from None
        for file in files:
            if "/" in file or file in ("", ".", "..") or not self.fs.exists(posixpath.join(self.root, file)):
                raise TrainError(f"--init-from {where} names {file}, which is not in {self.url}")
        return files, kind, where

    def check(self) -> None:
        files, kind, where = self._files()
        shapes: dict[str, Any] = {}
        for file in files:
            shapes.update(self._shapes(file) if kind == "safetensors" else self._read(file, kind))
        if self.generator is not None:
            shapes = electra.from_transformers(shapes, self._generator_shapes())
        try:
            weights_of(shapes, ModelConfig(**self.architecture, nsp_weight=0.0), where)  # shapes: no weight changes them
        except (WeightsError, ValueError) as e:
            raise TrainError(f"--init-from {e}") from None

    def _shapes(self, file: str) -> dict[str, tuple[int, ...]]:
        """The tensor shapes of a safetensors file from its header alone (8 bytes of length, then JSON)."""
        path, where = posixpath.join(self.root, file), f"{self.url}/{file}"
        try:
            (length,) = struct.unpack("<Q", self.fs.cat_file(path, start=0, end=8))
            header = json.loads(self.fs.cat_file(path, start=8, end=8 + length))
            return {k: tuple(v["shape"]) for k, v in header.items() if k != "__metadata__"}
        except (struct.error, ValueError, UnicodeDecodeError, KeyError, TypeError, AttributeError) as e:
            raise TrainError(f"--init-from {where}: not a safetensors file ({type(e).__name__})") from None

    def _read(self, file: str, kind: str) -> dict[str, torch.Tensor]:
        where, data = f"{self.url}/{file}", self.fs.cat_file(posixpath.join(self.root, file))
        try:
            if kind == "safetensors":
                from safetensors.torch import load

                return load(data)
            from trainer.checkpoint.safe_load import load

            tensors = load(io.BytesIO(data))
        except ContractError as e:  # safe_load's refusal: it names the file as the buffer it read
            raise TrainError(f"--init-from {where}: {str(e).split(': ', 1)[-1]}") from None
        except Exception as e:  # noqa: BLE001 - a truncated or foreign file, in whichever library read it
            raise TrainError(f"--init-from {where}: unreadable ({type(e).__name__}: {str(e)[:120]})") from None
        if not isinstance(tensors, dict) or not all(isinstance(v, torch.Tensor) for v in tensors.values()):
            raise TrainError(f"--init-from {where}: not a state dict of tensors")
        return tensors

    def tensors(self) -> dict[str, torch.Tensor]:
        files, kind, _ = self._files()
        out: dict[str, torch.Tensor] = {}
        for file in files:
            out.update(self._read(file, kind))
        if self.generator is not None:  # an ELECTRA export's generator, under our names
            name, kind = self._weights(posixpath.join(self.root, "generator"))
            out = electra.from_transformers(out, self._read(f"generator/{name}", kind))
        return out

    def _generator_shapes(self) -> dict[str, tuple[int, ...]]:
        name, kind = self._weights(posixpath.join(self.root, "generator"))
        if kind == "safetensors" and not name.endswith(".index.json"):
            return self._shapes(f"generator/{name}")
        return {k: tuple(v.shape) for k, v in self._read(f"generator/{name}", kind).items()}

    def weights_where(self) -> str:
        return self._files()[2]


_RUN_STEP = re.compile(r"^(?P<run>.+)@(?P<step>\d+)$")


class RunDirectory(Source):
    """A clozeforge run (RUN or RUN@STEP, local): the consolidated fp32 weights of one intact checkpoint."""

    @classmethod
    def matches(cls, url: str) -> bool:
        found = _RUN_STEP.match(url)
        return os.path.isdir(os.path.join(found["run"] if found else url, "checkpoints"))

    def __init__(self, url: str):
        from trainer.checkpoint import integrity, store
        from trainer.checkpoint.safe_load import load

        self.url = url
        found = _RUN_STEP.match(url)
        self.run = found["run"] if found else url
        if found:
            self.tag = store.tag_for(int(found["step"]))
            folder = os.path.join(store.checkpoint_dir(self.run), self.tag)
            trouble = integrity.problem(folder) if os.path.isdir(folder) else "no such checkpoint"
            if trouble:
                raise TrainError(f"--init-from {folder}: {trouble}")
        else:
            try:
                self.tag = store.intact_tag(self.run)
            except ContractError as e:
                raise TrainError(f"--init-from {e}") from None
            if self.tag is None:
                raise TrainError(f"--init-from {self.run}: no checkpoint yet (expected {store.checkpoint_dir(self.run)}/latest)")
        folder = os.path.join(store.checkpoint_dir(self.run), self.tag)
        states = sorted(f for f in os.listdir(folder) if f.endswith("model_states.pt"))
        try:
            meta = load(os.path.join(folder, states[0]))
            self.step = meta["step"]
            model_config = meta["model_config"]
        except (IndexError, KeyError, TypeError, ContractError) as e:
            raise TrainError(f"--init-from {folder}: not a clozeforge checkpoint ({type(e).__name__}: {e})") from None
        self.architecture = {k: model_config[k] for k in ARCHITECTURE if k in model_config}
        if model_config.get("objective", "mlm") != "mlm":
            self.architecture.update({k: model_config[k] for k in OBJECTIVE_FIELDS})
        self.kind = f"clozeforge run, step {self.step}"
        train_config = meta.get("train_config") or {}
        self.masking = train_config.get("masking")
        self.training, self.training_where = train_config or None, f"{folder}, its train config"
        self.vocab_dir = os.path.join(self.run, "vocab")
        vocab_url = os.path.join(self.vocab_dir, vocab_files.VOCAB_FILE)
        try:
            with open(vocab_url, "rb") as f:
                self.vocab_sha256 = canonical_vocab_sha256(f.read(), vocab_url)
        except FileNotFoundError:
            self.vocab_sha256 = None

    def tensors(self) -> dict[str, torch.Tensor]:
        from trainer.checkpoint import store

        try:
            state, _, _ = store.consolidated_state_dict(self.run, self.tag)
        except (ContractError, FileNotFoundError) as e:
            raise TrainError(f"--init-from {e}") from None
        return state

    def weights_where(self) -> str:
        return f"{self.run}/checkpoints/{self.tag}"


SOURCE_KINDS: tuple[type[Source], ...] = (RunDirectory, HuggingFaceDirectory)
"""The kinds of SOURCE, asked in this order (a run directory holds no config.json)."""


def open_source(url: str) -> Source:
    """The Source `url` names, its config and vocabulary read (not its weights); a TrainError when it is none."""
    try:
        for kind in SOURCE_KINDS:
            if kind.matches(url):
                return kind(url)
    except OSError as e:  # an object store that does not answer, no permission
        raise TrainError(f"--init-from {url}: {e.strerror or type(e).__name__}") from None
    raise TrainError(f"--init-from {url}: no config.json there, nor checkpoints/ (expected a HuggingFace "
                     f"directory of a {SUPPORTED}, a clozeforge export or a clozeforge run directory)")


def source_problem(config, manifest) -> str | None:
    """Why --init-from's source cannot start this run on this data (files, shapes, vocabulary), or None. Checked
    before any rank starts, and by rank 0 of every rank's preflight; a resume does not read the source."""
    from trainer.checkpoint import store

    if not config.init_from or store.latest_tag(config.output) is not None:
        return None
    try:
        source = open_source(config.init_from)
        if source.vocab_sha256 is None:
            return (f"--init-from {config.init_from}: no vocabulary there (vocab.txt or tokenizer.json), so --data cannot be "
                    "checked against the source's; add the source's tokenizer files")
        if source.vocab_sha256 != manifest.vocab["sha256"]:
            return (f"--data {manifest.url}: prepped with another vocabulary than --init-from {config.init_from} (vocab.txt "
                    f"sha256 differs); prep it with `--vocab {source.vocab_dir}` "
                    "so the ids mean what the source learned")
        shape = source.architecture
        positions = shape["max_position_embeddings"] - families.family(shape.get("family", "bert")).first_position(shape["pad_token_id"])
        fits = [(shape["vocab_size"] >= manifest.vocab["size"], f"its vocab_size {shape['vocab_size']} is below the "
                 f"vocabulary's {manifest.vocab['size']} tokens"),
                (shape["pad_token_id"] == manifest.special_id("pad_token"), f"its pad_token_id {shape['pad_token_id']} is "
                 f"not the vocabulary's padding id {manifest.special_id('pad_token')}"),
                (positions >= manifest.max_seq_len, f"its positions stop at {positions}, --data's rows are up to "
                 f"{manifest.max_seq_len} tokens"),
                (shape.get("family", "bert") == config.family or config.family is None,
                 f"it is a {shape.get('family', 'bert')} model, --data's family is {config.family} ("
                 + (f"pass --family {shape.get('family', 'bert')}: this data is its too"  # e.g. modernbert on RoBERTa's rows
                    if shape.get("family", "bert") != config.family and config.family is not None
                    and families.refusal(families.family(shape.get("family", "bert")), manifest.tokenizer,
                                         manifest.packing["mode"]) is None
                    else "prep --vocab the source and the packing its family trains on") + ")"),
                (shape.get("objective", "mlm") == config.objective, f"it was trained with --objective "
                 f"{shape.get('objective', 'mlm')}, this run's is {config.objective} (the networks differ: pass --objective "
                 f"{shape.get('objective', 'mlm')})")]
        for ok, why in fits:
            if not ok:
                return f"--init-from {config.init_from}: {why}"
        source.check()
    except TrainError as e:
        return str(e)
    return None
