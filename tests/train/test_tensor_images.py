import numpy as np
import pytest
import torch
from PIL import Image

from oodbench.data.arrays import ArraySource
from oodbench.errors import EmptyInputError, InvalidInputError, UnknownNameError
from oodbench.train.tensor_images import (
    CIFAR_MEAN,
    CIFAR_STD,
    TensorImages,
    augment,
    normalise,
    tensor_images,
)


def _images(n=6, size=8, seed=0):
    rng = np.random.default_rng(seed)
    x = torch.from_numpy(rng.integers(0, 256, (n, 3, size, size), dtype=np.uint8))
    return TensorImages(x, torch.arange(n) % 3, ("a", "b", "c"), "toy")


def _reference_crop_flip(image: np.ndarray, oy: int, ox: int, flip: bool, pad: int) -> np.ndarray:
    """torchvision's RandomCrop(padding=pad, fill=0) then RandomHorizontalFlip, restated."""
    c, h, w = image.shape
    padded = np.zeros((c, h + 2 * pad, w + 2 * pad), dtype=image.dtype)
    padded[:, pad:pad + h, pad:pad + w] = image
    crop = padded[:, oy:oy + h, ox:ox + w]
    return crop[:, :, ::-1] if flip else crop


def test_augment_equals_per_image_pad_crop_flip_then_normalise():
    data = _images(n=7, size=8)
    out = augment(data.images, torch.Generator().manual_seed(5), pad=2)
    # the same draws, in the order augment makes them
    g = torch.Generator().manual_seed(5)
    oy = torch.randint(0, 5, (7,), generator=g)
    ox = torch.randint(0, 5, (7,), generator=g)
    flips = torch.rand(7, generator=g) < 0.5
    mean = np.asarray(CIFAR_MEAN)[:, None, None]
    std = np.asarray(CIFAR_STD)[:, None, None]
    for b in range(7):
        ref = _reference_crop_flip(data.images[b].numpy(), int(oy[b]), int(ox[b]), bool(flips[b]), 2)
        # float32 standardisation of values up to ~2.5 against float64: ~3e-7 absolute
        np.testing.assert_allclose(out[b].numpy(), (ref / 255.0 - mean) / std, rtol=1e-5, atol=1e-5)
    assert out.is_contiguous(memory_format=torch.channels_last)
    assert bool(flips.any()) and not bool(flips.all())  # both branches exercised


def test_normalise_is_the_per_channel_standardisation():
    data = _images()
    x = normalise(data.images)
    assert x.is_contiguous(memory_format=torch.channels_last)
    expected = (data.images.numpy() / 255.0 - np.asarray(CIFAR_MEAN)[:, None, None]) / np.asarray(
        CIFAR_STD)[:, None, None]
    np.testing.assert_allclose(x.numpy(), expected, rtol=1e-5, atol=1e-5)  # as above


def test_split_relabels_and_rejects_an_empty_side():
    data = _images(n=9)
    id_part, held = data.split(["c", "a"])
    assert id_part.class_names == ("c", "a") and held.class_names == ("b",)
    np.testing.assert_array_equal(id_part.labels.numpy(), [1, 0, 1, 0, 1, 0])
    torch.testing.assert_close(id_part.images[0], data.images[0])
    with pytest.raises(EmptyInputError, match="held-out"):
        data.split(["a", "b", "c"])
    with pytest.raises(EmptyInputError, match="ID side"):
        data.split([])
    with pytest.raises(UnknownNameError, match="Did you mean 'a'"):
        data.select(["aa"], "x")


def test_tensor_images_decodes_a_source_per_class_and_resizes():
    rng = np.random.default_rng(0)
    arrays = rng.integers(0, 256, (10, 40, 40, 3), dtype=np.uint8)
    source = ArraySource(arrays, np.array([0, 1] * 5), name="toy", class_names=["x", "y"])
    data = tensor_images(source, per_class=2)
    assert data.images.shape == (4, 3, 40, 40) and data.class_names == ("x", "y")
    np.testing.assert_array_equal(data.images[0].permute(1, 2, 0).numpy(), arrays[0])
    small = tensor_images(source, size=32)
    expected = np.asarray(Image.fromarray(arrays[3]).resize((32, 32), Image.Resampling.BILINEAR,
                                                            reducing_gap=None))
    np.testing.assert_array_equal(small.images[3].permute(1, 2, 0).numpy(), expected)
    assert small.fingerprint() != data.fingerprint()


def test_bad_tensors_are_named():
    with pytest.raises(InvalidInputError, match="uint8"):
        TensorImages(torch.zeros(2, 3, 8, 8), torch.zeros(2, dtype=torch.int64), ("a",))
    with pytest.raises(InvalidInputError, match="labels must lie"):
        TensorImages(torch.zeros(2, 3, 8, 8, dtype=torch.uint8), torch.tensor([0, 4]), ("a",))
