"""The one table of pretraining outputs: every head a network may train, one row each (`HEADS`).

In:  nothing (a table); a network's ModelConfig for `weight_of` and `trained_by`.
Out: for each head, what its outputs are called (`<name>_loss`, `<name>_correct`, `<name>_count`), the batch tensors
     it reads and what fills their unused slots, the ModelConfig field that weighs its loss in `loss`, and whether
     it is drawn (curves.png), evaluated (trainer/evaluate.py) and exported (downstream/export.py).

    head  labels               targets (one a prediction slot)              weight                plotted evaluated exported
    mlm   mlm_labels           mlm_positions, mlm_labels                    mlm_weight            yes     yes       yes
    nsp   next_sentence_label  - (one label a row)                          nsp_weight            yes     yes       yes
    sbo   sbo_labels           sbo_left, sbo_right, sbo_rel_pos, sbo_labels sbo_weight            yes     yes       no
    rtd   - (the model's own)  -                                            discriminator_weight  yes     yes       yes

Who reads it: the loop (the losses a logged step records), evaluation (the heads it sums), trainer/metrics.py (the
progress line and curves.png), the batch forms and partitions (the prediction tensors, their fill, which of them
are token positions), the row audit (the MLM labels that put the masked ids back), the networks (each head's
weight; the heads with a module of their own) and export (what it drops). A masking strategy names the heads whose
targets it adds (trainer/masking/strategies.py: span masking adds SBO's).

A new head is one row here and, when no network computes it already, one module (`Head.module`): its
`build(config)` gives the head's nn.Module for a network that has it, or None; that module's
`forward(sequence_output, **targets)` returns the head's loss, correct and count. BertForPretraining builds such
heads under `heads.<name>` (project-only weights: export drops them). Standard library only: the masker's
loader workers and the metrics read it without torch.
"""

from __future__ import annotations

import dataclasses

IGNORE_INDEX = -100
"""The label of a slot that is no prediction (a padding slot, a word's later pieces): torch's cross-entropy
ignore_index default, which transformers' models use too."""


@dataclasses.dataclass(frozen=True)
class Target:
    """A batch tensor a head reads, one entry a prediction slot: (batch, P) padded, (N,) in a packed batch."""

    key: str
    fill: int = 0
    """Its value in a slot that holds no prediction (a row with fewer than P predictions)."""
    position: bool = False
    """A token position in its row: a packed batch counts it in the packed tokens (trainer/data/batch_forms.py)."""


@dataclasses.dataclass(frozen=True)
class Head:
    name: str
    """The prefix of its outputs: `<name>_loss` (the mean over its labels), `<name>_correct` and `<name>_count`."""
    labels: str | None
    """The batch tensor of its labels (None: the network makes them, as ELECTRA's replaced-or-not)."""
    weight: str | float
    """The ModelConfig field that weighs its loss in `loss` (the flag of the same name), or a fixed weight."""
    targets: tuple[Target, ...] = ()
    """The per-prediction tensors a masker adds for it; a per-row label (NSP's) is none of them."""
    words: str = ""
    """What it predicts, for the reader of the curves and the progress line."""
    plotted: bool = True
    """Its training and validation losses are drawn in curves.png (and its validation accuracy)."""
    evaluated: bool = True
    """Evaluation sums its loss, correct and count over the validation batches."""
    exported: bool = True
    """Its weights reach the transformers export; otherwise they are project-only, dropped at export."""
    prefix: str | None = None
    """Where its weights are in our state dict (None: none of its own)."""
    module: str | None = None
    """The module (dotted name) that makes it, for a head no network computes itself (see the module docstring)."""

    @property
    def loss(self) -> str:
        return f"{self.name}_loss"


MLM_TARGETS = (Target("mlm_positions", position=True), Target("mlm_labels", fill=IGNORE_INDEX))

HEADS: dict[str, Head] = {h.name: h for h in (
    Head("mlm", "mlm_labels", "mlm_weight", MLM_TARGETS, "the masked tokens", prefix="cls.predictions."),
    Head("nsp", "next_sentence_label", "nsp_weight", (), "whether segment B follows A", prefix="cls.seq_relationship."),
    Head("sbo", "sbo_labels", "sbo_weight",
         (Target("sbo_left", position=True), Target("sbo_right", position=True), Target("sbo_rel_pos"),
          Target("sbo_labels", fill=IGNORE_INDEX)),
         "each span token from the span's boundaries (SpanBERT)", exported=False, prefix="sbo."),
    Head("rtd", None, "discriminator_weight", (), "which tokens the generator replaced (ELECTRA)",
         prefix="discriminator_predictions."),
)}
"""Every head by name, in the order the progress line, evaluation and the curves list them."""

OWN_MODULES = "heads."
"""Where BertForPretraining keeps the heads that bring a module of their own (`heads.<name>.*`, project-only)."""


def loss_keys() -> tuple[str, ...]:
    """The outputs a logged training step records: `loss` (the weighted sum), then each head's loss."""
    return ("loss", *(h.loss for h in HEADS.values()))


def prediction_targets() -> dict[str, Target]:
    """Every per-prediction tensor of any head by its batch key (MLM's first: the others follow its slots)."""
    return {t.key: t for h in HEADS.values() for t in h.targets}


def weight_of(head: Head, config) -> float:
    """The weight of `head`'s loss in a network of `config` (a ModelConfig)."""
    return float(getattr(config, head.weight)) if isinstance(head.weight, str) else float(head.weight)


def project_only_prefixes() -> tuple[str, ...]:
    """The state-dict prefixes of weights no transformers class has: trained, dropped at export, fresh at --init-from."""
    return (*(h.prefix for h in HEADS.values() if not h.exported and h.prefix), OWN_MODULES)
