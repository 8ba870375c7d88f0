#!/usr/bin/env bash
# On the GPU machine: joins the parts pack_wheels.sh made (arrived over several device calls), checks every
# part and every wheel against SHA256SUMS, and installs the wheels into TARGET with pip (no index, no
# dependencies: the image has the rest). Then: export PYTHONPATH=TARGET
#
#   bash benchmarks/gpu/assemble.sh PARTS_DIR TARGET [WHEELS_OUT]     (WHEELS_OUT: keep the joined wheels)
set -euo pipefail
P=${1:?usage: assemble.sh PARTS_DIR TARGET [WHEELS_OUT]}
T=${2:?usage: assemble.sh PARTS_DIR TARGET [WHEELS_OUT]}
W=${3:-$(mktemp -d)}
mkdir -p "$W" "$T"
grep ' part-' "$P/SHA256SUMS" | (cd "$P" && sha256sum -c --quiet -) \
  || { echo "assemble: a part is missing or damaged in $P" >&2; exit 1; }
cat "$P"/part-* | tar -C "$W" -xf -
grep ' wheels/' "$P/SHA256SUMS" | (cd "$W" && sha256sum -c --quiet -) \
  || { echo "assemble: a joined wheel differs from the packed one" >&2; exit 1; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$T" "$W"/wheels/*.whl
echo "assemble: installed $(ls "$W"/wheels/*.whl | wc -l) wheels into $T"
[ -n "${3:-}" ] || rm -rf "$W"
