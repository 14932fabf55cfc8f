"""Exact neighbour searches reused across tuning trials (KNN's and NNGuide's ``k``).

Why: a Bayesian search over KNN's k (the CIFAR tuning study: 30 Gaussian-process trials of k in
[1, 500] per protocol, seed and M) fits a new detector per trial and scores the same validation
sets against the same bank. Every trial redoes the same N_query x N_bank search, and only the
number of neighbours it keeps changes. That search is nearly all of a trial's cost.

What: inside ``with reuse_searches():`` (:func:`oodbench.tuning.dispatch.search` runs in one: the
Bayesian searches and every protocol but the plain ``ood_val`` grid, which fits one bank per grid
already), ``NeighbourIndex.search(features, k)`` keeps each search's sorted best values,
``depth`` of them per query, under a key made of

* content digests (sha256) of the bank as searched (hashed again at every search) and of the
  query rows (their shape, dtype and bytes);
* the metric, the compute backend (kind, device, chunk size), the torch and faiss thread counts;
* the search's *plan* (:meth:`NeighbourIndex.plan`): what decides how each value is computed.

A later search with the same key and ``k <= depth`` gets a copy of the first ``k`` columns. A
miss searches ``depth = max(k, min(bank size, max(PREFETCH_DEPTH, 2 x the key's last depth)))``
when that depth has the same plan as ``k``, else exactly ``k``: a search over k in [1, 500]
searches each (bank, queries) once, at 512.

Why the values are the same bits as a search for ``k`` alone: an exact search's best ``k``
values are the k smallest (or largest) of the N_bank computed values, in order, so they are the
first ``k`` of the best ``depth``, as long as the search for ``k`` computes every value as the
search for ``depth`` does. Equal values (ties) are equal whichever neighbour they come from. The
plan says when the computation is the same:

* faiss-cpu (the ``"numpy"`` backend): the query chunks depend on the row count, not ``k``; for
  every k >= 2 faiss computes the same BLAS distances, then selects them exactly (a heap below
  k = 100, a reservoir from 100). Its k = 1 search runs a fused top-1 kernel that rounds
  differently (2.4e-7 on squared distances seen with faiss 1.15), so k = 1 is a plan of its own.
* the torch path: the tile sizes (query rows, bank block), which with the default chunk sizes
  depend on ``k`` only above 2,048 on the CPU and 131,072 on a GPU.
* faiss-gpu: not reused (no plan); its selection is not checked here.

Banks or queries holding NaN or an infinity are searched as they always were, at ``k``, and not
kept (how an exact search orders NaN is left to each backend: no prefix argument is made).

Never another data's result: the key holds the digests, so a bank or query array changed in
place, or another array of the same shape, is another key. The price: each search hashes the
bank and the queries, (N_bank + N_query) x D floats (sha256: about 0.5 GB/s on this machine),
against the N_query x N_bank x D multiply-adds of the search.

Memory: at most ``MAX_BYTES`` (256 MiB) of kept values, 4 bytes x queries x depth per entry; the
least recently used go first; an entry larger than that is not kept; all of it goes when the
outermost ``reuse_searches`` exits. Outside one nothing is kept: every search runs as before.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Protocol

import faiss
import numpy as np
import torch

from oodbench.compute import Backend

#: the depth a first search of a (bank, queries) pair keeps: the tuning paper's K_max is 500
#: (App. A of arXiv 2602.05935); OpenOOD's largest k, 1000, costs one more search (at 1024)
PREFETCH_DEPTH = 512
#: the most bytes of kept search values at a time
MAX_BYTES = 256 * 2**20
#: bytes hashed per step: a chunk stays in the caches for its finiteness check, and bounds the
#: contiguous copy of a strided or memory-mapped array
_DIGEST_STEP_BYTES = 4 * 2**20


class Index(Protocol):
    """What the memo asks of an index (``oodbench.detectors._neighbours.NeighbourIndex``)."""

    metric: str
    backend: Backend
    size: int

    def plan(self, n: int, k: int) -> tuple[object, ...] | None: ...

    def content_digest(self) -> bytes | None: ...

    def fresh_search(self, features: np.ndarray, k: int) -> np.ndarray: ...


class SearchMemo:
    """Sorted best values of past searches by key, least recently used first, within
    ``MAX_BYTES`` (see the module docstring)."""

    def __init__(self) -> None:
        self._entries: OrderedDict[Hashable, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self.nbytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Hashable) -> np.ndarray | None:
        """The values kept under ``key`` (read-only, marked most recently used), or None."""
        with self._lock:
            values = self._entries.get(key)
            if values is not None:
                self._entries.move_to_end(key)
            return values

    def put(self, key: Hashable, values: np.ndarray) -> None:
        """Keep ``values`` under ``key`` (replacing what was there), then drop the least
        recently used entries until at most ``MAX_BYTES`` are held."""
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self.nbytes -= old.nbytes
            if values.nbytes > MAX_BYTES:
                return
            values.flags.writeable = False
            self._entries[key] = values
            self.nbytes += values.nbytes
            while self.nbytes > MAX_BYTES:
                self.nbytes -= self._entries.popitem(last=False)[1].nbytes


_ACTIVE: ContextVar[SearchMemo | None] = ContextVar("oodbench_search_memo", default=None)


@contextmanager
def reuse_searches() -> Iterator[SearchMemo]:
    """Reuse neighbour searches in the enclosed code (also a decorator); nested uses share the
    outermost memo, which is dropped when it exits."""
    memo = _ACTIVE.get()
    if memo is not None:
        yield memo
        return
    memo = SearchMemo()
    token = _ACTIVE.set(memo)
    try:
        yield memo
    finally:
        _ACTIVE.reset(token)


def array_digest(*arrays: np.ndarray) -> bytes | None:
    """sha256 of the arrays' shapes, dtypes and bytes in row order, or None when they hold NaN or
    an infinity (read in row chunks: a strided or memory-mapped array is copied a chunk at a
    time, and each chunk is checked while in the caches)."""
    digest = hashlib.sha256()
    for array in arrays:
        digest.update(json.dumps([list(array.shape), array.dtype.str]).encode())
        row_bytes = max(1, array.itemsize * int(np.prod(array.shape[1:], dtype=np.int64)))
        step = max(1, _DIGEST_STEP_BYTES // row_bytes)
        for start in range(0, len(array), step):
            chunk = np.ascontiguousarray(array[start : start + step])
            if not np.isfinite(chunk).all():
                return None
            digest.update(chunk.data)
    return digest.digest()


def memo_search(index: Index, features: np.ndarray, k: int) -> np.ndarray:
    """``index.fresh_search(features, k)``, answered from or kept in the active memo when there
    is one and the index has a plan for ``k`` (see the module docstring)."""
    memo = _ACTIVE.get()
    plan = index.plan(len(features), k)
    if memo is None or plan is None:
        return index.fresh_search(features, k)
    bank, queries = index.content_digest(), array_digest(features)
    if bank is None or queries is None:  # non-finite data: searched as it always was
        return index.fresh_search(features, k)
    key = (index.metric, index.backend, torch.get_num_threads(), faiss.omp_get_max_threads(), plan,
           bank, queries)
    kept = memo.get(key)
    if kept is not None and kept.shape[1] >= k:
        return kept[:, :k].copy()
    depth = max(k, min(index.size, max(PREFETCH_DEPTH, 2 * (0 if kept is None else kept.shape[1]))))
    if index.plan(len(features), depth) != plan:
        depth = k
    values = index.fresh_search(features, depth)
    memo.put(key, values)
    return values[:, :k].copy()
