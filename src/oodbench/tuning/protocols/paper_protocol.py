"""The tuning paper's protocol, Algorithms 1-4: tune a detector without OOD data.

Mondal, Xie, Duan, Wong & Sundaramoorthi, "Tuning Out-of-Distribution (OOD) Detectors Without
Given OOD Data", arXiv 2602.05935, Section 2 and Section 4.1. ``protocol="held_out_paper"``:

    oodbench.tune("plf", "paper", id_val, None, fit=train, model=net, protocol="held_out_paper",
                  held_out={"m_grid": [1, 2, 3], "n_variants": 5, "n_tuning_sets": 5,
                            "retrain": "full"}, search="gp", n_trials=50)

With n the classes of ``fit`` (D_t):

* **Algorithm 1.** For each M of the grid and i = 1..N: withhold M random classes (simulated
  OOD), train the variant f_theta_i^M on the other n - M (simulated ID); for j = 1..S draw a
  simulated ID tuning set D_id,sim,i,j and a simulated OOD one D_ood,sim,i,j. Here the
  simulated-ID pool is the ``id_val`` rows of the kept classes (never trained on), the
  simulated-OOD pool every ``fit`` and ``id_val`` row of the withheld classes (the network never
  saw them: footnote 1 and Sec. 4.1 use "the OOD tuning and training data ... to create balanced
  simulated datasets"). Balanced (footnote 1): each set has k = min(|ID pool|, |OOD pool|)
  samples of each side, drawn with replacement (a bootstrap: the paper gives neither the size
  nor the scheme; drawing without replacement would return the whole smaller pool every time).
* **Algorithm 2.** For each M, phi*_M = argmax_phi l(phi | M), Eq. (1):
  ``l(phi | M) = 1/N sum_i 1/S sum_j AUROC(d_phi; f_theta_i^M, D_id,sim,i,j, D_ood,sim,i,j)``
  (the criterion may be another key of ``metrics.evaluate``; AUROC is the paper's, Sec. 4.1),
  searched with ``search`` (``"gp"``: Bayesian optimisation with a Gaussian-process surrogate,
  the paper's; ``"tpe"``; ``"grid"``). The detector is fitted on the variant's training rows
  through the variant, as the final one is fitted on D_t through f_theta.
* **Algorithm 3.** For each M, resample the tuning sets (new draws, same variants) and
  recompute ``l_hat(phi*_M | M)``; ``M* = argmax_M l_hat`` (Eq. (2); ties: the first M).
  Where the fresh sets come from (``disjoint_draws``): Algorithm 3, line 2 reads "Resample
  D_id,sim,i,j and D_ood,sim,i,j from D_id,sim,i and D_ood,sim,i" -- the same pools as
  Algorithm 2 -- and Sec. 2 calls the result "independently generated simulated datasets
  following the same distribution". The default (``False``) is that reading: new seeded
  bootstrap draws from the same pools (so l and l_hat share samples and correlate).
  ``disjoint_draws=True`` cuts each pool (per variant, simulated ID and OOD alike) into two
  seeded halves: Algorithm 2 draws from one, Algorithm 3 from the other, so l_hat is scored
  on samples the search never saw (:func:`pool_half`).
* **Algorithm 4.** The result is phi*_{M*}, fitted on ``fit`` through the original network.

Variants (``retrain``), all through :class:`oodbench.tuning.protocols.held_out.VariantFactory` (seeded,
cached by content):

* ``"full"``: the network fine-tuned on the kept classes' images through ``oodbench.train``
  (needs ``model=``; the paper trains its variants, Algorithm 1 line 5; here from the given
  weights, not from scratch: a documented approximation of its setting, the nearest one can
  run without the original training recipe);
* ``"scratch"``: a network re-initialised through the model factory and trained from scratch
  with the original network's recipe on the kept classes' images only
  (:mod:`oodbench.tuning.scratch`; ``train={"recipe": "cpu-resnet9"}`` for the small-image
  recipe, else ``oodbench.train.train`` on ``oodbench.models.load(spec, pretrained=False)``):
  the paper's own setting, the only one whose variants never saw the withheld classes;
* ``"last_block"``: the last block and the head retrained from cached activations of the
  stage before it, no image pass per epoch (:mod:`oodbench.tuning.last_block`) -- an
  approximation: every earlier layer keeps what it learnt from the withheld classes;
* ``"head"``: a new linear head on the frozen features -- the cheapest and most optimistic
  approximation (the whole backbone has seen the withheld classes).

Defaults "from the paper for the dataset size at hand" (Sec. 4.1): the grid and N of the paper's
setting nearest in the number of classes (log scale) -- CIFAR-10 (n = 10: M in {1..5}, 10 seeds),
CIFAR-100 (100: {5, 10, ..., 40}, 10), ImageNet-200 (200: {10, 20, 30, 40}, 3), ImageNet-1K
(1000: {50, 100, ..., 300}, 5) -- with M scaled by n / n_paper, rounded, kept in [1, n - 2]
(deduplicated). ``n_tuning_sets`` S is not given in the paper: 5 (our choice). ``retrain``
defaults to ``"full"`` (the paper trains its variants).

Seeds: variant i of M withholds the classes drawn by ``numpy.random.default_rng([seed, i, M])``
(:class:`VariantFactory`) and trains with seed ``seed * 1000 + i``; tuning set j of variant i
of M is drawn by ``default_rng([seed, M, i, j, stage])`` (stage 0: Algorithm 2, 1: Algorithm
3); the sampler of the search for M is seeded by ``search_seed + M``. So the same data and
seeds choose the same phi and M*. Resumable: the variants are cached by content (a re-run
trains nothing), and with ``storage`` each M's search is its own Optuna study
(``<study_name>-M<M>``), continued where it stopped.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

import numpy as np

from oodbench import metrics
from oodbench.constraints import Bool, Flag, Integer, ListOf, Seed
from oodbench.detectors import Detector
from oodbench.errors import InvalidInputError
from oodbench.extract.activations import Activations
from oodbench.tuning.criteria import resolve_criterion
from oodbench.tuning.protocol import Builder, Objective, Stage, TuningData, TuningProtocol, register
from oodbench.tuning.protocols.held_out import (
    HeldOutClasses,
    HeldOutProtocol,
    TrainOptions,
    Variant,
    VariantFactory,
    check_train_options,
    fit_classes,
    retrain_options,
)
from oodbench.tuning.settings import ProtocolSettings

#: the paper's settings (Sec. 4.1): classes -> (M grid, N seeds)
PAPER_SETTINGS: dict[int, tuple[tuple[int, ...], int]] = {
    10: (tuple(range(1, 6)), 10),
    100: (tuple(range(5, 41, 5)), 10),
    200: ((10, 20, 30, 40), 3),
    1000: (tuple(range(50, 301, 50)), 5),
}
RETRAIN = ("full", "last_block", "head", "scratch")


def paper_defaults(n_classes: int) -> tuple[tuple[int, ...], int]:
    """(M grid, N) of the paper's setting nearest to ``n_classes`` (log scale), M scaled to it."""
    nearest = min(PAPER_SETTINGS, key=lambda n: abs(math.log(n / max(n_classes, 1))))
    grid, n_variants = PAPER_SETTINGS[nearest]
    scaled = sorted({min(max(1, round(m * n_classes / nearest)), n_classes - 2) for m in grid})
    return tuple(scaled), n_variants


