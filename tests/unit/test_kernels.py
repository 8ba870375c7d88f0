"""Every registered metric against scipy / closed forms, on random and degenerate rows, float32 and float64."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.spatial.distance import jensenshannon, pdist
from scipy.special import rel_entr

from sago_fast.errors import InputError
from sago_fast.kernels import (
    DISTANCES,
    distances_to_reference,
    linear_cka,
    pairwise,
    pairwise_batched,
    pairwise_layers,
    topk_overlap,
)
from sago_fast.kernels import api as kernels_api


def ref_cosine(u, v):
    nu, nv = np.linalg.norm(u), np.linalg.norm(v)
    if nu == 0 and nv == 0:
        return 0.0
    if nu == 0 or nv == 0:
        return 1.0
    return max(0.0, 1.0 - float(np.dot(u, v)) / (nu * nv))


REFERENCES = {
    "cosine": ref_cosine,
    "euclidean": lambda u, v: float(np.linalg.norm(u - v)),
    "sqeuclidean": lambda u, v: float(((u - v) ** 2).sum()),
    "kl": lambda p, q: float(rel_entr(p, q).sum()),
    "js": lambda p, q: float(jensenshannon(p, q) ** 2),
    "tv": lambda p, q: 0.5 * float(np.abs(p - q).sum()),
    "hellinger": lambda p, q: float(np.sqrt(0.5 * ((np.sqrt(p) - np.sqrt(q)) ** 2).sum())),
}
# JS runs its vectorised log in float32: ~1e-7 relative per term
TOLERANCE = {"js": 2e-6}


def reference_pdist(X, metric):
    X64 = X.astype(np.float64)
    fn = REFERENCES[metric]
    n = len(X64)
    return np.array([fn(X64[i], X64[j]) for i in range(n - 1) for j in range(i + 1, n)])


def random_rows(metric, n, d, dtype, rng, degenerate=False):
    """Random rows; ``degenerate`` (n >= 5) plants zero/one-hot/uniform/repeated rows."""
    if DISTANCES.get(metric).kind == "vector":
        X = rng.standard_normal((n, d))
        if degenerate and n >= 5:
            X[1] = 0.0
            X[2] = 0.0
            X[3] = X[4]
    else:
        X = rng.dirichlet(np.full(d, 0.3), size=n)
        if degenerate and n >= 5:
            X[1] = np.eye(d)[0]  # one-hot
            X[2] = np.eye(d)[0]
            X[3] = np.full(d, 1.0 / d)  # uniform
            X[4, : d // 2] = 0.0  # zeros in a row
            X[4] /= X[4].sum()
    return X.astype(dtype)


def test_reference_table_covers_every_registered_metric():
    assert set(REFERENCES) == set(DISTANCES.names())


@pytest.mark.parametrize("metric", sorted(REFERENCES))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("degenerate", [False, True])
@pytest.mark.parametrize("n", [3, 6, 60])  # tiles of 4 + tails; 60 crosses the cosine Gram threshold
def test_pairwise_matches_reference(metric, dtype, degenerate, n):
    rng = np.random.default_rng(n)
    X = random_rows(metric, n, 257, dtype, rng, degenerate)
    got = pairwise(X, metric)
    want = reference_pdist(X, metric)
    assert got.shape == (n * (n - 1) // 2,) and got.dtype == np.float64
    tol = TOLERANCE.get(metric, 1e-9 if dtype == np.float64 else 1e-5)
    np.testing.assert_allclose(got, want, atol=tol, rtol=tol)
    assert not np.isnan(got).any()


def test_scipy_pdist_agrees_where_defined():
    X = np.random.default_rng(1).standard_normal((9, 40))
    for metric in ("cosine", "euclidean", "sqeuclidean"):
        np.testing.assert_allclose(pairwise(X, metric), pdist(X, metric), atol=1e-12)


def test_js_bounds_and_kl_infinity():
    P = np.eye(4)  # disjoint one-hot distributions
    np.testing.assert_allclose(pairwise(P, "js"), math.log(2), atol=1e-7)
    assert np.isinf(pairwise(P, "kl")).all()
    np.testing.assert_allclose(pairwise(P, "tv"), 1.0)
    np.testing.assert_allclose(pairwise(P, "hellinger"), 1.0)
    same = np.tile(np.array([[0.5, 0.5, 0.0]]), (3, 1))
    np.testing.assert_allclose(pairwise(same, "js"), 0.0, atol=1e-7)
    np.testing.assert_allclose(pairwise(same, "kl"), 0.0, atol=1e-12)


@pytest.mark.parametrize("metric", sorted(REFERENCES))
def test_batched_layers_and_reference_agree_with_single(metric):
    rng = np.random.default_rng(3)
    H = np.stack(
        [np.stack([random_rows(metric, 7, 33, np.float64, rng) for _ in range(5)]) for _ in range(3)]
    )
    layers = pairwise_layers(H, metric)  # (3, 5, 21)
    assert layers.shape == (3, 5, 21)
    for layer in range(3):
        for e in range(5):
            np.testing.assert_allclose(
                layers[layer, e], pairwise(H[layer, e], metric), rtol=1e-12, atol=1e-12
            )
    to_ref = distances_to_reference(H[0], metric, reference=2)  # (5, 7)
    for e in range(5):
        want = [0.0 if j == 2 else REFERENCES[metric](H[0, e, j], H[0, e, 2]) for j in range(7)]
        np.testing.assert_allclose(to_ref[e], want, atol=TOLERANCE.get(metric, 1e-9), rtol=1e-6)


def test_batched_cosine_gram_path():
    X = np.random.default_rng(4).standard_normal((3, kernels_api.COSINE_GRAM_MIN_ROWS + 2, 16))
    got = pairwise_batched(X, "cosine")
    for e in range(3):
        np.testing.assert_allclose(got[e], pdist(X[e], "cosine"), atol=1e-12)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("metric", ["cosine", "js", "kl"])
def test_nan_and_inf_are_errors(metric, bad):
    X = random_rows(metric, 4, 8, np.float64, np.random.default_rng(0))
    X[2, 3] = bad
    with pytest.raises(InputError, match="NaN or inf"):
        pairwise(X, metric)
    with pytest.raises(InputError, match="NaN or inf"):
        pairwise_batched(X[None], metric)


def test_distribution_contract_and_unknown_metric():
    with pytest.raises(InputError, match="sums to"):
        pairwise(np.ones((3, 4)), "js")
    with pytest.raises(InputError, match="non-negative"):
        pairwise(np.array([[1.5, -0.5], [0.5, 0.5]]), "js")
    with pytest.raises(InputError, match="did you mean 'cosine'"):
        pairwise(np.ones((3, 4)), "cosin")
    with pytest.raises(InputError, match="2-D"):
        pairwise(np.ones(4), "cosine")


def test_topk_overlap():
    P = np.array([[0.5, 0.3, 0.1, 0.1], [0.1, 0.3, 0.5, 0.1], [0.5, 0.3, 0.15, 0.05]])
    np.testing.assert_allclose(topk_overlap(P, k=2), [0.5, 1.0, 0.5])


def reference_cka(A, B):
    A = A - A.mean(0)
    B = B - B.mean(0)
    return np.linalg.norm(B.T @ A) ** 2 / (np.linalg.norm(A.T @ A) * np.linalg.norm(B.T @ B))


@pytest.mark.parametrize("n,d1,d2", [(20, 50, 30), (200, 8, 12)])  # Gram form and feature form
def test_linear_cka(n, d1, d2):
    rng = np.random.default_rng(5)
    A, B = rng.standard_normal((n, d1)), rng.standard_normal((n, d2))
    np.testing.assert_allclose(linear_cka(A, B), reference_cka(A, B), rtol=1e-10)
    Q, _ = np.linalg.qr(rng.standard_normal((d1, d1)))
    np.testing.assert_allclose(
        linear_cka(A, 3.0 * A @ Q + 1.0), 1.0, rtol=1e-10
    )  # invariant to rotation, scale, shift
    assert linear_cka(A, np.ones((n, d2))) == 0.0


def test_import_compiles_nothing():
    import subprocess
    import sys

    code = (
        "import sys, sago_fast.kernels as K, sago_fast.kernels.vector as v; "
        "print(len(v.cosine.signatures), sum(m.startswith('sago_fast_kernels_') for m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["0", "0"]


SECOND_PROCESS = """
import json, sys
import numpy as np
import sago_fast.kernels as K
from sago_fast.kernels import distribution, tiled, vector
rng = np.random.default_rng(0)
X = rng.random((3, 5, 8)); P = X / X.sum(-1, keepdims=True)
for name in ("euclidean", "js"):  # a tiled vector metric and a distribution metric with an aux
    A = X if name == "euclidean" else P
    K.pairwise(A[0], name); K.pairwise_batched(A, name); K.distances_to_reference(A, name)
