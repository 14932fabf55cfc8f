"""``oodbench.tune(...)``: the hyper-parameter search itself.

The package's docstring (:mod:`oodbench.tuning`) is the account of what it searches, the
protocols, the search strategies and the results; this module resolves named spaces
(``"openood"``, ``"paper"``) and hands every protocol and strategy to the one search driver,
:mod:`oodbench.tuning.dispatch`.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from oodbench.detectors import Detector, create
from oodbench.detectors._search_memo import reuse_searches
from oodbench.detectors.base import UntunedDefaultsWarning
from oodbench.detectors.presets import preset_for
from oodbench.errors import InvalidInputError
from oodbench.extract.activations import Activations
from oodbench.tuning.dispatch import search as run_search
from oodbench.tuning.edges import warn_edges
from oodbench.tuning.paper_space import paper_space
from oodbench.tuning.result import TuneResult
from oodbench.tuning.space import parse_space

__all__ = ["NAMED_GRIDS", "named_grid", "tune"]

#: grids known by name: the protocol whose preset holds the sweep
NAMED_GRIDS = ("openood",)


def named_grid(name: str, detector: str) -> dict[str, list[Any]]:
    """The grid a protocol's preset names for ``detector``: OpenOOD's sweep, or its configured
    values as a single point where OpenOOD does not search (``APS_mode: False``)."""
    if name not in NAMED_GRIDS:
        raise InvalidInputError(
            f"tune: unknown named grid {name!r}; use one of {NAMED_GRIDS + ('paper',)} or a dict "
            "of lists"
        )
    preset = preset_for(detector, name)
    if preset.grid:
        return {k: list(v) for k, v in preset.grid.items()}
    if not preset.hyperparams:
        raise InvalidInputError(
            f"tune: {name} has nothing to search for {detector!r} (no hyper-parameters); use "
            f"create({detector!r}, preset={name!r}) directly"
        )
    return {k: [v] for k, v in preset.hyperparams.items()}


def tune(
    detector_or_name: Detector | str,
    grid: Mapping[str, Sequence[Any]] | str,
    id_val: Activations,
    ood_val: Activations | None = None,
    **kwargs: Any,
) -> TuneResult:
    """Pick the detector's hyper-parameters from ``grid`` (see :func:`_tune` for the arguments).

    The candidates a search fits are not the detector's untuned run, so they raise no
    ``UntunedDefaultsWarning``; a best value at the edge of the searched space raises an
    :class:`~oodbench.tuning.edges.EdgeOfSpaceWarning` (:mod:`oodbench.tuning.edges`).

    Every protocol and search goes through the one driver,
    :func:`oodbench.tuning.dispatch.search`, which runs inside
    :func:`~oodbench.detectors._search_memo.reuse_searches`: trials that score the same rows
    against the same bank reuse one neighbour search (KNN, NNGuide), bit for bit."""
    with warnings.catch_warnings(), reuse_searches():
        warnings.simplefilter("ignore", UntunedDefaultsWarning)
        result, space = _tune(detector_or_name, grid, id_val, ood_val, **kwargs)
    warn_edges(result.detector.name, parse_space(space, allow_ranges=True), result.best_params)
    return result


def _tune(
    detector_or_name: Detector | str,
    grid: Mapping[str, Sequence[Any]] | str,
    id_val: Activations,
    ood_val: Activations | None = None,
    *,
    fit: Activations | None = None,
    model: Any = None,
    criterion: str | None = None,
    protocol: str = "ood_val",
    search: str | None = None,
    **options: Any,
) -> tuple[TuneResult, Mapping[str, Any]]:
    """Pick the detector's hyper-parameters from ``grid`` (see the module docstring); returns
    the result and the space searched.

    Args:
        detector_or_name: a registry name (the grid overrides its defaults, or the
            ``"openood"`` preset's values with ``grid="openood"``) or a detector (the grid
            overrides its hyper-parameters).
        grid: hyper-parameter name -> list of values; every combination is tried. With
            ``search="tpe"`` also ranges (``Range(low, high)`` or ``{"low": .., "high": ..}``).
            ``"openood"``: OpenOOD v1.5's sweep for this detector, in OpenOOD's order.
            ``"paper"``: the tuning paper's ranges (App. A of arXiv 2602.05935).
        id_val, ood_val: validation activations (``ood_val=None``: the OOD-free mode);
            detectors with ``fit_data="id_val"`` are also fitted on ``id_val``.
        fit: ID training activations for detectors that learn statistics from them; model:
            the live classifier for detectors that need it.
        criterion: a metric key; default ``"auroc"`` with OOD data, ``"id_auroc"`` without.
        protocol: a registered tuning protocol (:mod:`oodbench.tuning.protocol`):
            ``"ood_val"`` (above) or ``"held_out_classes"`` (no OOD data: simulated by
            withholding ID classes of ``fit``; ``held_out={"n_variants": 5,
            "held_out_fraction": 0.2, "retrain": "head", "seed": 0, "train": {...}}``;
            ``retrain="full"`` and ``"scratch"`` also need ``model``), ``"held_out_paper"``
            (Algorithms 1-4 of arXiv 2602.05935), ``"noise"`` / ``"fgsm"`` (the paper's
            baselines: Gaussian-noise or FGSM images as simulated OOD, Eq. 3-4,
            :mod:`oodbench.tuning.protocols.synthetic`; need ``model``); ``settings=`` gives any
            protocol's settings.
        search: ``"grid"`` (the default), ``"tpe"`` or ``"gp"`` (``n_trials=50, seed=0,
            storage=None, study_name=None, progress=False``); ``"gp"`` by default for
            ``grid="paper"``.
    """
    grid_name = grid if isinstance(grid, str) else "custom"
    space: Mapping[str, Any]
    if isinstance(grid, str):
        det_name = detector_or_name.name if isinstance(detector_or_name, Detector) else detector_or_name
        if grid == "paper":
            space, search = paper_space(det_name, fit), search or "gp"
        else:
            space = named_grid(grid, det_name)
            if not isinstance(detector_or_name, Detector):
                detector_or_name = create(detector_or_name, preset=grid_name)
    else:
        space = grid
    found = run_search(detector_or_name, space, id_val, ood_val, fit=fit, model=model,
                       criterion=criterion, protocol=protocol, search=search or "grid",
                       grid=grid_name, **options)
    return found, space
