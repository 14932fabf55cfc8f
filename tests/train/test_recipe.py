import numpy as np
import pytest
import torch

from oodbench.errors import EmptyInputError, InvalidInputError, UnknownNameError
from oodbench.train.optim import OptimSettings
from oodbench.train.recipe import (
    RECIPES,
    Recipe,
    check_inputs,
    predict_logits,
    run_key,
    train_recipe,
)
from oodbench.train.tensor_images import TensorImages

TINY = Recipe(widths=(8, 16), blocks=(1, 1), optim=OptimSettings(
    epochs=3, batch_size=16, lr=0.05, warmup_fraction=0.2), eval_batch_size=32)


def _colour_classes(n_per_class=24, size=32, seed=0) -> TensorImages:
    """Three classes told apart by which colour channel is bright: learnable in a few steps."""
    rng = np.random.default_rng(seed)
    images, labels = [], []
    for c in range(3):
        x = rng.integers(0, 90, (n_per_class, 3, size, size))
        x[:, c] += 150
        images.append(x)
        labels += [c] * n_per_class
    return TensorImages(torch.from_numpy(np.concatenate(images).astype(np.uint8)),
                        torch.tensor(labels), ("red", "green", "blue"), "colours")


@pytest.mark.parametrize("loss", ["ce", "logitnorm", "hem", "mm", "dice"])
def test_every_loss_learns_the_colour_classes(loss, one_thread):
    data = _colour_classes()
    result = train_recipe(TINY.scaled(epochs=4), data, loss=loss, seed=0, device="cpu")
    logits = predict_logits(result.model, _colour_classes(seed=1), TINY, device="cpu")
    assert logits.shape == (72, 3)
    assert (logits.argmax(1) == np.repeat([0, 1, 2], 24)).mean() > 0.9
    assert [h["epoch"] for h in result.history] == [1, 2, 3, 4]
    assert result.history[-1]["lr_end"] == pytest.approx(0.0, abs=1e-12)  # cosine to 0
    assert all(h["cpu_seconds"] > 0 for h in result.history)
    assert result.train_cpu_seconds == pytest.approx(sum(h["cpu_seconds"] for h in result.history))


def test_finished_run_is_read_back_not_retrained(tmp_path, one_thread):
    data = _colour_classes(n_per_class=10)
    whole = train_recipe(TINY, data, loss="hem", seed=2, device="cpu", out=tmp_path)
    again = train_recipe(TINY, data, loss="hem", seed=2, device="cpu", out=tmp_path)
    for (k, v), w in zip(whole.model.state_dict().items(), again.model.state_dict().values()):
        torch.testing.assert_close(v, w, rtol=0, atol=0, msg=k)  # read back: the same bits
    assert again.history == whole.history
    with pytest.raises(InvalidInputError, match="another config"):
        train_recipe(TINY.scaled(lr=0.2), data, loss="hem", seed=2, device="cpu", out=tmp_path)


