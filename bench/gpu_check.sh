#!/bin/bash
# The GPU figures of `bench/train.py` on a lent GPU machine (base, bf16; batch 64 with a compile trial, batch 256
# without), then its CPU figures on that machine's CPU with CUDA hidden. Run from the repository root; logs go to
# $OUT (the device tool's folder) or ./gpu-check when OUT is unset.
export PYTHONUNBUFFERED=1
OUT=${OUT:-gpu-check}; mkdir -p "$OUT"
nvidia-smi -L; nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv
lscpu | grep -E 'Model name|^CPU\(s\)'; grep -o -w -E 'avx512_bf16|amx_bf16' /proc/cpuinfo | sort | uniq -c
python3 -c "import torch, transformers, tokenizers; print('torch', torch.__version__, 'transformers', transformers.__version__, 'tokenizers', tokenizers.__version__)"
date +%T
timeout 300 python3 - <<'PY' 2>&1 | tee $OUT/gpu.log
import json, sys, time
sys.path.insert(0, ".")
from trainer import cpu_sharing
cpu_sharing.apply()
from bench.train import gpu_mfu
t = time.time()
print("GPU64", json.dumps(gpu_mfu(steps=30)), round(time.time() - t, 1), flush=True)
t = time.time()
print("GPU256", json.dumps(gpu_mfu(steps=20, batch_size=256, compile_trial=False)), round(time.time() - t, 1), flush=True)
PY
date +%T
CUDA_VISIBLE_DEVICES= timeout 270 python3 bench/run.py train 2>&1 | tee $OUT/cpu.log | tail -3
date +%T
