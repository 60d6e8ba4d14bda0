"""Benchmark `unpad`: the pretraining step on padded against unpadded (packed, cu_seqlens) batches of the same rows.

    python bench/run.py unpad [--quick]                  the CPU (fp32), or a GPU when torch sees one (bf16 autocast)
    python -m bench.unpad --preset base --batch 256      any preset and micro batch (bench/gpu_check.sh's form)

In:  random-id NSP pairs of BERT's length mix at seq 128 (bench/loader.py's writer: ~90% of rows full), streamed by
     ShardStream in both batch forms with the same seed, so micro batch k holds the same rows and masks in each
     (trainer/data/batch_forms.py; tests/trainer/test_batch_forms.py checks that).
Out: one JSON object: tokens/s of each form (real tokens), `ratio` = unpadded / padded tokens/s (the median over
     pairs of one padded and one unpadded step on batch k, their order alternating from pair to pair, each on a
     model and AdamW of its own from the same weights), the padding share of the padded batches, and the losses of
     the first batch before any step, without dropout (equal within 1e-5 in fp32: the same rows, masks and weights),
     a check that both forms hold the same batches. Timing needs a quiet machine; a figure from a busy one says nothing.
"""

from __future__ import annotations

import os
import sys

if __package__ in (None, ""):  # run as a file: the repository root, not bench/ (whose tokenize.py shadows the stdlib's)
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import argparse  # noqa: E402
import contextlib  # noqa: E402
import copy  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402


def _batches(pairs_dir: str, form: str, batch: int, count: int, seed: int) -> list[dict[str, torch.Tensor]]:
    from schemas import Manifest
    from trainer.data import ShardStream, loader
    from trainer.masking import Masker, MaskingConfig

    manifest = Manifest.read(pairs_dir)
    masker = Masker.for_manifest(MaskingConfig(), manifest)
    stream = ShardStream(manifest, split="train", batch_size=batch, masker=masker, seed=seed, epochs=1, batch_form=form,
                         verify_checksums=False)
    return [{k: v for k, v in b.items() if k != "position"} for _, b in zip(range(count), loader(stream, 0))]


class _Side:
    """A model and its AdamW, stepping one form's batches (already on the device)."""

    def __init__(self, model: torch.nn.Module, device: torch.device, bf16: bool):
        from trainer.optim import adamw

        self.model, self.device, self.bf16 = model, device, bf16
        self.optimizer = adamw(model, lr=1e-4, weight_decay=0.01)

    def step(self, batch: dict[str, torch.Tensor]) -> tuple[float, torch.Tensor]:
        """(seconds, loss) of forward, backward, clipping and the optimizer step."""
        sync = torch.cuda.synchronize if self.device.type == "cuda" else (lambda: None)
        autocast = torch.autocast("cuda", torch.bfloat16) if self.bf16 else contextlib.nullcontext()
        sync()
        started = time.perf_counter()
        with autocast:
            loss = self.model(**batch)["loss"]
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        sync()
        return time.perf_counter() - started, loss.detach()


def measure(preset: str, batch: int, steps: int, warmup: int, device: str | None = None, seed: int = 0) -> dict:
    from bench._loop import write_pairs
    from trainer.data.batch_forms import real_tokens
    from trainer.model import BertForPretraining, ModelConfig

    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    bf16 = dev.type == "cuda"
    count = warmup + steps
    with tempfile.TemporaryDirectory(prefix="bench-unpad.") as folder:
        pairs_dir = write_pairs(folder, batch * count + batch, seed=seed)
        forms = {form: _batches(pairs_dir, form, batch, count, seed) for form in ("padded", "unpadded")}
    config = ModelConfig.preset(preset, vocab_size=30522)
    base = BertForPretraining(config, seed=seed)
    sides = {form: _Side(copy.deepcopy(base).to(dev).train(), dev, bf16) for form in forms}
    moved = {form: [{k: v.to(dev) for k, v in b.items()} for b in batches] for form, batches in forms.items()}
    tokens = [real_tokens(b) for b in forms["unpadded"]]
    padded_positions = sum(int(b["attention_mask"].numel()) for b in forms["padded"][warmup:])
    seconds: dict[str, list[float]] = {form: [] for form in forms}
    with torch.no_grad():  # before any step, without dropout: the first batch's loss in each form, equal in fp32
        first_losses = {form: float(side.model.eval()(**moved[form][0])["loss"]) for form, side in sides.items()}
    for side in sides.values():
        side.model.train()
    torch.manual_seed(seed)
    for k in range(count):
        order = ("padded", "unpadded") if k % 2 == 0 else ("unpadded", "padded")  # alternating: drift hits both alike
        for form in order:
            took, _ = sides[form].step(moved[form][k])
            if k >= warmup:
                seconds[form].append(took)
    timed = tokens[warmup:]
    ratios = [(t / u) / (t / p) for t, p, u in zip(timed, seconds["padded"], seconds["unpadded"])]
    return {"device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu", "precision": "bf16" if bf16 else "fp32",
            "preset": preset, "batch": batch, "steps": steps, "warmup": warmup,
            "padded_tokens_per_s": round(sum(timed) / sum(seconds["padded"]), 1),
            "unpadded_tokens_per_s": round(sum(timed) / sum(seconds["unpadded"]), 1),
            "ratio": round(statistics.median(ratios), 3),
            "padding_share": round(1 - sum(timed) / padded_positions, 4),
            "first_loss_padded": round(first_losses["padded"], 6), "first_loss_unpadded": round(first_losses["unpadded"], 6),
            "torch": torch.__version__}


def main(corpus: str | None, quick: bool) -> dict:
    """bench/run.py's entry: BERT-mini at batch 32 on the CPU (tiny at 8, 4 steps, with --quick); BERT-base at 64 on a GPU."""
    del corpus  # random ids: the step's cost does not depend on the text, its length mix does
    if quick:
        return measure("tiny", 8, steps=4, warmup=1)
    if torch.cuda.is_available():
        return measure("base", 64, steps=40, warmup=5)
    return measure("mini", 32, steps=30, warmup=3)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(prog="bench/unpad.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="mini")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--device", default=None, help="cpu or cuda (default: cuda when torch sees one)")
    args = ap.parse_args()
    print(json.dumps(measure(args.preset, args.batch, args.steps, args.warmup, args.device)), flush=True)
