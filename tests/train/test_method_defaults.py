"""Each training method's default is its published recipe (oodbench.train.method_defaults):
every value compared with the official value it cites (re-stated here from the official code, so
a changed constant fails), and ``train(loss=...)`` without ``optim=`` running it."""

from __future__ import annotations

import math

import pytest
import torch
from torchvision import transforms as T

from oodbench import losses
from oodbench.data.arrays import ArraySource
from oodbench.models.clip import NPOS_TEMPLATES, resolve_templates
from oodbench.models.preprocessing import input_size
from oodbench.models.small_cnn import SmallCNN
from oodbench.train import OptimSettings, method_defaults, train
from oodbench.train.config import TrainSettings
from oodbench.train.method_defaults import CMA, DOE, GENERIC, NPOS, UNLEASHING_MASK, defaults_for
from oodbench.train.optim import FINETUNE
from tests.train._clip_run import model as clip_model
from tests.train._clip_run import toy_source
from tests.train._method_run import noise


class _Stop(Exception):
    """Raised by a patched step to end a run once what it would train with is known."""


# -- the recipes against the official values ----------------------------------------------------
def test_cma_recipe_is_the_official_one():
    """ma-kjh/CMA-OoDD: train.py:66-70 (--epochs 10, --bs 512, --lr 1e-5),
    utils/train_utils.py:22-35 (AdamW weight_decay 0.1, cosine to 0 after 500 warm-up steps),
    utils/load_model.py:24-31 (RandomResizedCrop scale (0.9, 1), BICUBIC), float32 (no
    autocast); utils/loader.py:30-31 (train prompt "a photo of a {}")."""
    assert CMA.optim == OptimSettings(epochs=10, batch_size=512, lr=1e-5, weight_decay=0.1,
                                      optimizer="adamw", schedule="cosine")
    assert CMA.amp == "off"
    assert (CMA.augmentation.scale, CMA.augmentation.interpolation) == ((0.9, 1.0), "bicubic")
    loss = losses.create("cma")
    assert (loss.warmup_steps, loss.train_prompt) == (500, "a photo of a {}")
    assert defaults_for("cma") is CMA


def test_npos_recipe_is_the_official_one():
    """deeplearning-wisc/npos CLIP_based/OOD: train_npos_imagenet_1k.sh (--epochs 100,
    --batch_size 1000, --learning_rate 0.1, --start_epoch 40), train_npos.py:46 (--decay 1e-4),
    :158-161 (MultiStepLR milestones [60], gamma 10), CLIP/CLIP_ft.py:196-215 (18 templates)."""
    assert NPOS.optim == OptimSettings(epochs=100, batch_size=1000, lr=0.1, weight_decay=1e-4,
                                       optimizer="sgd", schedule="step", milestones=(60,),
                                       step_factor=10.0, nesterov=True)  # train_npos.py:149-157
    assert losses.create("npos").start_epoch == 40
    assert losses.create("npos").head_templates == "npos"
    official = [
        "a photo of a {}.", "a blurry photo of a {}.", "a black and white photo of a {}.",
        "a low contrast photo of a {}.", "a high contrast photo of a {}.", "a bad photo of a {}.",
        "a good photo of a {}.", "a photo of a small {}.", "a photo of a big {}.",
        "a photo of the {}.", "a blurry photo of the {}.", "a black and white photo of the {}.",
        "a low contrast photo of the {}.", "a high contrast photo of the {}.",
        "a bad photo of the {}.", "a good photo of the {}.", "a photo of the small {}.",
        "a photo of the big {}.",
    ]
    assert list(NPOS_TEMPLATES) == official
    assert [t("x") for t in resolve_templates("npos")] == [t.format("x") for t in official]


def test_doe_recipe_is_the_official_one():
    """QizhouWang/DOE doe_final.py:25-31 (--epochs 10, --learning_rate 0.01, --batch_size 128,
    --oe_batch_size 256, --decay 5e-4), :46 (--warmup 5), :238 (SGD, momentum 0.9,
    nesterov=True), :239-241 (cosine from the lr to 1e-6)."""
    assert DOE.optim == OptimSettings(epochs=10, batch_size=128, lr=0.01, weight_decay=5e-4,
                                      optimizer="sgd", schedule="cosine", nesterov=True,
                                      min_lr=1e-6)
    assert DOE.outlier_batch_size == 256
    assert DOE.amp == "off"  # the official code runs in float32 (no autocast)
    assert losses.create("doe").warmup == 5
    assert losses.create("doe").clip_norm == 1.0  # doe_final.py:170, 196, 206 (max norm 1)


