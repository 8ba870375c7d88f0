#!/usr/bin/env bash
# The GPU check as one command: parity, probe throughput and the whole job on the lent GPU (~5 minutes on an
# H200; benchmarks/gpu_check.py says what each phase measures). Everything goes to OUT as JSON and text.
#
#   benchmarks/gpu_check.sh OUT [PARTS_DIR]                          the GPU machine: the image's python3
#   PYTHON=.venv/bin/python benchmarks/gpu_check.sh OUT --dry-run    here, on the CPU (a tiny model; CI)
#
# On the lent machine (no network, Python 3.12, torch cu130) the wheels the image lacks travel in parts
# (benchmarks/gpu/pack_wheels.sh; ~284 MiB in 6 parts of 52 MiB), one part per device call while the
# machine stays warm (30 s after each call), each call issued as soon as the one before returns:
#   0. here:  echo /.gpu/ >> .git/info/exclude; benchmarks/gpu/pack_wheels.sh .gpu 52
#             plus .gpu/mmlu (200 MMLU test items, seeded, across subjects) and .gpu/tokenizer (SmolLM2's)
#   1..5.     carry [.gpu/part-0K, .gpu/SHA256SUMS]:
#             mkdir -p ~/gpu-parts && cp .gpu/part-0K .gpu/SHA256SUMS ~/gpu-parts/ && ls ~/gpu-parts
#   6.        carry [.gpu/part-05, .gpu/SHA256SUMS, .gpu/mmlu, .gpu/tokenizer]:
#             cp .gpu/part-05 .gpu/SHA256SUMS ~/gpu-parts/ && benchmarks/gpu_check.sh $OUT ~/gpu-parts
#             (timeout_s ~ 420, leaving one rerun inside the session's 15 device minutes; a rerun on the
#             still-warm machine reuses the installed wheels, the 1B checkpoint and its export)
set -uo pipefail
OUT=${1:?usage: benchmarks/gpu_check.sh OUT [PARTS_DIR | --dry-run]}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
mkdir -p "$OUT"
cd "$ROOT"
if [ "${2:-}" = "--dry-run" ]; then
  exec "$PY" benchmarks/gpu_check.py "$OUT" --device cpu --dry-run "${@:3}"
fi
PARTS=${2:-$HOME/gpu-parts}
SITE=${SAGO_GPU_SITE:-/tmp/sago-gpu-site}
if [ ! -f "$SITE/.assembled" ]; then
  bash benchmarks/gpu/assemble.sh "$PARTS" "$SITE" >"$OUT/assemble.txt" 2>&1 && touch "$SITE/.assembled" \
    || { cat "$OUT/assemble.txt"; exit 1; }
fi
export PYTHONPATH="$SITE:$ROOT" PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1
exec "$PY" benchmarks/gpu_check.py "$OUT" --device cuda --mmlu .gpu/mmlu --tokenizer .gpu/tokenizer \
  --work /tmp/sago-gpu-work "${@:3}"
