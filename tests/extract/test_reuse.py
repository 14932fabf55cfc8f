"""One forward pass per (model, source): a cache entry that holds more than asked is reused.

Bit-identical comparisons here are between extractions in this process (or in a child
process set to the same thread count) over the same batches: the same operations in the same
order, so they hold on any CPU, whose kernels change both sides alike.
"""

from __future__ import annotations

import numpy as np
import pytest

from oodbench.extract import extract, list_cache
from oodbench.extract.key import cache_key, identity, reusable_identities
from tests.extract._toy import RandomImages, TinyNet

ALL = ("logits", "features", "feature_map")


def test_a_subset_of_a_complete_entry_needs_no_forward_pass():
    source = RandomImages(10)
    model = TinyNet()
    full = extract(model, source, capture=ALL, batch_size=4, progress=False)
    assert model.calls == 3
    for capture in (("logits",), ("logits", "features"), ("features", "feature_map")):
        again = extract(model, source, capture=capture, batch_size=4, progress=False)
        assert model.calls == 3, capture  # no forward pass
        assert again.meta["cache_hit"] and again.meta["cache_key"] == full.meta["cache_key"]
        assert again.meta["capture"] == ["logits", *[c for c in ALL[1:] if c in capture]]
        np.testing.assert_array_equal(again.logits, full.logits)
        for name in ALL[1:]:
            if name in capture:
                np.testing.assert_array_equal(getattr(again, name), getattr(full, name))
            else:
                assert getattr(again, name) is None
    assert len(list_cache()) == 1  # `cache ls` lists the data once


def test_a_superset_needs_a_new_pass_and_the_subset_entry_is_then_listed_as_contained():
    source = RandomImages(6)
    model = TinyNet()
    small = extract(model, source, capture=("logits",), batch_size=3, progress=False)
    big = extract(model, source, capture=ALL, batch_size=3, progress=False)
    assert model.calls == 4 and not big.meta["cache_hit"]
    np.testing.assert_array_equal(small.logits, big.logits)
    entries = {e["key"]: e for e in list_cache()}
    assert entries[small.meta["cache_key"]]["subset_of"] == big.meta["cache_key"]
    assert entries[big.meta["cache_key"]]["subset_of"] is None
    extract(model, source, capture=("logits",), batch_size=3, progress=False)
    assert model.calls == 4


def test_float16_feature_maps_serve_requests_without_feature_maps_only():
    source = RandomImages(4)
    model = TinyNet()
    half = extract(model, source, capture=ALL, feature_map_dtype="float16", progress=False)
    extract(model, source, capture=("logits", "features"), progress=False)
    assert model.calls == 1  # logits and features are float32 in every entry
    single = extract(model, source, capture=ALL, feature_map_dtype="float32", progress=False)
    assert model.calls == 2 and single.meta["cache_key"] != half.meta["cache_key"]


@pytest.mark.parametrize("fmap_dtype", ["float32", "float16"])
def test_reusable_identities_are_the_supersets_with_the_same_everything_else(fmap_dtype):
    model, source = TinyNet(), RandomImages(2)
    asked = identity(model, source, ("logits",), "float32", fmap_dtype)
    found = reusable_identities(asked)
    assert found[0] == asked  # the exact entry first
    captures = [tuple(i["capture"]) for i in found]
    assert captures == [("logits",), ("features", "logits"), ("feature_map", "logits"),
                        ("feature_map", "logits"), ("feature_map", "features", "logits"),
                        ("feature_map", "features", "logits")]
    assert {i["feature_map_dtype"] for i in found if "feature_map" in i["capture"]} == {
        "float32", "float16"}
    for other in found:
        assert {k: v for k, v in other.items() if k not in ("capture", "feature_map_dtype")} == {
            k: v for k, v in asked.items() if k not in ("capture", "feature_map_dtype")}
    with_map = identity(model, source, ("logits", "feature_map"), "float32", fmap_dtype)
    assert [i["feature_map_dtype"] for i in reusable_identities(with_map)] == [fmap_dtype] * 2
    assert len({cache_key(i) for i in found}) == len(found)

