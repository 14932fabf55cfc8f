"""Identities every Classifier must satisfy, checked on real tensors."""

from __future__ import annotations

from collections.abc import Callable

import torch

from oodbench.models import CAPTURABLE, Classifier
from tests._tolerance import U32, gamma


def assert_linear_head(logits: torch.Tensor, features: torch.Tensor, weight: torch.Tensor,
                       bias: torch.Tensor) -> None:
    """``logits == features @ weight.T + bias`` (computed in float32 by any kernel) to the
    rounding bound of a float32 ``D + 1``-term dot product: ``gamma(D + 1)`` times
    ``|features| @ |weight|.T + |bias|`` (Higham §3.1; it holds for any summation order, so
    for any CPU's kernel), against the float64 product."""
    f, w, b = features.detach().double(), weight.detach().double(), bias.detach().double()
    scale = f.abs() @ w.abs().T + b.abs()
    gap = (logits.detach().double() - (f @ w.T + b)).abs()
    assert (gap <= gamma(w.shape[1] + 1, U32) * scale).all(), float((gap / scale).max())


def assert_classifier_consistent(
    clf: Classifier,
    x: torch.Tensor,
    reference: Callable[[torch.Tensor], torch.Tensor] | None,
    x_small: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """Check the split of ``clf`` on the batch ``x`` (single methods on ``x_small`` if given,
    to save forward passes).

    * ``logits == features @ head_weight.T + head_bias`` in float64, to the rounding bound of a
      float32 ``D + 1``-term dot product, ``gamma(D + 1)`` times the scale
      ``|features| @ |head_weight|.T + |head_bias|`` (Higham §3.1; it holds for any summation
      order, so for any CPU's kernel; random-init logits reach ~100, where float32 itself is
      only good to ~1e-5 absolute);
    * ``forward_all`` equals ``logits`` / ``features`` / ``feature_map`` called one by one, and
      ``pool(feature_map) == features``, ``head(features) == logits``: the same float32 layers
      on the same batch (up to a pooling or head kernel's own summation order, ~1e-7 of
      values ~1, inside 1e-5);
    * ``logits`` equal the wrapped network's own forward ``reference(x)``, so the split
      reproduces the original model (another graph of the same float32 layers: 1e-4).
    """
    assert not clf.training
    with torch.inference_mode():
        out = clf.forward_all(x, CAPTURABLE)
        logits, feats, fmap = out["logits"], out["features"], out["feature_map"]
        b = x.shape[0]
        assert logits.shape == (b, clf.num_classes)
        assert feats.ndim == 2 and feats.shape[0] == b
        assert clf.head_weight.shape == (clf.num_classes, feats.shape[1])
        assert clf.head_bias.shape == (clf.num_classes,)
        assert_linear_head(logits, feats, clf.head_weight, clf.head_bias)
        torch.testing.assert_close(clf.pool(fmap), feats, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(clf.head(feats), logits, rtol=1e-5, atol=1e-5)
        if reference is not None:
            torch.testing.assert_close(reference(x), logits, rtol=1e-4, atol=1e-4)
        assert torch.isfinite(logits).all() and logits.std() > 0
        xs = x if x_small is None else x_small
        small = out if x_small is None else clf.forward_all(xs, CAPTURABLE)
        torch.testing.assert_close(clf.logits(xs), small["logits"], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(clf.features(xs), small["features"], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(clf.feature_map(xs), small["feature_map"], rtol=1e-5, atol=1e-5)
        assert set(clf.forward_all(xs, ("features",))) == {"features"}
    return out


def batch(size: int = 224, n: int = 2, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, 3, size, size, generator=torch.Generator().manual_seed(seed))
