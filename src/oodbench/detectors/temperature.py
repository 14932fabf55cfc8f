"""Temperature scaling: MSP of logits divided by a temperature fitted by maximum likelihood.

Guo, Pleiss, Sun & Weinberger, "On Calibration of Modern Neural Networks", ICML 2017
(arXiv 1706.04599).

Fit: ``T = argmin_T mean_i -log softmax(z_i / T)_{y_i}`` over the labelled fit rows, by default
held-out ID validation data (``fit_data="id_val"``, the paper's protocol and OpenOOD's; on the
training set the model is over-confident and T comes out too small). The NLL is convex in
``beta = 1/T``; we solve it with safeguarded Newton steps in float64 using the exact gradient
``mean(E_p[z] - z_y)`` and curvature ``mean(Var_p[z])`` until the gradient vanishes
(|g| <= 1e-10 * mean |z|) or a Newton step moves beta by less than 1e-12 relative. Score:

    kappa(x) = max_c softmax(z(x) / T)_c

**When the data cannot determine T** (``UndeterminedStatisticError``): the NLL has a finite
minimiser in T > 0 only if some fit sample is misclassified (its label's logit below the
largest: then the NLL grows without bound as T -> 0) *and* the labels are more likely than
average at T -> infinity (the gradient at beta = 0, ``mean(mean_c z_c - z_y)``, is negative). On
a set the model classifies perfectly, such as its own training set, the NLL decreases all the
way to T -> 0, and on a set whose labels the logits rank below average it decreases as
T -> infinity; ``fit`` raises in both cases, naming the cause.

pytorch-ood 0.4.0 ``TemperatureScaling`` returns ``-kappa`` for its own T, which it fits with
50 L-BFGS iterations (lr 0.01) and so only approximately; given the same T the scores agree.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from oodbench.detectors._math import as_tensor, max_softmax
from oodbench.detectors._stats import (
    by_chunks,
    chunks,
    labelled_rows,
    take_rows,
)
from oodbench.detectors.base import Detector, register
from oodbench.errors import UndeterminedStatisticError
from oodbench.extract.activations import Activations

#: relative rounding of the mean NLL summed over chunks in float64 (a few hundred ulps)
_NLL_ROUNDING = 1e-13
#: a Newton step this small relative to beta ends the fit (T then holds ~1e-12 relative)
_STEP_TOLERANCE = 1e-12


def _nll_terms(logits: np.ndarray, labels: np.ndarray, beta: float) -> tuple[float, float, float]:
    """Mean NLL of softmax(beta z) and its first and second derivatives in beta.

    With ``d = z - max z`` (float64), ``e = exp(beta d)`` and ``S = sum_c e_c``, per row:
    ``NLL = log S - beta d_y``, ``dNLL/dbeta = E_p[d] - d_y`` (= E_p[z] - z_y) and
    ``d2NLL/dbeta2 = Var_p[d] = E_p[d^2] - E_p[d]^2`` (= Var_p[z]; the shift keeps the
    difference small).
    """
    nll = grad = curv = 0.0
    for rows in chunks(len(logits)):
        z = as_tensor(logits[rows])  # may share float64 logits' memory: not modified
        d = z - z.amax(dim=1, keepdim=True)
        d_y = d.gather(1, torch.from_numpy(np.array(labels[rows], dtype=np.int64))[:, None])[:, 0]
        e = torch.exp(d * beta)
        total = e.sum(dim=1)
        e *= d
        mean_d = e.sum(dim=1) / total
        mean_d2 = torch.einsum("ij,ij->i", e, d) / total
        nll += float((total.log() - beta * d_y).sum())
        grad += float((mean_d - d_y).sum())
        curv += float((mean_d2 - mean_d**2).clamp(min=0).sum())
    n = len(logits)
    return nll / n, grad / n, curv / n


def check_temperature_determined(logits: np.ndarray, labels: np.ndarray) -> None:
    """Raise ``UndeterminedStatisticError`` unless the NLL has a finite minimiser in T > 0."""
    wrong = at_infinity = 0.0
    for rows in chunks(len(logits)):
        z = as_tensor(logits[rows])
        z_y = z.gather(1, torch.from_numpy(np.array(labels[rows], dtype=np.int64))[:, None])[:, 0]
        wrong += float((z_y < z.max(dim=1).values).sum())
        at_infinity += float((z.mean(dim=1) - z_y).sum())
    if wrong == 0:
        raise UndeterminedStatisticError(
            f"temperature scaling: the model classifies all {len(labels)} fit samples correctly, "
            "so the NLL keeps decreasing as T -> 0 and has no finite minimiser (this happens on "
            "the training set); fit it on held-out ID validation data the model partly gets "
            "wrong (fit_data='id_val')"
        )
    if at_infinity >= 0:
        raise UndeterminedStatisticError(
            "temperature scaling: on average the logits rank the labels no higher than the mean "
            "class, so the NLL keeps decreasing as T -> infinity; check that the fit labels "
            "match the model's classes"
        )


def fit_temperature(logits: np.ndarray, labels: np.ndarray, max_iter: int = 100) -> float:
    """The NLL-optimal temperature of ``logits`` for ``labels`` (Guo et al. 2017); raises
    ``UndeterminedStatisticError`` when there is none (see the module docstring)."""
    check_temperature_determined(logits, labels)
    scale = sum(float(np.abs(logits[rows]).sum(dtype=np.float64)) for rows in chunks(len(logits)))
    scale = scale / max(logits.size, 1) or 1.0
    beta = 1.0
    nll, grad, curv = _nll_terms(logits, labels, beta)
    for _ in range(max_iter):
        if abs(grad) <= 1e-10 * scale:
            break
        step = grad / curv if curv > 0 else np.sign(grad) * beta / 2
        while True:  # backtrack until the convex NLL decreases (beta stays positive)
            cand = beta - step if beta - step > 0 else beta / 2
            c_nll, c_grad, c_curv = _nll_terms(logits, labels, cand)
            # near the minimum the NLL changes by less than its own rounding: accept a step
            # that does not raise it beyond that
            if c_nll <= nll + _NLL_ROUNDING * abs(nll) or abs(step) < 1e-15 * beta:
                break
            step /= 2
        if cand == beta:
            break
        beta, nll, grad, curv = cand, c_nll, c_grad, c_curv
        if abs(step) <= _STEP_TOLERANCE * beta:  # Newton has converged: the next step is ~step^2
            break
    return 1.0 / beta


@register
@dataclass
class TemperatureScaling(Detector):
    """MSP after temperature scaling fitted by NLL on ID data."""

    name = "temperature_scaling"
    requires = frozenset({"logits", "train"})
    paper = "Guo et al., ICML 2017, arXiv 1706.04599"
    default_fit_data = "id_val"

    def _fit(self, train: Activations | None, model: object) -> None:
        assert train is not None
        rows = labelled_rows(train, f"detector {self.name!r}")
        self.temperature_ = fit_temperature(take_rows(train.logits, rows), take_rows(train.labels, rows))

    def _score(self, acts: Activations) -> np.ndarray:
        return by_chunks(
            len(acts), lambda rows: max_softmax(acts.logits[rows], self.temperature_), acts.num_classes
        )
