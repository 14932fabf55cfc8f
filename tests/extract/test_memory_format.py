"""The forward pass's memory format: channels-last on CPU for convolutional networks (and on CUDA
with autocast), recorded in the cache key so a channels-last pass never mixes with contiguous
shards; the arrays of either equal a one-image-at-a-time contiguous forward within its rounding
bound (``tests/extract/test_engine.py::test_arrays_equal_a_direct_forward_pass``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from torch import nn

from oodbench.extract import cache_key, extract
from oodbench.extract.key import identity, identity_of
from oodbench.extract.runtime import uses_channels_last
from tests._tolerance import assert_within
from tests.extract._toy import RandomImages, TinyNet, forward_bounds, reference_forward


def test_channels_last_on_cpu_only_for_convolutional_networks():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert uses_channels_last(TinyNet(), cpu, None)
    assert not uses_channels_last(nn.Sequential(nn.Flatten(), nn.Linear(12, 3)), cpu, None)
    assert uses_channels_last(TinyNet(), cuda, torch.bfloat16)
    assert not uses_channels_last(TinyNet(), cuda, None)  # float32 on CUDA: as before


def test_the_key_names_channels_last_and_keeps_contiguous_keys_unchanged():
    model, source = TinyNet(), RandomImages(4)
    plain = identity(model, source, ("logits",), "float32", "float16")
    last = identity(model, source, ("logits",), "float32", "float16", channels_last=True)
    assert "memory_format" not in plain  # the key of a contiguous pass is that of earlier versions
    assert last == {**plain, "memory_format": "channels_last"}
    assert cache_key(last) != cache_key(plain)
    assert identity_of({**plain, "memory_format": None}) == plain
    assert identity_of(last) == last


def test_a_cpu_extraction_of_a_conv_net_is_channels_last_and_within_the_rounding_bound(
    tmp_path: Path, monkeypatch
):
    monkeypatch.setenv("OODBENCH_CACHE", str(tmp_path))
    model, source = TinyNet(), RandomImages(6)
    acts = extract(model, source, capture=("logits", "features"), batch_size=3, progress=False)
    manifest = json.loads((Path(acts.meta["cache_path"]) / "manifest.json").read_text())
    assert manifest["memory_format"] == "channels_last"
    ident = identity(TinyNet(), source, ("logits", "features"), "float32", "float16",
                     channels_last=True)
    assert acts.meta["cache_key"] == cache_key(ident)
    ref = reference_forward(TinyNet(), source, range(6))  # contiguous, one image at a time
    bounds = forward_bounds(TinyNet(), source, range(6))
    for name in ("logits", "features"):
        assert getattr(acts, name).flags["C_CONTIGUOUS"]
        assert_within(getattr(acts, name), ref[name], bounds[name], name)
    np.testing.assert_array_equal(acts.predictions, ref["logits"].argmax(1))
