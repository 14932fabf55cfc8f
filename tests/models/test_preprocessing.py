"""MOOD's official preprocessing as transforms (oodbench.models.preprocessing): the evaluation
crop 0.875 (where timm's config of MOOD's BEiT gives 0.9), the training augmentation its ID
statistics are extracted with, and ``using_transform`` for the extraction."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision import transforms as T

from oodbench.errors import InvalidInputError
from oodbench.models.preprocessing import (
    MOOD_EVAL_CROP,
    MOOD_TRAIN_AUGMENTATION,
    mood_eval_transform,
    mood_train_transform,
    normalisation,
    using_transform,
)


class _Model:
    """A stand-in classifier whose eval transform is timm's for MOOD's BEiT (crop 0.9)."""

    def __init__(self) -> None:
        self.transform = T.Compose([
            T.Resize(248, interpolation=T.InterpolationMode.BICUBIC), T.CenterCrop(224),
            T.ToTensor(), T.Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))])


def _image(seed: int = 0, size=(300, 400)) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, size=(*size, 3), dtype=np.uint8))


def test_mood_evaluation_crop_is_the_official_0875():
    """MOODv1/datasets.py:349-358: crop_pct 224 / 256 below 384 pixels, Resize(int(224 /
    crop_pct)) with interpolation 3 (bicubic), CenterCrop(224), ToTensor, Normalize."""
    assert MOOD_EVAL_CROP == 224 / 256
    image = _image()
    official = T.Compose([T.Resize(int(224 / (224 / 256)), interpolation=T.InterpolationMode.BICUBIC),
                          T.CenterCrop(224), T.ToTensor(),
                          T.Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))])
    ours = mood_eval_transform(_Model())(image)
    assert torch.equal(ours, official(image))  # the same torchvision operations, bit for bit
    assert not torch.equal(ours, _Model().transform(image))  # timm's 0.9 crop differs


def test_mood_training_augmentation_is_the_official_one():
    """MOODv1/datasets.py:328-339 with eval_with_features.py:105-123: timm's training transform
    with colour jitter 0.4, RandAugment rand-m9-mstd0.5-inc1, bicubic, random erasing 0.25
    pixel x 1."""
    from timm.data import create_transform

    assert MOOD_TRAIN_AUGMENTATION == {
        "color_jitter": 0.4, "auto_augment": "rand-m9-mstd0.5-inc1", "interpolation": "bicubic",
        "re_prob": 0.25, "re_mode": "pixel", "re_count": 1}
    official = create_transform(input_size=224, is_training=True, color_jitter=0.4,
                                auto_augment="rand-m9-mstd0.5-inc1", interpolation="bicubic",
                                re_prob=0.25, re_mode="pixel", re_count=1,
                                mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5))
    ours = mood_train_transform(_Model())
    assert repr(ours) == repr(official)
    image = _image(1)

    def seeded(transform):  # timm draws from python's, numpy's and torch's generators
        random.seed(3)
        np.random.seed(3)  # noqa: NPY002 - timm draws from the legacy global generator
        torch.manual_seed(3)
        return transform(image)

    a, b = seeded(ours), seeded(official)
    assert a.shape == (3, 224, 224) and torch.equal(a, b)  # same ops, same random draws


def test_using_transform_swaps_and_restores():
    model = _Model()
    original = model.transform
    train = mood_train_transform(model)
    with using_transform(model, train) as same:
        assert same is model and model.transform is train
    assert model.transform is original
    with pytest.raises(RuntimeError), using_transform(model, train):
        raise RuntimeError
    assert model.transform is original  # restored after an error too


def test_a_transform_without_normalize_is_a_clear_error():
    with pytest.raises(InvalidInputError, match="no torchvision Normalize step"):
        normalisation(T.Compose([T.ToTensor()]))
