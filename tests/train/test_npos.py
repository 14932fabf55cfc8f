"""NPOS's training path: the split ViT reproduces encode_image, only the later blocks, ln_post,
proj and phi train, the frozen blocks are computed once, phi learns once outliers exist."""

import numpy as np
import pytest
import torch

from oodbench.train import checkpoint as ckpt
from oodbench.train.methods.npos import VisionSplit, uncertainty_mlp
from tests.train._clip_run import model, run, toy_source


def test_split_reproduces_encode_image():
    clip = model("npos").clip
    x = torch.randn(3, 3, 32, 32)
    split = VisionSplit(clip.visual, 1, "tiny")
    with torch.no_grad():
        # the same float32 blocks in two calls: equal up to ~1e-7 of embeddings of size ~1
        np.testing.assert_allclose(split.late(split.early(x)), clip.encode_image(x),
                                   rtol=1e-5, atol=1e-6)


def test_only_the_later_blocks_train_and_the_frozen_ones_are_cached_once(tmp_path):
    initial = model("npos")
    before = initial.clip.state_dict()
    result = run("npos", str(tmp_path / "run"), epochs=2)
    after = result.model.clip.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    trained = {k for k in before if k.startswith(("visual.transformer.resblocks.1.",
                                                  "visual.ln_post.")) or k == "visual.proj"}
    assert changed == trained
    # the cache holds blocks[:1] of the initial model for every training image
    source, split = toy_source(), VisionSplit(initial.clip.visual, 1, "tiny")
    with torch.no_grad():
        x = torch.stack([initial.transform(source.load(i)) for i in range(len(source))])
        expected = split.early(x).numpy()
    cache = tmp_path / "run" / "frozen_blocks" / "tokens.npy"
    np.testing.assert_allclose(np.load(cache), expected, rtol=1e-5, atol=1e-6)  # as above
    stamp = cache.stat().st_mtime_ns
    run("npos", str(tmp_path / "run"), epochs=2)  # finished: loads, computes nothing again
    assert cache.stat().st_mtime_ns == stamp


def test_phi_learns_only_once_outliers_exist(tmp_path, monkeypatch):
    """start_epoch = 1 of 2: the run stops at the first synthesis; it came in the second epoch
    (one epoch finished), and phi was untouched until then with the queues full. Resumed, the
    second epoch trains phi."""
    import json

    import oodbench.train.methods.npos as npos_train

    dim = model("npos").head_weight.shape[1]
    phi0 = uncertainty_mlp(dim, 32, 0).state_dict()
    synthesize = npos_train.synthesize

    def stop(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(npos_train, "synthesize", stop)
    with pytest.raises(KeyboardInterrupt):
        run("npos", str(tmp_path / "run"), epochs=2, weight_decay=0.0)  # start_epoch = 1
    assert json.loads((tmp_path / "run" / "train.json").read_text())["epochs_done"] == 1
    state = ckpt.read_method_state(tmp_path / "run")
    assert all(torch.equal(state[f"phi.{k}"], v) for k, v in phi0.items())
    assert bool((state["queue.counts"] == 4).all())
    monkeypatch.setattr(npos_train, "synthesize", synthesize)
    resumed = run("npos", str(tmp_path / "run"), epochs=2, weight_decay=0.0)
    state = ckpt.read_method_state(resumed.out)
    assert not all(torch.equal(state[f"phi.{k}"], v) for k, v in phi0.items())
