"""The sampled design over item × family cells (``--design sampled --families-per-item m``): its balance
along the visiting order, its exact inclusion probabilities, and estimators that are unbiased for the full
design's value, shown by enumerating every assignment of a tiny design (every block permutation) with the
axes' own scorers; and the one-line refusals of bad designs."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from sago_fast.axes.activation import dispersion_raw
from sago_fast.axes.confidence import confidence_scores
from sago_fast.axes.generation import generation_scores
from sago_fast.axes.levels import ActivationBlock
from sago_fast.axes.scored import ExampleOutputs, pair_inclusion
from sago_fast.errors import InputError
from sago_fast.types import Variant
from sago_fast.variants import design as design_module
from sago_fast.variants.design import CellDesign, draw_cells, drawn_families, visiting_rank

FAMILIES = tuple(f"f{i}" for i in range(10))


def variant(example: str, family: str, j: int, preserving: bool = True) -> Variant:
    canonical = family == "canonical"
    return Variant(example, f"{example}/{family}/{j}", family, j, "{}", canonical, preserving, "p")


def rendered(n_items: int, families=FAMILIES, k: int = 1, hint: bool = True) -> list[Variant]:
    """Every item's canonical, k variants of each family and (``hint``) a non-preserving wrong hint."""
    out = []
    for e in range(n_items):
        example = f"q{e:03d}"
        out.append(variant(example, "canonical", 0))
        out += [variant(example, f, j) for f in families for j in range(k)]
        if hint:
            out += [variant(example, "wrong_hint", j, preserving=False) for j in range(k)]
    return out


def test_every_item_keeps_its_canonical_and_hint_and_gets_m_families():
    variants = draw_cells(rendered(40, k=2), CellDesign("sampled", 3), seed=7)
    by_item: dict[str, list[Variant]] = {}
    for v in variants:
        by_item.setdefault(v.example_id, []).append(v)
    for item in by_item.values():
        families = [v.family for v in item]
        assert families[0] == "canonical" and families.count("wrong_hint") == 2
        drawn = {v.family for v in item if v.inclusion < 1}
        assert len(drawn) == 3 and all(families.count(f) == 2 for f in drawn)
        assert {v.inclusion for v in item if v.family in drawn} == {0.3}
        assert all(v.inclusion == 1.0 for v in item if v.family not in drawn)
    assert draw_cells(rendered(5), CellDesign(), seed=7) == rendered(5)  # the full design: every cell


@pytest.mark.parametrize(("m", "n_items"), [(1, 57), (3, 64), (4, 101)])
def test_any_run_of_consecutive_items_is_balanced_within_two(m, n_items):
    strata = {f"q{e:03d}": FAMILIES for e in range(n_items)}
    drawn = drawn_families(strata, m, seed=3)
    order = sorted(strata, key=lambda e: visiting_rank(3, e))
    counts = np.array([[f in drawn[e][0] for f in FAMILIES] for e in order], dtype=int)  # (n, K)
    prefix = np.vstack([np.zeros(len(FAMILIES), dtype=int), counts.cumsum(axis=0)])
    for start in range(n_items):
        windows = prefix[start + 1 :] - prefix[start]  # every window from ``start``
        assert (windows.max(axis=1) - windows.min(axis=1)).max() <= 2


def test_the_draw_depends_on_the_seed_and_the_items_not_on_their_order():
    variants = rendered(30)
    a = draw_cells(variants, CellDesign("sampled", 2), seed=1)
    shuffled = [
        v for e in np.random.default_rng(0).permutation(30) for v in variants if v.example_id == f"q{e:03d}"
    ]
    b = draw_cells(shuffled, CellDesign("sampled", 2), seed=1)  # the dataset's rows in another order
    assert sorted(v.variant_id for v in a) == sorted(v.variant_id for v in b)
    c = draw_cells(variants, CellDesign("sampled", 2), seed=2)
    assert sorted(v.variant_id for v in a) != sorted(v.variant_id for v in c)


