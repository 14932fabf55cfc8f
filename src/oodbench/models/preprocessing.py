"""Preprocessing a published run used, as transforms a model can be given.

    model.transform = mood_eval_transform(model)          # MOOD's crop 0.875, not timm's 0.9
    with using_transform(model, mood_train_transform(model)):
        train_acts = oodbench.extract(model, train_source)  # ID statistics as MOOD extracts them

A model's ``transform`` is part of the activation cache key (``oodbench.extract``), so features
extracted under another transform are cached apart. The mean and std are the model's own (the
``Normalize`` of its eval transform): for MOOD's BEiT, timm's config and the official code
agree (0.5, 0.5, 0.5; MOODv1/datasets.py:321-324 without ``--imagenet_default_mean_and_std``).

**MOOD** (Li et al., CVPR 2023; dvlab-research/MOOD ``MOODv1``):

* evaluation: ``Resize(int(224 / 0.875) = 256, bicubic)`` + ``CenterCrop(224)``
  (datasets.py:347-362: ``crop_pct = 224 / 256`` below 384 pixels), where timm's pretrained
  config of ``beit_large_patch16_224`` crops 0.9 (:data:`MOOD_EVAL_CROP`);
* the ID statistics (eval_with_features.py:226 and 240): the training set's features through
  the *training* augmentation of the fine-tuning (datasets.py:326-345 with the defaults of
  eval_with_features.py:105-123: RandomResizedCrop 224 bicubic, RandAugment
  ``rand-m9-mstd0.5-inc1``, colour jitter 0.4, random erasing 0.25 ``pixel`` x 1),
  :func:`mood_train_transform`. The official loader also drops the last incomplete batch
  (``drop_last=True``); oodbench keeps every image.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch

from oodbench.errors import InvalidInputError

#: MOOD's evaluation crop fraction (MOODv1/datasets.py:349-351, ``224 / 256`` below 384 pixels)
MOOD_EVAL_CROP = 224 / 256
#: MOOD's input size (MOODv1/eval_with_features.py:90, ``--input_size 224``)
MOOD_INPUT_SIZE = 224
#: the training augmentation the official ID statistics are extracted with: the keywords of
#: ``timm.data.create_transform`` (MOODv1/datasets.py:328-339; eval_with_features.py:105-123)
MOOD_TRAIN_AUGMENTATION: dict[str, Any] = {
    "color_jitter": 0.4, "auto_augment": "rand-m9-mstd0.5-inc1", "interpolation": "bicubic",
    "re_prob": 0.25, "re_mode": "pixel", "re_count": 1,
}


def input_size(transform: Any) -> int | tuple[int, ...]:
    """The output size of the ``CenterCrop`` of a torchvision ``Compose``."""
    from torchvision import transforms as T

    for step in getattr(transform, "transforms", ()):
        if isinstance(step, T.CenterCrop):
            size = tuple(int(v) for v in step.size)
            return size[0] if len(set(size)) == 1 else size
    raise InvalidInputError(
        f"the transform {type(transform).__name__} has no torchvision CenterCrop step, so the "
        "model's input size is unknown; pass a transform of your own")


def normalisation(transform: Any) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """``(mean, std)`` of the ``Normalize`` step of a torchvision ``Compose``, else a one-line
    ``InvalidInputError`` naming the fix."""
    from torchvision import transforms as T

    for step in getattr(transform, "transforms", ()):
        if isinstance(step, T.Normalize):
            return tuple(float(v) for v in step.mean), tuple(float(v) for v in step.std)
    raise InvalidInputError(
        f"the transform {type(transform).__name__} has no torchvision Normalize step, so the "
        "model's normalisation is unknown; pass a transform of your own")


def resize_center_crop(size: int, crop_fraction: float, mean: tuple[float, ...],
                       std: tuple[float, ...], interpolation: str = "bicubic"
                       ) -> Callable[..., torch.Tensor]:
    """``Resize(int(size / crop_fraction))`` (shorter side), ``CenterCrop(size)``, RGB,
    ``ToTensor``, ``Normalize(mean, std)``."""
    from torchvision import transforms as T

    if not 0 < crop_fraction <= 1:
        raise InvalidInputError(f"crop_fraction must lie in (0, 1]; got {crop_fraction!r}")
    mode = getattr(T.InterpolationMode, interpolation.upper())
    return T.Compose([T.Resize(int(size / crop_fraction), interpolation=mode),
                      T.CenterCrop(size), T.Lambda(rgb), T.ToTensor(), T.Normalize(mean, std)])


def rgb(image: Any) -> Any:
    """The PIL image in RGB (grey and palette images get three channels)."""
    return image.convert("RGB")


def mood_eval_transform(model: Any) -> Callable[..., torch.Tensor]:
    """MOOD's evaluation preprocessing (crop 0.875 at 224, bicubic) with the model's
    normalisation."""
    mean, std = normalisation(model.transform)
    return resize_center_crop(MOOD_INPUT_SIZE, MOOD_EVAL_CROP, mean, std, "bicubic")


def mood_train_transform(model: Any) -> Callable[..., torch.Tensor]:
    """The training augmentation MOOD's official ID statistics are extracted with (timm's
    ``create_transform(is_training=True)`` with :data:`MOOD_TRAIN_AUGMENTATION`), with the
    model's normalisation."""
    from timm.data import create_transform

    mean, std = normalisation(model.transform)
    transform = create_transform(
        input_size=MOOD_INPUT_SIZE, is_training=True, mean=mean, std=std,
        **MOOD_TRAIN_AUGMENTATION)
    for step in getattr(transform, "transforms", []):
        for op in getattr(step, "ops", []):  # timm's RandAugment
            if getattr(op, "name", "") == "PosterizeIncreasing":
                op.aug_fn = posterize_zero_bits_black
    return transform  # type: ignore[no-any-return]


