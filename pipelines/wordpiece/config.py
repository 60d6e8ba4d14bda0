"""VocabConfig: how a WordPiece vocabulary is learned and how text is normalized before it is encoded.

In:  prep's flags (--vocab-size, --cased, --num-unused, --min-frequency: PrepConfig nests this config), or a
     vocab_config.json body.
Out: a frozen, validated config that the learner, the encoder and the vocabulary files share; the special
     tokens' layout (`special_token_layout`) comes with it.
"""

from __future__ import annotations

import dataclasses

from schemas.config import Config, flag
from schemas.vocab import SPECIAL_TOKENS


def special_token_layout(num_unused: int = 0) -> list[str]:
    """The first ids of the vocabulary, in BERT's order.

    [PAD]=0, then [unused0] .. [unused{num_unused-1}] at ids 1..num_unused, then [UNK], [CLS], [SEP], [MASK].
    num_unused=99 reproduces bert-base-uncased's ids: [UNK]=100, [CLS]=101, [SEP]=102, [MASK]=103.
    """
    if num_unused < 0:
        raise ValueError(f"num_unused must be >= 0, got {num_unused}")
    pad, *rest = SPECIAL_TOKENS  # [PAD], [UNK], [CLS], [SEP], [MASK]
    return [pad, *(f"[unused{i}]" for i in range(num_unused)), *rest]


@dataclasses.dataclass(frozen=True, kw_only=True)
class VocabConfig(Config):
    """The vocabulary prep learns (unless --vocab names one to reuse); the WordPiece settings, and those every kind shares"""

    vocab_size: int = 30522
    """Size of the learned vocabulary, any --tokenizer, special (and [unused]) tokens included (WordPiece: more only
    if the alphabet alone is larger). roberta-base has 50265, xlm-roberta-base 250002."""
    lowercase: bool = flag(True, name="--cased")
    """Uncased vocabulary: text is lowercased and its accents stripped, as for bert-base-uncased. WordPiece only: bpe
    and unigram are cased, as RoBERTa's and XLM-R's."""
    strip_accents: bool | None = flag(None, hidden=True)
    """NFD + drop non-spacing marks; None means 'same as lowercase' (tokenizers' and bert-base's convention)."""
    handle_chinese_chars: bool = flag(True, hidden=True)
    """Each CJK ideograph is a word of its own (BERT's convention)."""
    num_unused: int = 0
    """[unusedN] tokens reserved after [PAD] for later domain words. With the default 0 the ids are [PAD]=0,
    [UNK]=1, [CLS]=2, [SEP]=3, [MASK]=4; 99 reproduces bert-base's: [UNK]=100 ... [MASK]=103."""
    min_frequency: int = 2
    """Pairs seen fewer times than this are not merged into the vocabulary (wordpiece and bpe)."""
    limit_alphabet: int = flag(1000, hidden=True)
    """Keep only the most frequent characters; words with any other character encode as [UNK]."""
    max_token_chars: int | None = flag(None, hidden=True)
    """Longest token a merge may create, in characters without the '##' prefix; None: no limit."""
    max_input_chars_per_word: int = flag(100, hidden=True)
    """Longer words encode as a single [UNK] (tokenizers' and BERT's max_input_chars_per_word)."""

    def __post_init__(self) -> None:
        specials = len(special_token_layout(max(self.num_unused, 0)))
        checks = [
            (self.num_unused >= 0, f"--num-unused must be >= 0, got {self.num_unused}"),
            (self.vocab_size > specials, f"--vocab-size must exceed the {specials} special tokens, got {self.vocab_size}"),
            (self.min_frequency >= 1, f"--min-frequency must be >= 1, got {self.min_frequency}"),
            (self.limit_alphabet >= 1, f"limit_alphabet must be >= 1, got {self.limit_alphabet}"),
            (self.max_token_chars is None or self.max_token_chars >= 2, f"max_token_chars must be >= 2 or None, got {self.max_token_chars}"),
            (self.max_input_chars_per_word >= 1, f"max_input_chars_per_word must be >= 1, got {self.max_input_chars_per_word}"),
            (self.strip_accents in (None, True, False), f"strip_accents must be true, false or None, got {self.strip_accents!r}"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)
