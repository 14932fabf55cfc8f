"""NNGuide: the energy score guided by nearest neighbours in an energy-scaled feature bank.

Park, Jung & Teoh, "Nearest Neighbor Guidance for Out-of-Distribution Detection", ICCV 2023
(arXiv 2309.14888, https://github.com/roomo7time/nnguide).

Fit: the bank holds ``E(z_i) * f_i / ||f_i||`` for the fit rows, with ``E(z) = logsumexp(z)``
the negative energy of the logits (optionally a random ``fit_fraction`` of the rows, drawn with
``seed``; labels are not used). Score, with ``N_k(x)`` the k bank entries of largest inner
product with ``f(x) / ||f(x)||``:

    G(x)     = 1/k sum_{b in N_k(x)} <f(x)/||f(x)||, b>       (guidance)
    kappa(x) = G(x) * E(z(x))

Exact search in float32 (a faiss ``IndexFlatIP`` on the CPU path; see
:mod:`oodbench.detectors._neighbours` for the torch path). Defaults ``k=10`` (the official code) and
``fit_fraction=1.0``: the paper builds the ImageNet bank from a random 1% of the training set
(``preset="paper"``: k=10, 1%; ``preset="openood"``: K=100, 1%), so pass ``fit_fraction=0.01``
with the full ImageNet training activations. ``k`` only affects scoring (one fit per bank; a
tuning search's trials share each scored set's search, as KNN's, :mod:`oodbench.detectors._search_memo`).
OpenOOD's bank is the first ~1% of its unshuffled training loader, oodbench's a seeded random 1%.

pytorch-ood 0.4.0 ``NNGuide(encoder, head, k)`` returns ``-kappa`` (exact top-k by chunked
matmul); it drops fit rows with label < 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import numpy as np

from oodbench.constraints import Interval, Seed
from oodbench.detectors._math import neg_energy
from oodbench.detectors._neighbours import NeighbourIndex, normalized_float32
from oodbench.detectors._stats import (
    Neighbours,
    bank_rows,
    by_chunks,
    check_k_in_bank,
    features_of,
    take_rows,
)
from oodbench.detectors.base import Detector, register
from oodbench.extract.activations import Activations


@register
@dataclass
class NNGuide(Detector):
    """Energy times the mean top-k similarity to an energy-scaled bank of training features."""

    name = "nnguide"
    requires = frozenset({"features", "logits", "train"})
    paper = "Park, Jung & Teoh, ICCV 2023, arXiv 2309.14888"
    score_only_hyperparams = frozenset({"k"})

    k: Neighbours = 10
    fit_fraction: Annotated[float, Interval(
        0, 1, "right", note="the share of the fit rows in the bank")] = 1.0
    seed: Seed = 0

    def _fit(self, train: Activations | None, model: object) -> None:
        assert train is not None
        who = f"detector {self.name!r}"
        rows = bank_rows(len(train), self.k, self.fit_fraction, self.seed, who)
        bank = normalized_float32(take_rows(features_of(train), rows))
        logits = take_rows(train.logits, rows)
        bank *= by_chunks(len(bank), lambda part: neg_energy(logits[part]), logits.shape[1]).astype(
            np.float32
        )[:, None]
        self.index_ = NeighbourIndex(bank, "ip")

    def _score(self, acts: Activations) -> np.ndarray:
        check_k_in_bank(int(self.k), self.index_.size, f"detector {self.name!r}")
        guidance = self.index_.search(features_of(acts), int(self.k)).astype(np.float64).mean(axis=1)
        return guidance * by_chunks(len(acts), lambda rows: neg_energy(acts.logits[rows]), acts.num_classes)