def posterize_zero_bits_black(img: Any, bits_to_keep: int, **_: Any) -> Any:
    """timm's ``posterize`` with the behaviour of the Pillow MOOD's code ran on: RandAugment's
    ``PosterizeIncreasing`` keeps ``4 - int(level / 10 * 4)`` bits, 0 at level 10 (magnitude 9
    with std 0.5 reaches it), and Pillow's ``posterize`` masked all 8 bits then (a black image)
    where Pillow 10+ raises "bits must be between or equal to 1 and 8" (the image was then
    skipped as unreadable)."""
    from PIL import Image, ImageOps

    if bits_to_keep >= 8:
        return img
    if bits_to_keep < 1:
        return Image.new(img.mode, img.size)
    return ImageOps.posterize(img, bits_to_keep)


@contextmanager
def using_transform(model: Any, transform: Callable[..., torch.Tensor]) -> Iterator[Any]:
    """``model`` with ``transform`` as its transform inside the block (restored after)."""
    previous = model.transform
    model.transform = transform
    try:
        yield model
    finally:
        model.transform = previous


def square_resize(settings: Mapping[str, Any]) -> Callable[..., torch.Tensor]:
    """``Resize((h, w))`` (both sides, the aspect ratio not kept, no crop), RGB, ``ToTensor``,
    ``Normalize(mean, std)``, from a recipe-style ``settings`` mapping (``resize`` = [h, w],
    ``interpolation``, ``mean``, ``std``): the evaluation transform of the BiT-based OOD code
    (deeplearning-wisc/gradnorm_ood test_ood.py:19-24) and of class_prior (test_ood.py:86-92)."""
    from torchvision import transforms as T

    mode = getattr(T.InterpolationMode, str(settings["interpolation"]).upper())
    return T.Compose([T.Resize(tuple(settings["resize"]), interpolation=mode), T.Lambda(rgb),
                      T.ToTensor(), T.Normalize(settings["mean"], settings["std"])])