def _official_doe_factor(step: int, total_steps: int, learning_rate: float = 0.01) -> float:
    """doe_final.py:239-241 re-stated: ``cosine_annealing(step, total, 1, 1e-6 / lr)``."""
    lr_max, lr_min = 1.0, 1e-6 / learning_rate
    return lr_min + (lr_max - lr_min) * 0.5 * (1 + math.cos(step / total_steps * math.pi))


def test_doe_optimiser_and_schedule_are_the_official_ones():
    """The optimiser the recipe builds is doe_final.py:238's (SGD, lr 0.01, momentum 0.9, weight
    decay 5e-4, Nesterov), and its learning rate at every step is :241's LambdaLR over
    ``epochs x steps`` ending at 1e-6 (checked over the 10 epochs of the paper; the official
    loop stops after 9 of them, a named difference)."""
    net = torch.nn.Linear(3, 2)
    opt = DOE.optim.make_optimizer(net.parameters())
    group = opt.param_groups[0]
    assert isinstance(opt, torch.optim.SGD)
    assert (group["lr"], group["momentum"], group["weight_decay"], group["nesterov"]) == (
        0.01, 0.9, 5e-4, True)
    steps_per_epoch = 7
    total = DOE.optim.epochs * steps_per_epoch
    scheduler = DOE.optim.make_scheduler(opt, steps_per_epoch)
    seen = []
    for _ in range(total):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        scheduler.step()
    official = [0.01 * _official_doe_factor(s, total) for s in range(total)]
    # the same cosine in a different order of float operations: a few ulps of 0.01
    assert seen == pytest.approx(official, rel=1e-12, abs=1e-15)
    assert 0.01 * _official_doe_factor(total, total) == pytest.approx(1e-6, rel=1e-9)
    assert any("epochs - 1" in d for d in DOE.differences)  # the 9-of-10 loop stays named


def test_unleashing_mask_recipe_is_the_official_one():
    """tmlr-group/Unleashing-Mask configs/smallscale/densenet_cifar10{,_UMAP}.yaml (sgd, lr 0.1,
    cosine_lr, epochs 100, weight_decay 1e-4, batch_size 256; UMAP prune_rate 0.8: the share
    kept), configs/estimate_loss/estimate_loss_cifar10.yaml (prune_rate 0.965)."""
    assert UNLEASHING_MASK.optim == OptimSettings(epochs=100, batch_size=256, lr=0.1,
                                                  weight_decay=1e-4, optimizer="sgd",
                                                  schedule="cosine")
    assert defaults_for("um") is defaults_for("umap") is UNLEASHING_MASK
    assert UNLEASHING_MASK.amp == "off"  # no autocast / GradScaler in the official code
    assert losses.create("umap").keep == 0.8
    assert losses.create("um").estimate_keep == losses.create("umap").estimate_keep == 0.965


def test_every_recipe_cites_a_source_and_other_losses_run_the_generic_settings():
    for name, recipe in method_defaults.RECIPES.items():
        assert recipe.sources and all(recipe.sources.values()), name
    for row in losses.available():
        if row["name"] not in method_defaults.RECIPES:
            assert defaults_for(row["name"]) is GENERIC
    assert GENERIC.optim == FINETUNE and GENERIC.amp == "auto"


# -- train() and the training config run the recipe -----------------------------------------------
@pytest.fixture
def seen(monkeypatch):
    """The settings each optimiser is made with; the run stops at the first data loader."""
    record: dict = {}

    original = OptimSettings.make_optimizer

    def make_optimizer(self, params):
        record["optim"] = self
        return original(self, params)

    def stop(source, load, *args, **kwargs):
        record["transform"] = load
        raise _Stop

    monkeypatch.setattr(OptimSettings, "make_optimizer", make_optimizer)
    monkeypatch.setattr("oodbench.train.methods.cma.make_loader", stop)
    monkeypatch.setattr("oodbench.train.finetune.make_loader", stop)
    return record


