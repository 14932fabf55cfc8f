"""The small-image recipe as data: :class:`Recipe` (network, augmentation, optimiser settings)
and its named presets :data:`RECIPES`. Training with one is :mod:`oodbench.train.recipe`.

This module imports no torch (the network is built on :meth:`Recipe.build`), so checking a
recipe's name and its changed fields -- a held-out tuning table's ``train = {recipe = NAME,
epochs = 3}`` (:mod:`oodbench.tuning.scratch`) -- loads no training code.

The presets in :data:`RECIPES` are data:

* ``cpu-resnet9``, the CPU study of ``studies/loss_table.py``: Page's ResNet-9 at width 16
  (16/32/64/128 channels), bfloat16 autocast, 20 epochs over all 30,000 training images of the
  6 ID classes, batch 128, peak lr 0.1 and weight decay 5e-4 (He et al.'s CIFAR optimiser, as
  LogitNorm's and HEM's CIFAR experiments use it), 15 % warm-up then cosine. Why: CE had to
  reach 85 % test accuracy on the 6 classes within about two hours of the 2-core study machine
  for 15 runs. ResNet-8 (``cpu-resnet8``) reached 77.4 % in 10 epochs and 83.1 % in 30. With
  CE at seed 0, one worker per core (``/tmp`` pilots, recorded in the loss table's note):
  ResNet-8 in bfloat16, batch 128, lr 0.1, 10 epochs: 78.1 %; ResNet-9 width 16, 10 epochs:
  83.7 % (375 CPU-s), 20 epochs: 86.2 % (about 800 CPU-s idle); width 24, 10 epochs: 84.6 %
  (780 CPU-s). On one idle core, 1 thread, this network trains at about 830 images per CPU-s
  in bfloat16 (470 in float32; ResNet-8: 1,150 and 650). The budget is the same for every
  loss and was chosen on CE alone.
* ``cpu-resnet8``, the earlier CPU study: the smallest He et al. network (widths 16/32/64,
  one block per stage, ResNet-8), 10 epochs, batch 64, peak lr 0.05 (0.1 per 128 images,
  scaled linearly to the batch), 15 % warm-up then cosine, float32; CE reached 77.4 %
  (``studies/results/loss_table_cpu-resnet8.json``).
* ``cpu-small``, a smoke-test size of the same network: 1 epoch (examples, quick checks).
* ``resnet20``, the paper network of He et al. (2016) at a CPU-sized epoch count.
* ``gpu-resnet18``, the full-scale configuration: ResNet-18, 200 epochs, batch 128, lr 0.1,
  weight decay 5e-4 (the CIFAR-10 schedule length and optimiser of LogitNorm, Wei et al.,
  ICML 2022, Sec. 4.1, and of their code's ``train.py``; the decay here is the recipe's
  cosine, not their steps at epochs 80 and 140, and there is no dropout).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any

from oodbench.errors import InvalidInputError, UnknownNameError
from oodbench.train.optim import RECIPE, OptimSettings, from_options

if TYPE_CHECKING:
    from oodbench.models.cifar_resnet import CifarResNet
    from oodbench.models.cifar_resnet9 import CifarResNet9

#: CIFAR-10's per-channel training mean and standard deviation (of x / 255): the recipe's
#: normalisation and the default of :mod:`oodbench.train.tensor_images`
CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2470, 0.2435, 0.2616)

#: the network families: He et al.'s CIFAR ResNet (``widths``, ``blocks``) and Page's ResNet-9
#: (one width)
NETWORKS = ("resnet", "resnet9")
#: the optimiser fields a recipe records under their own names (its ``as_dict`` and run keys)
_RECIPE_OPTIM = ("epochs", "batch_size", "lr", "weight_decay", "warmup_fraction")


@dataclass(frozen=True)
class Recipe:
    """Everything that decides a small-image training run except the loss, data and seed: the
    network's shape, the augmentation, and the optimiser settings ``optim`` (an
    :class:`~oodbench.train.optim.OptimSettings`: SGD, cosine, warm-up as a fraction of the
    steps; default :data:`~oodbench.train.optim.RECIPE`)."""

    widths: tuple[int, ...] = (16, 32, 64)
    blocks: tuple[int, ...] = (3, 3, 3)
    network: str = "resnet"
    image_size: int = 32
    optim: OptimSettings = RECIPE
    pad: int = 4
    flip: bool = True
    mean: tuple[float, float, float] = CIFAR_MEAN
    std: tuple[float, float, float] = CIFAR_STD
    channels_last: bool = True
    amp: str = "auto"
    eval_batch_size: int = 1000

    def __post_init__(self) -> None:
        if (self.optim.optimizer, self.optim.schedule, self.optim.warmup_epochs) != (
                "sgd", "cosine", 0):
            raise InvalidInputError(
                "the small-image recipe trains with SGD and a cosine schedule warmed up by "
                "warmup_fraction; give OptimSettings(optimizer='sgd', schedule='cosine', "
                f"warmup_epochs=0, ...); got {self.optim}")
        if self.image_size < 8 or self.pad < 0:
            raise InvalidInputError(
                f"image_size must be >= 8 and pad >= 0; got {self.image_size}, {self.pad}")
        if self.network not in NETWORKS:
            raise UnknownNameError("recipe network", self.network, NETWORKS)
        if self.network == "resnet9" and (len(self.widths) != 1 or self.blocks):
            raise InvalidInputError(
                "network='resnet9' takes one width (its first layer's, w; the others are 2w, "
                f"4w, 8w) and no blocks: widths=(16,), blocks=(); got widths={self.widths}, "
                f"blocks={self.blocks}")

    # read-only views of ``optim`` (the names a recipe's runs record them under)
    @property
    def epochs(self) -> int:
        return self.optim.epochs

    @property
    def batch_size(self) -> int:
        return self.optim.batch_size

    @property
    def lr(self) -> float:
        return self.optim.lr

    @property
    def weight_decay(self) -> float:
        return self.optim.weight_decay

    def scaled(self, **changes: Any) -> Recipe:
        """A copy with some fields changed (e.g. ``epochs=``, ``lr=``: fields of ``optim``
        change it; the others are the recipe's own)."""
        optim, own = from_options(changes, self.optim)
        return replace(self, optim=optim, **own)

    def as_dict(self) -> dict[str, Any]:
        """The recipe for a run's record and key: its own fields and ``optim``'s
        ``_RECIPE_OPTIM`` (flat, as before ``optim`` held them, so earlier runs' keys match)."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "optim"}
        if out["network"] == "resnet":  # recorded only when it is not the first family, so
            del out["network"]          # the runs of the earlier presets keep their keys
        out.update({k: getattr(self.optim, k) for k in _RECIPE_OPTIM})
        return {k: list(v) if isinstance(v, tuple) else v for k, v in out.items()}

    def build(self, num_classes: int, seed: int) -> CifarResNet | CifarResNet9:
        """A freshly initialised network of this recipe (``seed`` decides its weights)."""
        from oodbench.models.cifar_resnet import CifarResNet
        from oodbench.models.cifar_resnet9 import CifarResNet9

        if self.network == "resnet9":
            return CifarResNet9(num_classes, width=self.widths[0], seed=seed)
        return CifarResNet(num_classes, widths=self.widths, blocks=self.blocks, seed=seed)


#: the presets (see the module docstring)
RECIPES: dict[str, Recipe] = {
    "cpu-resnet9": Recipe(network="resnet9", widths=(16,), blocks=(), amp="bf16",
                          optim=OptimSettings(epochs=20, batch_size=128, lr=0.1,
                                              warmup_fraction=0.15)),
    "cpu-resnet8": Recipe(widths=(16, 32, 64), blocks=(1, 1, 1), optim=OptimSettings(
        epochs=10, batch_size=64, lr=0.05, warmup_fraction=0.15)),
    "cpu-small": Recipe(widths=(16, 32, 64), blocks=(1, 1, 1), optim=OptimSettings(
        epochs=1, batch_size=64, lr=0.05, warmup_fraction=0.15)),
    "resnet20": Recipe(widths=(16, 32, 64), blocks=(3, 3, 3), optim=RECIPE),
    "gpu-resnet18": Recipe(widths=(64, 128, 256, 512), blocks=(2, 2, 2, 2), optim=OptimSettings(
        epochs=200, batch_size=128, lr=0.1), eval_batch_size=2000),
}
