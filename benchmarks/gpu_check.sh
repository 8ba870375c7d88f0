#!/usr/bin/env bash
# One check for a machine with an NVIDIA GPU and no network.
#   benchmarks/gpu_check.sh OUT_DIR [WHEELS_DIR]
# Installs sago_fast from the wheels in WHEELS_DIR (default: ./wheels beside the repository) if the
# packages are missing, runs the GPU-marked tests (CUDA-EP parity with HF eager in fp16, fp32 generation
# equality with IOBinding), then `sago bench` on a randomly initialised ~1.07B-parameter Llama-style model
# (fp16, CUDA EP vs HF eager fp16, TF32 off). Everything it measures goes to OUT_DIR as text and JSON.
# Budget: under 8 minutes on an H100/H200-class GPU.
set -uo pipefail
OUT=${1:?usage: benchmarks/gpu_check.sh OUT_DIR [WHEELS_DIR]}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WHEELS=${2:-$ROOT/wheels}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$ROOT"
START=$(date +%s)
log() { echo "[gpu_check $(( $(date +%s) - START ))s] $*" | tee -a "$OUT/gpu_check.log"; }

PY=.venv/bin/python
if [ ! -x "$PY" ]; then python3 -m venv .venv; fi
if ! $PY -c "import sago_fast, onnxruntime, torch, transformers, optimum" 2>/dev/null; then
  log "installing from $WHEELS (no network)"
  $PY -m pip install -q --no-index --find-links "$WHEELS" -e ".[dev]" >>"$OUT/install.log" 2>&1 \
    || { log "install failed: see $OUT/install.log"; exit 1; }
fi
nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1 || log "nvidia-smi not available"
$PY - >"$OUT/environment.json" <<'PYEOF'
import json, onnxruntime as ort, torch
from sago_fast.runtime.session import cuda_runs
print(json.dumps({"ort": ort.__version__, "providers": ort.get_available_providers(), "torch": torch.__version__,
                  "torch_cuda": torch.cuda.is_available(), "cuda_runs": cuda_runs()}, indent=2))
PYEOF
log "environment: $(tr -d '\n ' <"$OUT/environment.json")"

log "GPU tests"
timeout 240 $PY -m pytest -q --rungpu -m gpu tests/gpu --junitxml "$OUT/gpu-tests.xml" >"$OUT/gpu-tests.txt" 2>&1
TESTS=$?
tail -3 "$OUT/gpu-tests.txt" | tee -a "$OUT/gpu_check.log"

log "building the ~1.07B random Llama-style checkpoint"
CKPT=${SAGO_GPU_CHECK_CKPT:-/tmp/sago-gpu-check/llama-1b}
$PY -c "
from pathlib import Path
from sago_fast.checkpoints.tiny import TinySize, build_tiny_checkpoint
if not (Path('$CKPT') / 'config.json').is_file():
    build_tiny_checkpoint('llama', '$CKPT', TinySize.bench_1b())
" >>"$OUT/gpu_check.log" 2>&1

log "sago bench (probe: batch 1/8/32 x 128/512 tokens; generation: batch 32 x 32 new tokens)"
timeout 330 .venv/bin/sago bench --model "$CKPT" --device cuda --batch-sizes 1,8,32 --seq-lens 128,512 \
  --gen-batch-sizes 32 --gen-tokens 32 --repeats 5 --cache-dir /tmp/sago-gpu-check/exports \
  --json "$OUT/bench-1b.json" >"$OUT/bench-1b.txt" 2>&1
BENCH=$?
cat "$OUT/bench-1b.txt" | tee -a "$OUT/gpu_check.log"
log "done: tests exit $TESTS, bench exit $BENCH"
[ "$TESTS" -eq 0 ] && [ "$BENCH" -eq 0 ]
