"""The tokenizer kinds a vocabulary directory holds, as contracts: one row per kind, read by prep, trainer and export.

    wordpiece  BERT's: vocab.txt + tokenizer.json (WordPiece), [PAD] [UNK] [CLS] [SEP] [MASK], '##' continues a word
    bpe        RoBERTa's byte-level BPE: tokenizer.json + vocab.json + merges.txt, <s> <pad> </s> <unk> <mask>,
               'Ġ' (a space byte) starts a word
    unigram    XLM-R's SentencePiece Unigram: tokenizer.json (Unigram, NFKC as a Precompiled charsmap), the same
               special tokens as RoBERTa, '▁' starts a word

A row says what a kind's directory holds (its files, transformers' tokenizer class, its special tokens by the role
transformers gives them) and how its tokens mark words (`WordBoundary`, recorded in vocab_config.json so that
whole-word masking reads it without importing pipelines). Every directory prep writes also holds vocab.txt (the
tokens in id order, the file the manifest's sha256 covers), whatever the kind.

`format_of(directory)` says which kind a directory holds: vocab_config.json's `tokenizer` (prep's), else
tokenizer_config.json's `tokenizer_class` (what AutoTokenizer goes by), else tokenizer.json's model, else vocab.txt
alone (BERT's first layout). `read_format` gives the row. Any other directory is one ValueError naming the file.
"""

from __future__ import annotations

import dataclasses
import posixpath
from typing import Any

from schemas.errors import ContractError
from schemas.jsonl import file_object


@dataclasses.dataclass(frozen=True)
class WordBoundary:
    """How a kind's tokens mark words, for whole-word and span masking."""

    mark: str
    """'##', 'Ġ' or '▁'."""
    marks_start: bool
    """True: a token that begins with `mark` begins a word (byte-level BPE's 'Ġ', Unigram's '▁'); False: a token that
    begins with it continues the word before it (WordPiece's '##')."""

    def continues_word(self, token: str) -> bool:
        """Whether `token`, after another token of the same text, belongs to that token's word.

        NOTE: with 'Ġ' a punctuation token that follows a word without a space ("word," → 'word' ','), continues it,
        as fairseq's whole-word masking for GPT-2 BPE reads it; the first token of a text (no 'Ġ' before it: RoBERTa
        adds no prefix space) starts a word wherever it stands, which only the position can tell."""
        return token.startswith(self.mark) != self.marks_start

    def continuation_flags(self, tokens: list[str], special: set[str] = frozenset()) -> list[bool]:
        """One flag per id: True for a token that continues a word (never a special token)."""
        return [t not in special and self.continues_word(t) for t in tokens]

    def to_dict(self) -> dict[str, str]:
        return {"mark": self.mark, "marks": "word_start" if self.marks_start else "continuation"}

    @classmethod
    def from_dict(cls, body: Any, where: str = "word_boundary") -> WordBoundary:
        if not (isinstance(body, dict) and isinstance(body.get("mark"), str) and body.get("marks") in ("word_start", "continuation")):
            raise ContractError(f"{where}: expected {{\"mark\": str, \"marks\": \"word_start\" | \"continuation\"}}, got {body!r}")
        return cls(mark=body["mark"], marks_start=body["marks"] == "word_start")


