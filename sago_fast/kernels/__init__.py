"""Pairwise distances between the variants of each example: Numba kernels, BLAS forms, drivers.

Nothing is compiled on import: each kernel compiles on first use and is cached on disk (``cache=True``;
Numba falls back to a per-user cache directory when the package folder is read-only, and
``NUMBA_CACHE_DIR`` overrides both).

Threads: Numba's OpenMP pool and OpenBLAS both spin-wait after work; on few cores a kernel called right
after a BLAS product can run 10x slower. The ``sago`` CLI and the benchmarks set
``OMP_WAIT_POLICY=PASSIVE`` before anything starts a thread pool; library users mixing BLAS-heavy code with
these kernels on small machines should do the same.
"""

from sago_fast.kernels.agreement import (
    answer_key,
    exact_match,
    normalize_answer,
    pairwise_agreement,
    token_f1,
)
from sago_fast.kernels.api import (
    distances_to_reference,
    pairwise,
    pairwise_batched,
    pairwise_layers,
    topk_overlap,
)
from sago_fast.kernels.distances import DISTANCES
from sago_fast.kernels.gram import linear_cka

__all__ = [
    "DISTANCES",
    "answer_key",
    "distances_to_reference",
    "exact_match",
    "linear_cka",
    "normalize_answer",
    "pairwise",
    "pairwise_agreement",
    "pairwise_batched",
    "pairwise_layers",
    "token_f1",
    "topk_overlap",
]
