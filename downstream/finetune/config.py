"""FinetuneConfig: every setting of `clozeforge finetune`, one field each; the flags are generated from it.

What to fine-tune on is one of three flags, each with one meaning: --task KIND with your files (--train,
--validation), --builtin-task NAME (its files written from this machine's text), or --suite NAME with --data DIR.
`--task NAME` with a built-in task's name, the spelling before --builtin-task existed, still means --builtin-task
NAME: the config moves it there (`__post_init__`), and its messages name the flag as the user typed it."""

from __future__ import annotations

import dataclasses

from downstream.finetune.builtin import TASKS as BUILTIN
from downstream.finetune.loop import TUNED_PARTS, Recipe
from downstream.finetune.suites import SUITES, SuiteOptions
from downstream.finetune.tasks import TASK_KINDS, Columns
from process.devices import DEVICES
from process.precision import PRECISIONS
from schemas.config import Config, flag
from schemas.tables import QUOTINGS, TableReading


def _floats(values) -> tuple[float, ...]:
    return tuple(float(v) for v in values)


@dataclasses.dataclass(frozen=True, kw_only=True)
class FinetuneConfig(Config):
    model: str = flag(default="", hidden=True)
    """(the positional MODEL) An exported HuggingFace directory (clozeforge export), or a training RUN directory whose checkpoint is
    exported once before the job starts (the latest, or those of --checkpoints)."""
    task: str | None = flag(None, choices=(*TASK_KINDS, *BUILTIN), metavar="{" + ",".join(TASK_KINDS) + "}")
    """The kind of your labelled data (--train, --validation): classify: one text and a label; pair: two texts and a
    label; tag: words and one BIO tag each; span: SQuAD-style question, context and answers with character offsets
    (no answer: SQuAD v2)."""
    builtin_task: str | None = flag(None, choices=tuple(BUILTIN))
    """A built-in task made from this machine's text (downstream/finetune/builtin/), its splits written for the job:
    no --task, --train, --validation, --test."""
    test_language: str | None = flag(None, metavar="CODE")
    """Zero-shot transfer, with a --builtin-task that has translations (man-sections: /usr/share/man/CODE): train
    and pick the lr on the task's English train and validation splits, and score its test split made of CODE's
    pages (no CODE label seen before; the English pages these translate left out), in the classes CODE has the
    pages for (builtin/transfer.py)."""
    written: dict | None = flag(default=None, hidden=True)
    """(set by code) What --builtin-task wrote for the job: results.json's `builtin` (builtin/run.py)."""
    train: str | None = None
    """Training split: JSON lines, CSV/TSV or Parquet, any fsspec URL."""
    validation: str | None = None
    """Validation split (picks the learning rate, and the epoch with --patience)."""
    suite: str | None = flag(None, choices=tuple(SUITES))
    """A benchmark in its official files (with --data, instead of a task and its splits): every task with its
    metric, selection metric and seeds (MosaicBERT's for GLUE, in place of --seeds), each in OUT/<task>, and
    OUT/<suite>.md/.json/.png with each task's score ± SE and the average (downstream/finetune/suites/)."""
    data: str | None = flag(None, metavar="DIR")
    """The --suite's directory as downloaded: GLUE's task folders, SQuAD's JSON files, CoNLL-2003's column files."""
    suite_options: SuiteOptions = SuiteOptions()  # noqa: RUF009  (frozen: one shared default is safe)
    test: str | None = None
    """Test split: scored with the chosen recipe, and its predictions written to predictions.jsonl."""
    output: str = flag(metavar="DIR")
    """Directory to write (results.json, model/, predictions.jsonl); replaced whole when the run ends."""
    overwrite: bool = False
    """Replace an --output directory that holds files this command did not write."""
    columns: Columns = Columns()  # noqa: RUF009  (frozen: one shared default is safe)
    regression: bool = False
    """Make integer labels a regression target (one output, MSE loss, Pearson); float labels are one without it
    (--task classify or pair)."""
    metric: str | None = flag(default=None, metavar="NAME")
    """The metric that picks the learning rate (and the epoch with --patience) and is reported: accuracy,
    macro_f1, mcc (classes); pearson, spearman (regression); entity_f1, precision, recall, token_accuracy
    (tag); f1, exact_match (span). Default: the first of each."""
    skip_bad_rows: bool = False
    """Count a bad row (a field count other than the header's, a bad quote, a line that is not a JSON object, an
    answer not at its offsets, a tag count other than the word count) as a drop at its line in results.json
    instead of stopping at it."""
    quoting: str = flag(choices=QUOTINGS, doc_from=(TableReading, "quoting"))
    seeds: int = 3
    """Runs per learning rate, seeds 0..N-1 (head initialisation and batch order); scores are mean ± SE."""
    lr: tuple[float, ...] = flag(default=(), metavar="X", convert=_floats)
    """The model's learning rate; repeat the flag for a grid, searched as given (default: three rungs of the 1-3
    ladder centred on BERT's 3e-5 x 768/hidden, grown while the best rate is at an edge: --lr-extend)."""
    lr_extend: int | None = flag(default=None, metavar="N")
    """Rates an arm's grid may add: while its best mean validation score sits at the grid's lowest (highest) rate,
    strictly above the others, the next rung below (above) of the 1-3 ladder is tried, up to N per arm; results.json
    records each round (`grid.search`). Default: 4 for a default grid, 0 for one given by --lr / --baseline-lr."""
    epochs: int = 20
    """Epochs per run, every arm alike (--baseline-epochs sets the baseline's apart): the most a run goes, as
    --patience ends each run when validation stops improving."""
    patience: int = 3
    """Stop a run after this many epochs without a better validation score and keep its best epoch; 0 trains
    all --epochs and keeps the last, as BERT's recipe does."""
    min_epochs: int | None = flag(default=None, metavar="N")
    """Epochs every run trains before --patience may end it (default: half of its arm's --epochs or
    --baseline-epochs): a small validation split often sits on a plateau before it climbs."""
    batch_size: int = 32
    """Examples per step."""
    group_by_length: bool = False
    """Batch rows of similar length together (each 50 batches' rows sorted by length, the batches shuffled): less
    padding, so faster on mixed lengths; other batches than without it, so scores move within their noise."""
    length_pieces: bool = True
    """Compute each batch in pieces of rows of similar length, each padded to its own longest row, the pieces'
    gradients summed into the batch's step (--no-length-pieces: one piece): the same batches and steps, less
    padding, so faster on mixed lengths; dropout draws differ, so scores move within their seed noise."""
    warmup: float = 0.1
    """Fraction of the steps with a linearly rising learning rate (then linear decay to zero)."""
    weight_decay: float = 0.01
    """AdamW weight decay (not on biases and LayerNorm)."""
    dropout: float = 0.1
    """Dropout of the encoder and the head while fine-tuning (BERT's 0.1; the export's own value is ignored)."""
    strategy: str = flag(default="full", choices=TUNED_PARTS)
    """full: train every weight; probe: freeze the encoder, train the head (a linear probe); last-n: train the
    top --unfreeze-layers layers, the pooler and the head."""
    unfreeze_layers: int = 2
    """Layers trained by --strategy last-n."""
    max_seq_len: int | None = flag(default=None, metavar="N")
    """Longest input in word pieces; longer texts are cut, long contexts windowed (default: the length the model
    trained on, its tokenizer's model_max_length, else its positions; longer is allowed with a warning, up to
    the positions)."""
    stride: int = 32
    """Word pieces shared by two consecutive windows of a long context (--task span)."""
    max_answer_tokens: int = 30
    """Longest answer span predicted, in word pieces (--task span)."""
    baseline: str = flag(default="none", metavar="none|scratch|MODEL2")
    """The arm the model is compared with, over the same seeds: scratch (the same architecture from random
    initialisation), or MODEL2 (another export or RUN, e.g. the source of a continued pretraining).
    results.json then holds the gain with its paired SE and a bootstrap interval over test examples."""
    baseline_lr: tuple[float, ...] = flag(default=(), metavar="X", convert=_floats)
    """The baseline's own learning rate; repeat for a grid, searched as given (default: the model's rule for its
    width, from scratch a rung higher, grown at an edge as --lr-extend says)."""
    baseline_epochs: int | None = flag(default=None, metavar="N")
    """The baseline's epochs per run (default: --epochs; early stopping lets an arm that converges later, as
    scratch does, use more of them)."""
    bootstrap: int = 1000
    """Resamples of the scored split's examples for the gain's 95% interval (0: none)."""
    device: str = flag(default="auto", choices=DEVICES)
    """Where the runs compute: auto takes a CUDA GPU when torch sees one (one per process), else the CPU."""
    precision: str = flag(default="auto", choices=PRECISIONS)
    """Arithmetic of the runs (autocast; weights and optimizer state stay fp32): auto is bf16 on a GPU that supports
    it, as `clozeforge train` chooses, and fp32 on a CPU; fp16 (GPU only) adds dynamic loss scaling."""
    nproc_per_node: int = 1
    """Processes to start on this machine (one per GPU, or a few on a CPU over gloo); the job's (model, lr, seed)
    runs are spread across them and rank 0 writes the output. Under torchrun (RANK set) it is ignored."""
    data_parallel: bool = False
    """With several processes: compute each run with all of them (DistributedDataParallel, each a slice of every
    batch; the global batch stays --batch-size) instead of spreading the runs; for one large task."""
    checkpoints: str | None = flag(default=None, metavar="all|STEP,...")
    """With a RUN directory: fine-tune from each of these checkpoints and write downstream.png and
    downstream.md (score against pretraining step)."""

    def __post_init__(self) -> None:
        # the flag the user named the task with, for the messages: --task (a kind, or a built-in's old spelling)
        named_by = "--task" if self.task in BUILTIN or (self.task and not self.builtin_task) else "--builtin-task"
        if self.task in BUILTIN:  # the old spelling of --builtin-task NAME
            if self.builtin_task not in (None, self.task):
                raise ValueError(f"--task {self.task} is --builtin-task {self.task}: give one built-in task")
            object.__setattr__(self, "builtin_task", self.task)  # frozen: set once, here, before anything reads it
            object.__setattr__(self, "task", None)
        checks = [(self.seeds >= 1, f"--seeds must be >= 1, got {self.seeds}"),
                  (self.epochs >= 1, f"--epochs must be >= 1, got {self.epochs}"),
                  (self.patience >= 0, f"--patience must be >= 0, got {self.patience}"),
                  (self.min_epochs is None or self.min_epochs >= 0, f"--min-epochs must be >= 0, got {self.min_epochs}"),
                  (self.lr_extend is None or self.lr_extend >= 0, f"--lr-extend must be >= 0, got {self.lr_extend}"),
                  (self.batch_size >= 1, f"--batch-size must be >= 1, got {self.batch_size}"),
                  (0 <= self.warmup < 1, f"--warmup must be in [0, 1), got {self.warmup}"),
                  (0 <= self.dropout < 1, f"--dropout must be in [0, 1), got {self.dropout}"),
                  (all(lr > 0 for lr in self.lr), f"--lr must be positive, got {self.lr}"),
                  (all(lr > 0 for lr in self.baseline_lr), f"--baseline-lr must be positive, got {self.baseline_lr}"),
                  (self.baseline_epochs is None or self.baseline_epochs >= 1,
                   f"--baseline-epochs must be >= 1, got {self.baseline_epochs}"),
                  (self.baseline != "none" or not (self.baseline_lr or self.baseline_epochs),
                   "--baseline-lr and --baseline-epochs need --baseline scratch|MODEL2"),
                  (self.bootstrap >= 0, f"--bootstrap must be >= 0, got {self.bootstrap}"),
                  (self.nproc_per_node >= 1, f"--nproc-per-node must be >= 1, got {self.nproc_per_node}"),
                  (self.stride >= 0, f"--stride must be >= 0, got {self.stride}"),
                  (self.unfreeze_layers >= 1, f"--unfreeze-layers must be >= 1, got {self.unfreeze_layers}"),
                  (self.max_seq_len is None or self.max_seq_len >= 8, f"--max-seq-len must be >= 8, got {self.max_seq_len}")]
        if self.suite:  # a suite brings its own tasks, splits, selection metric and seeds
            checks += [(self.data is not None, "--suite needs --data DIR (the benchmark's files)"),
                       (not (self.task or self.builtin_task or self.train or self.validation or self.test or self.metric
                             or self.regression),
                        "--suite sets the task, splits and metric of each of its tasks: drop --task, --builtin-task, "
                        "--train, --validation, --test, --metric and --regression"),
                       (self.checkpoints is None, "--checkpoints sweeps one task; with --suite, fine-tune one model")]
        elif self.builtin_task:
            checks += [(not (self.train or self.validation or self.test),
                        f"{named_by} {self.builtin_task} writes its own splits from this machine's text: drop --train, "
                        "--validation and --test (or fine-tune on your files: --task KIND)"),
                       (self.task is None, f"--builtin-task {self.builtin_task} has its own kind: drop --task {self.task}"),
                       (self.data is None, "--data goes with --suite")]
        else:
            checks += [(bool(self.task and self.train and self.validation),
                        "--task, --train and --validation are required (or --builtin-task NAME, or --suite NAME --data DIR)"),
                       (self.data is None, "--data goes with --suite")]
        checks.append((self.test_language is None or self.written is not None
                       or bool(self.builtin_task and BUILTIN[self.builtin_task].translations),
                       f"--test-language goes with a {'built-in --task' if named_by == '--task' else '--builtin-task'} "
                       "that has translations: " + ", ".join(n for n, t in BUILTIN.items() if t.translations)))
        for ok, message in checks:
            if not ok:
                raise ValueError(message)

    @property
    def recipe(self) -> Recipe:
        return Recipe(epochs=self.epochs, batch_size=self.batch_size, warmup=self.warmup,
                      weight_decay=self.weight_decay, strategy=self.strategy, unfreeze_layers=self.unfreeze_layers,
                      patience=self.patience, min_epochs=self.min_epochs, group_by_length=self.group_by_length,
                      length_pieces=self.length_pieces)
