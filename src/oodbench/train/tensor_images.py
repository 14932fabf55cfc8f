"""Small images held in memory as one uint8 tensor, with augmentation done on tensors.

    data = tensor_images(ImageFolder("cifar10-train"), per_class=5000)     # decode once
    id_data, ood_data = data.split(["airplane", "automobile", ...])       # ID / held-out
    x = augment(data.images[rows], generator, mean=..., std=...)          # float, channels-last

Decoding every JPEG once into ``(N, 3, H, W)`` uint8 (3 KB per 32 px image: CIFAR-10's 50,000
training images take 150 MB) replaces per-image PIL work in every epoch. :func:`augment` is
the standard CIFAR augmentation (He et al., CVPR 2016, Sec. 4.2: pad 4 pixels, take a random
32 x 32 crop, flip horizontally with probability 1/2) done for a whole batch by one gather:

    out[b, :, i, j] = padded[b, :, oy_b + i, ox_b + (W - 1 - j if flip_b else j)]

with ``oy_b, ox_b`` uniform in ``[0, 2 pad]`` and zero padding (as torchvision's
``RandomCrop(32, padding=4)``), followed by the per-channel normalisation
``(x / 255 - mean) / std``. The gather writes height-width-channel order, so the result is a
channels-last tensor without a copy.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from oodbench.data.source import Source
from oodbench.errors import EmptyInputError, InvalidInputError, UnknownNameError
from oodbench.train.recipe_config import CIFAR_MEAN, CIFAR_STD  # the defaults below (CIFAR-10's)


@dataclass(frozen=True)
class TensorImages:
    """``images`` (N, 3, H, W) uint8, ``labels`` (N,) int64 in ``[0, len(class_names))``."""

    images: torch.Tensor
    labels: torch.Tensor
    class_names: tuple[str, ...]
    name: str = "images"

    def __post_init__(self) -> None:
        if self.images.dtype != torch.uint8 or self.images.ndim != 4 or self.images.shape[1] != 3:
            raise InvalidInputError(
                f"{self.name}: images must be a (N, 3, H, W) uint8 tensor; got "
                f"{tuple(self.images.shape)} {self.images.dtype}"
            )
        if self.labels.shape != (len(self.images),):
            raise InvalidInputError(
                f"{self.name}: {len(self.labels)} labels for {len(self.images)} images")
        if len(self.labels) and (int(self.labels.min()) < -1
                                 or int(self.labels.max()) >= len(self.class_names)):
            raise InvalidInputError(
                f"{self.name}: labels must lie in [0, {len(self.class_names)}) (or -1 for no "
                f"class); got [{int(self.labels.min())}, {int(self.labels.max())}]"
            )

    def __len__(self) -> int:
        return len(self.images)

    @property
    def size(self) -> tuple[int, int]:
        """(height, width) of every image."""
        return int(self.images.shape[2]), int(self.images.shape[3])

    def fingerprint(self) -> str:
        """sha256 of the pixels, the labels and the class names (a content key)."""
        h = hashlib.sha256()
        h.update(repr((tuple(self.images.shape), self.class_names)).encode())
        h.update(self.images.contiguous().numpy().tobytes())
        h.update(self.labels.numpy().tobytes())
        return h.hexdigest()

    def select(self, classes: Sequence[str], name: str) -> TensorImages:
        """The images of ``classes``, relabelled ``0 .. len(classes) - 1`` in that order."""
        unknown = [c for c in classes if c not in self.class_names]
        if unknown:
            raise UnknownNameError("class", unknown[0], self.class_names)
        index = {self.class_names.index(c): i for i, c in enumerate(classes)}
        keep = torch.tensor([int(v) in index for v in self.labels], dtype=torch.bool)
        labels = torch.tensor([index[int(v)] for v in self.labels[keep]], dtype=torch.int64)
        return TensorImages(self.images[keep], labels, tuple(classes), name)

    def split(self, id_classes: Sequence[str]) -> tuple[TensorImages, TensorImages]:
        """(ID part: ``id_classes`` relabelled 0..k-1, held-out part: every other class).

        ``EmptyInputError`` before any work when either side has no class."""
        id_classes = list(id_classes)
        held_out = [c for c in self.class_names if c not in id_classes]
        if not id_classes or not held_out:
            side = "ID" if not id_classes else "held-out (class-OOD)"
            raise EmptyInputError(
                f"{self.name}: the class split leaves the {side} side empty (ID = {id_classes}, "
                f"of {list(self.class_names)}); give at least one class to each side"
            )
        return (self.select(id_classes, f"{self.name}[id]"),
                self.select(held_out, f"{self.name}[held-out]"))


def tensor_images(source: Source, *, per_class: int | None = None,
                  size: int | None = None, name: str | None = None) -> TensorImages:
    """Decode ``source`` (RGB) into a :class:`TensorImages`.

    Args:
        per_class: keep the first ``per_class`` images of every class (source order).
        size: resize every image to ``size`` x ``size`` (bilinear, antialiased) while decoding,
            e.g. ImageNet images down-sampled to 32 px as far-OOD data; ``None`` keeps the
            size, which must then be the same for all images.
    """
    from PIL import Image

    labels = np.asarray(source.labels, dtype=np.int64)
    rows = np.arange(len(labels))
    if per_class is not None:
        rows = np.concatenate([np.flatnonzero(labels == c)[:per_class]
                               for c in np.unique(labels)]) if len(labels) else rows
        rows.sort()
    if not len(rows):
        raise EmptyInputError(f"source {source.name!r} has no images")
    pixels = []
    for i in rows:
        image = source.load(int(i)).convert("RGB")
        if size is not None and image.size != (size, size):
            image = image.resize((size, size), Image.Resampling.BILINEAR, reducing_gap=None)
        pixels.append(np.asarray(image))
    shapes = {p.shape for p in pixels}
    if len(shapes) > 1:
        raise InvalidInputError(
            f"source {source.name!r} holds images of several sizes {sorted(shapes)[:3]}; pass "
            "size=... to resize them while decoding")
    images = torch.from_numpy(np.stack(pixels)).permute(0, 3, 1, 2).contiguous()
    names = getattr(source, "class_names", None) or [str(c) for c in range(int(labels.max()) + 1)]
    return TensorImages(images, torch.from_numpy(labels[rows]), tuple(names),
                        name or source.name)


def _scale(mean: Sequence[float], std: Sequence[float], device: torch.device
           ) -> tuple[torch.Tensor, torch.Tensor]:
    m = torch.tensor(mean, dtype=torch.float32, device=device).view(1, 3, 1, 1) * 255.0
    s = torch.tensor(std, dtype=torch.float32, device=device).view(1, 3, 1, 1) * 255.0
    return m, s


def normalise(images: torch.Tensor, mean: Sequence[float] = CIFAR_MEAN,
              std: Sequence[float] = CIFAR_STD, *, channels_last: bool = True) -> torch.Tensor:
    """uint8 (B, 3, H, W) -> float32 ``(x / 255 - mean) / std`` (channels-last by default)."""
    m, s = _scale(mean, std, images.device)
    x = images.to(torch.float32)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    return (x - m) / s


def augment(images: torch.Tensor, generator: torch.Generator, *, pad: int = 4,
            flip: bool = True, mean: Sequence[float] = CIFAR_MEAN,
            std: Sequence[float] = CIFAR_STD) -> torch.Tensor:
    """Random crop with zero padding and horizontal flip, then normalise (see module doc).

    ``generator`` lives on the CPU; the offsets are drawn there and moved to the images'
    device, so a run draws the same crops on a CPU and on a GPU."""
    b, c, h, w = images.shape
    dev = images.device
    oy = torch.randint(0, 2 * pad + 1, (b,), generator=generator).to(dev)
    ox = torch.randint(0, 2 * pad + 1, (b,), generator=generator).to(dev)
    flips = (torch.rand(b, generator=generator) < 0.5).to(dev) if flip else torch.zeros(
        b, dtype=torch.bool, device=dev)
    padded = torch.nn.functional.pad(images, (pad, pad, pad, pad)) if pad else images
    ar_h, ar_w = torch.arange(h, device=dev), torch.arange(w, device=dev)
    rows = oy[:, None] + ar_h[None, :]
    cols = ox[:, None] + torch.where(flips[:, None], w - 1 - ar_w[None, :], ar_w[None, :])
    hwc = padded.permute(0, 2, 3, 1)  # (B, H + 2p, W + 2p, C), a view
    batch = torch.arange(b, device=dev)[:, None, None]
    out = hwc[batch, rows[:, :, None], cols[:, None, :]]  # (B, H, W, C), contiguous
    m, s = _scale(mean, std, dev)
    return (out.permute(0, 3, 1, 2).to(torch.float32) - m) / s


class eval_transform:  # noqa: N801 - used like a function: eval_transform(mean, std)
    """PIL image -> float32 (3, H, W) ``(x / 255 - mean) / std``: the evaluation input of a
    recipe network (no resize, no crop), as a model's ``transform`` for ``oodbench.extract``.
    Picklable; ``mean`` and ``std`` are kept so that code which builds pixels itself (the
    noise and FGSM tuning protocols) can normalise them the same way."""

    def __init__(self, mean: Sequence[float] = CIFAR_MEAN, std: Sequence[float] = CIFAR_STD):
        self.mean, self.std = tuple(float(v) for v in mean), tuple(float(v) for v in std)

    def __call__(self, image: object) -> torch.Tensor:
        from PIL import Image

        assert isinstance(image, Image.Image)
        pixels = torch.from_numpy(np.asarray(image.convert("RGB")).copy()).permute(2, 0, 1)
        return normalise(pixels[None], self.mean, self.std, channels_last=False)[0]

    def __repr__(self) -> str:
        return f"eval_transform(mean={self.mean}, std={self.std})"