@dataclasses.dataclass(frozen=True)
class TokenizerFormat:
    name: str
    """prep's --tokenizer: wordpiece, bpe or unigram."""
    model_type: str
    """tokenizer.json's model.type."""
    tokenizer_class: str
    """transformers' class (tokenizer_config.json's tokenizer_class); AutoTokenizer loads it as this class."""
    roles: dict[str, str]
    """transformers' name of each special token → the token."""
    boundary: WordBoundary
    files: tuple[str, ...]
    """The files of a vocabulary directory prep writes for this kind, besides vocab_config.json and token_counts.txt."""

    @property
    def special_tokens(self) -> tuple[str, ...]:
        """The distinct special tokens, in the order of `roles`."""
        return tuple(dict.fromkeys(self.roles.values()))

    reserved_brackets: bool = False
    """Bracketed tokens ([unused3], ...) are reserved too: WordPiece's vocabularies hold such rows no text produces."""

    def never_produced(self, tokens: list[str]) -> list[int]:
        """The ids no text encodes to: the special tokens and the reserved ones (masking never selects nor draws
        them)."""
        specials = set(self.special_tokens)
        return [i for i, t in enumerate(tokens) if t in specials or (self.reserved_brackets and t.startswith("[") and t.endswith("]"))]

    def special_ids(self, tokens: list[str]) -> dict[str, int]:
        """{token: id} for the special tokens; a ContractError names the ones `tokens` lacks."""
        index = {t: i for i, t in enumerate(tokens)}
        missing = [t for t in self.special_tokens if t not in index]
        if missing:
            raise ContractError(f"vocabulary lacks special tokens {missing}")
        return {t: index[t] for t in self.special_tokens}


_ROBERTA_ROLES = {"bos_token": "<s>", "pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>", "sep_token": "</s>",
                  "cls_token": "<s>", "mask_token": "<mask>"}
WORDPIECE = TokenizerFormat(
    name="wordpiece", model_type="WordPiece", tokenizer_class="BertTokenizer",
    roles={"pad_token": "[PAD]", "unk_token": "[UNK]", "cls_token": "[CLS]", "sep_token": "[SEP]", "mask_token": "[MASK]"},
    boundary=WordBoundary("##", marks_start=False),
    files=("vocab.txt", "tokenizer.json", "tokenizer_config.json"),
    reserved_brackets=True,
)
BPE = TokenizerFormat(
    name="bpe", model_type="BPE", tokenizer_class="RobertaTokenizer", roles=_ROBERTA_ROLES,
    boundary=WordBoundary("Ġ", marks_start=True),
    files=("vocab.txt", "tokenizer.json", "vocab.json", "merges.txt", "tokenizer_config.json"),
)
UNIGRAM = TokenizerFormat(
    name="unigram", model_type="Unigram", tokenizer_class="XLMRobertaTokenizer", roles=_ROBERTA_ROLES,
    boundary=WordBoundary("▁", marks_start=True),
    files=("vocab.txt", "tokenizer.json", "tokenizer_config.json"),
)
TOKENIZER_FORMATS = {f.name: f for f in (WORDPIECE, BPE, UNIGRAM)}
"""Every format a vocabulary directory can hold, by tokenizer name."""


def format_named(name: str, where: str = "tokenizer") -> TokenizerFormat:
    if name not in TOKENIZER_FORMATS:
        raise ContractError(f"{where}: unknown tokenizer {name!r} (known: {', '.join(TOKENIZER_FORMATS)})")
    return TOKENIZER_FORMATS[name]


def _join(directory: str, name: str) -> str:
    return posixpath.join(directory.rstrip("/"), name)


