"""NPOS's loss against its formula: LogitNorm (t = 8) + 0.1 * BCE(phi(ID) = 1, phi(outliers) = 0)."""

import numpy as np
import pytest

from oodbench.errors import InvalidInputError
from oodbench.losses import create
from tests.losses.conftest import log_softmax, run


def _bce(scores: np.ndarray, targets: np.ndarray) -> float:
    p = 1 / (1 + np.exp(-scores))
    return float(-np.mean(targets * np.log(p) + (1 - targets) * np.log(1 - p)))


def _logitnorm(z: np.ndarray, y: np.ndarray, t: float) -> float:
    scaled = z / (t * (np.linalg.norm(z, axis=1, keepdims=True) + 1e-7))
    return float(-log_softmax(scaled)[np.arange(len(y)), y].mean())


def test_equals_the_formula():
    rng = np.random.default_rng(0)
    logits, labels = rng.normal(size=(16, 6)), rng.integers(0, 5, 16)  # 5 classes + phi
    outliers = rng.normal(size=(10, 6))
    expected = _logitnorm(logits[:, :5], labels, 8.0) + 0.1 * _bce(
        np.concatenate([logits[:, 5], outliers[:, 5]]), np.r_[np.ones(16), np.zeros(10)])
    value, grad = run(create("npos"), logits, labels, outliers)
    np.testing.assert_allclose(value, expected, rtol=1e-12)
    assert np.abs(grad[:, 5]).sum() > 0  # phi's column gets a gradient
    # before outliers exist only LogitNorm remains
    value, grad = run(create("npos"), logits, labels, None)
    np.testing.assert_allclose(value, _logitnorm(logits[:, :5], labels, 8.0), rtol=1e-12)
    assert not grad[:, 5].any()


def test_positive_row_factors_cancel():
    """The official code divides the image embeddings by the whole batch's norm, oodbench by
    each row's (cosine logits): LogitNorm normalises each row, so both give one loss."""
    rng = np.random.default_rng(1)
    image, text = rng.normal(size=(8, 12)) * 4, rng.normal(size=(12, 5))
    text /= np.linalg.norm(text, axis=0, keepdims=True)
    labels = rng.integers(0, 5, 8)
    phi = np.zeros((8, 1))
    batch_norm = np.hstack([image / np.linalg.norm(image) @ text, phi])
    per_row = np.hstack([image / np.linalg.norm(image, axis=1, keepdims=True) @ text * 100, phi])
    a, _ = run(create("npos"), batch_norm, labels)
    b, _ = run(create("npos"), per_row, labels)
    # only LogitNorm's 1e-7 in the norm tells the two scalings apart (~1e-8 relative here)
    np.testing.assert_allclose(a, b, rtol=1e-6)


def test_head_layout_and_defaults():
    loss = create("npos")
    assert loss.head_outputs(1000) == 1001 and loss.classes_for_width(1001) == 1000
    assert (loss.tau, loss.weight, loss.queue_size, loss.boundary, loss.k, loss.samples,
            loss.sigma, loss.keep, loss.start_epoch, loss.frozen_blocks) == (
        8.0, 0.1, 1000, 300, 400, 1500, 0.1, 2, 40, 10)


@pytest.mark.parametrize("options, match", [
    ({"k": 1001}, r"needs k <= queue_size .*; got k=1001, queue_size=1000"),
    ({"queue_size": 10, "k": 5, "boundary": 11},
     "needs boundary <= queue_size; got boundary=11, queue_size=10"),
    ({"samples": 1, "keep": 2}, "needs keep <= samples; got keep=2, samples=1"),
    ({"sigma": 0}, "sigma must be > 0"),
    ({"k": 0}, "k must be an integer >= 1"),
])
def test_bad_options_are_one_line_errors(options, match):
    with pytest.raises(InvalidInputError, match=match) as err:
        create("npos", **options)
    assert "\n" not in str(err.value)