drivers = [m for n, m in sys.modules.items() if n.startswith("sago_fast_kernels_")]
jitted = [getattr(m, f) for m in drivers for f in ("pairs_one_serial", "batched", "to_reference")]
jitted += [vector.euclidean, distribution.js, distribution.neg_entropy, tiled.euclidean_condensed]
print(json.dumps({"drivers": len(drivers), "compiled": sum(len(f.stats.cache_misses) for f in jitted),
                  "loaded": sum(len(f.stats.cache_hits) for f in jitted)}))
"""


def test_a_second_process_compiles_no_kernel_or_driver(tmp_path):
    """Drivers are specialised per metric into files Numba caches: the second process loads everything."""
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "SAGO_CACHE_DIR": str(tmp_path)}
    env.pop("NUMBA_CACHE_DIR", None)
    runs = [
        json.loads(
            subprocess.run(
                [sys.executable, "-c", SECOND_PROCESS], capture_output=True, text=True, check=True, env=env
            ).stdout
        )
        for _ in range(2)
    ]
    assert runs[0]["drivers"] == runs[1]["drivers"] == 2 and runs[0]["compiled"] > 0
    assert runs[1]["compiled"] == 0 and runs[1]["loaded"] > 0
    assert len(list((tmp_path / "kernels").iterdir())) == 1


def test_specialised_drivers_follow_the_kernel_sources(tmp_path, monkeypatch):
    """The specialised copies point at the metric's functions, and live in a folder keyed by every kernel
    module's source: an edited kernel never meets a driver cached from its old source."""
    import shutil

    from sago_fast.kernels import distribution, specialise, vector

    source = specialise.specialised_source(distribution.js, distribution.neg_entropy, None)
    assert "from sago_fast.kernels.distribution import js as kernel" in source
    assert "from sago_fast.kernels.distribution import neg_entropy as aux_fn" in source
    assert "tiled_fn = None" in source and "cosine" not in source.split("import numpy")[1].split("@njit")[0]
    before = specialise._key()
    copy = tmp_path / "kernels"
    shutil.copytree(specialise.KERNELS_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(specialise, "KERNELS_DIR", copy)
    assert specialise._key() == before
    vector_file = copy / "vector.py"
    vector_file.write_text(vector_file.read_text().replace("BLOCK = 256", "BLOCK = 128"))
    assert specialise._key() != before
    assert vector.BLOCK == 256


def test_cache_directory_is_used(tmp_path):
    import os
    import subprocess
    import sys

    code = "import numpy as np, sago_fast.kernels as K; K.pairwise(np.eye(3), 'cosine')"
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
    assert list(tmp_path.rglob("*.nbi")), "no Numba cache index written"