def read_json(url: str) -> dict[str, Any] | None:
    """The JSON object at `url`, or None when there is no such file; a ValueError naming the file when it is not a
    JSON object (schemas/jsonl.py's one message)."""
    import fsspec  # NOTE: imported where I/O happens, so importing schemas needs only pyarrow + stdlib

    try:
        with fsspec.open(url, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    return file_object(data, url)


def _exists(url: str) -> bool:
    import fsspec

    fs, path = fsspec.core.url_to_fs(url)
    return fs.isfile(path)


GENERIC_CLASSES = ("PreTrainedTokenizerFast", "TokenizersBackend")
"""transformers' tokenizer classes of no model's own, which read tokenizer.json as it is (ModernBERT's export)."""
_CLASS_PREFIXES = (("XLMRobertaTokenizer", UNIGRAM), ("RobertaTokenizer", BPE), ("BertTokenizer", WORDPIECE))


def format_of(directory: str) -> TokenizerFormat:
    """The kind of vocabulary `directory` holds (see the module docstring for the order the files are read in).

    FileNotFoundError when it holds none of vocab_config.json, tokenizer_config.json, tokenizer.json and vocab.txt;
    ValueError (naming the file) for a file that is not JSON, or a tokenizer of a kind clozeforge does not read."""
    config = read_json(_join(directory, "vocab_config.json"))
    if config is not None:
        name = config.get("tokenizer", "wordpiece") if isinstance(config, dict) else None  # before 'tokenizer': WordPiece
        if name not in TOKENIZER_FORMATS:
            raise ValueError(f"{_join(directory, 'vocab_config.json')}: tokenizer {name!r} is none of "
                             f"{', '.join(TOKENIZER_FORMATS)}")
        return TOKENIZER_FORMATS[name]
    hf_config = read_json(_join(directory, "tokenizer_config.json"))
    klass = hf_config.get("tokenizer_class") if isinstance(hf_config, dict) else None
    if klass in GENERIC_CLASSES:  # a class of no model (ModernBERT's): its tokenizer.json's model says the kind
        klass = None
    if klass:
        for prefix, kind in _CLASS_PREFIXES:
            if str(klass).startswith(prefix):
                return kind
        known = ", ".join(f.tokenizer_class for f in TOKENIZER_FORMATS.values())
        raise ValueError(f"{_join(directory, 'tokenizer_config.json')}: tokenizer_class {klass!r} is none of the classes "
                         f"clozeforge reads ({known})")
    body = read_json(_join(directory, "tokenizer.json"))
    if body is not None:
        model = (body.get("model") or {}).get("type") if isinstance(body, dict) else None
        for kind in TOKENIZER_FORMATS.values():
            if model == kind.model_type:
                return kind
        raise ValueError(f"{_join(directory, 'tokenizer.json')}: a {model} model, none of WordPiece, BPE or Unigram")
    if hf_config is not None or _exists(_join(directory, "vocab.txt")):
        return WORDPIECE
    raise FileNotFoundError(f"{directory}: no vocabulary here: none of vocab_config.json, tokenizer.json, tokenizer_config.json "
                            "or vocab.txt (expected the vocab/ directory of a prep run, or a tokenizer directory transformers saved)")


def word_boundary(directory: str) -> WordBoundary:
    """How the tokens of `directory` mark words: vocab_config.json's `word_boundary` (prep's), else its kind's."""
    config = read_json(_join(directory, "vocab_config.json"))
    if isinstance(config, dict) and "word_boundary" in config:
        return WordBoundary.from_dict(config["word_boundary"], f"{_join(directory, 'vocab_config.json')}: word_boundary")
    return format_of(directory).boundary


def tokens_of_tokenizer_json(body: Any, url: str) -> list[str]:
    """The tokens of a tokenizer.json, index = id: its model's vocabulary (WordPiece and BPE: token → id; Unigram:
    [piece, score] in id order) and the added tokens beyond it; a ValueError when the ids are not 0..n-1."""
    model = body.get("model") if isinstance(body, dict) else None
    vocab = model.get("vocab") if isinstance(model, dict) else None
    if isinstance(vocab, dict):
        by_id = {i: t for t, i in vocab.items()}
    elif isinstance(vocab, list):
        by_id = {i: (item[0] if isinstance(item, list) else item) for i, item in enumerate(vocab)}
    else:
        raise ValueError(f"{url}: no model vocabulary")
    for added in body.get("added_tokens") or []:
        if isinstance(added, dict) and by_id.get(added.get("id"), added.get("content")) != added.get("content"):
            raise ValueError(f"{url}: added token {added.get('content')!r} has the id {added.get('id')} of {by_id[added['id']]!r}")
        by_id.setdefault(added.get("id"), added.get("content"))
    if sorted(by_id) != list(range(len(by_id))) or not all(isinstance(t, str) for t in by_id.values()):
        raise ValueError(f"{url}: token ids are not 0..{len(by_id) - 1}, one string each")
    return [by_id[i] for i in range(len(by_id))]
