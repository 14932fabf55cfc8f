"""The torch path of every heavy detector agrees with the NumPy path to 1e-5 relative.

The torch path runs on a stand-in GPU (``tests/_fake_device.py``: CPU arithmetic, CUDA's
device rules), in small chunks, so a device mix-up or a missing ``.cpu()`` fails here as it would
on a GPU. Both paths take the same float32 steps (head products and projections of the 48
features, exps) in other orders and kernels: each within ``gamma(49)`` (2.9e-6) of the
magnitudes involved, so 1e-5 relative covers the two. Scores that cross zero (RMD, ViM) get an
absolute floor of twice that bound times the largest score, the others are compared element-wise.
"""

from __future__ import annotations

import numpy as np
import pytest

from oodbench import compute
from oodbench.detectors import create
from oodbench.extract.activations import Activations
from tests._fake_device import fake_device
from tests._tolerance import U32, gamma
from tests.detectors._reference import assert_rel
from tests.detectors.conftest import make_activations

#: the detectors with a torch path on the device (oodbench.compute)
HEAVY = ["knn", "nnguide", "mahalanobis", "rmd", "vim", "line", "dice", "react", "ash_p",
         "ash_b", "ash_s", "scale", "vra", "gen", "energy", "msp", "entropy"]
CROSS_ZERO = {"rmd", "vim"}
#: their floor, relative to the largest score: the 49-term float32 rounding bound, both paths
FLOOR = 2 * gamma(49, U32)
#: bytes per working chunk on the torch side: a few dozen rows, so every loop runs in pieces
SMALL_CHUNKS = 4 * 48 * 37


@pytest.fixture(scope="module")
def train_and_test() -> tuple[Activations, Activations]:
    train = make_activations(600, 12, 48, seed=0)
    test = Activations.concatenate(
        [make_activations(200, 12, 48, seed=1), make_activations(200, 12, 48, seed=2, ood=True)]
    )
    test.head_weight, test.head_bias = train.head_weight, train.head_bias
    return train, test


def both_paths(name: str, train: Activations, test: Activations, **hyperparams):
    """Scores of ``name`` on the NumPy path and on the torch path (stand-in GPU, small chunks)."""
    with compute.use("numpy"):
        reference = create(name, **hyperparams).fit(train).score(test)
    with fake_device() as device, compute.use("torch", device, chunk_bytes=SMALL_CHUNKS):
        on_device = create(name, **hyperparams).fit(train).score(test)
    return on_device, reference


@pytest.mark.parametrize("name", HEAVY)
def test_torch_path_agrees_with_the_numpy_path(name, train_and_test):
    on_device, reference = both_paths(name, *train_and_test)
    assert_rel(on_device, reference, rtol=1e-5, floor=FLOOR if name in CROSS_ZERO else 0.0)


def test_torch_path_options(train_and_test):
    """Options that take other branches: DICE + ReAct, global VRA thresholds, NNGuide's subsample."""
    for name, options in [("dice", {"react_percentile": 90.0}), ("vra", {"per_unit": False}),
                          ("vra", {"gamma": 0.3}), ("nnguide", {"fit_fraction": 0.5, "k": 7}),
                          ("knn", {"k": 1})]:
        on_device, reference = both_paths(name, *train_and_test, **options)
        assert_rel(on_device, reference, rtol=1e-5)


#: LINe's fit selects a percentile over all C x D head weights for each of the C classes (C^2 D
#: products, 2 x 10^9 for the full 1,000-class head): on real activations it is checked on the
#: real head's rows of this many classes of the fit images
LINE_CLASSES = 200


@pytest.mark.heavy
def test_torch_path_agrees_on_real_activations(lite0_imagenet_val):
    """EfficientNet-Lite0 (real weights) on real ImageNet images: real feature statistics
    (fit on 1,000 images, score 300); LINe on ``LINE_CLASSES`` classes of the real head."""
    _, _, acts = lite0_imagenet_val
    train, test = acts.subset(np.arange(1000)), acts.subset(np.arange(1000, len(acts)))
    classes = np.unique(train.labels)[:LINE_CLASSES]
    for name in HEAVY:
        fit_on, scored = (train, test) if name != "line" else (
            train.restrict_classes(classes), test.restrict_classes(classes))
        with compute.use("numpy"):
            reference = create(name).fit(fit_on).score(scored)
        with fake_device() as device, compute.use("torch", device):
            on_device = create(name).fit(fit_on).score(scored)
        assert_rel(on_device, reference, rtol=1e-5, floor=1e-6 if name in CROSS_ZERO else 0.0)
