"""What benchmarks ask the extraction for."""

from __future__ import annotations

from oodbench import detectors
from oodbench.benchmarks.base import capture_for


def test_benchmarks_capture_features_even_for_logit_detectors():
    """Features cost nothing next to the forward pass: capturing them always makes one cache
    entry serve every later detector of the same (model, source)."""
    assert capture_for([detectors.create("msp")]) == ("features", "logits")
    assert capture_for([detectors.create("knn")]) == ("features", "logits")
    assert capture_for([detectors.create("rankfeat")]) == ("feature_map", "features", "logits")
