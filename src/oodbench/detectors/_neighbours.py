"""Exact nearest-neighbour search over a bank of L2-normalised features (KNN, NNGuide).

One ``NeighbourIndex`` for every backend (:mod:`oodbench.compute`), chosen when the bank is
built:

- ``"numpy"``: faiss-cpu ``IndexFlatL2`` / ``IndexFlatIP`` (exact, float32);
- ``"torch"`` on a GPU with ``faiss-gpu`` installed (``pip install oodbench[gpu]``): the same
  flat index moved to that GPU (``faiss.index_cpu_to_gpu``);
- ``"torch"`` otherwise: the bank as a float32 tensor on the device, searched exactly by
  ``queries @ bank.T`` in tiles of at most ``chunk_bytes`` and a running ``topk`` merge, so the
  memory is bounded whatever the bank and query sizes.

Values are those of faiss' flat indexes: squared L2 distances ``||q||^2 + ||b||^2 - 2 q.b``
in ascending order, or inner products in descending order, float32.
"""

from __future__ import annotations

import faiss
import numpy as np
import torch

from oodbench.compute import Backend, current
from oodbench.detectors._math import l2_normalize

METRICS = ("l2", "ip")


def normalized_float32(features: np.ndarray) -> np.ndarray:
    """Unit-L2 rows as a C-contiguous float32 array (what faiss indexes), chunk by chunk."""
    out = np.empty(features.shape, dtype=np.float32)
    for rows in current().rows(len(features), features.shape[1], 8):
        out[rows] = l2_normalize(features[rows]).numpy()
    return out


def _faiss_index(bank: np.ndarray, metric: str, backend: Backend) -> tuple[faiss.Index, object]:
    """A flat faiss index of ``bank`` (on the backend's GPU when it has one) and the GPU
    resources it needs kept alive (``None`` on the CPU)."""
    bank = np.ascontiguousarray(bank, dtype=np.float32)
    index = faiss.IndexFlatL2(bank.shape[1]) if metric == "l2" else faiss.IndexFlatIP(bank.shape[1])
    index.add(bank)
    if not backend.on_gpu:
        return index, None
    resources = faiss.StandardGpuResources()
    return faiss.index_cpu_to_gpu(resources, backend.device.index or 0, index), resources


def _faiss_on(backend: Backend) -> bool:
    """Whether faiss searches on this backend: always on the CPU path, on a GPU when faiss-gpu is
    installed and sees one."""
    if backend.kind == "numpy":
        return True
    return backend.on_gpu and hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0


class NeighbourIndex:
    """The ``k`` best bank entries for each query: smallest squared L2 distances (``"l2"``) or
    largest inner products (``"ip"``), exact.

    Args:
        bank: (M, D) L2-normalised float32 rows (``normalized_float32``), or any rows for
            ``"ip"`` (NNGuide scales them).
        metric: ``"l2"`` or ``"ip"``.
    """

    def __init__(self, bank: np.ndarray, metric: str):
        if metric not in METRICS:
            raise ValueError(f"metric must be one of {METRICS}; got {metric!r}")
        self.metric = metric
        self.backend = current()
        self.size = len(bank)
        self.faiss_: faiss.Index | None = None
        if _faiss_on(self.backend):
            self.faiss_, self.faiss_resources_ = _faiss_index(bank, metric, self.backend)
            return
        self.bank_ = self.backend.tensor(bank, torch.float32)
        self.bank_sq_ = (self.bank_ * self.bank_).sum(dim=1)

    def search(self, features: np.ndarray, k: int) -> np.ndarray:
        """The ``k`` best values for every row of ``features`` after L2 normalisation, float32
        (N, k), best first; the queries are normalised and searched chunk by chunk."""
        out = np.empty((len(features), k), dtype=np.float32)
        backend = self.backend
        if self.faiss_ is not None:
            for rows in backend.rows(len(features), features.shape[1], 8):
                out[rows] = self.faiss_.search(normalized_float32(features[rows]), k)[0]
            return out
        # query rows per tile: the (rows x bank block) similarity tile stays within chunk_bytes
        query_rows = max(1, min(1024, backend.chunk_bytes // (4 * max(k, 1024))))
        for start in range(0, len(features), query_rows):
            rows = slice(start, min(start + query_rows, len(features)))
            query = torch.nn.functional.normalize(backend.tensor(features[rows], torch.float32), dim=1)
            out[rows] = self._search_tensor(query, k).cpu().numpy()
        return out

    def _search_tensor(self, query: torch.Tensor, k: int) -> torch.Tensor:
        """Exact top-k of one query chunk against the bank, block by block (running merge)."""
        largest = self.metric == "ip"
        block = max(k, self.backend.chunk_bytes // (4 * len(query)))
        best: torch.Tensor | None = None
        query_sq = (query * query).sum(dim=1, keepdim=True)
        for start in range(0, self.size, block):
            bank = self.bank_[start : start + block]
            if largest:
                values = query @ bank.T
            else:
                values = torch.addmm(query_sq + self.bank_sq_[start : start + block], query, bank.T,
                                     alpha=-2.0)
            if best is not None:
                values = torch.cat([best, values], dim=1)
            best = torch.topk(values, min(k, values.shape[1]), dim=1, largest=largest).values
        assert best is not None
        return best
