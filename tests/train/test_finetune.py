"""oodbench.train.train: fine-tuning, checkpoints, resume after a kill, DDP, loading back."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from oodbench import models
from oodbench.data.arrays import ArraySource
from oodbench.data.digits import DigitsSource
from oodbench.errors import ClassCountMismatchError, InvalidInputError, UnknownNameError
from oodbench.models.small_cnn import SmallCNN
from oodbench.train import OptimSettings, train
from tests._tolerance import assert_same_training
from tests.train._digits_run import DDP_SETTINGS, run
from tests.train._subprocess import kill_after_first_checkpoint


def _same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_checkpoint_files_and_history(tmp_path):
    res = run(str(tmp_path / "run"), epochs=2)
    assert sorted(p.name for p in res.out.iterdir()) == [
        "model.safetensors", "optimizer.safetensors", "train.json"]
    record = json.loads((res.out / "train.json").read_text())
    assert record["epochs_done"] == 2 and record["config"]["loss"] == "ce"
    assert [h["epoch"] for h in res.history] == [1, 2]
    assert res.history[1]["loss"] < res.history[0]["loss"]
    assert all(h["images"] == 1083 and h["images_per_s"] > 0 for h in res.history)
    reloaded = SmallCNN(6, seed=0)
    reloaded.load_state_dict(models.checkpoint.read_state_dict(res.weights))
    assert _same_weights(reloaded, res.model)


@pytest.mark.heavy
def test_resume_after_a_kill_gives_the_same_weights(tmp_path):
    """A subprocess is SIGKILLed after its first checkpoint, somewhere in a later epoch (or in
    the middle of writing a checkpoint); the resumed run ends bit-identical to an
    uninterrupted one."""
    epochs = 6
    out = tmp_path / "killed"
    done = kill_after_first_checkpoint(["tests.train._digits_run", str(out), str(epochs)], out,
                                       pause=0.2, timeout=120)
    assert 1 <= done < epochs, "the kill came too late to test resuming"
    resumed = run(str(out), epochs)
    assert [h["epoch"] for h in resumed.history] == list(range(1, epochs + 1))
    assert resumed.resumed_from == done  # issue 23 item 9: it says that it resumed
    assert resumed.describe_start() == f"resumed after epoch {done} of {epochs}"
    straight = run(str(tmp_path / "straight"), epochs)
    assert straight.resumed_from == 0 and straight.describe_start() == "a new run"
    assert _same_weights(resumed.model, straight.model)
    assert [h["loss"] for h in resumed.history] == [h["loss"] for h in straight.history]


def test_resume_refuses_another_config(tmp_path):
    run(str(tmp_path / "r"), epochs=1)
    with pytest.raises(InvalidInputError, match="another config .*lr"):
        run(str(tmp_path / "r"), epochs=1, lr=1e-2)
    assert run(str(tmp_path / "r"), epochs=1, lr=1e-2, resume=False).config["lr"] == 1e-2


@pytest.mark.heavy
def test_two_gloo_processes_equal_one_process(tmp_path, gloo_runs):
    """torchrun, 2 CPU processes on gloo, global batch 48 split 24/24 (the last batch 27 split
    14/13): the weights after 2 epochs equal the single-process run within float tolerance.
    (The torchrun launch, ``gloo_runs``, is shared with the CLIP methods' two-process tests:
    tests/train/_gloo_runs.py.)"""
    out = gloo_runs / "digits"
    single = run(str(tmp_path / "single"), epochs=2, **DDP_SETTINGS)
    ddp = SmallCNN(6, seed=0, dropout=0.0)
    ddp.load_state_dict(models.checkpoint.read_state_dict(out / "model.safetensors"))
    record = json.loads((out / "train.json").read_text())
    assert record["config"]["world_size"] == 2
    # the gradients' sums in another order, drifting through the steps (tests/_tolerance.py)
    assert_same_training(ddp.state_dict(), single.model.state_dict(),
                         SmallCNN(6, seed=0, dropout=0.0).state_dict())
    np.testing.assert_allclose([h["loss"] for h in record["history"]],
                               [h["loss"] for h in single.history], rtol=1e-5)


def test_head_only_leaves_the_rest_untouched(tmp_path):
    before = SmallCNN(6, seed=0).state_dict()
    res = run(str(tmp_path / "h"), epochs=1, trainable="head")
    after = res.model.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed == {"fc.weight", "fc.bias"}
    res = run(str(tmp_path / "b"), epochs=1, trainable="last_block")
    changed = {k for k in before if not torch.equal(before[k], res.model.state_dict()[k])}
    assert changed == {"fc.weight", "fc.bias", "body.5.weight", "body.5.bias"}


def test_outlier_exposure_reads_the_outlier_source(tmp_path):
    rng = np.random.default_rng(0)
    noise = ArraySource(rng.integers(0, 256, size=(40, 8, 8), dtype=np.uint8), np.full(40, -1),
                        name="noise")
    res = run(str(tmp_path / "oe"), epochs=1, loss="oe", outliers=noise, outlier_batch_size=16)
    assert res.config["outliers"] == noise.fingerprint() and res.history[0]["loss"] > 0


def test_bad_input_gets_one_line_errors(tmp_path):
    digits = DigitsSource(range(6))
    with pytest.raises(UnknownNameError, match="unknown loss 'logitnrom'"):
        train(SmallCNN(6), digits, out=tmp_path, loss="logitnrom")
    with pytest.raises(InvalidInputError, match="needs an outlier source"):
        train(SmallCNN(6), digits, out=tmp_path, loss="oe")
    with pytest.raises(ClassCountMismatchError, match="label 5 lies outside the head's 4 classes"):
        train(SmallCNN(4), digits, out=tmp_path)
    with pytest.raises(InvalidInputError, match="trainable must be one of"):
        train(SmallCNN(6), digits, out=tmp_path, trainable="body")
    for error in (UnknownNameError, InvalidInputError, ClassCountMismatchError):
        assert "\n" not in str(error("loss", "x", ["y"]) if error is UnknownNameError else error("x"))


@pytest.mark.heavy
def test_timm_model_round_trips_through_models_load(tmp_path):
    """A timm ResNet fine-tuned (last block) loads back with models.load(spec, weights=...);
    a checkpoint of another architecture is refused with a one-line error."""
    rng = np.random.default_rng(0)
    images = ArraySource(rng.integers(0, 256, size=(12, 32, 32, 3), dtype=np.uint8),
                         np.arange(12) % 3, name="tiny")
    model = models.load("timm:resnet18", pretrained=False, num_classes=3)
    model.transform = lambda im: torch.from_numpy(np.asarray(im, dtype=np.float32) / 255.0).permute(2, 0, 1)
    frozen = {k: v.clone() for k, v in model.state_dict().items()}
    res = train(model, images, out=tmp_path / "r18", optim=OptimSettings(epochs=1, batch_size=6),
                trainable="last_block",
                progress=False, device="cpu")
    changed = {k.split(".")[1] for k in frozen if not torch.equal(frozen[k], res.model.state_dict()[k])}
    assert changed == {"layer4", "fc"}  # layer4[-1] and the head; BN stats of frozen parts kept
    back = models.load("timm:resnet18", pretrained=False, num_classes=3, weights=res.weights)
    x = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(back(x), res.model(x))  # the same weights, float32 defaults
    with pytest.raises(InvalidInputError, match="Check that the checkpoint is for this architecture") as err:
        models.load("timm:resnet34", pretrained=False, num_classes=3, weights=res.weights)
    assert "\n" not in str(err.value)


def test_trained_model_gets_a_new_weights_digest(tmp_path):
    """The cache keys activations by weights digest: after training in place, the model must
    not report the digest it had before (a stale memo would serve the untrained activations)."""
    model = models.wrap(SmallCNN(6, seed=0).body.append(torch.nn.AdaptiveAvgPool2d(1))
                        .append(torch.nn.Flatten()).append(torch.nn.Linear(64, 6)),
                        feature_layer="6", head_layer="9", transform=SmallCNN(6).transform)
    before = model.weights_digest()
    res = train(model, DigitsSource(range(6)), out=tmp_path, optim=OptimSettings(epochs=1), progress=False,
                device="cpu")
    assert res.model.weights_digest() != before
    assert res.model.weights_digest() == models._adapter.state_dict_digest(res.model)


def test_checkpoint_of_another_architecture_in_an_experiment(tmp_path):
    """A trained SmallCNN's weights given to a wider SmallCNN in an experiment: one line naming
    the checkpoint and the mismatching shapes."""
    from oodbench.models.spec import ModelSpec
    from oodbench.run.build import load_model

    res = run(str(tmp_path / "r"), epochs=1)
    spec = ModelSpec(factory="oodbench.models.small_cnn:SmallCNN",
                     options={"num_classes": 6, "width": 32}, weights=res.weights)
    with pytest.raises(ClassCountMismatchError, match="does not fit SmallCNN: .*shape") as err:
        load_model(spec)
    assert "\n" not in str(err.value) and str(res.weights) in str(err.value)
