"""Benchmark: training throughput of clozeforge's BertForPretraining against transformers' BertForPreTraining.

In:  `corpus`, a glob of .txt / .jsonl(.gz|.zst) files ({"text": ...} per line), or None for the built-in docstring
     corpus, encoded with a WordPiece vocabulary of 8,192 that `tokenizers` trains here on the same text. With
     `quick` and no corpus: random ids with BERT's pair-length distribution (no tokenizer training).
Out: median training tokens/s (non-[PAD] tokens per second of forward + backward + AdamW step) of each model, and
     `ratio` = ours / transformers; the same for our model with dense MLM logits (`dense_ratio`), to show how much
     of the gain is the sparse MLM head; and the eval-mode loss of both on the first batch (same weights: the two
     must agree, which is the proof that they train the same thing). With `contended` (`--contended`): our
     training beside a busy loop and beside another training process instead (bench/_contended.py); with `loop`
     (`--loop`): the trainer's own loop against a bare loop, `loop_ratio` (bench/_loop.py).

Setup, identical for all sides: the tiny preset (2 layers, hidden 128, 2 heads, ffn 512) with vocabulary 8,192,
dropout 0.1; batch 32 at max_seq_len 128, collated with `collate_pairs` (padded to the longest pair) and masked
once by `Masker` ("bert", 15%, at most 20 predictions, as BERT's max_predictions_per_seq at 128); the same
initial weights (transformers loads our state dict); the trainer's AdamW (`trainer.optim.adamw`: lr 1e-4, weight
decay 0.01 off biases and LayerNorms, torch's fused kernel where there is one, which is also what transformers'
Trainer picks by default on torch >= 2.8; `optimizer` in the result says which ran); 2 torch threads.
transformers gets `labels` (the masked ids, -100 elsewhere) and `next_sentence_label`, with
attn_implementation="sdpa".

Timing: the machine is shared, so the sides take turns step by step (the order rotating every round), each step is
timed alone, warm-up steps are dropped, and the median over steps is reported: a load spike then costs each side
a few steps, not a whole window. On a CPU with native bf16 (AVX512_BF16 or AMX_BF16, what `--precision auto`
looks for), both models are also trained in bf16 autocast (copies from the same weights, in the same rotation):
`bf16_speedup` = ours in bf16 / ours in fp32 and `bf16_ratio` = ours / transformers, both in bf16. On Linux with
glibc, a second shorter timing gives both sides the allocator setting a training rank runs with
(`heap_allocator_*`: large freed blocks kept for reuse, process/cpu_sharing.py). With a GPU,
`base` is also trained in bf16 autocast and its model-FLOPs utilisation (MFU) reported, ours and transformers'
(after their fp32 eval losses on the GPU agree), and a `model.compile()` trial of ours against eager.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F

from bench._batches import (
    BATCH,
    SEQ_LEN,
    SPECIAL_TOKENS,
    THREADS,
    VOCAB,
    Batch,
    _encoder_inputs,
    make_batches,
    ours_loss,
)
from bench._corpus import read_texts
from process.precision import cpu_bf16_instructions
from trainer.model import IGNORE_INDEX, BertForPretraining, ModelConfig
from trainer.optim import adamw, fused_available

PEAK_BF16_FLOPS = {"H100 PCIe": 756e12, "H100": 989e12, "H200": 989e12, "A100": 312e12}
"""Dense bf16 tensor-core peaks (no sparsity) from NVIDIA's data sheets; the first name in the device name wins."""

def _token_stream(rng: np.random.Generator, corpus: str | None, quick: bool) -> tuple[np.ndarray, str]:
    """(token ids, description): WordPiece ids of the corpus text, or random ids for a quick run with no corpus."""
    if corpus is None and quick:
        return rng.integers(len(SPECIAL_TOKENS), VOCAB, 200_000), "random ids"
    from tokenizers import BertWordPieceTokenizer

    texts = list(read_texts(corpus, 1_000_000 if quick else 2_000_000))
    if not texts:
        raise SystemExit(f"bench train: no text found in {corpus!r}")
    tokenizer = BertWordPieceTokenizer(lowercase=True)
    tokenizer.train_from_iterator(texts, vocab_size=VOCAB, special_tokens=SPECIAL_TOKENS, show_progress=False)
    if [tokenizer.token_to_id(t) for t in SPECIAL_TOKENS] != list(range(len(SPECIAL_TOKENS))):
        raise RuntimeError("the trained vocabulary does not start with the special tokens")
    stream = np.concatenate([e.ids for e in tokenizer.encode_batch(texts, add_special_tokens=False)]).astype(np.int64)
    return stream, f"{corpus or 'built-in docstrings'}, {len(texts)} docs, {stream.size} tokens"


