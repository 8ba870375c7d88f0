"""Defaults of ``sago run`` settings, stated once: the configuration dataclasses use them as field defaults
and the CLI's help texts print them (this module imports nothing, so the CLI starts fast)."""

from __future__ import annotations

VARIANTS_PER_FAMILY = 2  # variants drawn per perturbation family and example
DESIGN = "sampled"  # which item × family cells a unit renders (sago_fast.variants.design)
# --design sampled without --families-per-item: the meaning-preserving families an item gets
FAMILIES_PER_ITEM = 3
SEED = 0  # variant seed
DEVICE = "cpu"
MAX_NEW_TOKENS = 16  # generation tasks: tokens generated at most
STOP = ("\n",)  # generation tasks: the answer is cut before the first stop string
EXECUTOR = "local"
ANSWER_MODE = "cloze"  # multiple choice: the mode the axes read
CHAT_TEMPLATE = "none"
NUM_FEWSHOT = 0
CHUNK_MEMORY_MB = 256  # a unit is answered in chunks of examples whose probe arrays fit in this
SAMPLE_MEMORY_MB = 512  # kNN and CKA keep example activations up to this, then sample examples
# Results files shared by processes: each holds the file only for one step (a commit, a query)
DB_READ_WAIT_S = 30.0  # a reader (query, stats, report, status) waits this long for a held file, at most
DB_WRITE_WAIT_S = 600.0  # a writer (a run's commit) waits this long, at most ($SAGO_DB_WAIT sets both)
STATS_DB_MEMORY = "1GB"  # DuckDB's buffer while sago stats reads a run (else it keeps what it scanned)
READER_DB_MEMORY = "1GB"  # the same for every read-only opener (sago query, report, status)
HEARTBEAT_S = 10.0  # a writing process records that it is alive this often
STALE_AFTER_S = 120.0  # a claim without a heartbeat for this long is taken over (its chunks are kept)
# prompts sharing at least this many leading tokens prefill them once (runtime/prefill/shared_prefix.py)
MIN_SHARED_TOKENS = 32  # a shorter shared prefix, or a shorter step between cuts, is not worth a pass
