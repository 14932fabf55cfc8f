"""No silent no-ops: NPOS with start_epoch >= epochs, DOE with warmup >= epochs and a setting the
method ignores (warmup_epochs with CMA, an outlier source with CE, ...) are refused before
anything loads, through oodbench.train.train and through `oodbench train CONFIG.toml` (exit
status 2, no checkpoint, no cache entry); the declarations every loss makes are well-formed."""

from __future__ import annotations

import inspect
import pickle

import numpy as np
import pytest
from click.testing import CliRunner

from oodbench import losses
from oodbench.cli.main import main
from oodbench.data.arrays import ArraySource
from oodbench.errors import NoOpSettingError
from oodbench.models.small_cnn import SmallCNN
from oodbench.train import OptimSettings, method_settings, train
from tests.run.tiny import write_tiny_experiment
from tests.train._clip_run import model as clip_model
from tests.train._clip_run import toy_source
from tests.train._method_run import noise

NPOS_NEVER = ("loss 'npos': start_epoch=40 >= epochs=10, so the outlier loss (phi's BCE on the "
              "synthesised outliers) never switches on (the whole run would be LogitNorm alone); "
              "set start_epoch below epochs (the official recipe: start_epoch 40 of 100 epochs")
DOE_NEVER = ("loss 'doe': warmup=5 >= epochs=5, so DOE's perturbed step never switches on (the "
             "whole run would be plain Outlier Exposure, CE + OE); set warmup below epochs (the "
             "official recipe: warmup 5 of 10 epochs")
CMA_UNUSED = ("loss 'cma' does not use warmup_epochs=1: its warm-up is the loss option "
              "warmup_steps (in optimisation steps, the official 500): set that instead; leave "
              "warmup_epochs at its default 0")


@pytest.fixture
def nothing_loads(monkeypatch):
    """Reading any image of an ArraySource fails the test: the refusal comes before data."""

    def refuse(self, index):
        raise AssertionError(f"image {index} of {self.name!r} was read before the refusal")

    monkeypatch.setattr(ArraySource, "load", refuse)


def _labelled(n: int = 12) -> ArraySource:
    rng = np.random.default_rng(1)
    return ArraySource(rng.integers(0, 256, size=(n, 8, 8), dtype=np.uint8), np.arange(n) % 6,
                       name="labelled")


def _refused(tmp_path, match: str, model, source, **kwargs) -> NoOpSettingError:
    out = tmp_path / "run"
    with pytest.raises(NoOpSettingError) as err:
        train(model, source, out=out, progress=False, device="cpu", **kwargs)
    assert match in str(err.value) and "\n" not in str(err.value)
    assert not out.exists()  # no checkpoint, no frozen-block cache: nothing ran
    return err.value


def test_npos_that_never_switches_on_is_refused(tmp_path, nothing_loads):
    err = _refused(tmp_path, NPOS_NEVER, clip_model("npos"), toy_source(), loss="npos",
                   optim=OptimSettings(epochs=10))
    assert err.setting == "loss_options.start_epoch"


def test_doe_that_is_only_outlier_exposure_is_refused(tmp_path, nothing_loads):
    err = _refused(tmp_path, DOE_NEVER, SmallCNN(6, seed=0), _labelled(), loss="doe",
                   outliers=noise(), optim=OptimSettings(epochs=5))
    assert err.setting == "loss_options.warmup"


def test_a_warm_up_cma_ignores_is_refused(tmp_path, nothing_loads):
    err = _refused(tmp_path, CMA_UNUSED, clip_model("cma"), toy_source(), loss="cma",
                   optim=OptimSettings(epochs=2, warmup_epochs=1))
    assert err.setting == "warmup_epochs"


@pytest.mark.parametrize(("loss", "kwargs", "setting", "message"), [
    ("ce", {"outliers": noise()}, "outliers",
     "loss 'ce' does not use an outlier source: it trains on no outlier images (the losses that "
     "do: doe, oe); give no outlier source"),
    ("logitnorm", {"outlier_batch_size": 16}, "outlier_batch_size",
     "loss 'logitnorm' does not use outlier_batch_size=16"),
    ("cma", {"optim": OptimSettings(warmup_fraction=0.1)}, "warmup_fraction",
     "loss 'cma' does not use warmup_fraction=0.1"),
    ("npos", {"trainable": "head", "loss_options": {"start_epoch": 1}}, "trainable",
     "loss 'npos' does not use trainable='head': NPOS trains the vision blocks after "
     "frozen_blocks"),
])
def test_other_unused_settings_are_refused(tmp_path, nothing_loads, loss, kwargs, setting,
                                           message):
    model = clip_model(loss) if loss in ("cma", "npos") else SmallCNN(6, seed=0)
    source = toy_source() if loss in ("cma", "npos") else _labelled()
    assert _refused(tmp_path, message, model, source, loss=loss, **kwargs).setting == setting