def ours_dense_loss(model: BertForPretraining, b: Batch) -> torch.Tensor:
    """Our encoder with transformers' head arithmetic: MLM logits at every position, then the masked ones' loss."""
    sequence_output, pooled, _ = model.encode(**_encoder_inputs(b))
    logits = model.dense_mlm_logits(sequence_output)  # (batch, seq, vocab)
    mlm = F.cross_entropy(logits.view(-1, logits.shape[-1]), b["labels"].view(-1), ignore_index=IGNORE_INDEX)
    return mlm + F.cross_entropy(model.cls.seq_relationship(pooled), b["next_sentence_label"])


def theirs_loss(model, b: Batch) -> torch.Tensor:
    return model(**_encoder_inputs(b), labels=b["labels"], next_sentence_label=b["next_sentence_label"]).loss


def _transformers_model(cfg: ModelConfig, state: dict):
    import transformers

    theirs = transformers.BertForPreTraining(transformers.BertConfig(**cfg.to_hf_config(),
                                                                     attn_implementation="sdpa"))
    theirs.load_state_dict(state)
    if theirs.config._attn_implementation != "sdpa":
        raise RuntimeError(f"transformers chose attention {theirs.config._attn_implementation!r}, not sdpa")
    return theirs


def in_cpu_bf16(loss_fn: Callable) -> Callable:
    """`loss_fn` under CPU bf16 autocast (what the trainer's `--precision bf16` does on a CPU)."""
    def run(model, b: Batch) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return loss_fn(model, b)
    return run


def build_models(cfg: ModelConfig, device: str = "cpu", cpu_bf16: bool = False) -> dict[str, tuple[torch.nn.Module, Callable]]:
    """{name: (model in train mode, loss function)}; all start from our seed-0 weights. With `cpu_bf16`, also
    `ours_bf16` and `transformers_bf16`: copies trained under CPU bf16 autocast."""
    ours = BertForPretraining(cfg, seed=0)
    dense = BertForPretraining(cfg, seed=0)
    theirs = _transformers_model(cfg, ours.state_dict())
    models = {"ours": (ours, ours_loss), "transformers": (theirs, theirs_loss), "ours_dense_mlm": (dense, ours_dense_loss)}
    if cpu_bf16:
        models["ours_bf16"] = (BertForPretraining(cfg, seed=0), in_cpu_bf16(ours_loss))
        models["transformers_bf16"] = (_transformers_model(cfg, ours.state_dict()), in_cpu_bf16(theirs_loss))
    return {name: (model.to(device).train(), loss_fn) for name, (model, loss_fn) in models.items()}


@torch.no_grad()
def eval_losses(models: dict[str, tuple[torch.nn.Module, Callable]], b: Batch) -> dict[str, float]:
    out = {}
    for name, (model, loss_fn) in models.items():
        model.eval()
        out[name] = float(loss_fn(model, b))
        model.train()
    return out


def time_steps(models, batches: list[Batch], *, warmup: int, rounds: int, budget_s: float,
               sync: Callable[[], None] = lambda: None,
               autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
               ) -> tuple[dict[str, np.ndarray], list[int]]:
    """Seconds per training step of each model, and the batch index of each timed round.

    One round = one step of every model on the same batch, in an order that rotates every round; `warmup` rounds
    are not timed. Stops early (after at least 3 timed rounds) once `budget_s` of wall time is spent, so a loaded
    machine cannot overrun the bench."""
    optimizers = {name: adamw(m, lr=1e-4, weight_decay=0.01) for name, (m, _) in models.items()}
    names = list(models)
    seconds: dict[str, list[float]] = {name: [] for name in names}
    timed: list[int] = []
    started = time.perf_counter()
    for r in range(warmup + rounds):
        if r >= warmup + 3 and time.perf_counter() - started > budget_s:
            break
        b = batches[r % len(batches)]
        for name in names[r % len(names):] + names[:r % len(names)]:
            model, loss_fn = models[name]
            sync()
            start = time.perf_counter()
            with autocast():
                loss = loss_fn(model, b)
            optimizers[name].zero_grad(set_to_none=True)
            loss.backward()
            optimizers[name].step()
            sync()
            if r >= warmup:
                seconds[name].append(time.perf_counter() - start)
        if r >= warmup:
            timed.append(r % len(batches))
    return {name: np.asarray(v) for name, v in seconds.items()}, timed


def real_tokens(batches: list[Batch]) -> np.ndarray:
    """(len(batches),) non-[PAD] tokens per batch: what a tokens/s figure counts."""
    return np.asarray([int(b["attention_mask"].sum()) for b in batches], dtype=np.float64)


