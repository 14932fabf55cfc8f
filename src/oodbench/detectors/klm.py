"""KL-Matching: KL divergence of the softmax to the closest class-typical softmax.

Hendrycks, Basart, Mazeika, Zou, Kwon, Mostajabi, Steinhardt & Song, "Scaling Out-of-Distribution
Detection for Real-World Settings", ICML 2022 (arXiv 1911.11132).

Fit (no labels needed): for every class k that the model predicts on the fit set, the template
``d_k`` is the mean softmax of the fit samples predicted as k. Score:

    kappa(x) = -min_k KL[p(x) || d_k] = max_k sum_c p_c log d_kc - sum_c p_c log p_c

with the minimum over the classes predicted at least once on the fit set. The paper fits on
held-out ID validation data, and so does OpenOOD (``fit_data="id_val"``, the default); every row
of the fit activations is used (labels are ignored). Computed in float64, chunked over rows.

The cross term ``max_k sum_c p_c log d_kc`` is a (rows x C) by (C x K) product: in float64 it
was the whole cost of scoring (5,000 x 1,000 x 1,000: 0.25 s on one core, against 0.12 s for
the same product in float32). It is found exactly with a float32 screen
(``_best_cross_terms``): the float32 product ``a_ik`` is within ``slack_k`` of the float64
value (the rounding bound of a C-term dot product, ``2 (C + 3) 2^-24 max_c |log d_kc|``, since
``sum_c p_c = 1``), so only the templates with ``a_ik + slack_k >= max_j (a_ij - slack_j)`` can
hold the maximum; all of them lie within twice the largest slack of the row's float32 maximum,
a band found in two float32 passes. The templates in the band (usually one or two per row) are
recomputed as float64 dot products and the largest is taken: the same float64 maximum as the
full product, to float64 rounding. Rows
with many candidates (flat softmaxes next to many similar templates) get the full float64
product; a template with a log that float32 cannot hold is always a candidate; and the screen
is off (all float64) when float32 products are allowed to run in lower precision
(``torch.set_float32_matmul_precision`` other than ``"highest"``, TF32).

A class the model never predicts on the fit data has no template: the data cannot determine it,
so it is left out of the minimum and ``fit`` warns with the number of such classes (OpenOOD puts
a one-hot template there, whose KL to any softmax with two non-zero entries is infinite: the
same minimum). A fit set much smaller than the number of classes leaves most classes out.

pytorch-ood 0.4.0 ``KLMatching`` (``fit_logits`` then ``predict_logits``) returns
``min_k KL = -kappa``; it drops fit rows with label < 0.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import torch

from oodbench.detectors._math import as_tensor, row_max, softmax
from oodbench.detectors._stats import (
    by_chunks,
    chunks,
)
from oodbench.detectors.base import Detector, register
from oodbench.extract.activations import Activations


@register
@dataclass
class KLMatching(Detector):
    """Negative KL divergence to the nearest class-conditional mean softmax."""

    name = "klm"
    requires = frozenset({"logits", "train"})
    paper = "Hendrycks et al., ICML 2022, arXiv 1911.11132"
    default_fit_data = "id_val"

    def _fit(self, train: Activations | None, model: object) -> None:
        assert train is not None
        num_classes = train.num_classes
        sums = torch.zeros(num_classes, num_classes, dtype=torch.float64)
        counts = torch.zeros(num_classes, dtype=torch.int64)
        for rows in chunks(len(train)):
            p = softmax(train.logits[rows])
            pred = row_max(p)[1][:, 0]
            sums.index_add_(0, pred, p)
            counts += torch.bincount(pred, minlength=num_classes)
        present = counts > 0
        templates = sums[present] / counts[present].unsqueeze(1)
        # log 0 (an underflowed template entry) -> most negative float: p > 0 there gives KL ~ inf
        self.log_templates_ = templates.log().nan_to_num(neginf=torch.finfo(torch.float64).min)
        self.template_classes_ = np.flatnonzero(present.numpy())
        missing = num_classes - self.template_classes_.size
        if missing:
            warnings.warn(
                f"detector {self.name!r}: {missing} of {num_classes} classes are never predicted "
                f"on the {len(train)} fit rows, so they have no template and are left out of "
                "the minimum; fit on more held-out ID data to cover them",
                stacklevel=3,
            )

    def _score(self, acts: Activations) -> np.ndarray:
        screen = _float32_screen(self.log_templates_)
        return by_chunks(len(acts), lambda rows: self._chunk(acts.logits[rows], screen),
                         acts.num_classes, itemsize=8)

    def _chunk(self, logits: np.ndarray, screen: _Screen | None) -> torch.Tensor:
        """``kappa`` of one chunk, float64: with ``u = z - max z``, ``p = e^u / Z`` and
        ``sum_c p_c log p_c = sum_c p_c u_c - log Z`` (one exp pass, no log-softmax array)."""
        z = as_tensor(logits)  # shares float64 input: no in-place ops on it
        u = z - z.amax(dim=1, keepdim=True)
        p = u.exp()
        total = p.sum(dim=1)
        p /= total[:, None]
        neg_entropy = (p * u).sum(dim=1) - total.log()
        return _best_cross_terms(p, self.log_templates_, screen) - neg_entropy


#: rows with more screened candidates than this get the full float64 product
_MAX_CANDIDATES = 32


def _float32_screen(log_templates: torch.Tensor) -> _Screen | None:
    """The float32 screen of ``_best_cross_terms``, or ``None`` when float32 products may run
    in lower precision (then everything stays float64).

    ``slack_k = 2 (C + 3) 2^-24 max_c |log d_kc|`` is twice the bound on the error of a float32
    C-term dot product of float32-rounded inputs whose ``p`` sums to 1. A template with a log
    float32 cannot hold (an underflowed entry, floored to the most negative float64) gets a
    float32 row of -1e30 (never near a row's maximum) and is always a candidate.
    """
    if not _exact_float32_products():
        return None
    classes = log_templates.shape[1]
    largest = log_templates.abs().amax(dim=1)
    representable = largest < 1e30
    slack = 2.0 * (classes + 3) * 2.0**-24 * largest[representable]
    width = 2.0 * float(slack.max()) + 1e-30 if slack.numel() else 0.0
    narrow = torch.where(representable[:, None], log_templates, -1e30).to(torch.float32)
    always = (~representable).nonzero()[:, 0]
    return _Screen(narrow, width, always)


@dataclass(frozen=True)
class _Screen:
    """float32 log templates, the candidate band's width below a row's float32 maximum (twice
    the largest slack), and the templates that are candidates in every row."""

    narrow: torch.Tensor
    width: float
    always: torch.Tensor


def _exact_float32_products() -> bool:
    """Whether float32 matrix products run in float32 (no TF32 or bfloat16 passes)."""
    if torch.get_float32_matmul_precision() != "highest":
        return False
    return not (torch.cuda.is_available() and torch.backends.cuda.matmul.allow_tf32)


def _best_cross_terms(p: torch.Tensor, log_templates: torch.Tensor, screen: _Screen | None
                      ) -> torch.Tensor:
    """``max_k sum_c p_ic log d_kc`` per row in float64, through the float32 screen of the
    module docstring (``screen`` from ``_float32_screen``; ``None``: the float64 product).

    The candidates are the templates within ``width`` (twice the largest slack) of the row's
    float32 maximum: a superset of those the exact test ``a_ik + slack_k >= max_j (a_ij -
    slack_j)`` keeps, found in two float32 passes; the band's lower edge is rounded down to
    float32, so no template that can hold the maximum is left out.
    """
    if screen is None:
        return (p @ log_templates.T).max(dim=1).values
    candidates, count, top = _screened(p, screen)
    single = count == 1  # the row's float32 maximum is its only candidate
    if bool(single.all()):
        return torch.linalg.vecdot(p, log_templates[top])
    best = torch.empty(len(p), dtype=torch.float64, device=p.device)
    if bool(single.any()):
        best[single] = torch.linalg.vecdot(p[single], log_templates[top[single]])
    many = count > _MAX_CANDIDATES
    if bool(many.any()):
        best[many] = (p[many] @ log_templates.T).amax(dim=1)
    few = ~(single | many)
    if bool(few.any()):
        best[few] = _best_of_candidates(p[few], log_templates, candidates[few])
    return best


def _best_of_candidates(p: torch.Tensor, log_templates: torch.Tensor, candidates: torch.Tensor
                        ) -> torch.Tensor:
    """``max_k p_i . log d_k`` over each row's ``candidates`` (a (rows, K) mask), float64."""
    rows, ks = candidates.nonzero(as_tuple=True)
    best = torch.full((len(p),), -torch.inf, dtype=torch.float64, device=p.device)
    step = max(1, (8 * 2**20) // (8 * p.shape[1]))  # pairs per block: 8 MiB of float64 rows
    for start in range(0, len(rows), step):
        r, k = rows[start : start + step], ks[start : start + step]
        best.scatter_reduce_(0, r, torch.linalg.vecdot(p[r], log_templates[k]), reduce="amax")
    return best


def _screened(p: torch.Tensor, screen: _Screen) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(rows, K) mask of the candidate templates, their count per row, and each row's float32
    argmax: the float32 products within ``screen.width`` of the row's float32 maximum (the
    band's lower edge rounded down to float32), plus the templates that are always candidates.

    On the CPU the passes run in NumPy (``max``, ``argmax``, the comparison and the count there
    take a fifth of the time of torch's ``max`` with indices and comparison); the same values.
    """
    approx = p.to(torch.float32) @ screen.narrow.T
    values = approx.numpy() if approx.device.type == "cpu" else None  # the NumPy passes
    if values is not None:
        top_value, top = torch.from_numpy(values.max(axis=1)), torch.from_numpy(values.argmax(axis=1))
    else:
        top_value, top = approx.amax(dim=1), approx.argmax(dim=1)
    edge = top_value.to(torch.float64) - screen.width
    edge32 = edge.to(torch.float32)
    edge32 = torch.where(edge32.to(torch.float64) > edge,
                         torch.nextafter(edge32, torch.full_like(edge32, -torch.inf)), edge32)
    if values is not None:
        candidates = torch.from_numpy(values >= edge32.numpy()[:, None])
    else:
        candidates = approx >= edge32[:, None]
    if screen.always.numel():
        candidates[:, screen.always] = True
    if values is not None:
        count = torch.from_numpy(np.count_nonzero(candidates.numpy(), axis=1))
    else:
        count = candidates.sum(dim=1)
    return candidates, count, top
