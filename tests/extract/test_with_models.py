"""extract() through a real model adapter of oodbench.models (a tiny timm network, random weights)."""

from __future__ import annotations

import numpy as np
import torch

from oodbench.data import DigitsSource
from oodbench.extract import extract, iterate_batches
from oodbench.models import load


def _model():
    torch.manual_seed(0)
    return load("timm:test_resnet", pretrained=False)


def test_timm_adapter_arrays_are_consistent_and_cached():
    model, source = _model(), DigitsSource().subset(np.arange(0, 80, 10))
    acts = extract(model, source, capture=("logits", "features", "feature_map"), batch_size=4,
                   progress=False)
    assert acts.logits.shape == (8, 1000) and acts.feature_map.ndim == 4
    # timm's resnet: features = global average of the feature map; logits = linear head
    np.testing.assert_allclose(acts.feature_map.mean(axis=(2, 3)), acts.features, atol=1e-5)
    np.testing.assert_allclose(acts.features @ acts.head_weight.T + acts.head_bias, acts.logits,
                               atol=1e-4)
    np.testing.assert_array_equal(acts.labels, source.labels)
    # the live path (ODIN, MC-dropout) sees the same images: same logits from iterate_batches
    model.eval()
    with torch.inference_mode():
        live = np.concatenate([model.logits(x).numpy() for x, _ in
                               iterate_batches(model, source, batch_size=4)])
    np.testing.assert_allclose(live, acts.logits, rtol=1e-5, atol=1e-5)
    again = extract(_model(), source, capture=("logits", "features", "feature_map"),
                    progress=False)
    assert again.meta["cache_hit"] and again.meta["weights_digest"] == model.weights_digest()