def gpu_mfu(*, preset: str = "base", device: str = "cuda", dtype: torch.dtype = torch.bfloat16, steps: int = 20,
            vocab_size: int = 30522, batch_size: int = 64, compile_trial: bool = True) -> dict:
    """Tokens/s and model-FLOPs utilisation of `preset` in `dtype` autocast, ours and transformers', random ids.

    Model FLOPs are the same for both sides: what training on the batch needs, 6 per weight multiply-add and real
    token (forward + backward) in the encoder, plus the attention scores and mixing (12 * layers * seq * hidden per
    token), plus the MLM transform and decoder at the masked positions only. transformers' decoder at every other
    position is work it does but the objective does not need, so it lowers its MFU, as padding does for both."""
    cfg = ModelConfig.preset(preset, vocab_size=vocab_size)
    rng = np.random.default_rng(0)
    stream = rng.integers(len(SPECIAL_TOKENS), vocab_size, 200_000)
    batches = [{k: v.to(device) for k, v in b.items()}
               for b in make_batches(stream, 4, rng, batch_size=batch_size, vocab_size=vocab_size)]
    models = {k: v for k, v in build_models(cfg, device).items() if k != "ours_dense_mlm"}
    losses = eval_losses(models, batches[0])  # fp32 on the GPU: SDPA's kernels there, not the CPU's
    if abs(losses["ours"] - losses["transformers"]) > 1e-3:
        raise RuntimeError(f"GPU eval losses differ on the same weights and batch: {losses}")
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    autocast = lambda: torch.autocast(device.split(":")[0], dtype=dtype)  # noqa: E731
    seconds, timed = time_steps(models, batches, warmup=3, rounds=steps, budget_s=240.0, sync=sync,
                                autocast=autocast)
    h, layers, ffn = cfg.hidden_size, cfg.num_layers, cfg.intermediate_size
    tokens = real_tokens(batches)[timed]  # (timed rounds,)
    predictions = np.asarray([int((b["mlm_labels"] != IGNORE_INDEX).sum()) for b in batches], np.float64)[timed]
    seq = np.asarray([b["input_ids"].shape[1] for b in batches], np.float64)[timed]
    flops = ((6 * layers * (4 * h * h + 2 * h * ffn) + 12 * layers * seq * h) * tokens
             + 6 * (h * h + h * vocab_size) * predictions)  # (timed rounds,) per training step
    name = torch.cuda.get_device_name(device) if device.startswith("cuda") else device
    peak = next((v for k, v in PEAK_BF16_FLOPS.items() if k in name), None)
    out: dict = {"gpu": name, "gpu_preset": preset, "gpu_batch": batch_size, "gpu_timed_steps_each": len(timed)}
    for side in models:
        out[f"gpu_{side}_tokens_per_s"] = round(float(np.median(tokens / seconds[side])))
        achieved = float(np.median(flops / seconds[side]))
        out[f"gpu_{side}_tflops"] = round(achieved / 1e12, 3)
        if peak:
            out[f"gpu_{side}_mfu"] = round(achieved / peak, 3)
    out["gpu_ratio"] = round(out["gpu_ours_tokens_per_s"] / out["gpu_transformers_tokens_per_s"], 2)
    out["gpu_eval_loss_ours"], out["gpu_eval_loss_transformers"] = round(losses["ours"], 5), round(losses["transformers"], 5)
    if compile_trial:
        out.update(_compile_trial(cfg, batches, device, steps, sync, autocast))
    return out


def _compile_trial(cfg: ModelConfig, batches: list[Batch], device: str, steps: int, sync: Callable[[], None],
                   autocast: Callable[[], contextlib.AbstractContextManager]) -> dict:
    """`model.compile()` (inductor) against the eager model, same weights, batches and autocast, alternating step
    by step: the compile time (the first step's wall time) and the steady speed-up. A failure to compile is a
    figure too (`gpu_compile_error`), not a lost benchmark."""
    eager = BertForPretraining(cfg, seed=0).to(device).train()
    compiled = BertForPretraining(cfg, seed=0).to(device).train()
    compiled.compile()
    try:  # the first step, timed alone: it compiles
        first, _ = time_steps({"ours_compiled": (compiled, ours_loss)}, batches, warmup=0, rounds=1, budget_s=0.0,
                              sync=sync, autocast=autocast)
    except Exception as e:  # noqa: BLE001 (any inductor failure is the trial's result)
        return {"gpu_compile_error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"}
    first_s = float(first["ours_compiled"][0])
    pair = {"ours_eager": (eager, ours_loss), "ours_compiled": (compiled, ours_loss)}
    seconds, timed = time_steps(pair, batches, warmup=3, rounds=steps, budget_s=240.0, sync=sync, autocast=autocast)
    tokens = real_tokens(batches)[timed]
    tps = {name: float(np.median(tokens / s)) for name, s in seconds.items()}
    return {"gpu_compile_first_step_s": round(first_s, 1),
            "gpu_ours_compiled_tokens_per_s": round(tps["ours_compiled"]),
            "gpu_compile_speedup": round(tps["ours_compiled"] / tps["ours_eager"], 2)}