def all_assignments(n_items: int, families: tuple[str, ...], m: int):
    """Every assignment the design can make of ``n_items`` items (one stratum): each block's every
    permutation, in turn (the design's randomness), as {example id: drawn families}."""
    k = len(families)
    order = sorted((f"q{e:03d}" for e in range(n_items)), key=lambda e: visiting_rank(0, e))
    blocks = [order[i : i + k] for i in range(0, n_items, k)]
    for sigmas in itertools.product(itertools.permutations(range(k)), repeat=len(blocks)):
        drawn = {}
        for block, sigma in zip(blocks, sigmas, strict=True):
            for q, example in enumerate(block):
                chosen = {sigma[(q * m + j) % k] for j in range(m)}
                drawn[example] = tuple(f for i, f in enumerate(families) if i in chosen)
        yield drawn


def test_inclusion_probabilities_are_exact_over_every_assignment():
    families, m = FAMILIES[:4], 2
    assignments = list(all_assignments(5, families, m))
    assert len(assignments) == 24**2
    single = {f: np.mean([f in a["q000"] for a in assignments]) for f in families}
    assert single == pytest.approx(dict.fromkeys(families, m / 4))
    joint = np.mean([{"f0", "f2"} <= set(a["q000"]) for a in assignments])
    assert joint == pytest.approx(m * (m - 1) / (4 * 3))
    # the draw the package makes is one of them, with these probabilities
    strata = {f"q{e:03d}": families for e in range(5)}
    drawn = drawn_families(strata, m, seed=0)
    assert {e: f for e, (f, _) in drawn.items()} in assignments
    assert {p for _, p in drawn.values()} == {0.5}


def example_outputs(rng: np.random.Generator, families: tuple[str, ...], k: int) -> ExampleOutputs:
    """One multiple-choice item's outputs under the full design: canonical, then k variants per family."""
    names = ("canonical", *[f for f in families for _ in range(k)])
    v = len(names)
    probs = rng.dirichlet(np.ones(4) * 0.7, v)
    answer = probs.argmax(axis=1)
    return ExampleOutputs(
        "q",
        gold=1,
        answer=answer,
        correct=answer == 1,
        option_probs=probs,
        families=names,
        meaning_preserving=np.ones(v, dtype=bool),
        option_order=np.tile(np.arange(4), (v, 1)),
        hint_index=np.full(v, -1),
    )


def subset(ex: ExampleOutputs, drawn: tuple[str, ...], probability: float) -> ExampleOutputs:
    rows = [i for i, f in enumerate(ex.families) if f == "canonical" or f in drawn]
    return ex.restricted_to(
        rows, np.array([1.0 if ex.families[i] == "canonical" else probability for i in rows])
    )


UNBIASED = ("answer_disagreement", "correctness_flip", "flip_rate", "option_js", "margin_flip", "p_gold_diff")


@pytest.mark.parametrize(("m", "k"), [(2, 1), (3, 2)])
def test_item_scores_averaged_over_every_assignment_equal_the_full_design(m, k):
    """Every m-subset of an item's K = 5 families (the cells any assignment gives it, equally often): the
    mean of the sampled estimate equals the full design's score, exactly, for every score that is a mean
    over renderings or over pairs of them (the pairs weighted by 1 / their inclusion probability)."""
    families = FAMILIES[:5]
    rng = np.random.default_rng(m)
    for _ in range(5):
        full_ex = example_outputs(rng, families, k)
        full = {
            s.metric: s.value for s in generation_scores(full_ex, [None]) + confidence_scores(full_ex, [None])
        }
        sampled = []
        for drawn in itertools.combinations(families, m):
            ex = subset(full_ex, drawn, m / len(families))
            scores = generation_scores(ex, [None]) + confidence_scores(ex, [None])
            sampled.append({s.metric: s.value for s in scores})
        for metric in UNBIASED:
            assert np.mean([s[metric] for s in sampled]) == pytest.approx(full[metric], abs=1e-12), metric
        # the population SD of P(gold): its square (the variance over the full design's renderings) is
        # unbiased; the root is nearly so
        variance = np.mean([s["p_gold_sd"] ** 2 for s in sampled])
        assert variance == pytest.approx(full["p_gold_sd"] ** 2, rel=1e-9)