@dataclass(frozen=True)
class PaperProtocol(ProtocolSettings):
    """Settings of Algorithms 1-4 (see the module docstring); ``None`` = the paper's default."""

    protocol = "held_out_paper"

    m_grid: Annotated[tuple[int, ...] | None, ListOf(Integer(min=1), note=(
        "the class counts M withheld, each at most n - 2 for the n classes of fit"))] = None
    n_variants: Annotated[int | None, Integer(min=1, note="N, the network variants per M")] = None
    n_tuning_sets: Annotated[int, Integer(min=1, note="S, the tuning sets per variant")] = 5
    retrain: Annotated[str, retrain_options(*RETRAIN)] = "full"
    seed: Seed = 0
    train: TrainOptions = field(default_factory=dict)
    cache: Bool = True
    disjoint_draws: Annotated[bool, Flag(note="Algorithm 2's and 3's sets from disjoint halves")] = False

    def check(self) -> None:
        check_train_options(self.retrain, self.train, self.protocol)

    def resolved(self, n_classes: int) -> tuple[tuple[int, ...], int]:
        """(M grid, N) for ``n_classes`` classes, checked: every M an integer, 1 <= M <= n - 2."""
        if n_classes < 3:
            raise InvalidInputError(
                f"held_out_paper needs at least 3 classes in fit (withhold one, keep two); fit "
                f"has {n_classes}")
        grid, n_variants = paper_defaults(n_classes)
        grid = tuple(self.m_grid) if self.m_grid is not None else grid
        for m in grid:
            if not (isinstance(m, (int, np.integer)) and 1 <= m <= n_classes - 2):
                raise InvalidInputError(
                    f"held_out_paper: m_grid holds M={m!r}, but M must be an integer in [1, "
                    f"{n_classes - 2}] (fit has {n_classes} classes: withhold at least one, "
                    "keep at least two)")
        return tuple(int(m) for m in grid), self.n_variants or n_variants

    def describe(self, n_classes: int) -> dict[str, Any]:
        grid, n_variants = self.resolved(n_classes)
        return {"m_grid": list(grid), "n_variants": n_variants, "n_tuning_sets": self.n_tuning_sets,
                "retrain": self.retrain, "seed": self.seed, "train": dict(self.train),
                "disjoint_draws": self.disjoint_draws,
                "balanced": "bootstrap, k = min(|sim ID|, |sim OOD|) per side"}


