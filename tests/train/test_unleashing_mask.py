"""UM and UMAP through oodbench.train: the L_hat estimate against a direct re-statement of
estimate_loss.py, UMAP leaving every weight unchanged (the result is W * m), resume after a
crash, configs, and errors before training."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from oodbench import models
from oodbench.data.digits import DigitsSource
from oodbench.errors import InvalidInputError
from oodbench.models.small_cnn import SmallCNN
from oodbench.train import masks, train
from oodbench.train.hooks import Run
from oodbench.train.methods.um import estimate_constraint
from tests.train._digits_run import run
from tests.train._method_run import method_run


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_estimate_is_the_masked_copys_mean_training_ce():
    model, source = SmallCNN(6, seed=0), DigitsSource(range(6))
    rows = np.arange(len(source))
    estimate = estimate_constraint(
        Run(model, [model], source, rows, 100, 3, torch.device("cpu"), 0, 1, 0), 0.965)
    copy_ = copy.deepcopy(model)  # the official estimate: random SubnetConv masks, k = 0.965, eval
    for index, (_, layer) in enumerate(masks.maskable_layers(copy_)):
        g = torch.Generator().manual_seed(3 * 100_003 + index)
        bound = 1.0 / np.sqrt(np.prod(layer.weight.shape[1:]))
        scores = torch.empty(layer.weight.shape).uniform_(-bound, bound, generator=g)
        with torch.no_grad():
            layer.weight.mul_(masks.top_k_mask(scores, 0.965))
    copy_.eval()
    x = torch.stack([model.transform(source.load(i)) for i in rows])
    y = torch.as_tensor(np.asarray(source.labels)[rows])
    with torch.no_grad():
        expected = float(F.cross_entropy(copy_(x), y))
    assert estimate == pytest.approx(expected, rel=1e-6)  # float32 passes, other batches: ~1e-7
    assert not torch.equal(copy_.fc.weight, model.fc.weight)  # the model itself is not masked


def test_um_fine_tunes_with_the_estimated_constraint(tmp_path):
    res = run(str(tmp_path / "um"), epochs=1, loss="um")
    record = json.loads((res.out / "train.json").read_text())
    assert isinstance(record["config"]["loss_options"]["constraint"], float)
    # the estimate's masks keep the official 0.965 (tests/losses/test_um.py pins the default)
    assert record["config"]["loss_constraint"] == "estimated (random masks keeping 0.965)"
    given = run(str(tmp_path / "given"), epochs=1, loss="um", loss_options={"constraint": 0.7})
    assert given.config["loss_options"]["constraint"] == 0.7
    assert given.config["loss_constraint"] == "given"


def test_estimate_ignores_the_training_augmentation(tmp_path):
    """The constraint is part of the config: a random training transform must not move it."""

    def flip(image):
        tensor = SmallCNN(6).transform(image)
        return tensor.flip(-1) if torch.rand(()) < 0.5 else tensor

    first = run(str(tmp_path / "a"), epochs=1, loss="um", transform=flip)
    torch.manual_seed(123)
    second = run(str(tmp_path / "b"), epochs=1, loss="um", transform=flip)
    assert first.config["loss_options"]["constraint"] == second.config["loss_options"]["constraint"]


def test_umap_leaves_every_weight_unchanged(tmp_path):
    before = SmallCNN(6, seed=0).state_dict()
    res = method_run(str(tmp_path / "umap"), "umap", epochs=2)
    after = res.model.state_dict()
    assert after.keys() == before.keys()  # a plain SmallCNN again: the masks are baked in
    scores = res.out / "method.safetensors"
    from safetensors.torch import load_file

    state = load_file(str(scores))
    layers = [name for name, _ in masks.maskable_layers(SmallCNN(6, seed=0))]
    assert len(state) == len(layers)
    for i, name in enumerate(layers):
        m = masks.top_k_mask(state[f"scores.{i}"], 0.8)
        assert torch.equal(after[f"{name}.weight"], before[f"{name}.weight"] * m), name
        assert 0.79 < float(m.mean()) <= 0.81
        assert torch.equal(after[f"{name}.bias"], before[f"{name}.bias"]), name
    initial = [masks.WeightMask(before[f"{n}.weight"].shape, 0.8,
                                torch.Generator().manual_seed(0 * 100_003 + i)).scores
               for i, n in enumerate(layers)]
    assert any(not torch.equal(state[f"scores.{i}"], s) for i, s in enumerate(initial))  # scores trained
    loaded = SmallCNN(6, seed=0)
    loaded.load_state_dict(models.checkpoint.read_state_dict(res.weights))
    assert _same(loaded.state_dict(), after)


def test_umap_resumes_after_a_crash_to_the_same_weights(tmp_path, monkeypatch):
    from oodbench.train.methods import umap as unleashing_mask

    straight = method_run(str(tmp_path / "straight"), "umap", epochs=3)
    calls = {"n": 0}
    original = unleashing_mask.UMAPHooks.state

    def crash_in_epoch_two(self):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt  # interrupted after epoch 1's checkpoint
        return original(self)

    monkeypatch.setattr(unleashing_mask.UMAPHooks, "state", crash_in_epoch_two)
    with pytest.raises(KeyboardInterrupt):
        method_run(str(tmp_path / "crashed"), "umap", epochs=3)
    monkeypatch.setattr(unleashing_mask.UMAPHooks, "state", original)
    assert json.loads((tmp_path / "crashed" / "train.json").read_text())["epochs_done"] == 1
    resumed = method_run(str(tmp_path / "crashed"), "umap", epochs=3)
    assert _same(resumed.model.state_dict(), straight.model.state_dict())
    assert [h["loss"] for h in resumed.history] == [h["loss"] for h in straight.history]


def test_errors_before_training(tmp_path):
    class WeightNormed(SmallCNN):
        """Every conv and linear layer weight-normalised: nothing left for a mask."""

        def __init__(self):
            super().__init__(6, seed=0)
            for i in (0, 2, 5):
                torch.nn.utils.parametrizations.weight_norm(self.body[i])
            torch.nn.utils.parametrizations.weight_norm(self.fc)

    # a Classifier's linear head is always maskable, so a model with nothing to mask has only
    # parametrised layers, whose head the trainer cannot find either: one line, before training
    with pytest.raises(InvalidInputError, match="no nn.Linear module holds the head's weight|"
                       "no convolution or linear layer to mask") as err:
        train(WeightNormed(), DigitsSource(range(6)), out=tmp_path / "w", loss="umap",
              loss_options={"constraint": 1.0}, progress=False, device="cpu")
    assert "\n" not in str(err.value)
    with pytest.raises(InvalidInputError, match=r"keep must be in \(0, 1\] \(the mask fraction"):
        train(SmallCNN(6), DigitsSource(range(6)), out=tmp_path / "k", loss="umap",
              loss_options={"keep": 0.0}, progress=False)
    assert not (tmp_path / "k").exists() and not (tmp_path / "w" / "train.json").exists()
