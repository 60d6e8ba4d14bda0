"""A network's names: how our tensor names (trainer/model/bert.py, BertForPreTraining's) are spelled in one family's
transformers class, both ways.

In:  a tensor name, ours or the family's. Out: the other spelling; `bare` adds the base model's prefix to a bare
     encoder checkpoint's names (a BertModel or RobertaModel saved alone), `dropped` says which of a checkpoint's
     tensors we never read (buffers, parts our network does not have).
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Network:
    name: str
    base_prefix: str
    """transformers' `base_model_prefix` + ".": a bare encoder saves `embeddings.…`, its task classes `<prefix>embeddings.…`."""
    renames: tuple[tuple[str, str], ...] = ()
    """(our prefix, theirs), the first that matches wins; names no rename matches are spelled alike."""
    dropped: tuple[str, ...] = ()
    """Prefixes (theirs) of tensors a checkpoint may hold that this network does not read."""

    def theirs(self, ours: str) -> str:
        for mine, their in self.renames:
            if ours.startswith(mine):
                return their + ours[len(mine):]
        return ours

    def ours(self, theirs: str) -> str:
        for mine, their in self.renames:
            if theirs.startswith(their):
                return mine + theirs[len(their):]
        return theirs

    def bare(self, theirs: str) -> str:
        """A bare encoder's tensor name with the base model's prefix (the others as they are)."""
        return self.base_prefix + theirs if theirs.startswith(("embeddings.", "encoder.", "pooler.")) else theirs
