"""The OOD metrics against scikit-learn, pytorch-ood, brute-force Fractions and invariances.

Why tolerances of 1e-12 and exact equalities hold on any CPU: the metrics rank the scores and
count (integers), then divide and sum in NumPy, whose elementwise operations are correctly
rounded and whose sums run in one fixed (pairwise) order; no BLAS, no threads, no vector
transcendental kernels. Two computations of one metric differ by float64 rounding of sums of at
most a few thousand terms in [0, 1] (< 1e-13), or not at all where both divide the same counts.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from pytorch_ood.metrics import functional as pood
from sklearn import metrics as skm

from oodbench.errors import EmptyInputError, InvalidInputError, NonFiniteError
from oodbench.metrics import (
    aupr_in,
    aupr_out,
    auroc,
    average_precision_in,
    average_precision_out,
    fpr_at_tpr,
)
from tests.metrics._reference import brute_force, random_case, sklearn_metrics

TOL = 1e-12  # the issue asks for 1e-9 on AUROC


def ours(id_scores, ood_scores, tpr: float = 0.95) -> dict[str, float]:
    """Every public OOD metric, each called on its own (each validates and sorts again)."""
    return {
        "auroc": auroc(id_scores, ood_scores),
        "fpr_id": fpr_at_tpr(id_scores, ood_scores, tpr=tpr, positive="id"),
        "fpr_ood": fpr_at_tpr(id_scores, ood_scores, tpr=tpr, positive="ood"),
        "aupr_in": aupr_in(id_scores, ood_scores),
        "aupr_out": aupr_out(id_scores, ood_scores),
        "ap_in": average_precision_in(id_scores, ood_scores),
        "ap_out": average_precision_out(id_scores, ood_scores),
    }


def assert_matches(got: dict, want: dict) -> None:
    for key, value in want.items():
        if key.startswith("fpr"):  # the same float divisions as sklearn: equal bit for bit
            assert got[key] == value, (key, got[key], value)
        else:
            assert abs(got[key] - value) <= TOL, (key, got[key], value)


@pytest.mark.parametrize("seed", range(10))
def test_matches_sklearn_on_random_cases(seed):
    """1000 cases: sizes 2..20k, ID share 0.1 %..99.9 %, ties, fp16, ±1e300, ±inf."""
    rng = np.random.default_rng(seed)
    for _ in range(100):
        id_scores, ood_scores = random_case(rng)
        tpr = float(rng.choice([0.95, 0.0, 0.5, 0.9, 0.99, 1.0, rng.uniform()]))
        assert_matches(
            ours(id_scores, ood_scores, tpr), sklearn_metrics(id_scores, ood_scores, tpr)
        )


@pytest.mark.parametrize("n_id, n_ood", [(1, 1), (1, 20_000), (20_000, 1), (20, 19_980)])
def test_matches_sklearn_at_size_and_imbalance_extremes(n_id, n_ood):
    rng = np.random.default_rng(n_id)
    for id_scores, ood_scores in [
        (rng.normal(1, 1, n_id), rng.normal(0, 1, n_ood)),
        (rng.integers(0, 3, n_id).astype(float), rng.integers(0, 3, n_ood).astype(float)),
    ]:
        assert_matches(ours(id_scores, ood_scores), sklearn_metrics(id_scores, ood_scores))


finite_or_inf = st.floats(allow_nan=False, allow_infinity=True, allow_subnormal=True)
score_lists = st.lists(
    st.one_of(finite_or_inf, st.integers(-3, 3).map(float)), min_size=1, max_size=60
)


@settings(max_examples=150, deadline=None, database=None)
@given(id_scores=score_lists, ood_scores=score_lists, tpr=st.floats(0, 1))
def test_matches_sklearn_hypothesis(id_scores, ood_scores, tpr):
    """Python lists of any floats (subnormals, ±0, ±inf, the largest doubles) and any tpr."""
    want = sklearn_metrics(np.array(id_scores), np.array(ood_scores), tpr)
    assert_matches(ours(id_scores, ood_scores, tpr), want)


@pytest.mark.parametrize("seed", range(4))
def test_exact_against_fractions(seed):
    """Small cases against the definitions evaluated exactly: AUROC and FPR must equal the
    correctly rounded exact value; the PR areas differ from it by rounding only."""
    rng = np.random.default_rng(100 + seed)
    for _ in range(40):
        id_scores = rng.integers(-3, 4, rng.integers(1, 9)) / 4
        ood_scores = rng.integers(-4, 3, rng.integers(1, 9)) / 4
        exact = brute_force(id_scores, ood_scores)
        got = ours(id_scores, ood_scores)
        for key in ("auroc", "fpr_id", "fpr_ood"):
            assert got[key] == float(exact[key]), key
        for key in ("aupr_in", "aupr_out", "ap_in", "ap_out"):
            assert abs(Fraction(got[key]) - exact[key]) <= Fraction(1, 10**15), key


@pytest.mark.parametrize("seed", range(3))
def test_matches_pytorch_ood(seed):
    """pytorch-ood 0.4.0 takes outlier scores (-confidence) with OOD (label < 0) positive."""
    rng = np.random.default_rng(200 + seed)
    for _ in range(40):
        id_scores, ood_scores = random_case(rng)
        scores = torch.from_numpy(-np.concatenate([id_scores, ood_scores]))
        labels = torch.cat([torch.zeros(id_scores.size), -torch.ones(ood_scores.size)]).long()
        assert fpr_at_tpr(id_scores, ood_scores, positive="ood") == float(
            pood.fpr_at_tpr(scores, labels, 0.95)
        )
        assert abs(auroc(id_scores, ood_scores) - float(pood.auroc(scores, labels))) <= TOL
        assert abs(aupr_in(id_scores, ood_scores) - float(pood.aupr(scores, labels, "id"))) <= TOL
        assert abs(aupr_out(id_scores, ood_scores) - float(pood.aupr(scores, labels, "ood"))) <= TOL


def test_closed_form_cases():
    assert auroc([1, 2, 3], [0]) == 1.0
    assert auroc([0], [1, 2, 3]) == 0.0
    assert auroc([5, 5], [5, 5, 5]) == 0.5
    assert auroc([2, 1], [1, 0]) == (1 + 1 + 0.5 + 1) / 4
    # accept ID scores >= 3 keeps 2/2 ID (tpr 1) and 1 of 4 OOD
    assert fpr_at_tpr([3, 4], [0, 1, 2, 3], tpr=1.0) == 0.25
    # flag scores <= 2 catches 3/4 OOD; to catch all 4 flag <= 3, which flags 1/2 ID
    assert fpr_at_tpr([3, 4], [0, 1, 2, 3], tpr=1.0, positive="ood") == 0.5
    assert fpr_at_tpr([3, 4], [0, 1, 2, 3], tpr=0.75, positive="ood") == 0.0
    # perfect separation: AP = AUPR = 1
    assert aupr_in([2, 3], [0, 1]) == aupr_out([2, 3], [0, 1]) == 1.0
    assert average_precision_in([2, 3], [0, 1]) == average_precision_out([2, 3], [0, 1]) == 1.0


def test_openood_drop_intermediate_difference_is_documented_behaviour():
    """With OOD positive, groups (from the lowest confidence) of 18 OOD; 1 OOD + 1 ID; 1 OOD +
    1 ID put the ROC points (0, .9), (.1, .95), (.2, 1) on one line. The exact answer at TPR
    0.95 is 0.1; sklearn's default drop_intermediate=True removes (.1, .95) and gives 0.2."""
    ood_scores = np.r_[np.zeros(18), 1.0, 2.0]
    id_scores = np.r_[1.0, 2.0, np.full(8, 3.0)]
    y = np.r_[np.zeros(10), np.ones(20)]
    s = -np.r_[id_scores, ood_scores]
    fpr_kept, tpr_kept, _ = skm.roc_curve(y, s)  # OpenOOD's call
    assert fpr_kept[np.argmax(tpr_kept >= 0.95)] == 0.2
    assert fpr_at_tpr(id_scores, ood_scores, positive="ood") == 0.1


