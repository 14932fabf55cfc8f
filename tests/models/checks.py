"""Identities every Classifier must satisfy, checked on real tensors."""

from __future__ import annotations

from collections.abc import Callable

import torch

from oodbench.models import CAPTURABLE, Classifier


def assert_classifier_consistent(
    clf: Classifier,
    x: torch.Tensor,
    reference: Callable[[torch.Tensor], torch.Tensor] | None,
    x_small: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """Check the split of ``clf`` on the batch ``x`` (single methods on ``x_small`` if given,
    to save forward passes).

    * ``logits == features @ head_weight.T + head_bias`` in float64, to 1e-5 of the float32
      rounding scale ``|features| @ |head_weight|.T + |head_bias|`` (random-init logits reach
      ~100, where float32 itself is only good to ~1e-5 absolute);
    * ``forward_all`` equals ``logits`` / ``features`` / ``feature_map`` called one by one;
    * ``pool(feature_map) == features`` and ``head(features) == logits``;
    * ``logits`` equal the wrapped network's own forward ``reference(x)``, so the split
      reproduces the original model.
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
        w, bias = clf.head_weight.double(), clf.head_bias.double()
        linear = feats.double() @ w.T + bias
        # float32 rounding of a D-term dot product scales with sum_d |f_d w_cd| + |b_c|
        scale = feats.double().abs() @ w.abs().T + bias.abs()
        assert ((logits.double() - linear).abs() <= 1e-5 * scale).all()
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
