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

Inside ``reuse_searches()`` (a tuning search) a search of a bank and queries searched before,
with another ``k``, is answered from the earlier one, to the same bits
(:mod:`oodbench.detectors._search_memo`).
"""

from __future__ import annotations

import faiss
import numpy as np
import torch

from oodbench.compute import Backend, current
from oodbench.detectors._search_memo import array_digest, memo_search

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
        (N, k), best first: :meth:`fresh_search`, or inside ``reuse_searches()`` the same values
        from an earlier search of the same bank and rows (:mod:`oodbench.detectors._search_memo`)."""
        return memo_search(self, features, k)

    def plan(self, n: int, k: int) -> tuple[object, ...] | None:
        """What decides how :meth:`fresh_search` computes each value of ``n`` query rows for
        ``k``: two searches with equal plans compute the same values to the bit (only how many
        they keep differs), so the best ``k`` are the first ``k`` of a deeper search's. None:
        not reused (faiss-gpu)."""
        if self.gpu_index_ is not None:
            return None
        if self.host_bank_ is not None:
            return ("faiss", k == 1)  # faiss' k = 1 runs a fused top-1 kernel of its own rounding
        rows = self._query_rows(k)
        lengths = sorted({min(rows, n), n % rows} - {0})
        return ("torch", rows, tuple(self._block(k, m) for m in lengths))

    def content_digest(self) -> bytes | None:
        """sha256 of the bank as searched (and of its squared norms on the torch path); None
        when it holds NaN or an infinity (``array_digest``)."""
        if self.host_bank_ is not None:
            return array_digest(self.host_bank_)
        assert self.gpu_index_ is None, "faiss-gpu searches have no plan: never reused"
        return array_digest(self.bank_.cpu().numpy(), self.bank_sq_.cpu().numpy())

    def _query_rows(self, k: int) -> int:
        """Query rows per tile on the torch path: the (rows x bank block) similarity tile stays
        within ``chunk_bytes``."""
        return max(1, min(1024, self.backend.chunk_bytes // (4 * max(k, 1024))))

    def _block(self, k: int, rows: int) -> int:
        """Bank rows per block against a chunk of ``rows`` queries on the torch path."""
        return max(k, self.backend.chunk_bytes // (4 * rows))

    def fresh_search(self, features: np.ndarray, k: int) -> np.ndarray:
        """The search itself: the queries are normalised and searched chunk by chunk."""
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
        query_rows = self._query_rows(k)
        for start in range(0, len(features), query_rows):
            rows = slice(start, min(start + query_rows, len(features)))
            query = torch.nn.functional.normalize(backend.tensor(features[rows], torch.float32), dim=1)
            out[rows] = self._search_tensor(query, k).cpu().numpy()
        return out

    def _search_tensor(self, query: torch.Tensor, k: int) -> torch.Tensor:
        """Exact top-k of one query chunk against the bank, block by block (running merge)."""
        largest = self.metric == "ip"
        block = self._block(k, len(query))
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