def test_invariant_under_permutation():
    rng = np.random.default_rng(7)
    id_scores = rng.integers(0, 5, 300).astype(float)
    ood_scores = rng.integers(-1, 4, 500).astype(float)
    want = ours(id_scores, ood_scores)
    for _ in range(5):
        assert ours(rng.permutation(id_scores), rng.permutation(ood_scores)) == want


@pytest.mark.parametrize(
    "transform",
    [
        lambda x: 3 * x - 7,
        lambda x: x**3,
        np.exp,
        lambda x: 1 / (1 + np.exp(-x / 4)),
        lambda x: np.log(x + 100),
        np.arctan,
    ],
    ids=["affine", "cube", "exp", "sigmoid", "log", "arctan"],
)
def test_invariant_under_strictly_increasing_maps(transform):
    rng = np.random.default_rng(8)
    id_scores = rng.integers(-40, 41, 400) / 8
    ood_scores = rng.integers(-50, 31, 300) / 8
    mapped_id, mapped_ood = transform(id_scores), transform(ood_scores)
    pooled = np.r_[id_scores, ood_scores]
    # precondition: the map kept every distinct value distinct in float64
    assert np.unique(transform(np.unique(pooled))).size == np.unique(pooled).size
    got, want = ours(mapped_id, mapped_ood), ours(id_scores, ood_scores)
    assert got.keys() == want.keys()
    for key in want:
        assert abs(got[key] - want[key]) <= TOL, key