def as_protocol(settings: PaperProtocol | Mapping[str, Any] | None) -> PaperProtocol:
    """``settings`` as a :class:`PaperProtocol` (a mapping's unknown keys raise, naming the known)."""
    return PaperProtocol.from_mapping(settings)


def pool_half(n: int, key: Sequence[int], stage: int) -> np.ndarray:
    """The sorted rows of one half of a pool of ``n`` rows: a seeded permutation (``key``) cut
    in two, the first ``n // 2`` for stage 0 (Algorithm 2), the rest for stage 1 (Algorithm 3).
    The halves share no row."""
    perm = np.random.default_rng(list(key)).permutation(n)
    return np.sort(perm[: n // 2] if stage == 0 else perm[n // 2:])


def tuning_sets(variant: Variant, m: int, seed: int, n_sets: int, stage: int,
                disjoint: bool = False) -> list[tuple[np.ndarray, np.ndarray]]:
    """S balanced (simulated-ID rows, simulated-OOD rows) draws of ``variant``: k = min of the
    two pool sizes per side, with replacement, seeded by (seed, M, i, j, stage). With
    ``disjoint``, stage 0 draws from one half of each pool and stage 1 from the other
    (:func:`pool_half`, keyed (seed, M, i, side))."""
    n_id, n_ood = len(variant.id_val), len(variant.ood)
    id_pool, ood_pool = np.arange(n_id), np.arange(n_ood)
    if disjoint:
        id_pool = pool_half(n_id, [seed, m, variant.index, 0], stage)
        ood_pool = pool_half(n_ood, [seed, m, variant.index, 1], stage)
    k = min(len(id_pool), len(ood_pool))
    if k == 0:
        halves = " (half of each pool: disjoint_draws)" if disjoint else ""
        raise InvalidInputError(
            f"held_out_paper: variant {variant.index} of M={m} has {n_id} simulated-ID and "
            f"{n_ood} simulated-OOD samples{halves}; id_val needs samples of the kept classes")
    out = []
    for j in range(n_sets):
        rng = np.random.default_rng([seed, m, variant.index, j, stage])
        out.append((id_pool[rng.integers(0, len(id_pool), size=k)],
                    ood_pool[rng.integers(0, len(ood_pool), size=k)]))
    return out


def loss_of(build: Callable[[Mapping[str, Any]], Detector], variants: list[Variant],
            sets: list[list[tuple[np.ndarray, np.ndarray]]], criterion: str
            ) -> Callable[[Mapping[str, Any]], dict[str, float]]:
    """point -> Eq. (1): ``criterion`` averaged over the variants and their tuning sets, with
    ``<criterion>_std`` (spread over the N x S sets)."""

    def objective(point: Mapping[str, Any]) -> dict[str, float]:
        values = []
        for variant, draws in zip(variants, sets):
            det = build(point).fit(variant.fit, id_val=variant.id_val)
            s_id, s_ood = det.score(variant.id_val), det.score(variant.ood)
            correct = np.asarray(variant.id_val.correct)
            values += [metrics.evaluate(s_id[i], s_ood[o], id_correct=correct[i])[criterion]
                       for i, o in draws]
        return {criterion: float(np.mean(values)), f"{criterion}_std": float(np.std(values))}

    return objective


def stages(build: Builder, fit: Activations, id_val: Activations, model: Any,
           config: PaperProtocol, criterion: str) -> Iterator[Stage]:
    """Algorithms 1-3, one stage per M (consumed in order by the search driver): the variants
    of M (Algorithm 1, trained when the stage is reached), the loss of Eq. (1) on the S tuning
    sets to search (Algorithm 2) and on fresh draws to choose M* (Algorithm 3)."""
    n_classes = len(fit_classes(fit))
    grid, n_variants = config.resolved(n_classes)
    factory = VariantFactory(fit, id_val, HeldOutClasses(
        n_variants=n_variants, retrain=config.retrain, seed=config.seed, train=config.train,
        cache=config.cache, held_out_fraction=min(0.5, max(grid) / n_classes)), model)
    for m in grid:
        variants = factory.variants_m(m)  # Algorithm 1
        draws, fresh = ([tuning_sets(v, m, config.seed, config.n_tuning_sets, stage,
                                     config.disjoint_draws) for v in variants] for stage in (0, 1))
        yield Stage(loss_of(build, variants, draws, criterion),  # Algorithm 2
                    validate=loss_of(build, variants, fresh, criterion),  # Algorithm 3
                    value=m, key=m)


@register
class HeldOutPaperProtocol(TuningProtocol):
    """The tuning paper's own Algorithms 1-4 (Mondal et al., arXiv 2602.05935): a search per
    M, M* chosen on resampled tuning sets, the final phi on the original network."""

    name = "held_out_paper"
    settings = PaperProtocol
    keyword = "held_out"
    needs = frozenset({"fit", "features"})

    @classmethod
    def check_detector(cls, detector: type[Detector]) -> None:
        HeldOutProtocol.check_detector(detector)

    @classmethod
    def check_fit_classes(cls, settings: Any, space: Mapping[str, Any] | str,
                          n_classes: int) -> None:
        """Every M of the grid lies in [1, n - 2] (:meth:`PaperProtocol.resolved`)."""
        as_protocol(settings).resolved(n_classes)

    @classmethod
    def objective(cls, build: Builder, data: TuningData, criterion: str | None,
                  settings: Any) -> Objective:
        """One stage per M (:func:`stages`); the driver keeps phi*_{M*}, M* = the first best
        l_hat, and fits it on ``fit`` through the original network (Algorithm 4): the result's
        ``best_value`` is l_hat(phi*_{M*} | M*), its table every point of every M's search
        (columns ``M``, ``best_of_m``, ``best``), its record every M's phi*, l and l_hat, M*."""
        if data.ood_val is not None:
            raise InvalidInputError(
                "tune: protocol='held_out_paper' simulates OOD with withheld ID classes and takes "
                "no ood_val; pass ood_val=None (or use protocol='ood_val')")
        if data.fit is None:
            raise InvalidInputError(
                "tune: protocol='held_out_paper' trains variants on labelled ID training "
                "activations: pass fit=train_activations")
        config = as_protocol(settings)
        name, larger = resolve_criterion(criterion, with_ood=True)
        described = config.describe(len(fit_classes(data.fit)))  # every M checked here
        return Objective(None, name, larger, described, label="M",
                         stages=stages(build, data.fit, data.id_val, data.model, config, name),
                         signature={"protocol": cls.name, "settings": described})
