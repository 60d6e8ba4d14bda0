"""How a directory holding a public encoder is laid out, read without running any of its code.

In:  a directory's files, through `cat(relative path) -> bytes` (FileNotFoundError when absent): a transformers
     directory (config.json beside the weights), or a sentence-transformers one (modules.json naming a Transformer
     module in the root or a folder such as `0_Transformer/`, then Pooling and Normalize modules).
Out: a `Layout`: the folder the encoder's config.json, weights and tokenizer are in ("" for the root), its `Pooling`
     (None for a transformers directory) and the layout's name; or a ContractError in one line naming the file, for a
     module clozeforge has no row for (Dense, a custom class: code it would have to run) and for a config that needs
     `trust_remote_code` (`auto_map`). `remote_code(config)` is that last check alone, for every reader of a
     config.json. Standard library only: the trainer (--init-from) and downstream (`embed`'s pooling) both read it.

One row a layout in LAYOUTS, asked in order; one row a sentence-transformers module kind in MODULE_KINDS (by the last
part of its class name, which sentence-transformers 2.x spells `sentence_transformers.models.Pooling` and 5.x
`sentence_transformers.sentence_transformer.modules.pooling.Pooling`).
"""

from __future__ import annotations

import dataclasses
import json
import posixpath
from collections.abc import Callable

from schemas.errors import ContractError

MODULES_FILE = "modules.json"
CONFIG_FILE = "config.json"
ST_CONFIG_FILE = "sentence_bert_config.json"
POOLING_MODES = ("cls", "mean", "max", "mean_sqrt_len_tokens")
"""The pooling modes `embed` computes (sentence-transformers' names); its weightedmean and lasttoken are refused."""
_LEGACY_MODES = {"pooling_mode_cls_token": "cls", "pooling_mode_max_tokens": "max", "pooling_mode_mean_tokens": "mean",
                 "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
                 "pooling_mode_weightedmean_tokens": "weightedmean", "pooling_mode_lasttoken": "lasttoken"}
"""sentence-transformers 2.x's boolean keys of 1_Pooling/config.json, in the order it concatenates them."""

Cat = Callable[[str], bytes]


@dataclasses.dataclass(frozen=True)
class Pooling:
    """A sentence vector as sentence-transformers makes it from the encoder's last hidden state."""

    mode: str
    """One of POOLING_MODES."""
    normalize: bool
    """L2-normalised after pooling (a Normalize module follows)."""
    max_seq_length: int | None = None
    """Tokens the Transformer module cuts texts to (sentence_bert_config.json), where it says."""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, body: dict, where: str) -> Pooling:
        try:
            found = cls(**body)
        except TypeError as e:
            raise ContractError(f"{where}: not a pooling record ({e})") from None
        if found.mode not in POOLING_MODES:
            raise ContractError(f"{where}: pooling mode {found.mode!r} is not one clozeforge computes ({', '.join(POOLING_MODES)})")
        return found

    def describe(self) -> str:
        return f"{self.mode} pooling{', normalized' if self.normalize else ''}"


@dataclasses.dataclass(frozen=True)
class Layout:
    name: str
    encoder_dir: str
    """The folder of the encoder's config.json, weights and tokenizer, relative to the directory ("" the root)."""
    pooling: Pooling | None = None


def _json(cat: Cat, path: str, where: str):
    try:
        return json.loads(cat(path))
    except FileNotFoundError:
        raise
    except (ValueError, UnicodeDecodeError) as e:
        raise ContractError(f"{where}/{path}: not JSON ({type(e).__name__})") from None


def remote_code(config: dict, where: str) -> str | None:
    """Why a transformers config.json needs code from its directory (`auto_map`: trust_remote_code), or None."""
    if isinstance(config, dict) and config.get("auto_map"):
        classes = ", ".join(sorted(map(str, config["auto_map"].values()))) if isinstance(config["auto_map"], dict) else "?"
        return (f"{where}: auto_map names code in the directory ({classes}) that transformers runs only with "
                "trust_remote_code; clozeforge runs no code a model directory brings")
    return None


def _pooling(cat: Cat, path: str, where: str) -> str:
    body = _json(cat, posixpath.join(path, CONFIG_FILE), where)
    modes = body.get("pooling_mode") if isinstance(body, dict) else None
    if modes is None and isinstance(body, dict):  # 2.x: booleans; none set means mean, as sentence-transformers reads it
        modes = [mode for key, mode in _LEGACY_MODES.items() if body.get(key)] or ["mean"]
    modes = [modes] if isinstance(modes, str) else list(modes or [])
    if len(modes) != 1 or modes[0] not in POOLING_MODES:
        raise ContractError(f"{where}/{path}/{CONFIG_FILE}: pooling {'+'.join(map(str, modes)) or 'none'} is not one "
                            f"clozeforge computes ({', '.join(POOLING_MODES)})")
    return modes[0]


MODULE_KINDS = ("Transformer", "Pooling", "Normalize")
"""The sentence-transformers modules a directory may list (by class name, in this order), none with code of its own
to run: the encoder, the parameter-free pooling and the L2 normalisation."""