def test_interrupted_run_resumes_bit_identically(tmp_path, monkeypatch, one_thread):
    from oodbench.train import recipe as recipe_module

    data = _colour_classes(n_per_class=10)
    whole = train_recipe(TINY, data, loss="ce", seed=1, device="cpu")
    real_epoch, calls = recipe_module._epoch, []

    def dies_in_epoch_3(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real_epoch(*args, **kwargs)

    monkeypatch.setattr(recipe_module, "_epoch", dies_in_epoch_3)
    with pytest.raises(KeyboardInterrupt):
        train_recipe(TINY, data, loss="ce", seed=1, device="cpu", out=tmp_path)
    monkeypatch.setattr(recipe_module, "_epoch", real_epoch)
    resumed = train_recipe(TINY, data, loss="ce", seed=1, device="cpu", out=tmp_path)
    # both runs in this process on one thread: the same ops in the same order (another CPU
    # changes both alike), so resuming must give the same bits
    for (k, v), w in zip(whole.model.state_dict().items(), resumed.model.state_dict().values()):
        torch.testing.assert_close(v, w, rtol=0, atol=0, msg=k)
    assert len(resumed.history) == 3


def test_bad_input_fails_before_training():
    data = _colour_classes(n_per_class=4)
    with pytest.raises(UnknownNameError, match="Did you mean 'logitnorm'"):
        check_inputs(TINY, data, "logitnrom")
    big = TensorImages(torch.zeros(3, 3, 224, 224, dtype=torch.uint8), torch.tensor([0, 1, 2]),
                       ("a", "b", "c"), "imagenet-like")
    with pytest.raises(InvalidInputError, match="recipe is for 32 px images but the data is 224 x 224"):
        train_recipe(RECIPES["cpu-small"], big, loss="ce")
    with pytest.raises(InvalidInputError, match="outlier"):
        check_inputs(TINY, data, "oe")
    with pytest.raises(EmptyInputError, match="held-out"):
        data.split(["red", "green", "blue"])
    with pytest.raises(InvalidInputError, match="warmup_fraction"):
        Recipe(optim=OptimSettings(warmup_fraction=1.0))
    with pytest.raises(InvalidInputError, match="epochs"):
        Recipe(optim=OptimSettings(epochs=0))


def test_run_key_changes_with_what_decides_the_weights():
    data = _colour_classes(n_per_class=4)
    base = run_key(TINY, data, "ce", {}, 0)
    assert base == run_key(TINY, data, "ce", {}, 0)
    assert len({base, run_key(TINY, data, "ce", {}, 1), run_key(TINY, data, "hem", {}, 0),
                run_key(TINY.scaled(lr=0.1), data, "ce", {}, 0),
                run_key(TINY, _colour_classes(n_per_class=4, seed=9), "ce", {}, 0),
                run_key(TINY, data, "logitnorm", {"tau": 0.1}, 0)}) == 6


def test_gpu_preset_is_the_full_scale_resnet18():
    gpu = RECIPES["gpu-resnet18"]
    assert gpu.widths == (64, 128, 256, 512) and gpu.blocks == (2, 2, 2, 2)
    assert (gpu.epochs, gpu.batch_size, gpu.lr, gpu.weight_decay) == (200, 128, 0.1, 5e-4)


def test_cpu_study_preset_is_resnet9_in_bfloat16():
    """The study's network, batch and optimiser (bench_recipe.py --recipe cpu-resnet9 measures
    them against a bare loop); the earlier study's preset is cpu-small trained ten epochs."""
    study = RECIPES["cpu-resnet9"]
    assert (study.network, study.widths, study.blocks, study.amp) == ("resnet9", (16,), (), "bf16")
    assert (study.epochs, study.batch_size, study.lr, study.weight_decay) == (20, 128, 0.1, 5e-4)
    assert RECIPES["cpu-resnet8"] == RECIPES["cpu-small"].scaled(epochs=10)


def test_networks_and_their_checks():
    assert "network" not in TINY.as_dict()  # the first family's runs keep their earlier keys
    nine = Recipe(network="resnet9", widths=(4,), blocks=())
    assert nine.as_dict()["network"] == "resnet9"
    assert type(nine.build(3, 0)).__name__ == "CifarResNet9"
    data = _colour_classes(n_per_class=4)
    assert run_key(nine, data, "ce", {}, 0) != run_key(TINY, data, "ce", {}, 0)
    with pytest.raises(InvalidInputError, match="one width"):
        Recipe(network="resnet9")
    with pytest.raises(UnknownNameError, match="resnet9"):
        Recipe(network="resnet99", widths=(4,), blocks=())


def test_bfloat16_training_and_float32_logits(one_thread):
    """A ResNet-9 recipe in bfloat16 learns; its logits come from a float32 forward pass (not
    rounded to bfloat16's 8 bits of mantissa)."""
    nine = Recipe(network="resnet9", widths=(4,), blocks=(), amp="bf16", optim=OptimSettings(
        epochs=4, batch_size=16, lr=0.05, warmup_fraction=0.2), eval_batch_size=32)
    result = train_recipe(nine, _colour_classes(), loss="ce", seed=0, device="cpu")
    test = _colour_classes(seed=1)
    logits = predict_logits(result.model, test, nine, device="cpu")
    assert logits.dtype == np.float32
    assert (logits.argmax(1) == np.repeat([0, 1, 2], 24)).mean() > 0.9
    from oodbench.train.tensor_images import normalise

    with torch.no_grad():
        plain = result.model(normalise(test.images)).numpy()
    # float32, not bfloat16: predict_logits runs batches of 32, the plain pass all 72 rows, and
    # a CPU's kernels may round other batch sizes differently (~1e-6 relative); bfloat16 would
    # move them by ~2^-9 = 2e-3 (checked next)
    np.testing.assert_allclose(logits, plain, rtol=1e-5, atol=1e-5 * np.abs(plain).max())
    as_bf16 = torch.from_numpy(logits).to(torch.bfloat16).float().numpy()
    assert (as_bf16 != logits).mean() > 0.9
