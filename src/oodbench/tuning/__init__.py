"""Hyper-parameter search for detectors on cached activations: the ``oodbench.tune`` function.

This package is light: importing it (or a tuning spec, :mod:`oodbench.tuning.spec`) loads no
detector, training or extraction code. The search itself is :func:`oodbench.tuning.api.tune`,
exported as ``oodbench.tune`` (an ordinary function); the protocols are entries of
:data:`oodbench.tuning.protocol.PROTOCOLS`, one file each, loaded on first lookup; other search
strategies are sibling modules (``oodbench.tuning.<name>``). The names below (``tune``,
``TuneResult``, ``PROTOCOLS``, ``Range``, ...) are looked up on first use.

    result = oodbench.tune("react", {"percentile": [85, 90, 95, 99]}, id_val, ood_val, fit=train)
    result = oodbench.tune("react", "openood", id_val, ood_val, fit=train)   # OpenOOD's own sweep
    result.best_params   # {"percentile": 90}
    result.detector      # the detector with those hyper-parameters, fitted on its fit data
    result.table         # one row per grid point: its hyper-parameters and every metric

Detectors are fitted on the ID data their ``fit_data`` names: ``fit`` (the ID training set) or
``id_val`` -- the same ID validation activations the grid points are scored on, as in OpenOOD,
whose ReAct / VRA / KL-matching / temperature scaling fit on its ID-val split.

**With OOD data** (``ood_val`` given) this is the OpenOOD v1.5 protocol: every point of the grid
is scored on an ID validation set and an OOD validation set and the point with the best AUROC
(``criterion="auroc"``, the default; any key of :func:`oodbench.metrics.evaluate` may be used)
wins. ``grid="openood"`` takes OpenOOD's own sweep for the detector (its configs'
``postprocessor_sweep``, see :mod:`oodbench.detectors.presets`), starts from
``preset="openood"`` when given a name, and visits the points in OpenOOD's order (its
``recursive_generator``: the first swept hyper-parameter varies fastest), so ties break as they
do there; a detector OpenOOD does not search (``APS_mode: False``) is evaluated at its
configured values only. Two differences from OpenOOD's implementation: (1) whenever a hyper-parameter can change
what ``fit`` learns (ReAct's percentile sets its threshold, DICE's sparsity its mask, KNN's
subsampling its bank), the detector is fitted again for that grid point -- OpenOOD relies on
each postprocessor's ``set_hyperparam`` to do that, and e.g. its ``DICEPostprocessor`` only
stores the new ``p`` and keeps the weight mask computed at the first grid point for the whole
sweep; (2) nothing runs the network: every point is scored from the cached activations (only
live-model detectors such as ODIN and MC-dropout run their own passes).

A detector class declares ``score_only_hyperparams`` (field names that only affect scoring:
KNN's k, whose bank stays the same, a temperature); grid points that differ only in those share
one fit (the table's ``refit`` column says which points fitted). Without that declaration every
grid point is fitted separately, which is always correct.

The returned detector records the search in ``detector.tuning`` (:meth:`TuneResult.tuning_record`,
the results table's ``tuning`` column; ``grid`` names a named space: ``"openood"`` or
``"paper"``, absent for a space given as a table).

**Without OOD data** (``ood_val=None``) the criterion is ``"id_auroc"`` (default) or ``"aurc"``:
how well the score separates the ID validation samples the model classifies correctly from
those it gets wrong (the C-OOD paper's ID-AUROC, i.e. selective-prediction quality; AURC is the
area under the risk-coverage curve, lower is better). It needs only labelled ID data, so nothing
about the OOD test distribution leaks into the choice, and it favours settings that keep the
score a faithful confidence of the classifier's own predictions. It is a proxy: it is not the
OOD AUROC, it cannot see failure modes that only OOD inputs trigger, and for detectors whose
score ignores the prediction (feature-distance detectors) it can prefer different settings
than OOD data would. Report which mode chose the hyper-parameters.

Ties are broken by grid order (the first best point wins); NaN metrics never win.

**Other protocols and searches** (:mod:`oodbench.tuning.dispatch`): ``protocol="held_out_classes"``
tunes without OOD data by withholding ID classes (:mod:`oodbench.tuning.protocols.held_out`: one
withheld fraction, M tuned jointly with phi, oodbench's approximation), and
``protocol="held_out_paper"`` is that paper's own Algorithms 1-4 (Mondal et al., arXiv
2602.05935; :mod:`oodbench.tuning.protocols.paper_protocol`: an M grid, N variants per M, S balanced
tuning sets, phi per M, M* on resampled sets, the final phi on the original network;
variants fine-tuned, retrained in the last block or head, or trained from scratch on the kept
classes, ``retrain="scratch"``, :mod:`oodbench.tuning.scratch`); ``protocol="noise"`` and
``protocol="fgsm"`` are that paper's baselines (Gaussian-noise or FGSM-perturbed images as the
simulated OOD, Sec. 3, Eq. 3-4; :mod:`oodbench.tuning.protocols.synthetic`);
``search="tpe"`` or ``search="gp"`` searches ranges (:class:`oodbench.tuning.space.Range`) with
Optuna's seeded, resumable TPE or Gaussian-process sampler (:mod:`oodbench.tuning.optuna_search`).
``grid="paper"`` is the tuning paper's search space for the detector (arXiv 2602.05935, App. A;
:mod:`oodbench.tuning.paper_space`), searched by ``search="gp"`` unless another is named.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from oodbench.tuning.api import NAMED_GRIDS, named_grid, tune
    from oodbench.tuning.criteria import ID_CRITERIA, OOD_CRITERIA
    from oodbench.tuning.protocol import PROTOCOLS, TuningProtocol, register
    from oodbench.tuning.result import TuneResult
    from oodbench.tuning.space import Range

#: name -> the module that defines it (imported on first use)
_LAZY = {
    "tune": "oodbench.tuning.api",
    "named_grid": "oodbench.tuning.api",
    "NAMED_GRIDS": "oodbench.tuning.api",
    "ID_CRITERIA": "oodbench.tuning.criteria",
    "OOD_CRITERIA": "oodbench.tuning.criteria",
    "PROTOCOLS": "oodbench.tuning.protocol",
    "TuningProtocol": "oodbench.tuning.protocol",
    "register": "oodbench.tuning.protocol",
    "TuneResult": "oodbench.tuning.result",
    "Range": "oodbench.tuning.space",
}

__all__ = ["ID_CRITERIA", "NAMED_GRIDS", "OOD_CRITERIA", "PROTOCOLS", "Range", "TuneResult",
           "TuningProtocol", "named_grid", "register", "tune"]


def __getattr__(name: str) -> Any:
    """``oodbench.tuning.tune``, ``oodbench.tuning.TuneResult``, ... from their modules."""
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