def test_negating_scores_swaps_the_classes():
    rng = np.random.default_rng(9)
    id_scores, ood_scores = rng.integers(0, 6, 200) * 1.0, rng.integers(-2, 4, 150) * 1.0
    neg_id, neg_ood = -ood_scores, -id_scores  # the OOD set as "ID", ranked by -score
    assert auroc(neg_id, neg_ood) == auroc(id_scores, ood_scores)
    assert fpr_at_tpr(neg_id, neg_ood, positive="id") == fpr_at_tpr(
        id_scores, ood_scores, positive="ood"
    )
    assert aupr_in(neg_id, neg_ood) == aupr_out(id_scores, ood_scores)
    assert average_precision_in(neg_id, neg_ood) == average_precision_out(id_scores, ood_scores)
    assert abs(auroc(-id_scores, -ood_scores) - (1 - auroc(id_scores, ood_scores))) <= TOL


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.int32])
def test_torch_inputs_equal_their_float64_values(dtype):
    rng = np.random.default_rng(10)
    id_t = torch.from_numpy(rng.normal(1, 2, 500)).to(dtype)
    ood_t = torch.from_numpy(rng.normal(0, 2, 700)).to(dtype)
    got = ours(id_t, ood_t)
    id_np, ood_np = id_t.double().numpy(), ood_t.double().numpy()
    assert got == ours(id_np, ood_np)
    assert_matches(got, sklearn_metrics(id_np, ood_np))


def test_numpy_float16_and_lists():
    id_scores = np.array([0.1, 0.2, 0.2, 0.7], dtype=np.float16)
    ood_scores = np.array([0.2, 0.05, 0.3], dtype=np.float16)
    want = sklearn_metrics(id_scores.astype(float), ood_scores.astype(float))
    assert_matches(ours(id_scores, ood_scores), want)
    assert_matches(ours(id_scores.tolist(), tuple(ood_scores.tolist())), want)


def test_nan_is_refused_with_count_and_indices():
    ood_scores = np.zeros(20)
    ood_scores[[3, 11]] = np.nan
    with pytest.raises(NonFiniteError, match=r"ood_scores contains 2 NaN.*\[3, 11\]"):
        auroc([1.0, 2.0], ood_scores)
    with pytest.raises(NonFiniteError, match="id_scores"):
        fpr_at_tpr(torch.tensor([float("nan"), 1.0]), [0.0])


@pytest.mark.parametrize("func", [auroc, fpr_at_tpr, aupr_in, aupr_out, average_precision_out])
def test_empty_side_is_refused(func):
    with pytest.raises(EmptyInputError, match="id_scores is empty"):
        func([], [1.0])
    with pytest.raises(EmptyInputError, match="ood_scores is empty"):
        func(np.ones(3), np.array([]))


def test_bad_arguments_are_refused():
    with pytest.raises(InvalidInputError, match="1-D"):
        auroc(np.ones((3, 2)), [1.0])
    with pytest.raises(InvalidInputError, match="real numbers"):
        auroc(["a", "b"], [1.0])
    with pytest.raises(InvalidInputError, match="positive must be 'id' or 'ood'"):
        fpr_at_tpr([1.0], [0.0], positive="in")  # type: ignore[arg-type]
    for bad in (95, -0.1, float("nan")):
        with pytest.raises(InvalidInputError, match="tpr must be a fraction"):
            fpr_at_tpr([1.0], [0.0], tpr=bad)
