#!/bin/bash
# The trainer at its model's speed on one lent GPU, in one prepared run of about 6-8 minutes (issue 37):
# BERT-base, bf16, seq-128 random-id pairs written here (no Beam), one rank:
#   the bare model (forward + backward + fused AdamW, bench/_loop.py) at batch 64 and 256, eager and compiled;
#   the trainer (`trainer.loop.train`, --precision auto) with the same batches, ZeRO 0 and 2, eager and compiled;
#   where a compiled step's time goes (wall against device-busy ms, launches, host ms per part of the loop), the
#   compiled trainer without its dynamic-shape marks, host synchronisations per trainer step
#   (torch.cuda.set_sync_debug_mode); tokens/s and MFU for each, then a table of them all (bench/_gpu_check.py);
#   and the fine-tuning loop against transformers' Trainer; issue 47's parts: the trainer on unpadded batches
#   (--batch-form unpadded, attention dropout 0: the varlen kernel) and on the static form (CUDA graphs), the bare
#   step padded against unpadded (bench/unpad.py), fine-tuning with length-grouped batches on both sides, and the
#   executed-FLOPs MFU beside the old one in every trainer row.
#   The parts run most important first, within GPU_CHECK_BUDGET seconds (default 480, one lease's call); a part
#   is cut to what is left; GPU_CHECK_PARTS="NAME:SECONDS ..." runs only those.
# Each part runs under its own `timeout`; a part that fails or times out does not stop the others. Logs and the
# table go to $OUT (the device tool's folder), or bench/out/gpu-check (ignored by git) when OUT is unset. Run from the repository root:
#   bash bench/gpu_check.sh
# with deepspeed (and its pydantic, hjson, msgpack, einops, py-cpuinfo, ninja) importable, e.g. a carried
# site-packages folder on PYTHONPATH. A CPU check of the Python parts, in a minute or two per part:
#   GPU_CHECK_TINY=1 bash bench/gpu_check.sh
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false PYTHONWARNINGS=ignore
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # the repository's packages for every script below
OUT=${OUT:-bench/out/gpu-check}; mkdir -p "$OUT"
PY=${PYTHON:-python3}
T0=$(date +%s)
stamp() { echo "--- $1 at +$(( $(date +%s) - T0 ))s"; }

stamp environment
nvidia-smi || echo "nvidia-smi: not available"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,power.limit --format=csv 2>/dev/null
lscpu | grep -E 'Model name|^CPU\(s\)'; nproc
$PY - <<'PY' 2>&1 | tee "$OUT/environment.log"
import importlib, sys
print("python", sys.version.split()[0])
for name in ("torch", "deepspeed", "transformers", "pyarrow", "fsspec", "numpy", "pydantic", "hjson", "msgpack",
             "einops", "cpuinfo", "psutil", "ninja", "matplotlib", "tensorboard", "triton"):
    try:
        module = importlib.import_module(name)
        print(f"{name:<12} {getattr(module, '__version__', 'ok')}")
    except Exception as e:  # noqa: BLE001
        print(f"{name:<12} MISSING ({type(e).__name__}: {e})")
import torch
print("cuda", torch.version.cuda, "available", torch.cuda.is_available(),
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
PY

# part NAME SECONDS: one part under its own timeout (TERM, then KILL 15 s later), clamped to what is left of
# GPU_CHECK_BUDGET (seconds for the whole script, default 480: a lease's one call); a part with under 40 s left is
# skipped and says so. `finetune` is the fine-tuning loop's line (bench/finetune_loop.py --gpu, issue 34).
BUDGET=${GPU_CHECK_BUDGET:-480}
part() {
    local left=$(( BUDGET - ($(date +%s) - T0) - 20 )) limit=$2
    (( left < limit )) && limit=$left
    if (( limit < 40 )); then echo "--- $1: skipped, ${left}s of the budget left"; return; fi
    stamp "$1 (timeout $limit s)"
    if [ "$1" = finetune ]; then
        timeout -k 15 "$limit" $PY bench/finetune_loop.py --gpu > "$OUT/$1.log" 2>&1
    elif [ "$1" = varlen-test ]; then  # the varlen kernel's losses against the padded step's (issue 47's test)
        timeout -k 15 "$limit" $PY -m pytest -q -o addopts="" -p no:cacheprovider tests/trainer/test_batch_forms.py \
            -k varlen_kernel > "$OUT/$1.log" 2>&1
    elif [ "$1" = finetune-grouped ]; then  # both sides length-grouped (ours --group-by-length; issue 47)
        timeout -k 15 "$limit" $PY bench/finetune_loop.py --gpu --group-by-length > "$OUT/$1.log" 2>&1
    else
        timeout -k 15 "$limit" $PY bench/_gpu_check.py "$1" > "$OUT/$1.log" 2>&1
    fi
    local rc=$?
    grep -E '^(RESULT|FAILED) ' "$OUT/$1.log" | cut -c1-900
    [[ "$1" = finetune* || "$1" = varlen-test ]] && tail -1 "$OUT/$1.log" | cut -c1-900
    [ $rc -eq 0 ] || { echo "$1: exit $rc (124 = timed out); the end of its log:"; tail -5 "$OUT/$1.log"; }
}
# The issue's figure first (the compiled trainer against the compiled bare model, ZeRO 0), then the diagnostics
# of what is left of the gap (the profile, no dynamic-shape marks), then eager, the fine-tuning line, ZeRO 2 and
# host syncs per step. (`compiled-z0-autocast` is the default now; `GPU_CHECK_PARTS` can still name it.)
# Issue 47's parts come right after the first: the varlen kernel's losses against the padded step's (a test), the trainer on unpadded batches (varlen attention) against its bare
# model, fine-tuning with length-grouped batches against Trainer's, the static batch form (CUDA graphs), and the
# bare step padded against unpadded. Every trainer row prints the executed-FLOPs MFU beside the old one.
PARTS="compiled-z0:170 varlen-test:60 compiled-z0-unpadded:150 finetune-grouped:150 compiled-z0-static-form:120 unpad:90 profile:120 compiled-z0-static:90 eager-z0:100 finetune:150 compiled-z2:110 eager-z2:70 syncs:90"
[ "${GPU_CHECK_TINY:-0}" = 1 ] && PARTS=${PARTS/finetune-grouped:150 /} && PARTS=${PARTS/finetune:150 /}
[ -n "$GPU_CHECK_PARTS" ] && PARTS=$GPU_CHECK_PARTS  # NAME:SECONDS ..., to rerun some
for spec in $PARTS; do part "${spec%%:*}" "${spec##*:}"; done
stamp summary
$PY bench/_gpu_check.py summary $(for spec in $PARTS; do [[ "${spec%%:*}" = finetune* || "${spec%%:*}" = varlen-test ]] || echo "$OUT/${spec%%:*}.log"; done) | tee "$OUT/summary.txt"
stamp done