def test_a_switch_before_the_last_epoch_and_the_defaults_are_accepted():
    check, settings = method_settings.check, method_settings.run_settings
    check(losses.create("npos", start_epoch=9), settings(OptimSettings(epochs=10)))
    check(losses.create("doe"), settings(OptimSettings(epochs=6), outliers="noise"))
    check(losses.create("cma"), settings(OptimSettings(epochs=2)))
    check(losses.create("oe"), settings(OptimSettings(), outliers="noise", outlier_batch_size=8))


def test_every_declaration_names_a_real_setting_and_option():
    """A misspelt declaration would silently check nothing."""
    for row in losses.available():
        cls = losses.loss_class(row["name"])
        assert set(cls.unused_settings) <= set(method_settings.DEFAULTS), cls.name
        options = inspect.signature(cls.__init__).parameters
        assert set(cls.switch_epochs) <= set(options), cls.name
    assert set(losses.loss_class("npos").switch_epochs) == {"start_epoch"}
    assert set(losses.loss_class("doe").switch_epochs) == {"warmup"}
    err = pickle.loads(pickle.dumps(NoOpSettingError("message", "warmup_epochs")))
    assert (str(err), err.setting) == ("message", "warmup_epochs")


def test_npos_queue_that_never_fills_is_refused(tmp_path, nothing_loads):
    """31 images of 3 classes (10 in the smallest) over 2 epochs: a queue of 25 never fills,
    so no outlier is ever synthesised."""
    with pytest.raises(Exception, match=r"class 1 of source 'toy' has 10 training images, so over "
                       r"epochs=2 its queue receives 20 < queue_size=25 embeddings and never "
                       r"fills") as err:
        train(clip_model("npos"), toy_source(), out=tmp_path / "run", loss="npos",
              loss_options={"start_epoch": 1, "queue_size": 25, "k": 2, "boundary": 3,
                            "frozen_blocks": 1},
              optim=OptimSettings(epochs=2), progress=False, device="cpu")
    assert "\n" not in str(err.value) and not (tmp_path / "run").exists()


# -- through `oodbench train CONFIG.toml` ---------------------------------------------------------
CLIP_MODEL = """[model]
factory = "tests._clip_fixtures:tiny_clip"
options = { class_names = ["a", "b", "c"] }
"""
CNN_MODEL = """[model]
factory = "oodbench.models.small_cnn:SmallCNN"
options = { num_classes = 3, seed = 0 }
"""


def _config(folder, loss: str, train_extra: str, model: str, outliers: bool = False):
    """A training config like examples/train_tiny.toml (its images, a CPU run to ``run``)."""
    path = folder / "train.toml"
    path.write_text(f"""[train]
loss = "{loss}"
{train_extra}
batch_size = 8
lr = 0.003
device = "cpu"
num_workers = 0
output = "run"

{model}
[data]
train = {{ folder = "data/id_train" }}
""" + ('outliers = { folder = "data/noise" }\n' if outliers else ""))
    return path


@pytest.mark.parametrize(("loss", "train_extra", "model", "outliers", "where", "message"), [
    ("npos", "epochs = 10\nschedule = \"constant\"", CLIP_MODEL, False,
     "[train].loss_options.start_epoch", NPOS_NEVER),
    ("npos", "epochs = 10", CLIP_MODEL, False, "[train]",
     "the NPOS recipe multiplies the learning rate by 10 at epoch 60 of 100 (schedule 'step', "
     "milestones [60]), which a run of epochs=10 never reaches: give milestones below epochs "
     "(the recipe's at the same share of the run: milestones = [6]), or another schedule"),
    ("doe", "epochs = 5", CNN_MODEL, True, "[train].loss_options.warmup", DOE_NEVER),
    ("cma", "epochs = 2\nwarmup_epochs = 1", CLIP_MODEL, False, "[train].warmup_epochs",
     CMA_UNUSED),
    ("hem", "epochs = 3", CNN_MODEL, True, "[data].outliers",
     "loss 'hem' does not use an outlier source"),
])
def test_oodbench_train_refuses_before_training(tmp_path, monkeypatch, loss, train_extra, model,
                                                outliers, where, message):
    cache = tmp_path / "cache"
    monkeypatch.setenv("OODBENCH_CACHE", str(cache))
    write_tiny_experiment(tmp_path)
    config = _config(tmp_path, loss, train_extra, model, outliers)
    result = CliRunner().invoke(main, ["train", str(config), "--no-progress"],
                                terminal_width=400)
    assert result.exit_code == 2, result.output
    assert where in result.output and message in " ".join(result.output.split())
    assert "Traceback" not in result.output
    assert not (tmp_path / "run").exists() and not (cache / "train").exists()
