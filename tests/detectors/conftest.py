"""Shared fixtures for detector tests: realistic random ``Activations``.

``make_activations(n, num_classes, dim, seed, with_head=True)`` builds activations the way a real
classifier would produce them: non-negative (post-ReLU-like) penultimate features with a class
structure, and logits that are exactly ``features @ W.T + b`` of a linear head.

Use it directly (``from tests.detectors.conftest import make_activations``) or through the
``make_acts`` fixture (the same function) and the ready-made ``id_train`` / ``id_test`` / ``ood_test``
fixtures (one head shared by all three; OOD rows come from shifted features with labels -1).
"""

from __future__ import annotations

import numpy as np
import pytest

from oodbench.extract.activations import Activations


def make_head(num_classes: int, dim: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A random linear head ``(W (C, D), b (C,))`` in float32, rows roughly unit-scale."""
    rng = np.random.default_rng(seed)
    weight = rng.normal(0.0, 1.0 / np.sqrt(dim), size=(num_classes, dim)).astype(np.float32)
    bias = rng.normal(0.0, 0.1, size=num_classes).astype(np.float32)
    return weight, bias


def make_activations(
    n: int,
    num_classes: int,
    dim: int,
    seed: int = 0,
    *,
    with_head: bool = True,
    ood: bool = False,
    head_seed: int = 1234,
    feature_map: tuple[int, int] | None = None,
) -> Activations:
    """Random but realistic activations of one model.

    Features are ``relu(mu_y + noise)`` where ``mu_y`` is a per-class prototype (the prototypes
    depend only on ``head_seed``, so ID train and test sets share them); the head is aligned with
    the prototypes so the classifier is mostly right. With ``ood=True`` the features come from a
    shifted, unstructured distribution and labels are -1. ``feature_map=(H, W)`` also builds an
    (N, D, H, W) non-negative map whose spatial mean is the features.
    """
    rng = np.random.default_rng(seed)
    proto_rng = np.random.default_rng(head_seed)
    prototypes = np.abs(proto_rng.normal(0.0, 1.0, size=(num_classes, dim)))
    prototypes *= proto_rng.uniform(0.0, 1.0, size=(num_classes, dim)) < 0.3  # sparse patterns
    if ood:
        labels = np.full(n, -1, dtype=np.int64)
        pre = rng.normal(0.3, 0.8, size=(n, dim))
    else:
        labels = rng.integers(0, num_classes, size=n).astype(np.int64)
        pre = prototypes[labels] * 1.5 + rng.normal(0.0, 0.6, size=(n, dim))
    features = np.maximum(pre, 0.0).astype(np.float32)

    weight, bias = make_head(num_classes, dim, head_seed)
    # align the head with the (centred) prototypes so predictions carry information
    centred = prototypes - prototypes.mean(axis=0, keepdims=True)
    weight = (0.5 * weight + 3.0 * centred / np.sqrt(dim)).astype(np.float32)
    # float32 features times float32 weights are exact in float64; NumPy's pairwise sum adds
    # them in one fixed order (BLAS's order differs between CPUs' kernels), so the float32
    # logits, and the digest of golden_scores.npz's inputs, are the same bits on every CPU
    products = features.astype(np.float64)[:, None, :] * weight.astype(np.float64)[None, :, :]
    logits = (products.sum(axis=2) + bias).astype(np.float32)

    fmap = None
    if feature_map is not None:
        h, w = feature_map
        noise = rng.uniform(0.0, 2.0, size=(n, dim, h, w))
        noise /= noise.mean(axis=(2, 3), keepdims=True)
        fmap = (features[:, :, None, None] * noise).astype(np.float32)

    return Activations(
        logits=logits,
        labels=labels,
        ids=np.array([f"{'ood' if ood else 'id'}{seed}:{i}" for i in range(n)]),
        features=features,
        feature_map=fmap,
        head_weight=weight if with_head else None,
        head_bias=bias if with_head else None,
        meta={"model": "synthetic", "seed": seed},
    )


@pytest.fixture
def make_acts():
    """The ``make_activations`` factory as a fixture."""
    return make_activations


@pytest.fixture
def id_train() -> Activations:
    """400 ID training samples, 10 classes, 32-d features (with head)."""
    return make_activations(400, 10, 32, seed=0)


@pytest.fixture
def id_test() -> Activations:
    """150 ID test samples from the same model/classes as ``id_train``."""
    return make_activations(150, 10, 32, seed=1)


@pytest.fixture
def ood_test() -> Activations:
    """150 OOD samples (labels -1) through the same head."""
    return make_activations(150, 10, 32, seed=2, ood=True)
