#!/usr/bin/env bash
# Packs the wheels sago_fast needs on the lent GPU machine into parts that travel one per device call.
#
#   benchmarks/gpu/pack_wheels.sh OUT_DIR [PART_MiB]        (from the project root; OUT_DIR ignored by git)
#
# The machine (Python 3.12, CUDA 13, torch cu130, no package index) lacks onnxruntime-gpu and holds other
# versions of transformers, tokenizers, huggingface_hub than optimum-onnx 0.1.0 accepts; WHEELS below
# lists what it lacks. WHEELS_DIR=DIR packs the *.whl of DIR instead of downloading (the CPU test does).
# Writes OUT_DIR/part-00..NN (PART_MiB each, default 50: the tree that travels with each call is ~8 MiB
# and a call carries at most 64 MiB), OUT_DIR/SHA256SUMS (of the parts and of each wheel) and wheels.txt.
# benchmarks/gpu/assemble.sh joins, checks and installs them there; benchmarks/gpu_check.sh says the
# sequence of device calls.
set -euo pipefail
OUT=${1:?usage: pack_wheels.sh OUT_DIR [PART_MiB]}
PART=${2:-50}
WHEELS=(
  onnxruntime-gpu==1.31.1  # a CUDA 13 build: matches the image's torch cu130 and nvidia-*-cu13 libraries
  transformers==4.57.6     # optimum-onnx 0.1.0 needs transformers < 4.58 (the image has 5.x)
  tokenizers==0.22.2
  huggingface_hub==0.36.2
  optimum==2.1.0
  optimum-onnx==0.1.0
  duckdb==2.0.1
  gguf==0.19.0
)
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE/wheels" "$OUT"
if [ -n "${WHEELS_DIR:-}" ]; then
  cp "$WHEELS_DIR"/*.whl "$STAGE/wheels/"
else
  for w in "${WHEELS[@]}"; do
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
      --platform manylinux2014_x86_64 -d "$STAGE/wheels" "$w"
  done
fi
(cd "$STAGE/wheels" && ls -- *.whl) > "$OUT/wheels.txt"
rm -f "$OUT"/part-* "$OUT/SHA256SUMS"
tar -C "$STAGE" --sort=name -cf - wheels | split -b "${PART}M" -d -a 2 - "$OUT/part-"
{ (cd "$OUT" && sha256sum part-*); (cd "$STAGE" && sha256sum wheels/*.whl); } > "$OUT/SHA256SUMS"
echo "$(ls "$OUT"/part-* | wc -l) parts of at most ${PART} MiB in $OUT ($(du -sh "$OUT" | cut -f1) in all):"
cat "$OUT/wheels.txt"
