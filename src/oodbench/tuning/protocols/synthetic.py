"""The tuning paper's baselines: tune on Gaussian-noise images or on FGSM-perturbed ID images.

Mondal et al., "Tuning Out-of-Distribution (OOD) Detectors Without Given OOD Data", arXiv
2602.05935, Sec. 3 and Sec. 4.1. ``protocol="noise"`` and ``protocol="fgsm"``:

    oodbench.tune("react", "paper", id_val, None, fit=train, model=net, protocol="noise",
                  search="gp", n_trials=30, settings={"sigmas": [32, 64, 128], "n_sets": 5})

Both simulate OOD from the ID data and the original network f_theta only, and choose their own
hyper-parameter h "with the same principled approach" as the held-out protocol (Sec. 3):

* **Simulated OOD, noise** (Sec. 4.1, "Gaussian Noise"): "We sample the noise images as
  N(mu, sigma) at each pixel location, and thereafter clip each pixel to be in the range
  [0, 255] ... We fix mu = 128, and consider three levels for the hyperparameter sigma: 32, 64
  and 128." Here: every pixel and channel of an image of the network's input size is
  ``clip(128 + sigma * z, 0, 255)``, ``z`` standard normal (not rounded to integers: the paper
  does not quantise), then divided by 255 and normalised like the ID images.
* **Simulated OOD, FGSM** (Sec. 4.1, "Adversarial Perturbations", Eq. 4): "x_adv = x + eps *
  sign(grad_x L(x, y)), where L denotes the Binary Cross-Entropy (BCE) loss ... three levels
  for the hyperparameter eps: 0.005, 0.01, and 0.1. After applying the perturbation, the
  adversarial images are clipped to remain within the valid pixel range." Here: x is the ID
  image in [0, 1] (the scale on which those eps are perturbations), L is BCE with logits
  between the network's logits and the one-hot label y (mean over the outputs), the gradient
  is taken through the network's input normalisation, and x_adv is clipped to [0, 1]. Sec. 3:
  "the ID data is sampled from the tuning data ... The OOD data is now the result of
  adversarially perturbing the ID tuning data": the OOD set j is the FGSM image of every ID
  image of set j.
* **Eq. 3**: ``l(phi | h) = 1/S sum_j L(d_phi; f_theta, D^h_id,sim,j, D^h_ood,sim,j)``,
  "where we sample S datasets D^h_id,sim,j and D^h_ood,sim,j from the ID data and the
  simulated OOD data". L is AUROC (Sec. 4.1: "We choose to optimize AUROC"; another key of
  ``metrics.evaluate`` may be the criterion). The ID data is ``id_val`` (never trained on); the
  detector is fitted on ``fit`` through f_theta, as the final one.
* "This loss is optimized via Bayesian optimization to find phi*_h" (``search="gp"``; also
  ``"tpe"`` or ``"grid"``); "we resample the simulated ID/OOD data and then optimize the new
  loss l(phi*_h | h) over h": ``h* = argmax_h l_hat(phi*_h | h)`` on new draws (ties: the
  first h). The result is phi*_{h*}, fitted on ``fit`` through f_theta.

Draws (oodbench's choices where the paper gives none): set j of stage s (0: the search, 1: the
fresh sets) for the h of index t holds k ID rows drawn with replacement from the ID pool by
``numpy.random.default_rng([seed, t, j, s])`` (k = the pool's size: a bootstrap, as the
held-out sets), then, for noise, k noise images drawn by the same generator
(``rng.standard_normal((k, 3, H, W))``); for FGSM the FGSM images of those ID rows. The
default pool is every ``id_val`` row for both stages; with ``disjoint_draws`` stage 0 draws
from one seeded half of ``id_val`` and stage 1 from the other (as ``held_out_paper``).

Pixels: the ID images come back through the model's own transform (PIL -> normalised tensor)
and are un-normalised to [0, 1] with the transform's ``mean`` and ``std`` (an
``oodbench.train.tensor_images.eval_transform``, a torchvision ``Normalize`` in a ``Compose``,
or ``settings["mean"]``, ``settings["std"]``); generated images are normalised the same way.
Needs ``model=`` and activations from ``oodbench.extract`` (the images behind ``id_val``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar

import numpy as np
import torch

from oodbench import metrics
from oodbench.constraints import Finite, Flag, Integer, Interval, ListOf, Seed
from oodbench.detectors import Detector
from oodbench.errors import InvalidInputError
from oodbench.extract.activations import Activations
from oodbench.tuning.criteria import resolve_criterion
from oodbench.tuning.kept_classes import images_of
from oodbench.tuning.protocol import Builder, Objective, Stage, TuningData, TuningProtocol, register
from oodbench.tuning.protocols.held_out import HeldOutProtocol
from oodbench.tuning.protocols.paper_protocol import pool_half
from oodbench.tuning.settings import ProtocolSettings

NOISE_MEAN = 128.0
#: the paper's levels (Sec. 4.1)
SIGMAS = (32.0, 64.0, 128.0)
EPSILONS = (0.005, 0.01, 0.1)
_BATCH = 256


@dataclass(frozen=True)
class SyntheticSettings(ProtocolSettings):
    """What the noise and FGSM protocols share: ``n_sets`` (S), ``seed``, ``disjoint_draws``,
    optional ``mean`` / ``std`` of the input normalisation; the level of each is its own
    (:class:`NoiseSettings`, :class:`FgsmSettings`)."""

    kind: ClassVar[str] = ""
    #: the setting that holds the levels h (sigma or eps)
    level_key: ClassVar[str] = ""

    n_sets: Annotated[int, Integer(min=1, note="S, the tuning sets per level")] = 5
    seed: Seed = 0
    disjoint_draws: Annotated[bool, Flag(note="the search's and the fresh sets from disjoint halves")] = False
    mean: Annotated[tuple[float, ...] | None, ListOf(Finite(), size=3, note=(
        "per channel, images in [0, 1]"))] = None
    std: Annotated[tuple[float, ...] | None, ListOf(Interval(0, None, "neither"), size=3, note=(
        "per channel, images in [0, 1]"))] = None

    @property
    def levels(self) -> tuple[float, ...]:
        """The levels h searched, in order."""
        return tuple(getattr(self, self.level_key))

    def describe(self) -> dict[str, Any]:
        return {self.level_key: list(self.levels),
                "n_sets": self.n_sets, "seed": self.seed, "disjoint_draws": self.disjoint_draws,
                **({"noise_mean": NOISE_MEAN} if self.kind == "noise" else {"loss": "bce"})}


@dataclass(frozen=True)
class NoiseSettings(SyntheticSettings):
    """Settings of ``protocol="noise"``: the sigmas of the noise images (pixel units, 0-255)."""

    protocol = kind = "noise"
    level_key = "sigmas"

    sigmas: Annotated[tuple[float, ...], ListOf(Interval(0, None, "neither"), note=(
        "the noise's standard deviations, pixel units 0-255"))] = SIGMAS


@dataclass(frozen=True)
class FgsmSettings(SyntheticSettings):
    """Settings of ``protocol="fgsm"``: the eps of the perturbations (images in [0, 1])."""

    protocol = kind = "fgsm"
    level_key = "eps"

    eps: Annotated[tuple[float, ...], ListOf(Interval(0, 1, "right"), note=(
        "the perturbations' sizes, images in [0, 1]"))] = EPSILONS


#: the settings class of each protocol
SETTINGS: dict[str, type[SyntheticSettings]] = {"noise": NoiseSettings, "fgsm": FgsmSettings}


def Synthetic(kind: str, levels: Sequence[float], **settings: Any) -> SyntheticSettings:  # noqa: N802
    """The settings of the ``kind`` protocol (``"noise"`` or ``"fgsm"``) with ``levels`` as its
    sigmas or eps."""
    cls = SETTINGS[kind]
    return cls.from_mapping({cls.level_key: levels, **settings})


def normalisation(model: Any, config: SyntheticSettings) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean, std) as (1, 3, 1, 1) tensors: the settings', else the model transform's."""
    mean, std = config.mean, config.std
    if mean is None or std is None:
        transform = getattr(model, "transform", None)
        found: list[Any] = [transform, *(getattr(transform, "transforms", None) or [])]
        stats: Any = next(((t.mean, t.std) for t in found
                           if hasattr(t, "mean") and hasattr(t, "std")), None)
        if stats is None:
            raise InvalidInputError(
                f"{config.kind}: cannot find the input normalisation of the model's transform; "
                "give settings mean=[...] and std=[...] (per channel, images in [0, 1])")
        mean, std = mean or tuple(stats[0]), std or tuple(stats[1])
    return (torch.tensor(mean, dtype=torch.float32).view(1, 3, 1, 1),
            torch.tensor(std, dtype=torch.float32).view(1, 3, 1, 1))


