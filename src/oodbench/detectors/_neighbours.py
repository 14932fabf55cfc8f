"""Exact nearest-neighbour search over a bank of L2-normalised features (KNN, NNGuide).

One ``NeighbourIndex`` for every backend (:mod:`oodbench.compute`), chosen when the bank is
built:

- ``"numpy"``: faiss-cpu's exact brute-force search (``faiss.knn``, the search of its
  ``IndexFlatL2`` / ``IndexFlatIP``, float32) over the bank array itself: no index copy of it;
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

METRICS = ("l2", "ip")


def normalized_float32(features: np.ndarray) -> np.ndarray:
    """Unit-L2 rows as a C-contiguous float32 array (what faiss searches), chunk by chunk.

    Each row is divided in float32 by its norm accumulated in float64 (within one float32 ulp
    of the correctly rounded quotient; float16 rows are widened first); zero rows stay zero.
    """
    out = np.empty(features.shape, dtype=np.float32)

    def one(rows: slice) -> None:
        _unit_rows(features[rows], out=out[rows])

    backend = current()
    backend.run_chunks(backend.rows(len(features), features.shape[1], 8), one)
    return out


def _unit_rows(rows: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """One chunk of ``normalized_float32``, in this thread (into ``out`` when given)."""
    chunk = np.asarray(rows, dtype=np.float32)
    norms = np.sqrt(np.einsum("ij,ij->i", chunk, chunk, dtype=np.float64))
    if out is None:
        out = np.empty(chunk.shape, dtype=np.float32)
    return np.divide(chunk, np.maximum(norms, 1e-12).astype(np.float32)[:, None], out=out)


def _gpu_index(bank: np.ndarray, metric: str, backend: Backend) -> tuple[faiss.Index, object]:
    """A flat faiss index of ``bank`` on the backend's GPU and the GPU resources it needs kept
    alive."""
    index = faiss.IndexFlatL2(bank.shape[1]) if metric == "l2" else faiss.IndexFlatIP(bank.shape[1])
    index.add(np.ascontiguousarray(bank, dtype=np.float32))
    resources = faiss.StandardGpuResources()
    return faiss.index_cpu_to_gpu(resources, backend.device.index or 0, index), resources


def _faiss_gpu(backend: Backend) -> bool:
    """Whether faiss searches on the backend's GPU: faiss-gpu installed and seeing one."""
    return backend.on_gpu and hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0


class NeighbourIndex:
    """The ``k`` best bank entries for each query: smallest squared L2 distances (``"l2"``) or
    largest inner products (``"ip"``), exact.

    Args:
        bank: (M, D) L2-normalised float32 rows (``normalized_float32``), or any rows for
            ``"ip"`` (NNGuide scales them). Kept, not copied, on the NumPy path.
        metric: ``"l2"`` or ``"ip"``.
    """

    def __init__(self, bank: np.ndarray, metric: str):
        if metric not in METRICS:
            raise ValueError(f"metric must be one of {METRICS}; got {metric!r}")
        self.metric = metric
        self.backend = current()
        self.size = len(bank)
        self.host_bank_: np.ndarray | None = None
        self.gpu_index_: faiss.Index | None = None
        if self.backend.kind == "numpy":
            self.host_bank_ = np.ascontiguousarray(bank, dtype=np.float32)
        elif _faiss_gpu(self.backend):
            self.gpu_index_, self.gpu_resources_ = _gpu_index(bank, metric, self.backend)
        else:
            self.bank_ = self.backend.tensor(bank, torch.float32)
            self.bank_sq_ = (self.bank_ * self.bank_).sum(dim=1)

    def _faiss_search(self, query: np.ndarray, k: int) -> np.ndarray:
        """faiss' exact search of normalised float32 ``query`` rows: over the host bank, or
        with the GPU index."""
        if self.gpu_index_ is not None:
            return self.gpu_index_.search(query, k)[0]
        assert self.host_bank_ is not None
        metric = faiss.METRIC_L2 if self.metric == "l2" else faiss.METRIC_INNER_PRODUCT
        return faiss.knn(query, self.host_bank_, k, metric=metric)[0]

    def search(self, features: np.ndarray, k: int) -> np.ndarray:
        """The ``k`` best values for every row of ``features`` after L2 normalisation, float32
        (N, k), best first; the queries are normalised and searched chunk by chunk."""
        out = np.empty((len(features), k), dtype=np.float32)
        backend = self.backend
        if self.gpu_index_ is not None:
            for rows in backend.rows(len(features), features.shape[1], 8):
                out[rows] = self._faiss_search(normalized_float32(features[rows]), k)
            return out
        if self.host_bank_ is not None:  # chunks on the single-threaded workers (faiss too)
            def one(rows: slice) -> None:
                out[rows] = self._faiss_search(_unit_rows(features[rows]), k)

            backend.run_chunks(backend.rows(len(features), features.shape[1], 8), one)
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
