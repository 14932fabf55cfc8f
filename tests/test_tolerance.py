"""The rounding bounds of tests/_tolerance.py and tests/detectors/_reference.py hold for float32
computations in other summation orders (as another CPU's kernels would sum), and stay far below
the effect of a real change; assert_within and auroc_slack do what they say."""

from __future__ import annotations

import numpy as np
import pytest

from tests._tolerance import U32, assert_within, auroc_slack, dot_error, gamma, scatter_error
from tests.detectors._reference import energy_error, entropy_error, msp_error


def _orders(terms: np.ndarray) -> list[np.ndarray]:
    """Row sums of float32 ``terms`` (N, n) in three orders: left to right, right to left, and
    pairwise (NumPy's), each accumulated in float32."""
    forward = np.zeros(len(terms), np.float32)
    backward = np.zeros(len(terms), np.float32)
    for j in range(terms.shape[1]):
        forward += terms[:, j]
        backward += terms[:, -1 - j]
    return [forward, backward, terms.sum(axis=1, dtype=np.float32)]


def test_dot_error_bounds_float32_products_in_any_order():
    rng = np.random.default_rng(0)
    x = np.maximum(rng.normal(size=(200, 64)), 0).astype(np.float32)
    w = rng.normal(size=(10, 64)).astype(np.float32)
    exact = x.astype(np.float64) @ w.T.astype(np.float64)
    bound = dot_error(x, w, U32)
    for c in range(w.shape[0]):
        for got in _orders(x * w[c]):
            assert_within(got, exact[:, c], bound[:, c])
    assert bound.max() < 1e-4 * np.abs(exact).max()  # a changed weight moves far more


def test_scatter_error_bounds_both_orders():
    rng = np.random.default_rng(1)
    c = rng.normal(size=(500, 6))
    products = c[:, :, None] * c[:, None, :]
    pairwise = products.sum(axis=0)
    sequential = np.zeros((6, 6))
    for row in products[::-1]:
        sequential += row
    assert_within(pairwise, sequential, scatter_error(c))


@pytest.mark.parametrize("scale", [1.0, 5.0, 20.0])
def test_softmax_bounds_hold_for_float32_exps_and_sums_in_any_order(scale):
    rng = np.random.default_rng(2)
    z = (rng.normal(size=(300, 12)) * scale).astype(np.float32)
    d = z - z.max(axis=1, keepdims=True)  # float32, as the detectors compute it
    e = np.exp(d)  # NumPy's float32 exp: within 2.52 ulps
    top = np.argmax(z, axis=1)
    e_others = e.copy()
    e_others[np.arange(len(z)), top] = 0.0
    exact = z.astype(np.float64)
    exact_msp = 1.0 / np.exp(exact - exact.max(axis=1, keepdims=True)).sum(axis=1)
    exact_energy = exact.max(axis=1) + np.log(np.exp(exact - exact.max(axis=1, keepdims=True)).sum(axis=1))
    for s in _orders(e_others):
        assert_within(1.0 / (1.0 + s.astype(np.float64)), exact_msp, msp_error(z))
    for total in _orders(e):
        assert_within(z.max(axis=1).astype(np.float64) + np.log(total.astype(np.float64)),
                      exact_energy, energy_error(z))
    # -H in float64 with the top class's term p log p = -log1p(s) / (1 + s) kept exact (a
    # rounded 1 / (1 + s) would drop it for s < 1e-16)
    q = exact - exact.max(axis=1, keepdims=True)
    others = np.arange(z.shape[1]) != top[:, None]
    s64 = np.where(others, np.exp(q), 0.0).sum(axis=1)
    exact_neg_entropy = (np.where(others, np.exp(q) * q, 0.0).sum(axis=1) / (1.0 + s64)
                         - np.log1p(s64))
    for a, s in zip(_orders(e * d), _orders(e_others)):  # entropy.py's -H = A / (1 + s) - log1p(s)
        s64 = s.astype(np.float64)
        assert_within(a.astype(np.float64) / (1.0 + s64) - np.log1p(s64), exact_neg_entropy,
                      entropy_error(z))
    if scale == 1.0:  # ordinary logits: far below a change of T by 1%
        shifted = 1.0 / np.exp((exact - exact.max(axis=1, keepdims=True)) / 1.01).sum(axis=1)
        assert msp_error(z).max() < 1e-3 * np.abs(shifted - exact_msp).max()


def test_assert_within_names_the_worst_entry():
    assert_within([1.0, 2.0], [1.0 + 1e-9, 2.0], 1e-8)
    with pytest.raises(AssertionError, match=r"1 of 3 entries .* worst at \(2,\)"):
        assert_within([1.0, 2.0, 3.0], [1.0, 2.0, 3.1], [1e-8, 1e-8, 1e-3])
    with pytest.raises(AssertionError, match="1 of 1"):
        assert_within([np.nan], [0.0], 1.0)  # NaN never passes


def test_auroc_slack_counts_the_pairs_that_may_swap():
    ids, oods = np.array([1.0, 2.0, 3.0]), np.array([0.0, 2.0 + 1e-9, 5.0])
    assert auroc_slack(ids, oods, 0.0, 0.0) == pytest.approx(1e-12)  # no pair overlaps
    assert auroc_slack(ids, oods, 1e-8, 1e-8) == pytest.approx(1 / 9 + 1e-12)  # (2, 2 + 1e-9)
    assert auroc_slack(ids, oods, 2.0, 0.0) == pytest.approx(6 / 9 + 1e-12)
    assert gamma(10, U32) == pytest.approx(10 * U32, rel=1e-6)


def test_same_training_sees_a_doubled_update_and_a_moved_frozen_tensor():
    """The distributed-training tolerance passes rounding-sized drift and fails what a wrong
    all-reduce does: the gradients summed over 2 ranks instead of averaged double the update."""
    import torch

    from tests._tolerance import TRAINING_DRIFT, assert_same_training

    gen = torch.Generator().manual_seed(0)
    start = {"w": torch.randn(8, 8, generator=gen), "frozen": torch.randn(3, generator=gen),
             "steps": torch.tensor(5)}
    update = 1e-2 * torch.randn(8, 8, generator=gen)
    one = {**start, "w": start["w"] + update}
    drifted = {**one, "w": one["w"] + 0.5 * TRAINING_DRIFT * update}
    assert_same_training(drifted, one, start)
    with pytest.raises(AssertionError, match="w: the two trainings differ"):
        assert_same_training({**one, "w": start["w"] + 2 * update}, one, start)
    with pytest.raises(AssertionError, match="frozen"):
        assert_same_training({**one, "frozen": start["frozen"] + 1e-7}, one, start)
    with pytest.raises(AssertionError, match="steps"):
        assert_same_training({**one, "steps": torch.tensor(6)}, one, start)
