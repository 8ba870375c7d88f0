"""Defaults of ``sago run`` settings, stated once: the configuration dataclasses use them as field defaults
and the CLI's help texts print them (this module imports nothing, so the CLI starts fast)."""

from __future__ import annotations

VARIANTS_PER_FAMILY = 2  # variants drawn per perturbation family and example
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