def test_train_cma_without_optim_runs_cmas_recipe(tmp_path, seen, monkeypatch):
    amps = []
    monkeypatch.setattr("oodbench.train.methods.cma.resolve_amp",
                        lambda amp, device: amps.append(amp) or None)
    model = clip_model("cma")
    with pytest.raises(_Stop):
        train(model, toy_source(), out=tmp_path / "cma", loss="cma", progress=False,
              device="cpu", num_workers=0)
    assert seen["optim"] == CMA.optim and amps == ["off"]
    steps = seen["transform"].transforms
    crop = steps[0]
    assert isinstance(crop, T.RandomResizedCrop) and crop.scale == (0.9, 1.0)
    assert crop.interpolation == T.InterpolationMode.BICUBIC
    assert crop.size == (input_size(model.transform),) * 2  # the model's input size
    model_norm = next(s for s in model.transform.transforms if isinstance(s, T.Normalize))
    assert (steps[-1].mean, steps[-1].std) == (tuple(model_norm.mean), tuple(model_norm.std))


def test_train_doe_without_optim_runs_does_recipe(tmp_path, seen):
    labelled = ArraySource(noise().images[:12], torch.arange(12).numpy() % 6, name="labelled")
    with pytest.raises(_Stop):
        train(SmallCNN(6, seed=0), labelled, out=tmp_path / "doe", loss="doe", outliers=noise(),
              progress=False, device="cpu", num_workers=0)
    assert seen["optim"] == DOE.optim


def test_train_npos_without_optim_runs_npos_recipe_with_its_templates(tmp_path, monkeypatch):
    seen: dict = {}

    def make_optimizer(self, params):
        seen["optim"] = self
        raise _Stop

    monkeypatch.setattr(OptimSettings, "make_optimizer", make_optimizer)
    model = clip_model("npos")
    with pytest.raises(_Stop):
        train(model, toy_source(), out=tmp_path / "npos", loss="npos", progress=False,
              device="cpu", num_workers=0,
              loss_options={"frozen_blocks": 1, "queue_size": 4, "k": 2, "boundary": 3})
    assert seen["optim"] == NPOS.optim
    assert [t("x") for t in model.templates] == [t.format("x") for t in NPOS_TEMPLATES]


def test_training_config_fills_left_out_keys_from_the_recipe():
    cma = TrainSettings(loss="cma")
    assert cma.optim() == CMA.optim and cma.resolved_amp() == "off"
    one = TrainSettings(loss="cma", epochs=1)
    assert one.optim() == OptimSettings(**{**CMA.optim.__dict__, "epochs": 1})
    assert TrainSettings(loss="doe").resolved_outlier_batch_size() == 256
    assert TrainSettings(loss="npos", epochs=20, milestones=[12]).optim().milestones == (12,)
    assert TrainSettings(loss="npos", schedule="cosine", epochs=10).optim().milestones == ()
    ce = TrainSettings()
    assert ce.optim() == FINETUNE and ce.resolved_amp() == "auto"
    assert ce.record()["amp"] == "auto" and "milestones" not in ce.record()


def test_step_schedule_multiplies_at_each_milestone():
    """The "step" schedule as MultiStepLR stepped per epoch: factor 10 from epoch 2 on (3 steps
    an epoch)."""
    settings = OptimSettings(epochs=4, lr=0.1, schedule="step", milestones=(2,), step_factor=10.0)
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=settings.lr)
    scheduler = settings.make_scheduler(opt, steps_per_epoch=3)
    lrs = []
    for _ in range(12):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        scheduler.step()
    reference = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    per_epoch = torch.optim.lr_scheduler.MultiStepLR(reference, milestones=[2], gamma=10.0)
    expected = []
    for _ in range(4):
        expected += [reference.param_groups[0]["lr"]] * 3
        reference.step()
        per_epoch.step()
    assert lrs == pytest.approx(expected, rel=1e-12)  # 0.1 * 10: one float multiplication each
