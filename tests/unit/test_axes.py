"""Every axis metric on small cases computed by hand (JS and CKA against scipy / the textbook formula)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.spatial.distance import jensenshannon

from sago_fast.axes.confidence import calibration_by_family, confidence_scores, expected_calibration_error
from sago_fast.axes.generation import generation_scores, text_agreement_scores
from sago_fast.axes.mirroring import mirroring_scores, prompt_echo_scores
from sago_fast.axes.scored import ExampleOutputs

PROBS = np.array(
    [
        [0.2, 0.7, 0.1],  # canonical -> answers 1 (gold)
        [0.1, 0.3, 0.6],  # permutation [1, 2, 0] -> 2
        [0.5, 0.3, 0.2],  # permutation [2, 0, 1] -> 0
        [0.6, 0.3, 0.1],  # typo -> 0
        [0.8, 0.1, 0.1],  # wrong hint naming option 0 -> 0
    ]
)
EX = ExampleOutputs(
    example_id="e1",
    gold=1,
    answer=np.array([1, 2, 0, 0, 0]),
    correct=np.array([True, False, False, False, False]),
    option_probs=PROBS,
    families=("canonical", "option_permutation", "option_permutation", "typo", "wrong_hint"),
    meaning_preserving=np.array([True, True, True, True, False]),
    option_order=np.array([[0, 1, 2], [1, 2, 0], [2, 0, 1], [0, 1, 2], [0, 1, 2]]),
    hint_index=np.array([-1, -1, -1, -1, 0]),
)
FAMILIES = [None, "option_permutation", "typo"]


def as_dict(scores):
    return {(s.metric, s.family): s.value for s in scores}


def test_generation_by_hand():
    got = as_dict(generation_scores(EX, FAMILIES))
    # all meaning-preserving: answers [1, 2, 0, 0] -> 1 equal pair of 6; correct [1, 0, 0, 0] -> 3 of 6 differ
    assert got[("answer_disagreement", None)] == pytest.approx(5 / 6)
    assert got[("correctness_flip", None)] == pytest.approx(3 / 6)
    assert got[("flip_rate", None)] == pytest.approx(1.0)
    assert got[("worst_case", None)] == 0.0
    # permutations only: answers [1, 2, 0]; correct [1, 0, 0]
    assert got[("answer_disagreement", "option_permutation")] == pytest.approx(1.0)
    assert got[("correctness_flip", "option_permutation")] == pytest.approx(2 / 3)
    assert got[("flip_rate", "option_permutation")] == pytest.approx(1.0)
    assert got[("answer_disagreement", "typo")] == pytest.approx(1.0)


def test_generation_stable_example_scores_zero():
    stable = ExampleOutputs(
        "s",
        0,
        np.zeros(3, int),
        np.ones(3, bool),
        np.tile([[0.9, 0.1]], (3, 1)),
        ("canonical", "typo", "typo"),
        np.ones(3, bool),
        np.tile([[0, 1]], (3, 1)),
        -np.ones(3, int),
    )
    got = as_dict(generation_scores(stable, [None]))
    assert got[("answer_disagreement", None)] == 0.0 and got[("flip_rate", None)] == 0.0
    assert got[("worst_case", None)] == 1.0


def test_confidence_by_hand():
    got = as_dict(confidence_scores(EX, [None]))
    # p_gold [0.7, 0.3, 0.3, 0.3]: mean 0.4, population variance (0.09 + 3 * 0.01) / 4 = 0.03
    assert got[("p_gold_sd", None)] == pytest.approx(math.sqrt(0.03))
    assert got[("p_gold_range", None)] == pytest.approx(0.4)
    # |differences| over the 6 pairs: three of 0.4 (0.7 against each 0.3), three of 0
    assert got[("p_gold_diff", None)] == pytest.approx(0.2)
    # gold margins: + (0.7 vs 0.2), - (0.3 vs 0.6), - (0.3 vs 0.5), - (0.3 vs 0.6): 3 of 6 pairs flip
    assert got[("margin_flip", None)] == pytest.approx(0.5)
    P = PROBS[:4]
    want = np.mean([jensenshannon(P[i], P[j]) ** 2 for i in range(4) for j in range(i + 1, 4)])
    assert got[("option_js", None)] == pytest.approx(want, abs=2e-6)


def test_next_token_js_and_ece():
    vocab = np.array([[0.5, 0.5, 0.0], [0.0, 0.5, 0.5], [0.5, 0.5, 0.0], [0.5, 0.5, 0.0], [1.0, 0.0, 0.0]])
    got = as_dict(confidence_scores(EX, [None], next_token_probs=vocab))
    # pairs among the 4 meaning-preserving variants: 3 pairs involve row 1 (JS = ln2 / 2 each? computed by scipy)
    js01 = jensenshannon(vocab[0], vocab[1]) ** 2
    assert got[("next_token_js", None)] == pytest.approx(3 * js01 / 6, abs=2e-6)
    # ECE: bins 9, 5, 6 hold one prediction each: (|1 - .95| + |0 - .55| + |1 - .6|) / 3 = 1/3
    assert expected_calibration_error(np.array([0.95, 0.55, 0.6]), np.array([1, 0, 1])) == pytest.approx(
        1 / 3
    )


def test_ece_spread_reads_each_familys_meaning_preserving_flag():
    """The spread is over families whose variants preserve meaning, by their flag, not by family name."""
    confidence = np.array([0.95, 0.55, 0.6, 0.9, 0.9, 0.8, 0.7])
    correct = np.array([1, 0, 1, 1, 0, 0, 1])
    families = ["canonical", "canonical", "canonical", "typo", "typo", "my_cue", "my_cue"]
    preserving = np.array([True, True, True, True, True, False, False])
    eces, spread = calibration_by_family(confidence, correct, families, preserving)
    assert eces["canonical"] == pytest.approx(1 / 3)  # as above
    assert eces["typo"] == pytest.approx(0.4)  # one bin: |0.5 - 0.9|
    assert eces["my_cue"] == pytest.approx(0.55)  # bins 8 and 7: (|0 - .8| + |1 - .7|) / 2
    assert spread == pytest.approx(0.4 - 1 / 3)  # my_cue (not meaning preserving) is left out
    _, with_cue = calibration_by_family(confidence, correct, families, np.ones(7, dtype=bool))
    assert with_cue == pytest.approx(max(eces.values()) - min(eces.values()))


def test_mirroring_by_hand():
    got = as_dict(mirroring_scores(EX))
    # both permutations move the canonical answer (content 1) away from position 1; both answers are the
    # option now shown at position 1 (2, then 0): positions kept 2, contents kept 0
    assert got[("position_mirroring", "option_permutation")] == 1.0
    assert got[("position_chance", "option_permutation")] == pytest.approx(1 / 3)
    assert got[("mirroring_log_odds", "option_permutation")] == pytest.approx(math.log(2.5 / 0.5))
    # hint names option 0: P rises from 0.2 to 0.8
    assert got[("cue_following", "wrong_hint")] == pytest.approx(0.6)


@pytest.mark.parametrize("swap_answer,expected", [(0, 1.0), (1, 0.0)])
def test_swap_consistency(swap_answer, expected):
    pair = ExampleOutputs(
        "p",
        0,
        np.array([0, swap_answer]),
        np.array([True, swap_answer == 0]),
        np.array([[0.8, 0.2], [0.6, 0.4] if swap_answer == 0 else [0.3, 0.7]]),
        ("canonical", "pair_swap"),
        np.array([True, True]),
        np.array([[0, 1], [1, 0]]),
        np.array([-1, -1]),
    )
    assert as_dict(mirroring_scores(pair))[("swap_consistency", "pair_swap")] == expected


def reference_cka(A, B):
    A = A - A.mean(0)
    B = B - B.mean(0)
    return np.linalg.norm(B.T @ A) ** 2 / (np.linalg.norm(A.T @ A) * np.linalg.norm(B.T @ B))


def activation_rows(H, layout, chunks):
    """Every activation scorer on H (L, E, V, d), the examples split into ``chunks`` (lists of indices):
    {(example, metric, family): value} per layer 0 and {(layer, metric, family): value} of dataset rows."""
    from sago_fast.axes.levels import DATASET_SCORERS, LAYER_SCORERS, ActivationBlock, ChunkView, UnitContext

    ids = [f"e{i}" for i in range(H.shape[1])]
    context = UnitContext(len(ids), 0, frozenset({tuple(layout)}))
    layer_rows, partials = [], {"dispersion": [], "neighbourhood": []}
    for chunk in chunks:
        block = ActivationBlock(
            tuple(layout),
            np.ones(len(layout), dtype=bool),
            (None, *sorted(set(layout) - {"canonical"})),
            tuple(ids[i] for i in chunk),
            "mean",
            H[:, chunk],
            H[:, chunk, 0],
        )
        layer_rows += LAYER_SCORERS.get("dispersion_raw").score(block, context)
        view = ChunkView(context, [], np.zeros(0), np.zeros(0), np.zeros(0), np.zeros(0), [block])
        for name in partials:
            partials[name].append(DATASET_SCORERS.get(name).partial(view))
    datasets = []
    for name, parts in partials.items():
        done = DATASET_SCORERS.get(name).finish(parts, context)
        layer_rows += done.layers
        datasets += done.datasets
    table = {
        (int(e[1:]), m, f): v
        for block in layer_rows
        for e, layer, m, f, v in zip(
            block.example_id, block.layer, block.metric, block.family, block.value, strict=True
        )
        if layer == 0
    }
    return table, {(d.layer, d.metric, d.family): d.value for d in datasets}


@pytest.mark.parametrize("chunks", [[[0, 1, 2]], [[0], [1, 2]], [[0], [1], [2]]])
def test_activation_by_hand(chunks):
    # 1 layer, 3 examples, variants (canonical, typo), d = 2; the same in one chunk or split
    H = np.array([[[[1, 0], [0, 1]], [[1, 1], [1, -1]], [[0, 1], [1, 0]]]], dtype=np.float32)  # (1, 3, 2, 2)
    table, dataset = activation_rows(H, ("canonical", "typo"), chunks)
    # every example's two variants are orthogonal: cosine distance 1
    for e in range(3):
        assert table[(e, "dispersion_raw", None)] == pytest.approx(1.0)
    # canonical distances: (0,1) 1 - 1/sqrt2, (0,2) 1, (1,2) 1 - 1/sqrt2
    between = (2 * (1 - 1 / math.sqrt(2)) + 1) / 3
    assert table[(0, "dispersion", "typo")] == pytest.approx(1 / between)
    # k = E - 2 = 1 nearest canonical rendering of another example: to the canonicals 0->1, 1->0 (tie,
    # lower index), 2->1; to the typos (0,1)->c2, (1,-1)->c0 (distance 1 - 1/sqrt2 against 1 + 1/sqrt2),
    # (1,0)->c0
    assert [table[(e, "knn_instability", "typo")] for e in range(3)] == [1.0, 0.0, 1.0]
    assert dataset[(0, "cka", "typo")] == pytest.approx(reference_cka(H[0, :, 0], H[0, :, 1]))
    assert dataset[(0, "between_example_distance", "canonical")] == pytest.approx(between)


def test_dispersion_is_left_out_where_examples_do_not_spread():
    """Layer 0 as under last-token pooling: every canonical prompt ends in the same token, so the
    between-example distance is 0 and a ratio to it is not a number: no dispersion rows at that layer (never
    NaN or inf), while layer 1 keeps its rows; the layer mean in item_scores averages the defined layers."""
    from sago_fast.units.chunk import layer_item_scores

    rng = np.random.default_rng(0)
    H = rng.normal(size=(2, 4, 2, 3)).astype(np.float32)  # (L, E, V, d)
    H[0, :, 0] = [1.0, 2.0, 0.5]  # layer 0: the same canonical vector for every example
    ids = [f"e{i}" for i in range(4)]
    table, dataset = activation_rows(H, ("canonical", "typo"), [[0, 1], [2, 3]])
    assert dataset[(0, "between_example_distance", "canonical")] == 0.0
    assert not [k for k in table if k[1] == "dispersion"]  # layer 0: left out

    from sago_fast.axes.levels import DATASET_SCORERS, ActivationBlock, ChunkView, UnitContext

    context = UnitContext(4, 0, frozenset({("canonical", "typo")}))
    block = ActivationBlock(
        ("canonical", "typo"), np.ones(2, dtype=bool), (None, "typo"), tuple(ids), "mean", H, H[:, :, 0]
    )
    view = ChunkView(context, [], np.zeros(0), np.zeros(0), np.zeros(0), np.zeros(0), [block])
    scorer = DATASET_SCORERS.get("dispersion")
    layers = scorer.finish([scorer.partial(view)], context).layers
    assert layers and all(set(block.layer) == {1} and np.isfinite(block.value).all() for block in layers)
    items = {(i.example_id, i.family): i.value for i in layer_item_scores(layers)}
    one = next(b for b in layers if b.family[0] is None)
    assert items[("e0", None)] == pytest.approx(one.value[one.example_id.index("e0")])


def test_between_example_distance_from_sums_equals_scipy():
    from scipy.spatial.distance import pdist

    from sago_fast.axes.activation import between_example_distance, unit_vector_sums

    rng = np.random.default_rng(3)
    X = rng.normal(size=(2, 40, 7)).astype(np.float32)  # (L, E, d)
    X[1, 5] = 0.0  # a zero row: distance 1 to every other row, as the kernels
    parts = [unit_vector_sums(X[:, :17]), unit_vector_sums(X[:, 17:])]
    got = between_example_distance(
        parts[0][0] + parts[1][0], parts[0][1] + parts[1][1], parts[0][2] + parts[1][2]
    )
    for layer in range(2):
        expected = pdist(X[layer].astype(np.float64), "cosine")
        expected[np.isnan(expected)] = 1.0  # scipy: NaN against a zero row
        assert got[layer] == pytest.approx(expected.mean(), rel=1e-12)


def test_seeded_sample_is_uniform_size_and_independent_of_order():
    from sago_fast.axes.activation import NEIGHBOUR_BLOCK
    from sago_fast.units.chunk import sample_size, seeded_sample

    ids = [f"x{i}" for i in range(1000)]
    assert seeded_sample(ids, 1000, 0) is None  # all fit: exact
    sample = seeded_sample(ids, 100, 7)
    assert (
        len(sample) == 100 and sample == seeded_sample(ids, 100, 7) and sample != seeded_sample(ids, 100, 8)
    )
    per_example = 1 << 20
    m = sample_size(per_example, 64 << 20)

    def working_set(n):
        return n * (per_example + 16 * NEIGHBOUR_BLOCK) + 48 * n * n

    assert working_set(m) <= 64 << 20 < working_set(m + 1)


# --- generation tasks: answers are answer keys, no options ---
GEN = ExampleOutputs(
    example_id="g1",
    gold=-1,
    answer=np.array(["paris", "paris", "france", "capital of france"], dtype=object),
    correct=np.array([True, True, False, False]),
    option_probs=np.zeros((4, 0)),
    families=("canonical", "typo", "typo", "casing"),
    meaning_preserving=np.array([True, True, True, True]),
    option_order=np.zeros((4, 0), dtype=np.int64),
    hint_index=np.array([-1, -1, -1, -1]),
)
GEN_FAMILIES = [None, "casing", "typo"]


def test_generation_task_consistency_by_hand():
    got = as_dict(generation_scores(GEN, GEN_FAMILIES))
    # keys [paris, paris, france, capital of france]: 1 equal pair of 6
    assert got[("answer_disagreement", None)] == pytest.approx(5 / 6)
    assert got[("correctness_flip", None)] == pytest.approx(4 / 6)
    assert got[("flip_rate", None)] == pytest.approx(2 / 3)
    assert got[("worst_case", None)] == 0.0
    # typo: [paris, paris, france]
    assert got[("answer_disagreement", "typo")] == pytest.approx(2 / 3)
    assert got[("flip_rate", "typo")] == pytest.approx(1 / 2)


def test_token_f1_disagreement_by_hand():
    texts = [(1, 2, 3), (1, 2, 3), (4,), (1, 5)]  # token ids of each variant's generated text
    got = as_dict(text_agreement_scores(GEN, texts, GEN_FAMILIES))
    # pair F1: (0,1)=1, (0,2)=0, (0,3)=2*(1/3)(1/2)/(5/6)=0.4, (1,2)=0, (1,3)=0.4, (2,3)=0
    assert got[("token_f1_disagreement", None)] == pytest.approx(1 - 1.8 / 6)
    assert got[("token_f1_disagreement", "casing")] == pytest.approx(1 - 0.4)
    assert got[("token_f1_disagreement", "typo")] == pytest.approx(1 - 1 / 3)


def test_generation_task_confidence_by_hand():
    p_gold = np.array([0.5, 0.3, 0.1, 0.5])
    next_token = np.array([[0.5, 0.5, 0.0], [0.5, 0.5, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    got = as_dict(confidence_scores(GEN, GEN_FAMILIES, next_token_probs=next_token, p_gold=p_gold))
    assert ("option_js", None) not in got and ("margin_flip", None) not in got
    assert got[("p_gold_sd", None)] == pytest.approx(np.std(p_gold))
    assert got[("p_gold_range", None)] == pytest.approx(0.4)
    assert got[("p_gold_range", "typo")] == pytest.approx(0.4)
    assert got[("p_gold_sd", "casing")] == pytest.approx(0.0)
    pairs = [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]
    js = [jensenshannon(next_token[i], next_token[j]) ** 2 for i, j in pairs]
    assert got[("next_token_js", None)] == pytest.approx(np.mean(js), abs=1e-6)


def test_prompt_echo_by_hand():
    prompts = [
        "Question: What is the capital of France?\nAnswer:",
        "Question: What is the capitl of France?\nAnswer:",
        "Question: What is the capitl of France?\nAnswer:",
        "QUESTION: WHAT IS THE CAPITAL OF FRANCE?\nANSWER:",
    ]
    got = as_dict(prompt_echo_scores(GEN, prompts, GEN_FAMILIES))
    # echoes: v2 "france" (wrong, in its prompt), v3 "capital of france" (wrong, in its prompt, any case);
    # v0/v1 are correct, so never echoes
    assert got[("prompt_echo", None)] == pytest.approx(2 / 4)
    assert got[("prompt_echo", "typo")] == pytest.approx(1 / 3)
    assert got[("prompt_echo", "casing")] == pytest.approx(1 / 2)
    # a word that only appears inside another word is not an echo
    partial = ExampleOutputs(**{**GEN.__dict__, "answer": np.array(["", "", "ran", "pari"], dtype=object)})
    assert as_dict(prompt_echo_scores(partial, prompts, [None]))[("prompt_echo", None)] == 0.0
