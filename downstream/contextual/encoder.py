"""A transformers encoder → contextual vectors of whole words and of character spans, per layer or averaged.

In:  a model directory that transformers' AutoModel and AutoTokenizer load (a clozeforge export; any BERT,
     RoBERTa, XLM-R saved with save_pretrained), with a fast tokenizer; texts; targets in them (a character span,
     or the index of a word as `words` numbers them); the hidden states to use (vectors.layer_indices).
Out: `Encoder.sentences(texts, layer)` → one vector per text, the mean of one hidden state over its real tokens
     (every position the attention mask keeps: its pieces and the tokenizer's special tokens, as XTREME's Tatoeba
     retrieval pools), for an XLM model with language embeddings fed that language's id at every token
     (`language_id`); `Encoder.words(texts, layers)` → per text a `Words`: its words, their character spans and one vector each, the
     mean of the word's pieces' vectors; `Encoder.targets(texts, targets, layers)` → one vector per target, the mean
     of the pieces of every word the target touches, or why it has none (`Miss`). With `per_layer` a vector is
     (layers, hidden), else the mean over the layers, (hidden,).

Words are the tokenizer's own: `word_ids()` of the fast tokenizer, i.e. what its pre-tokenizer splits (BERT's
whitespace and punctuation; byte-level BPE's and SentencePiece's space-prefixed words), so no rule of ours decides
what a word is. A text longer than the model's trained length (its tokenizer's model_max_length) is read from its
start: a word cut by that limit gets no vector (`Words.cut` counts them), a target cut by it is a `Miss`.

A model is given the token type ids its tokenizer returns only when its config has a table of them
(`type_vocab_size`: BERT's, RoBERTa's, ELECTRA's): transformers' XLM takes `token_type_ids` too but adds them as
*word* embeddings (modeling_xlm.py: `tensor + self.embeddings(token_type_ids)`), so zeros would add token 0's vector
(nothing only where token 0 is the padding, whose row is zero).
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect

import numpy as np
import torch

from schemas import ContractError


@dataclasses.dataclass
class Words:
    words: list[str]
    spans: list[tuple[int, int]]
    """Each word's [start, end) in its text."""
    vectors: np.ndarray
    """(words, hidden), or (words, layers, hidden) per layer; float32."""
    cut: int = 0
    """Words past the model's trained length, which have no vector."""


@dataclasses.dataclass(frozen=True)
class Miss:
    """A target with no vector: `reason` (a drop reason) and a message naming what is wrong."""

    reason: str
    message: str


@contextlib.contextmanager
def quiet_transformers():
    """transformers without its load report and bars ("some weights were not used": an encoder leaves the heads
    aside), then its logging as it was, for a caller that loads models in the same process."""
    import transformers

    verbosity, bars = transformers.logging.get_verbosity(), transformers.utils.logging.is_progress_bar_enabled()
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    try:
        yield transformers
    finally:
        transformers.logging.set_verbosity(verbosity)
        if bars:
            transformers.utils.logging.enable_progress_bar()