def id_pixels(model: Any, acts: Activations, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """The images behind ``acts`` in [0, 1], (N, 3, H, W) float32, through the model's transform."""
    if acts.source is None or acts.source_indices is None:
        raise InvalidInputError(
            "noise / fgsm tuning needs the images behind id_val: pass activations from "
            "oodbench.extract")
    source = images_of(acts)
    x = torch.stack([model.transform(source.load(i)) for i in range(len(source))]).float()
    return (x * std + mean).clamp(0.0, 1.0)


def activations_of(model: Any, pixels: torch.Tensor, mean: torch.Tensor, std: torch.Tensor,
                   name: str) -> Activations:
    """Logits, features and head of ``model`` on [0, 1] images (label -1: OOD)."""
    feats, logits = [], []
    model.eval()
    with torch.no_grad():
        for start in range(0, len(pixels), _BATCH):
            f = model.features((pixels[start : start + _BATCH] - mean) / std).float()
            feats.append(f.numpy())
            logits.append(model.head(f).float().numpy())
    n = len(pixels)
    return Activations(logits=np.concatenate(logits), labels=np.full(n, -1),
                       ids=np.array([f"{name}:{i}" for i in range(n)]),
                       features=np.concatenate(feats),
                       head_weight=model.head_weight.detach().float().numpy(),
                       head_bias=model.head_bias.detach().float().numpy(), meta={"generated": name})


def noise_images(rng: np.random.Generator, k: int, shape: tuple[int, int, int], sigma: float
                 ) -> torch.Tensor:
    """k images of ``clip(128 + sigma z, 0, 255) / 255`` per pixel and channel (Sec. 4.1)."""
    z = rng.standard_normal((k, *shape))
    return torch.from_numpy(np.clip(NOISE_MEAN + sigma * z, 0.0, 255.0) / 255.0).float()


def fgsm(model: Any, pixels: torch.Tensor, labels: np.ndarray, eps: float, mean: torch.Tensor,
         std: torch.Tensor) -> torch.Tensor:
    """Eq. 4: ``clip(x + eps sign(grad_x BCE(logits(x), onehot(y))), 0, 1)``, in batches."""
    model.eval()
    out = []
    y_all = torch.as_tensor(np.array(labels), dtype=torch.long)
    for start in range(0, len(pixels), _BATCH):
        x = pixels[start : start + _BATCH].clone().requires_grad_(True)
        logits = model.logits((x - mean) / std).float()
        target = torch.nn.functional.one_hot(y_all[start : start + _BATCH], logits.shape[1]).float()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, target)
        (grad,) = torch.autograd.grad(loss, x)
        out.append((x.detach() + eps * grad.sign()).clamp(0.0, 1.0))
    return torch.cat(out)