def test_dispersion_over_every_assignment_equals_the_full_design():
    """Activations: the mean pairwise cosine distance among an item's meaning-preserving variants, each
    pair weighted by 1 / its inclusion probability, averaged over every m-subset of families."""
    families, m, k = FAMILIES[:4], 2, 2
    rng = np.random.default_rng(0)
    names = ("canonical", *[f for f in families for _ in range(k)])
    hidden = rng.normal(size=(2, 1, len(names), 3)).astype(np.float32)  # (L, E, V, d)

    def block(columns: list[int], inclusion: np.ndarray | None, grid: np.ndarray | None) -> ActivationBlock:
        layout = tuple(names[c] if grid is None else ("canonical" if c == 0 else "drawn") for c in columns)
        return ActivationBlock(
            layout,
            np.ones(len(columns), dtype=bool),
            (None,),
            ("q",),
            "mean",
            hidden[:, :, columns],
            hidden[:, :, 0],
            family_grid=grid,
            inclusion=inclusion,
        )

    full = dispersion_raw(block(list(range(len(names))), None, None))[None]
    sampled = []
    for drawn in itertools.combinations(families, m):
        columns = [c for c, f in enumerate(names) if f == "canonical" or f in drawn]
        inclusion = np.array([[1.0] + [m / len(families)] * (len(columns) - 1)])
        grid = np.array([[names[c] for c in columns]])
        sampled.append(dispersion_raw(block(columns, inclusion, grid))[None])
    assert np.mean(sampled, axis=0) == pytest.approx(full, abs=1e-6)


def test_pair_inclusion_of_a_sampled_item():
    families = ["canonical", "a", "a", "b", "b", "c", "c", "wrong_hint"]
    inclusion = np.array([1.0] + [0.3] * 6 + [1.0])  # m = 3 of K = 10
    got = pair_inclusion(families, inclusion)
    i, j = np.triu_indices(len(families), 1)
    expected = {
        ("canonical", "a"): 0.3,
        ("a", "a"): 0.3,
        ("a", "b"): 0.3 * 2 / 9,
        ("canonical", "wrong_hint"): 1.0,
    }
    for (x, y), p in expected.items():
        picked = [n for n in range(len(i)) if (families[i[n]], families[j[n]]) == (x, y)]
        assert got[picked] == pytest.approx([p] * len(picked))


@pytest.mark.parametrize(
    ("design", "m", "message"),
    [
        ("halves", None, "--design must be one of full, sampled"),
        ("sampled", 0, "--families-per-item must be at least 1"),
        ("full", 2, "--families-per-item 2 needs --design sampled"),
    ],
)
def test_bad_designs_are_one_line(design, m, message):
    with pytest.raises(InputError, match=message):
        CellDesign(design, m)


def test_sampled_without_m_takes_the_default():
    from sago_fast import defaults

    assert CellDesign("sampled").families_per_item == defaults.FAMILIES_PER_ITEM


def test_more_families_than_an_item_has_is_refused():
    with pytest.raises(InputError, match="more than the 10 meaning-preserving families"):
        CellDesign("sampled", 11).check_families(design_module.most_preserving_families(rendered(3)), "x")


def test_variance_components_and_the_best_m():
    from sago_fast.stats.design_advice import best_families_per_item, variance_components

    nan = float("nan")
    values = np.array([[0.1, 0.3, 0.5], [0.6, 0.6, 0.9], [0.2, nan, nan]])  # examples a, b, c x f0..f2
    between, within, scored, n = variance_components(values)
    assert n == 2 and scored == 3  # "c" has one family: no within-item variance, left out
    assert between == pytest.approx(np.var([0.3, 0.7], ddof=1))
    assert within == pytest.approx(
        np.mean([np.var([0.1, 0.3, 0.5], ddof=1), np.var([0.6, 0.6, 0.9], ddof=1)])
    )
    # families that never differ: one family an item is enough; items that never differ: every family
    assert best_families_per_item(0.04, 0.0, 10, 10, (3.0, 1.0)) == (1, pytest.approx(4 / 13))
    assert best_families_per_item(0.0, 0.5, 10, 10, (3.0, 1.0))[0] == 10
    # in between, the minimum of (sigma_b² + S_w² (1/m - 1/K)) (c0 + c1 m) over m, found by hand
    products = {m: (0.01 + 0.2 * (1 / m - 1 / 10)) * (3 + 2 * m) for m in range(1, 11)}
    best = min(products, key=products.get)
    assert best_families_per_item(0.01 + 0.2 * (1 / 10 - 1 / 10), 0.2, 10, 10, (3.0, 2.0)) == (
        best,
        pytest.approx(products[best] / products[10]),
    )
