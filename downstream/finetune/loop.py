"""The fine-tuning loop and the recipe it trains by: one (model, learning rate, seed) run → per-epoch validation
scores, computed where its `Place` says (a device, an arithmetic, the ranks it shares each step with; ranks.py
builds it).

In:  a transformers `AutoModelFor...` model, the encoded train and validation `Features`, a `Recipe`.
Out: `RunResult`: the best epoch's validation metrics, its weights (CPU copies), and the history of every epoch;
     a progress line per epoch (loss, score, seconds, ETA for the whole job) through the job's `Progress` (job.py).

The recipe is BERT's (Devlin et al. 2019, appendix A.3): AdamW with weight decay 0.01 (none on biases and
LayerNorm), linear warm-up over the first 10% of steps then linear decay to zero, batch 32, the learning rate
picked on validation from a grid that grows while its best rate sits at an edge (protocol.py). Strategies: `full`
trains every weight; `probe` freezes the encoder (embeddings, layers, pooler) and trains the new head only, the
cleanest measure of what pretraining put in the vectors; `last-n` trains the top `unfreeze_layers` layers, the
pooler and the head. With `patience` > 0 (the command's default) a run stops after that many epochs without a
better validation score (the schedule still spans `epochs`), once it has trained `min_epochs` (default half of
`epochs`), and keeps the best epoch: "fine-tune until validation stops improving", so that an arm which converges
later (a model from random weights) is not cut short by an epoch count chosen for the other (BERT's 3 epochs assume
a pretrained model). The floor is Keras' `EarlyStopping(start_from_epoch=)` and Lightning's `min_epochs`: on a small
validation split a run often sits on a plateau for its first epochs before it climbs, and patience alone ended
such runs there (experiments/README.md "Issue 46, part 0").

On a CPU a batch is computed in pieces (`length_pieces`): its rows sorted by length and cut where the padding saved
outweighs a piece's fixed cost, each piece padded to its own longest row, each piece's loss weighted by its share of
what the head averages over (`Task.loss_units`), their gradients summed before the one optimizer step. The batches,
the steps and the gradients are the batch's (to float rounding; dropout draws differ), only less padding is computed:
1.2-1.35x the whole batch's speed on rows of uniformly mixed lengths (bench/README.md, issue 62). Span extraction's
batches stay whole (`Task.padding_free_loss`), and on a GPU every batch does (a piece's fixed cost there is
unmeasured). --group-by-length is the other way to pad less, by changing which rows share a batch, and it costs
scores where lengths go with labels. On a CPU, too, dropout draws its masks from 16-bit lanes of random words
(cpu_kernels.py: torch's one draw an element was a third of a small model's step).

With --data-parallel the model is wrapped in DistributedDataParallel: every rank draws the same global batch from the
seed and takes its own slice of it, so the global batch and the schedule are those of one process. The loss stays on
the device until the epoch ends: no host synchronisation per step beyond fp16's inf check. The default Place is a
CPU, fp32, one process.

NOTE: the loop is ours, not transformers' Trainer. On a quiet 2-core CPU, each at its defaults, ours runs 1.36-1.49x
Trainer's examples a second in the loop and 1.31-1.43x as whole processes at 2 x 128, 4 x 256 and 6 x 384, and
1.8-2.7x beside a busy loop (`python bench/run.py finetune_vs_trainer --shapes ...`, bench/README.md, issue 62):
the pieces and the lane masks above, and its threading policy on a shared machine. Importing Trainer also costs
accelerate, which the `train` extra would have to add. What we need (a seed
that fixes the head's initialisation and the batch order, batches cut to their longest row, the best epoch's
weights kept in memory, one progress line per epoch with the ETA of a whole sweep, a job's runs spread over
processes) is direct here and indirect (callbacks, TrainingArguments) there; `python bench/finetune_loop.py --gpu`
times the two on BERT-base on a GPU in bf16 (bench/README.md). The model, the heads, the tokenizer, the schedule
(`get_linear_schedule_with_warmup`) and the saved directory are transformers'.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time

import numpy as np
import torch
import torch.distributed as dist

from downstream.finetune.cpu_kernels import lane_dropout
from downstream.finetune.tasks import Evaluation, Features, Task
from process.cpu_sharing import keep_freed_memory
from trainer.optim import adamw

_AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16}
TUNED_PARTS = ("full", "probe", "last-n")
"""--strategy: which weights a run trains (`freeze`): every one, the new head only, or the top layers, pooler and head."""


@dataclasses.dataclass(frozen=True)
class Recipe:
    epochs: int = 3
    batch_size: int = 32
    warmup: float = 0.1
    weight_decay: float = 0.01
    strategy: str = "full"
    unfreeze_layers: int = 2
    patience: int = 0
    min_epochs: int | None = None
    """With `patience`: the epochs a run trains before patience may end it; None: half of `epochs` (`first_stop`)."""
    group_by_length: bool = False
    """Batches of rows of similar length (`epoch_batches`), which pad less: faster on mixed lengths, other batches."""
    length_pieces: bool = True
    """On a CPU, each batch computed in pieces of rows of similar length (`length_pieces`): the same batches and
    steps, padded less."""

    @property
    def first_stop(self) -> int:
        """The first epoch after which patience may end a run."""
        return self.epochs // 2 if self.min_epochs is None else self.min_epochs


@dataclasses.dataclass(frozen=True)
class Place:
    """Where a run computes: its device and arithmetic, and the ranks it shares each step with (`join_ranks` builds it)."""

    device: torch.device = torch.device("cpu")
    precision: str = "fp32"
    """fp32, or bf16 / fp16 autocast over fp32 weights (fp16 with a GradScaler)."""
    rank: int = 0
    world_size: int = 1
    data_parallel: bool = False
    """Every run is computed by all `world_size` ranks together, each on a slice of each batch (DDP)."""

    @property
    def ddp(self) -> bool:
        return self.data_parallel and self.world_size > 1

    def autocast(self):
        if self.precision == "fp32":
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=_AUTOCAST[self.precision])

    def to_device(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """A host batch on the device: pinned and copied asynchronously to a GPU (the copy overlaps the previous
        step's kernels); CPU tensors as they are."""
        if self.device.type != "cuda":
            return batch
        return {k: v.pin_memory().to(self.device, non_blocking=True) for k, v in batch.items()}


@dataclasses.dataclass
class RunResult:
    metrics: dict[str, float]
    """Validation metrics of the kept epoch."""
    epoch: int
    state: dict[str, torch.Tensor]
    history: list[dict]
    calibration: dict | None = None
    """What the kept epoch fitted on validation and test reuses (span: the no-answer threshold)."""


def freeze(model, strategy: str, unfreeze_layers: int) -> None:
    """Leave trainable what `strategy` trains (see the module docstring)."""
    if strategy == "full":
        return
    encoder = model.base_model
    for p in encoder.parameters():
        p.requires_grad_(False)
    if strategy == "last-n":
        # a layer's modules by its number: BERT's, RoBERTa's and ELECTRA's `encoder.layer`; XLM's parts of a layer in
        # lists of their own (attentions, layer_norm1, ffns, layer_norm2), so the top n of each list
        for layers in (m for m in encoder.modules() if isinstance(m, torch.nn.ModuleList)):
            for layer in layers[max(len(layers) - unfreeze_layers, 0):]:
                for p in layer.parameters():
                    p.requires_grad_(True)
        if getattr(encoder, "pooler", None) is not None:
            for p in encoder.pooler.parameters():
                p.requires_grad_(True)


def _batch(tensors: dict[str, torch.Tensor], rows, lengths: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """Rows of every tensor, cut to the longest real sequence among them (padding costs time, not accuracy);
    `lengths`: every row's real tokens, when the caller has counted them once. One gather per tensor, the cut inside
    it (`v[rows, :length]`), so its result is contiguous without a second copy: transformers' heads flatten per-token
    labels with .view(-1), which refuses a strided tensor (the tag task's labels, whenever a batch is cut)."""
    if lengths is None:
        lengths = tensors["attention_mask"][rows].sum(1)
    else:
        lengths = lengths[rows]
    length = int(lengths.max())
    return {k: v[rows, :length] if v.dim() == 2 else v[rows] for k, v in tensors.items()}


GROUP_BATCHES = 50
"""Batches whose rows `epoch_batches` sorts by length together (transformers' LengthGroupedSampler's megabatch)."""


def epoch_batches(permutation: np.ndarray, lengths: np.ndarray, batch_size: int, rng: np.random.Generator | None) -> list[np.ndarray]:
    """An epoch's batches of row indices: `permutation` cut in order, or with `rng` (--group-by-length) each run of
    GROUP_BATCHES batches of it sorted by length, longest first (stable), cut, and the epoch's batches shuffled by
    `rng`: rows of a batch have similar lengths and pad less; every row still once an epoch, the same number of
    batches (only the last one short), their order a function of the seed."""
    if rng is None:
        return [permutation[s:s + batch_size] for s in range(0, len(permutation), batch_size)]
    group = GROUP_BATCHES * batch_size
    batches = []
    for g in range(0, len(permutation), group):
        rows = permutation[g:g + group]
        rows = rows[np.argsort(-lengths[rows], kind="stable")]
        batches += [rows[s:s + batch_size] for s in range(0, len(rows), batch_size)]
    last = batches.pop() if len(permutation) % batch_size else None  # the short batch stays last, as without grouping
    batches = [batches[i] for i in rng.permutation(len(batches))]
    return batches + ([last] if last is not None else [])


PIECE_COST = 4_600_000
"""What computing one more piece of a batch costs on a CPU (its forward and backward's fixed work: per-op dispatch,
the dense gradient of the word embeddings), in padded positions times hidden²: 280 positions at width 128, 31 at
384 (`piece_overhead`). Fitted to fp32 forward + backward times of BertForSequenceClassification at 2 x 128,
4 x 256 and 6 x 384 for 4-32 rows of 16-128 positions (bench/README.md, issue 62): 10-13 ms a call against 34,
196 and 518 µs a padded position."""


def piece_overhead(model) -> int:
    """`length_pieces`' cost of a piece for `model` on a CPU, in padded positions (at least 16)."""
    hidden = int(getattr(model.config, "hidden_size", 768))
    return max(16, round(PIECE_COST / hidden**2))


def length_pieces(rows: np.ndarray, lengths: np.ndarray, overhead: int) -> list[np.ndarray]:
    """One batch's rows as pieces to compute one after another, each cut to its own longest row: the rows sorted by
    length (longest first, stable) and cut where the padded positions saved outweigh `overhead` a piece (the
    cheapest cut of the sorted rows, by dynamic programming: a piece of rows i..j-1 costs overhead + (j - i) *
    length of row i). The batch is the same rows, only padded less: the loop accumulates the pieces' gradients,
    each loss weighted by its share of the batch's (`Task.loss_units`), so the step is the batch's."""
    rows = rows[np.argsort(-lengths[rows], kind="stable")]
    padded = lengths[rows].astype(np.int64)
    n = len(rows)
    cost = np.zeros(n + 1)
    cut = np.full(n + 1, n)
    ends = np.arange(1, n + 1)
    for i in range(n - 1, -1, -1):
        options = overhead + (ends[i:] - i) * padded[i] + cost[i + 1:]
        best = int(np.argmin(options))
        cost[i], cut[i] = options[best], i + 1 + best
    pieces, i = [], 0
    while i < n:
        pieces.append(rows[i:cut[i]])
        i = int(cut[i])
    return pieces


@torch.no_grad()
def predict_outputs(task: Task, model, features: Features, batch_size: int = 128, place: Place = Place()) -> list[torch.Tensor]:
    """The model's outputs on every row, on the host: [logits], or [start_logits, end_logits] for span extraction.
    Rows go through the model longest first, so each batch holds rows of similar length and pads little; the
    outputs come back in the rows' own order."""
    model.eval()
    inputs = {k: v for k, v in features.tensors.items() if k in ("input_ids", "token_type_ids", "attention_mask")}
    rows, width = inputs["input_ids"].shape
    lengths = inputs["attention_mask"].sum(1)
    order = torch.from_numpy(np.argsort(-lengths.numpy(), kind="stable"))
    parts: list[list[torch.Tensor]] = []
    for start in range(0, rows, batch_size):
        with place.autocast():
            out = model(**place.to_device(_batch(inputs, order[start:start + batch_size], lengths)))
        logits = task.outputs(out)
        if task.per_token:  # per-token outputs of a trimmed batch: pad back to `width` to concatenate
            logits = [torch.nn.functional.pad(x, (0, 0, 0, width - x.shape[1]) if x.dim() == 3 else (0, width - x.shape[1]),
                                              value=-1e4) for x in logits]
        parts.append([x.float() for x in logits])
    columns = [torch.cat(column).cpu() for column in zip(*parts)]  # one copy back per split, not one per batch
    for column in columns:
        column[order] = column.clone()  # back to the rows' order
    return columns


def evaluate(task: Task, model, features: Features, examples: list[dict], calibration: dict | None = None,
             place: Place = Place()) -> Evaluation:
    """Metrics and predictions of `model` on one split (`calibration`: fitted on validation, see Task.evaluate)."""
    outputs = predict_outputs(task, model, features, place=place)
    return task.evaluate(outputs, features, examples, calibration)


def _host_copy(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}


def _final_state(model) -> dict[str, torch.Tensor]:
    """The weights after the last epoch, on the host: the model's own tensors on a CPU (it trains no further, so
    there is nothing to copy them from), a host copy from a GPU."""
    return {k: v.detach() if v.device.type == "cpu" else v.detach().to("cpu") for k, v in model.state_dict().items()}


def _my_rows(rows: np.ndarray, place: Place) -> tuple[np.ndarray, float]:
    """This rank's slice of a global batch and the weight of its mean loss: DDP averages the ranks' gradients,
    so rank r's loss is scaled by n_r * world / n, which makes that average the global batch's mean-over-rows
    gradient. A rank left without rows (a last batch smaller than the world) computes one row at weight 0, so
    every rank still joins the step's all-reduce."""
    if not place.ddp:
        return rows, 1.0
    mine = rows[place.rank::place.world_size]
    if len(mine) == 0:
        return rows[:1], 0.0
    return mine, len(mine) * place.world_size / len(rows)


def train(task: Task, model, train_features: Features, valid_features: Features, valid_examples: list[dict],
          recipe: Recipe, *, lr: float, seed: int, progress, label: str, place: Place = Place()) -> RunResult:
    """One run: `recipe` at rate `lr` from `seed`; each epoch reported to `progress` (job.py's Progress, the job's
    epoch lines and ETA) under `label`. On a CPU, activations are reused from malloc's heap rather than mapped
    afresh each step, and dropout draws lane masks (cpu_kernels.py)."""
    on_cpu = place.device.type == "cpu"
    if on_cpu:
        keep_freed_memory()
    with lane_dropout(model) if on_cpu else contextlib.nullcontext():
        return _train(task, model, train_features, valid_features, valid_examples, recipe, lr=lr, seed=seed,
                      progress=progress, label=label, place=place)


def _train(task: Task, model, train_features: Features, valid_features: Features, valid_examples: list[dict],
           recipe: Recipe, *, lr: float, seed: int, progress, label: str, place: Place) -> RunResult:
    from transformers import get_linear_schedule_with_warmup

    freeze(model, recipe.strategy, recipe.unfreeze_layers)
    model.to(place.device)  # before the optimizer: adamw picks its fused kernel by the parameters' device
    net = model
    if place.ddp:
        net = torch.nn.parallel.DistributedDataParallel(model, device_ids=[place.device.index] if place.device.type == "cuda" else None)
    rows = train_features.tensors["input_ids"].shape[0]
    steps_per_epoch = (rows + recipe.batch_size - 1) // recipe.batch_size
    total = steps_per_epoch * recipe.epochs
    optimizer = adamw(model, lr=lr, weight_decay=recipe.weight_decay)
    schedule = get_linear_schedule_with_warmup(optimizer, int(recipe.warmup * total), total)
    scaler = torch.amp.GradScaler(place.device.type) if place.precision == "fp16" else None
    order = np.random.default_rng(seed)  # batch order: a function of the seed only (the same on every rank)
    lengths = train_features.tensors["attention_mask"].sum(1)  # each row's real tokens, counted once
    row_lengths = lengths.numpy()
    # pieces on a CPU only: a GPU's per-call cost (kernel launches) against its per-position cost is unmeasured here
    overhead = piece_overhead(model) if recipe.length_pieces and task.padding_free_loss and place.device.type == "cpu" else 0
    grouping = np.random.default_rng([seed, 1]) if recipe.group_by_length else None  # its own stream: the plain order stays
    best: RunResult | None = None
    history, stale = [], 0
    for epoch in range(1, recipe.epochs + 1):
        started = time.time()
        net.train()
        losses = []  # on the device: read once per epoch
        permutation = order.permutation(rows)
        for global_rows in epoch_batches(permutation, row_lengths, recipe.batch_size, grouping):
            mine, weight = _my_rows(global_rows, place)
            pieces = length_pieces(mine, row_lengths, overhead) if overhead else [mine]
            batches = [_batch(train_features.tensors, torch.from_numpy(rows), lengths) for rows in pieces]
            # each piece's loss weighted by its share of what the head averages over (counted only for pieces)
            units = [task.loss_units(b) for b in batches] if len(batches) > 1 else [1]
            total = sum(units)
            optimizer.zero_grad(set_to_none=True)
            step_loss = 0.0
            for i, batch in enumerate(batches):
                share = weight * units[i] / total
                # DDP all-reduces the gradients once a step, at its last piece's backward
                with net.no_sync() if place.ddp and i < len(batches) - 1 else contextlib.nullcontext():
                    with place.autocast():
                        loss = net(**place.to_device(batch)).loss
                    if share != 1.0:
                        loss = loss * share
                    (loss if scaler is None else scaler.scale(loss)).backward()
                step_loss = step_loss + loss.detach()
            if scaler is None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
            else:  # fp16: clipping on the true (unscaled) gradients, a step skipped on inf/NaN
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                scaler.step(optimizer)
                scaler.update()
            schedule.step()
            losses.append(step_loss)
        epoch_losses = torch.stack(losses).double()
        if place.ddp:  # each rank holds its weighted share of every step's loss: their mean is the global loss
            dist.all_reduce(epoch_losses)
            epoch_losses /= place.world_size
        mean_loss = float(np.mean(epoch_losses.cpu().numpy()))
        evaluation = evaluate(task, model, valid_features, valid_examples, place=place)
        metrics = evaluation.metrics
        if place.ddp:  # every rank decides the same kept epoch and early stop as rank 0, or the ranks part ways
            metrics["score"] = _rank0_value(metrics["score"])
        history.append({"epoch": epoch, "loss": mean_loss, **metrics})
        if best is None or metrics["score"] > best.metrics["score"]:
            # without patience the last epoch is kept whatever its score: no copy of weights that will not be
            # kept (on a GPU, BERT-base's 440 MB from device to host)
            best = RunResult(metrics, epoch, _host_copy(model) if recipe.patience else {}, history, evaluation.calibration)
            stale = 0
        else:
            stale += 1
        stop = recipe.patience > 0 and stale >= recipe.patience and epoch >= recipe.first_stop
        progress.epoch(label, epoch, recipe.epochs, mean_loss, metrics, best.metrics["score"],
                       time.time() - started, skipped=recipe.epochs - epoch if stop else 0)
        if stop:
            break
    if recipe.patience == 0:  # BERT's recipe: the model after the last epoch, not the best on validation
        best = RunResult(metrics, epoch, _final_state(model), history, evaluation.calibration)
    best.history = history
    return best


def _rank0_value(value: float) -> float:
    t = torch.tensor([value], dtype=torch.float64)  # a host tensor: gloo carries it (join_ranks' process group)
    dist.broadcast(t, 0)
    return float(t.item())