def draw_rows(n_id: int, seed: int, level: int, j: int, stage: int, disjoint: bool
              ) -> tuple[np.ndarray, np.random.Generator]:
    """The ID rows of set j of ``stage`` for the level of index ``level``, and the generator
    (which then draws the noise): k = the pool's size, with replacement."""
    pool = pool_half(n_id, [seed, n_id], stage) if disjoint else np.arange(n_id)
    if pool.size == 0:
        raise InvalidInputError("noise / fgsm: id_val has too few rows to draw from")
    rng = np.random.default_rng([seed, level, j, stage])
    return pool[rng.integers(0, pool.size, size=pool.size)], rng


@dataclass
class TuningSet:
    """One (ID rows of id_val, OOD activations) pair of Eq. 3."""

    id_rows: np.ndarray
    ood: Activations


def set_images(model: Any, labels: np.ndarray, config: SyntheticSettings, level: int, stage: int,
               mean: torch.Tensor, std: torch.Tensor, pixels: torch.Tensor
               ) -> list[tuple[np.ndarray, torch.Tensor]]:
    """The S sets of Eq. 3 for the level of index ``level`` and ``stage``: per set, the ID rows
    of ``pixels`` (id_val) and the simulated-OOD images in [0, 1] (module docstring)."""
    h = float(config.levels[level])
    perturbed = fgsm(model, pixels, labels, h, mean, std) if config.kind == "fgsm" else None
    out = []
    for j in range(config.n_sets):
        rows, rng = draw_rows(len(pixels), config.seed, level, j, stage, config.disjoint_draws)
        if perturbed is None:
            out.append((rows, noise_images(rng, rows.size, (int(pixels.shape[1]), int(pixels.shape[2]),
                                                   int(pixels.shape[3])), h)))
        else:
            out.append((rows, perturbed[torch.from_numpy(rows)]))
    return out