def _sentence_transformers(cat: Cat, where: str) -> Layout | None:
    try:
        modules = _json(cat, MODULES_FILE, where)
    except FileNotFoundError:
        return None
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise ContractError(f"{where}/{MODULES_FILE}: not a list of modules")
    kinds = []
    for module in modules:
        kind, path = str(module.get("type", "")).rsplit(".", 1)[-1], str(module.get("path", ""))
        if not str(module.get("type", "")).startswith("sentence_transformers.") or kind not in MODULE_KINDS:
            raise ContractError(f"{where}/{MODULES_FILE}: module {module.get('type')!r} is not one clozeforge reads "
                                f"({', '.join(MODULE_KINDS)} of sentence_transformers; it runs no code a directory brings)")
        if path.startswith("/") or ".." in path.split("/"):
            raise ContractError(f"{where}/{MODULES_FILE}: module path {path!r} leaves the directory")
        kinds.append((kind, path))
    order = [k for k, _ in kinds]
    if order[:1] != ["Transformer"] or order.count("Transformer") != 1 or order.count("Pooling") > 1 \
            or order != sorted(order, key=MODULE_KINDS.index):
        raise ContractError(f"{where}/{MODULES_FILE}: modules {' -> '.join(order)}; clozeforge reads Transformer -> "
                            "[Pooling] -> [Normalize]")
    encoder = kinds[0][1].strip("/")
    try:
        config = _json(cat, posixpath.join(encoder, ST_CONFIG_FILE), where)
    except FileNotFoundError:
        config = {}
    for key in ("model_args", "config_args", "tokenizer_args"):
        if isinstance(config, dict) and isinstance(config.get(key), dict) and config[key].get("trust_remote_code"):
            raise ContractError(f"{where}/{posixpath.join(encoder, ST_CONFIG_FILE)}: {key} asks for trust_remote_code; "
                                "clozeforge runs no code a model directory brings")
    length = config.get("max_seq_length") if isinstance(config, dict) else None
    pooling = next((Pooling(_pooling(cat, path, where), "Normalize" in order, length if isinstance(length, int) else None)
                    for kind, path in kinds if kind == "Pooling"), None)
    return Layout("sentence-transformers", encoder, pooling)


def _transformers(cat: Cat, where: str) -> Layout | None:
    try:
        cat(CONFIG_FILE)
    except FileNotFoundError:
        return None
    return Layout("transformers", "")


LAYOUTS: tuple[Callable[[Cat, str], Layout | None], ...] = (_sentence_transformers, _transformers)
"""The layouts, asked in this order (a sentence-transformers directory with its encoder in the root has config.json too)."""


def read(cat: Cat, where: str) -> Layout | None:
    """The directory's Layout (its encoder's config.json checked for remote code), or None when it is neither kind."""
    for layout in LAYOUTS:
        found = layout(cat, where)
        if found is not None:
            try:
                config = _json(cat, posixpath.join(found.encoder_dir, CONFIG_FILE), where)
            except FileNotFoundError:
                raise ContractError(f"{where}/{posixpath.join(found.encoder_dir, CONFIG_FILE)}: not there (the "
                                    f"{found.name} layout's encoder config)") from None
            problem = remote_code(config, f"{where}/{posixpath.join(found.encoder_dir, CONFIG_FILE)}")
            if problem:
                raise ContractError(problem)
            return found
    return None


RUN_KEY = "init_pooling"
"""The key of RUN/train_config.json holding a sentence-transformers source's Pooling (trainer/start/steps.py)."""
CARD_KEY = "sentence_pooling"
"""The model card entry (downstream/export_card.py writes a key as a "## Sentence pooling" table) of an export whose
run continued a sentence-transformers source: that source's Pooling, which `embed` uses by default."""
CARD_SECTION = "## " + CARD_KEY.replace("_", " ").capitalize()


def pooling_of_card(text: str, where: str) -> Pooling | None:
    """The Pooling a model card's CARD_SECTION table records (`| key | value |` rows), or None when it has none."""
    lines = text.splitlines()
    if CARD_SECTION not in lines:
        return None
    rows: dict[str, str] = {}
    for line in lines[lines.index(CARD_SECTION) + 1:]:
        if line.startswith("#"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0] not in ("key", "") and not set(cells[0]) <= {"-"}:
            rows[cells[0]] = cells[1]
    length = rows.get("max_seq_length", "None")
    return Pooling.from_dict({"mode": rows.get("mode"), "normalize": rows.get("normalize") == "True",
                              "max_seq_length": int(length) if length.isdigit() else None}, f"{where} ({CARD_SECTION})")


def recorded_pooling(cat: Cat, where: str) -> Pooling | None:
    """A directory's sentence pooling: a sentence-transformers directory's own, or what an export's card records."""
    layout = read(cat, where)
    if layout is not None and layout.pooling is not None:
        return layout.pooling
    try:
        return pooling_of_card(cat("README.md").decode("utf-8", errors="replace"), f"{where}/README.md")
    except FileNotFoundError:
        return None
