"""KNN: distance to the k-th nearest normalised training feature.

Sun, Ming, Zhu & Li, "Out-of-Distribution Detection with Deep Nearest Neighbors", ICML 2022
(arXiv 2204.06507).

Fit: the bank is the L2-normalised features ``z_i = f_i / ||f_i||`` of the fit rows (labels are
not used), optionally a random ``fit_fraction`` of them (the paper's alpha, drawn with ``seed``).
Score, with ``z_(k)`` the k-th nearest bank entry to ``z = f(x) / ||f(x)||``:

    kappa(x) = -||z - z_(k)||_2

Exact search in float32 (squared distances, square-rooted here): a faiss ``IndexFlatL2`` on the
CPU path, faiss on the GPU with ``faiss-gpu``, else chunked ``matmul`` + ``topk`` in torch
(:mod:`oodbench.detectors._neighbours`).
Default ``k=50``: the paper uses k=50 on CIFAR-10 and k=200 on CIFAR-100, and on ImageNet
k=1000 with the full 1.28M training bank (k=10 with alpha=1%; ``preset="paper"`` is k=1000);
OpenOOD v1.5 configures k=50 and searches {50, 100, 200, 500, 1000} on its validation sets
(``preset="openood"``, ``oodbench.tune(..., grid="openood")``; it scores the squared distance,
the same ranking). The right k grows with the bank, so pass ``k=1000`` with a full ImageNet bank
(or tune it). ``k`` only affects scoring: a grid over k fits the bank once, and the trials of a
tuning search (``oodbench.tune``'s Bayesian searches and protocols) search each scored set once,
deep enough for their ks, to the same bits (:mod:`oodbench.detectors._search_memo`). Invariant
to rescaling any feature vector.

pytorch-ood 0.4.0 ``KNN(k=k)`` (``fit_features`` then ``predict_features``) returns
``||z - z_(k)|| = -kappa`` (sklearn ``NearestNeighbors``); it drops fit rows with label < 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import numpy as np

from oodbench.constraints import Interval, Seed
from oodbench.detectors._neighbours import NeighbourIndex, normalized_float32
from oodbench.detectors._stats import Neighbours, bank_rows, check_k_in_bank, features_of, take_rows
from oodbench.detectors.base import Detector, register
from oodbench.extract.activations import Activations


@register
@dataclass
class KNN(Detector):
    """Negative distance to the k-th nearest normalised training feature."""

    name = "knn"
    requires = frozenset({"features", "train"})
    paper = "Sun et al., ICML 2022, arXiv 2204.06507"
    score_only_hyperparams = frozenset({"k"})

    k: Neighbours = 50
    fit_fraction: Annotated[float, Interval(
        0, 1, "right", note="the share of the fit rows in the bank")] = 1.0
    seed: Seed = 0

    def _fit(self, train: Activations | None, model: object) -> None:
        assert train is not None
        who = f"detector {self.name!r}"
        rows = bank_rows(len(train), self.k, self.fit_fraction, self.seed, who)
        self.index_ = NeighbourIndex(normalized_float32(take_rows(features_of(train), rows)), "l2")

    def _score(self, acts: Activations) -> np.ndarray:
        check_k_in_bank(int(self.k), self.index_.size, f"detector {self.name!r}")
        kth = self.index_.search(features_of(acts), int(self.k))[:, -1].astype(np.float64)
        return -np.sqrt(np.maximum(kth, 0.0))
