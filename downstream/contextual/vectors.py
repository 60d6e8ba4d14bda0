"""How a word's vector is made: the flags `clozeforge embed --pooling words`, `senses` and `similarity` share.

In:  the flags (WordVectors), and a model's number of layers.
Out: `layer_indices(spec, num_layers)`: the hidden states to average, as indices into transformers'
     `hidden_states` (0 is the embedding layer's output, 1..L the layers), and a note when the spec asked for
     more layers than the model has.

The default is BERT's feature-based recipe (Devlin et al. 2019, section 5.3): the mean of the last four layers.
A model with fewer layers averages all of them, and a note says so.
"""

from __future__ import annotations

import dataclasses

from schemas.config import Config, check_choices, flag

STANDARDIZERS = ("none", "center", "zscore")
"""The names of standardize.STANDARDIZERS (listed here so the flags need no numpy)."""


class LayersError(ValueError):
    """--layers names no hidden state of the model (the message is one line naming the flag)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class WordVectors(Config):
    """Word vectors: layers and standardisation"""

    layers: str = flag(default="last:4", metavar="last:N|all|I,J,...")
    """The hidden states a vector averages: last:N (the last N layers; BERT's section 5.3 takes 4), all (the
    embedding output and every layer), or indices (0: the embedding output, 1..L: the layers)."""
    standardize: str = flag(default="none", choices=STANDARDIZERS)
    """center: subtract each dimension's mean; zscore: also divide by its standard deviation (Timkey & van
    Schijndel 2021: a few rogue dimensions dominate cosine until they are standardised). The statistics come from
    --reference (and are saved beside the output) or from --stats."""
    reference: str | None = flag(default=None, metavar="URL")
    """Texts whose words the statistics of --standardize are fitted on: a text file (one text a line) or a table's
    `text` column."""
    stats: str | None = flag(default=None, metavar="FILE")
    """Statistics saved by an earlier run (X.standardize.npz beside embed's output, standardize.npz in a senses or
    similarity directory), applied to this text as they are."""

    def __post_init__(self) -> None:
        check_choices(self)
        if self.standardize == "none" and (self.reference or self.stats):
            raise ValueError("--reference and --stats go with --standardize center|zscore")
        if self.standardize != "none" and not (self.reference or self.stats):
            raise ValueError(f"--standardize {self.standardize} needs --reference FILE (texts to fit it on) or --stats FILE")
        if self.reference and self.stats:
            raise ValueError("--reference fits new statistics, --stats reuses saved ones: give one")
        layer_indices(self.layers, None)  # the syntax, before any model is loaded


def layer_indices(spec: str, num_layers: int | None) -> tuple[tuple[int, ...], str | None]:
    """(indices into hidden_states, a note or None); with num_layers None only the syntax is checked."""
    text = spec.strip().lower()
    limit = 10**6 if num_layers is None else num_layers
    if text == "all":
        return tuple(range(limit + 1)) if num_layers is not None else (), None
    if text.startswith("last:"):
        try:
            count = int(text[5:])
        except ValueError:
            raise LayersError(f"--layers {spec}: expected last:N with a whole number N") from None
        if count < 1:
            raise LayersError(f"--layers {spec}: N must be >= 1")
        kept = min(count, limit)
        note = None if kept == count else (f"--layers {spec}: the model has {num_layers} layers; its vectors average "
                                           f"all {kept}")
        return tuple(range(limit - kept + 1, limit + 1)), note
    try:
        indices = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise LayersError(f"--layers {spec}: expected last:N, all, or comma-separated layer numbers") from None
    for index in indices:
        if not 0 <= index <= limit:
            raise LayersError(f"--layers {spec}: no layer {index} (0 is the embedding output, 1..{limit} the layers)"
                              if num_layers is not None else f"--layers {spec}: layer numbers are >= 0")
    if len(set(indices)) != len(indices):
        raise LayersError(f"--layers {spec}: a layer is named twice")
    return indices, None