def _trimmed(text: str, start: int, end: int) -> tuple[int, int]:
    """[start, end) without the spaces at either end: a SentencePiece word's first piece is the space before it."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return int(start), int(end)


class Encoder:
    """A model and its fast tokenizer, on a device; `scratch_seed` gives the same architecture from random weights."""

    def __init__(self, model_dir: str, device: torch.device | str = "cpu", scratch_seed: int | None = None) -> None:
        from downstream.finetune.models import trained_length

        self.model_dir = model_dir
        with quiet_transformers() as transformers:
            self.tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
            if not getattr(self.tokenizer, "is_fast", False):
                raise ContractError(f"{model_dir}: its tokenizer has no fast (tokenizers) version, whose word boundaries "
                                    "(word_ids) and offsets these commands read")
            config = transformers.AutoConfig.from_pretrained(model_dir)
            if scratch_seed is None:
                model = transformers.AutoModel.from_pretrained(model_dir)
            else:
                torch.manual_seed(scratch_seed)
                model = transformers.AutoModel.from_config(config)
        self.device = torch.device(device)
        self.model = model.to(self.device).eval()
        self.config = config
        self.num_layers, self.hidden_size = config.num_hidden_layers, config.hidden_size
        self.max_length = trained_length(model_dir)[0]
        self._accepts = set(inspect.signature(self.model.forward).parameters)
        if getattr(config, "type_vocab_size", None) is None:  # XLM: see the module docstring
            self._accepts.discard("token_type_ids")

    def language_id(self, code: str) -> tuple[int | None, str | None]:
        """(the id of language `code` in an XLM config's lang2id, or None; a note when the model has language
        embeddings but not this language, or knows it by its base code: `zh` for `zh_CN`). A model without language
        embeddings (use_lang_emb false, or one language) takes none: (None, None)."""
        config = self.config
        if not (getattr(config, "use_lang_emb", False) and int(getattr(config, "n_langs", 1) or 1) > 1):
            return None, None
        known = dict(getattr(config, "lang2id", None) or {})
        base = code.replace("-", "_").split("@")[0].split("_")[0]
        if code in known:
            return int(known[code]), None
        if base in known:
            return int(known[base]), f"{code} is read as {base}, the model's language {known[base]}"
        return None, (f"the model's lang2id has no {code!r} (it has {', '.join(sorted(known)) or 'none'}): its texts are "
                      "embedded without language ids")

    def sentences(self, texts: list[str], layer: int, *, language_id: int | None = None,
                  batch_size: int = 32) -> np.ndarray:
        """(len(texts), hidden) float32: hidden state `layer` (0: the embedding output, 1..L the layers) averaged
        over each text's real tokens; `language_id` fed as XLM's `langs` at every position when given."""
        vectors = np.zeros((len(texts), self.hidden_size), np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))  # like lengths together: less padding
        for first in range(0, len(order), batch_size):
            rows = order[first : first + batch_size]
            enc = self.tokenizer([texts[i] for i in rows], padding=True, truncation=True, max_length=self.max_length,
                                 return_tensors="pt")
            inputs = {k: v.to(self.device) for k, v in enc.items() if k in self._accepts}
            if language_id is not None:
                inputs["langs"] = torch.full_like(inputs["input_ids"], language_id)
            with torch.no_grad():
                states = self.model(**inputs, output_hidden_states=True).hidden_states[layer].float()  # (batch, seq, hidden)
            mask = inputs["attention_mask"].unsqueeze(-1).to(states.dtype)  # (batch, seq, 1)
            vectors[rows] = ((states * mask).sum(1) / mask.sum(1).clamp(min=1)).cpu().numpy()
        return vectors

    def _encode(self, texts: list[str], layers: tuple[int, ...]):
        """(the batch's encoding, its untruncated encoding, states (batch, seq, layers, hidden) on the CPU)."""
        enc = self.tokenizer(texts, padding=True, truncation=True, max_length=self.max_length,
                             return_offsets_mapping=True, return_tensors="pt")
        full = self.tokenizer(texts, return_offsets_mapping=True)  # which words the truncation cut
        inputs = {k: v.to(self.device) for k, v in enc.items() if k in self._accepts}
        with torch.no_grad():
            hidden = self.model(**inputs, output_hidden_states=True).hidden_states
            states = torch.stack([hidden[i] for i in layers], 2).float().cpu()  # (batch, seq, layers, hidden)
        return enc, full, states

    @staticmethod
    def _pieces(word_ids: list[int | None]) -> dict[int, list[int]]:
        """{word: the positions of its pieces}, in order."""
        found: dict[int, list[int]] = {}
        for position, word in enumerate(word_ids):
            if word is not None:
                found.setdefault(word, []).append(position)
        return found

    def words(self, texts: list[str], layers: tuple[int, ...], *, per_layer: bool = False,
              batch_size: int = 32) -> list[Words]:
        """Each text's words and their vectors (see the module docstring)."""
        out = []
        for first in range(0, len(texts), batch_size):
            batch = texts[first : first + batch_size]
            enc, full, states = self._encode(batch, layers)
            for i, text in enumerate(batch):
                kept, whole = self._pieces(enc.word_ids(i)), self._pieces(full.word_ids(i))
                offsets = full["offset_mapping"][i]
                words, spans, vectors = [], [], []
                for word, positions in whole.items():
                    if len(kept.get(word, ())) != len(positions):  # past the trained length, whole or in part
                        continue
                    start, end = _trimmed(text, offsets[positions[0]][0], offsets[positions[-1]][1])
                    words.append(text[start:end])
                    spans.append((start, end))
                    vectors.append(states[i, positions].mean(0))  # (layers, hidden): the mean of its pieces
                stacked = torch.stack(vectors).numpy() if vectors else np.zeros((0, len(layers), self.hidden_size), np.float32)
                out.append(Words(words, spans, stacked if per_layer else stacked.mean(1), cut=len(whole) - len(words)))
        return out

    def targets(self, texts: list[str], targets: list[tuple[str, int, int]], layers: tuple[int, ...], *,
                per_layer: bool = False, batch_size: int = 32) -> tuple[np.ndarray, list[Miss | None]]:
        """One vector per (text, target): a target is ("span", start, end) in characters or ("word", index, 0);
        (vectors (n, [layers,] hidden) with zeros where missed, [None or a Miss per target])."""
        shape = (len(layers), self.hidden_size) if per_layer else (self.hidden_size,)
        vectors = np.zeros((len(texts), *shape), np.float32)
        misses: list[Miss | None] = []
        unk = self.tokenizer.unk_token_id
        for first in range(0, len(texts), batch_size):
            batch = texts[first : first + batch_size]
            enc, full, states = self._encode(batch, layers)
            for i, (text, target) in enumerate(zip(batch, targets[first : first + batch_size])):
                kept, whole = self._pieces(enc.word_ids(i)), self._pieces(full.word_ids(i))
                touched = self._touched(target, whole, full["offset_mapping"][i], len(text))
                if isinstance(touched, Miss):
                    misses.append(touched)
                    continue
                positions = [p for w in touched for p in whole[w]]
                if any(len(kept.get(w, ())) != len(whole[w]) for w in touched):
                    misses.append(Miss("past_positions", f"the target is past the model's {self.max_length} positions"))
                    continue
                ids = full["input_ids"][i]
                if unk is not None and all(ids[p] == unk for p in positions):
                    start, end = _trimmed(text, full["offset_mapping"][i][positions[0]][0], full["offset_mapping"][i][positions[-1]][1])
                    misses.append(Miss("unknown_word", f"{text[start:end]!r} is only {self.tokenizer.unk_token} to the tokenizer"))
                    continue
                piece_states = states[i, positions]  # (pieces, layers, hidden)
                vectors[first + i] = (piece_states.mean(0) if per_layer else piece_states.mean((0, 1))).numpy()
                misses.append(None)
        return vectors, misses

    @staticmethod
    def _touched(target: tuple[str, int, int], whole: dict[int, list[int]], offsets, length: int) -> list[int] | Miss:
        kind, a, b = target
        if kind == "word":
            if not 0 <= a < len(whole):
                return Miss("bad_index", f"word index {a}: the text has {len(whole)} words (0..{len(whole) - 1})")
            return [list(whole)[a]]
        if not 0 <= a < b <= length:
            return Miss("bad_span", f"span [{a}, {b}) is not within the text's {length} characters")
        words = [w for w, positions in whole.items()
                 if any(offsets[p][0] < b and offsets[p][1] > a for p in positions)]
        return words or Miss("bad_span", f"span [{a}, {b}) covers no word piece")