def main(corpus: str | None, quick: bool, contended: bool = False, loop: bool = False) -> dict:
    if contended:  # beside a busy loop and beside another training process: bench/_contended.py
        from bench import _contended

        return _contended.main(quick)
    if loop:  # the trainer's loop against a bare loop on the same model and batches: bench/_loop.py
        from bench import _loop

        return _loop.main(quick)
    torch.set_num_threads(THREADS)
    torch.manual_seed(0)  # dropout masks draw from the global generator; seeded so reruns do the same work
    rng = np.random.default_rng(0)
    stream, data = _token_stream(rng, corpus, quick)
    batches = make_batches(stream, 8 if quick else 24, rng)
    bf16 = cpu_bf16_instructions()
    models = build_models(ModelConfig.preset("tiny", vocab_size=VOCAB), cpu_bf16=bool(bf16))
    losses = eval_losses(models, batches[0])
    if abs(losses["ours"] - losses["transformers"]) > 1e-3:  # the two would not be training the same thing
        raise RuntimeError(f"eval losses differ on the same weights and batch: {losses}")
    seconds, timed = time_steps(models, batches, warmup=2 if quick else 3, rounds=12 if quick else 60,
                                budget_s=25.0 if quick else 150.0)
    tokens = real_tokens(batches)
    tps = {name: float(np.median(tokens[timed] / s)) for name, s in seconds.items()}
    result = {
        "data": data,
        "model": "tiny: 2 layers, hidden 128, 2 heads, ffn 512, dropout 0.1",
        "vocab_size": VOCAB, "seq_len": SEQ_LEN, "batch": BATCH, "threads": torch.get_num_threads(),
        "optimizer": "AdamW, fused" if fused_available(list(models["ours"][0].parameters())) else "AdamW, foreach",
        "timed_steps_each": len(timed),
        "mean_real_tokens_per_batch": round(float(tokens.mean()), 1),
        "ours_tokens_per_s": round(tps["ours"]),
        "transformers_tokens_per_s": round(tps["transformers"]),
        "ratio": round(tps["ours"] / tps["transformers"], 2),
        # the same batch, a step apart: the median of per-round ratios also resists slow drifts in machine load
        "paired_ratio_median": round(float(np.median(seconds["transformers"] / seconds["ours"])), 2),
        "ours_dense_mlm_tokens_per_s": round(tps["ours_dense_mlm"]),
        "dense_ratio": round(tps["ours_dense_mlm"] / tps["transformers"], 2),
        "eval_loss_ours": round(losses["ours"], 5),
        "eval_loss_transformers": round(losses["transformers"], 5),
        "cpu_bf16": " and ".join(bf16) or "none (the bf16 figures need avx512_bf16 or amx_bf16)",
    }
    # The trainer's allocator setting (process/cpu_sharing.keep_freed_memory, what a rank on CPU runs with), given
    # to both sides for a second, shorter timing: the figures above are glibc's defaults on both sides.
    from process.cpu_sharing import keep_freed_memory

    if keep_freed_memory():
        pair = {name: models[name] for name in ("ours", "transformers")}
        heap_seconds, heap_timed = time_steps(pair, batches, warmup=2, rounds=12 if quick else 40,
                                              budget_s=20.0 if quick else 90.0)
        heap = {name: float(np.median(tokens[heap_timed] / s)) for name, s in heap_seconds.items()}
        result.update({
            "heap_allocator_ours_tokens_per_s": round(heap["ours"]),
            "heap_allocator_transformers_tokens_per_s": round(heap["transformers"]),
            "heap_allocator_ratio": round(heap["ours"] / heap["transformers"], 2),
        })
    if bf16:
        result.update({
            "ours_bf16_tokens_per_s": round(tps["ours_bf16"]),
            "transformers_bf16_tokens_per_s": round(tps["transformers_bf16"]),
            "bf16_speedup": round(tps["ours_bf16"] / tps["ours"], 2),
            "bf16_ratio": round(tps["ours_bf16"] / tps["transformers_bf16"], 2),
            "eval_loss_ours_bf16": round(losses["ours_bf16"], 5),
        })
    if torch.cuda.is_available():
        result.update(gpu_mfu(steps=10 if quick else 30))
    return result