def tuning_sets(model: Any, id_val: Activations, config: SyntheticSettings, level: int, stage: int,
                mean: torch.Tensor, std: torch.Tensor, pixels: torch.Tensor) -> list[TuningSet]:
    """:func:`set_images` with the simulated OOD passed through the network."""
    sets = set_images(model, np.asarray(id_val.labels), config, level, stage, mean, std, pixels)
    h = float(config.levels[level])
    return [TuningSet(rows, activations_of(model, images, mean, std, f"{config.kind}-{h:g}-{stage}-{j}"))
            for j, (rows, images) in enumerate(sets)]


def loss_of(build: Callable[[Mapping[str, Any]], Detector], fit: Activations, id_val: Activations,
            sets: list[TuningSet], criterion: str) -> Callable[[Mapping[str, Any]], dict[str, float]]:
    """point -> Eq. 3: ``criterion`` averaged over the S sets (``<criterion>_std``: spread)."""

    def objective(point: Mapping[str, Any]) -> dict[str, float]:
        det = build(point).fit(fit, id_val=id_val)
        s_id = det.score(id_val)
        correct = np.asarray(id_val.correct)
        values = [metrics.evaluate(s_id[t.id_rows], det.score(t.ood),
                                   id_correct=correct[t.id_rows])[criterion] for t in sets]
        return {criterion: float(np.mean(values)), f"{criterion}_std": float(np.std(values))}

    return objective


def stages(build: Builder, data: TuningData, config: SyntheticSettings, criterion: str
           ) -> Iterator[Stage]:
    """Eq. 3, one stage per level h (consumed in order by the search driver): the loss on the S
    sets to search, and on S fresh sets (resampled) to choose h*."""
    assert data.fit is not None
    fit = data.fit
    mean, std = normalisation(data.model, config)
    pixels = id_pixels(data.model, data.id_val, mean, std)
    for index, h in enumerate(config.levels):
        sets = tuning_sets(data.model, data.id_val, config, index, 0, mean, std, pixels)

        def validate(point: Mapping[str, Any], index: int = index) -> dict[str, float]:
            fresh = tuning_sets(data.model, data.id_val, config, index, 1, mean, std, pixels)
            return loss_of(build, fit, data.id_val, fresh, criterion)(point)

        yield Stage(loss_of(build, fit, data.id_val, sets, criterion), validate=validate,
                    value=float(h), key=index)


class _SyntheticProtocol(TuningProtocol):
    """Shared by the noise and FGSM protocols: a search per level h on S sets, h* on fresh
    sets, phi*_{h*} fitted on ``fit`` through the network (Sec. 3, Eq. 3)."""

    needs = frozenset({"fit", "model", "features"})

    @classmethod
    def check_detector(cls, detector: type[Detector]) -> None:
        HeldOutProtocol.check_detector(detector)

    @classmethod
    def objective(cls, build: Builder, data: TuningData, criterion: str | None,
                  settings: Any) -> Objective:
        config: SyntheticSettings = cls.parse_settings(settings)
        if data.ood_val is not None:
            raise InvalidInputError(
                f"tune: protocol={cls.name!r} simulates OOD from the ID data and takes no "
                "ood_val; pass ood_val=None (or use protocol='ood_val')")
        if data.fit is None or data.model is None:
            raise InvalidInputError(
                f"tune: protocol={cls.name!r} fits the detector on ID training activations "
                "through the network: pass fit=train_activations and model=classifier")
        name, larger = resolve_criterion(criterion, with_ood=True)
        described = config.describe()
        return Objective(None, name, larger, described, label="h",
                         stages=stages(build, data, config, name),
                         signature={"protocol": cls.name, "settings": described})


@register
class NoiseProtocol(_SyntheticProtocol):
    """Tune on Gaussian-noise images N(128, sigma^2) (arXiv 2602.05935, Sec. 3-4.1, Eq. 3)."""

    name = "noise"
    settings = NoiseSettings


@register
class FgsmProtocol(_SyntheticProtocol):
    """Tune on FGSM-perturbed ID images (arXiv 2602.05935, Sec. 3-4.1, Eq. 3-4)."""

    name = "fgsm"
    settings = FgsmSettings
