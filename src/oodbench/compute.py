"""Where the heavy detectors and the metrics compute: the NumPy/faiss-cpu path or torch on a device.

One mechanism for every detector (no per-detector branches): the detectors' shared helpers
(``detectors/_math.py``, ``_stats.py``, ``_shaping.py``) and the metrics' ranking kernel ask the
*current backend* where to put a chunk of rows, how many rows a chunk may hold, how to search
nearest neighbours and how to sort.

- ``"numpy"``: the reference path. CPU; nearest neighbours with faiss-cpu, eigendecompositions
  with SciPy's LAPACK, per-class percentiles with NumPy's selection, metrics sorted by NumPy;
  chunks sized for the CPU caches.
- ``"torch"``: torch on ``device`` (``"cuda"``, ``"cuda:1"``, or ``"cpu"`` to run this path
  without a GPU, as the tests do). Nearest neighbours with faiss on the GPU when ``faiss-gpu`` is
  installed (``pip install oodbench[gpu]``), else an exact chunked ``matmul`` + ``topk``;
  ``torch.linalg`` and ``torch.sort`` on the device; larger chunks, bounded by ``chunk_bytes``
  of device memory per working array.

The default (``"auto"``, or the ``OODBENCH_BACKEND`` environment variable: ``numpy``, ``torch``,
``torch:cuda:1``, ...) is torch on the first GPU when one is present, else NumPy. Choose for a
block of code with ``with oodbench.compute.use("torch", device="cuda:1"): ...`` (a context
variable: threads and asyncio tasks each see their own choice, like ``sklearn.config_context``).

Precision is the same on both paths: per-sample products (the head, the ViM projection, the
exps of the softmax) run in float32, the precision in which activations are stored; what
accumulates, cancels or decides a discrete choice runs in float64 (class sums and scatter
matrices, eigendecompositions, Mahalanobis whitening, the final ``log`` / ``1 / (1 + s)`` of the
softmax family, LINe's predicted class and masks, VRA's thresholds). oodbench never turns on
TF32 (``torch.set_float32_matmul_precision("high")`` in user code would cost three digits on
a GPU). The two paths agree to 1e-5 relative (``tests/detectors/test_backends.py``); each
detector's docstring says where its float32 steps are.

Threads on the CPU (``Backend.run_chunks``). A chunk of a few MiB is a few milliseconds of
work, and torch splits every op on it into an OpenMP parallel region of all its intra-op
threads: MSP on 20,000 x 1,000 logits is 16 chunks of 23 ops each, 7 of them parallel
regions. When other work (DataLoader workers, a second job) holds the cores, each region waits
for its slowest, descheduled thread, a scheduler slice every time: the score took 20 to 35 times
longer. So chunk loops whose chunks are independent run each chunk on *one* thread (torch's, and
faiss' OpenMP and OpenBLAS for the neighbour searches), and spread
the chunks over a pool of ``torch.get_num_threads()`` single-threaded workers: no op opens a
parallel region, every core still works, and a descheduled worker delays one chunk while the
others take the rest. With one torch thread (``torch.set_num_threads(1)``) or on a GPU the
chunks run in order in the calling thread. Either way each chunk is computed by the same ops in
the same order, so the results are identical to the last bit.
"""

from __future__ import annotations

import contextvars
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace

import numpy as np
import torch

from oodbench.errors import InvalidInputError

KINDS = ("numpy", "torch")
#: bytes of one float working chunk on the CPU: small enough for the caches, large enough for
#: efficient matrix products (a few hundred rows of 2048 floats)
CPU_CHUNK_BYTES = 8 * 2**20
#: bytes of one working chunk on a GPU
GPU_CHUNK_BYTES = 512 * 2**20
#: on the CPU, the count of chunks is a multiple of this (see ``Backend.rows``)
CPU_SPREAD = 8
#: the smallest chunk on the CPU (below it, the per-chunk overhead outweighs the spread)
MIN_CHUNK_BYTES = 256 * 2**10


@dataclass(frozen=True)
class Backend:
    """Where and in what pieces the heavy maths runs (see the module docstring).

    Attributes:
        kind: ``"numpy"`` (the reference CPU path) or ``"torch"``.
        device: the torch device the chunks go to (always the CPU for ``"numpy"``).
        chunk_bytes: the size of one working chunk (rows x width x bytes per entry).
    """

    kind: str
    device: torch.device
    chunk_bytes: int

    @property
    def on_gpu(self) -> bool:
        return self.device.type == "cuda"

    def rows(self, n: int, width: int, itemsize: int = 4) -> Iterator[slice]:
        """Consecutive row slices of equal size covering ``range(n)``, whose working copies
        take at most ``chunk_bytes`` (``width`` entries of ``itemsize`` bytes per row).

        On the CPU the count of slices is a multiple of ``CPU_SPREAD`` (8), so that the
        single-threaded workers of ``run_chunks`` finish together on up to 8 cores (three
        chunks on two workers left one worker idle for a third of the time), but no slice is
        smaller than ``MIN_CHUNK_BYTES`` unless ``n`` is. The slices depend only on ``n``, the
        row size and ``chunk_bytes``, never on the thread count, so the results do not either.
        """
        row_bytes = max(1, width) * itemsize
        fewest = -(-n // max(1, self.chunk_bytes // row_bytes))
        pieces = fewest
        if not self.on_gpu:
            least_rows = max(1, min(MIN_CHUNK_BYTES, self.chunk_bytes) // row_bytes)
            spread = -(-fewest // CPU_SPREAD) * CPU_SPREAD
            pieces = max(fewest, min(spread, n // least_rows))
        size = -(-n // max(1, pieces)) if n else 1
        for start in range(0, n, size):
            yield slice(start, min(start + size, n))

    def run_chunks(self, slices: Iterable[slice], fn: Callable[[slice], None]) -> None:
        """``fn(rows)`` for every slice: on the CPU with more than one torch thread, concurrently
        on single-threaded workers (see the module docstring), else in order here.

        ``fn`` must write its result to rows of its own (disjoint slices of one output) and not
        depend on the order. It sees this thread's compute backend and grad mode. Under a torch
        function or dispatch mode (thread-local: a test's device checks, an op counter) the
        chunks run here, in order, so that the mode sees them. The first exception of a chunk is
        raised here, after the chunks already started have finished.
        """
        todo = list(slices)
        threads = torch.get_num_threads()
        if self.on_gpu or threads == 1 or len(todo) < 2 or _thread_local_modes():
            for rows in todo:
                fn(rows)
            return
        grad = torch.is_grad_enabled()

        def task(rows: slice) -> None:
            with torch.set_grad_enabled(grad):
                fn(rows)

        pool = _single_thread_workers(threads)
        futures: list[Future[None]] = [
            pool.submit(contextvars.copy_context().run, task, rows) for rows in todo
        ]
        done, pending = wait(futures, return_when=FIRST_EXCEPTION)
        for future in pending:
            future.cancel()
        wait(pending)
        for future in futures:
            if future.done() and not future.cancelled() and future.exception() is not None:
                raise future.exception()  # type: ignore[misc]

    def tensor(self, array: np.ndarray | torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """``array`` (host rows, possibly memory-mapped float16) as a ``dtype`` tensor on the device.

        Writable host arrays already in ``dtype`` are shared, not copied, on the CPU; read-only
        ones (memory-mapped cache files) are copied, chunk by chunk, since torch cannot wrap
        read-only memory.
        """
        if isinstance(array, torch.Tensor):
            return array.to(device=self.device, dtype=dtype)
        arr = np.asarray(array)
        if not arr.flags.writeable or not arr.flags.c_contiguous:
            arr = np.array(arr, order="C")
        return torch.from_numpy(arr).to(device=self.device, dtype=dtype)


def _thread_local_modes() -> bool:
    """Whether a torch function or dispatch mode is in force in this thread."""
    return torch._C._is_torch_function_mode_enabled() or torch._C._len_torch_dispatch_stack() > 0


_WORKERS: dict[int, ThreadPoolExecutor] = {}
_WORKERS_LOCK = threading.Lock()


def _forget_workers_after_fork() -> None:
    """A forked child (a DataLoader worker) has none of the parent's threads: start afresh."""
    global _WORKERS_LOCK
    _WORKERS.clear()
    _WORKERS_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_forget_workers_after_fork)


def _one_intra_op_thread(started: threading.Barrier) -> None:
    """Make this worker thread run torch ops (and MKL) on one thread, and faiss' searches (its
    OpenMP loops and its OpenBLAS, which uses the same OpenMP runtime) too, then wait for the
    others. OpenMP's thread count is per thread: the caller's own faiss keeps its threads."""
    torch.get_num_threads()  # torch's per-thread initialisation first: it would undo the next line
    torch.set_num_threads(1)
    import faiss

    faiss.omp_set_num_threads(1)
    started.wait()


def _single_thread_workers(size: int) -> ThreadPoolExecutor:
    """The process's pool of ``size`` worker threads with one intra-op torch (and faiss) thread
    each.

    ``torch.set_num_threads`` in a worker also sets the count that threads started later begin
    with, so every worker is started and set up at once (a barrier) and the caller's own count
    is set back before the pool is used.
    """
    with _WORKERS_LOCK:
        pool = _WORKERS.get(size)
        if pool is None:
            mine = torch.get_num_threads()
            started = threading.Barrier(size + 1)
            pool = ThreadPoolExecutor(size, thread_name_prefix="oodbench-chunks")
            for _ in range(size):
                pool.submit(_one_intra_op_thread, started)
            started.wait()
            torch.set_num_threads(mine)
            _WORKERS[size] = pool
        return pool


def to_host(values: torch.Tensor | np.ndarray) -> np.ndarray:
    """``values`` as a float64 NumPy array on the CPU (from any device)."""
    if isinstance(values, torch.Tensor):
        return values.detach().to(device="cpu", dtype=torch.float64).numpy()
    return np.asarray(values, dtype=np.float64)


def resolve(kind: str = "auto", device: str | torch.device | None = None,
            chunk_bytes: int | None = None) -> Backend:
    """The ``Backend`` named by ``kind`` (``"auto"``, ``"numpy"``, ``"torch"``) and ``device``.

    ``"auto"``: torch on ``cuda`` when a GPU is present, else NumPy. ``"torch"`` without a device
    takes ``cuda`` when present, else the CPU. Raises ``InvalidInputError`` for an unknown kind, a
    device given to ``"numpy"`` other than the CPU, or a CUDA device on a machine without one.
    """
    if kind == "auto":
        kind = "torch" if torch.cuda.is_available() else "numpy"
    if kind not in KINDS:
        raise InvalidInputError(
            f"compute backend must be one of {('auto', *KINDS)}; got {kind!r} "
            "(set OODBENCH_BACKEND or call oodbench.compute.use(...))"
        )
    if device is None:
        dev = torch.device("cuda" if kind == "torch" and torch.cuda.is_available() else "cpu")
    else:
        try:
            dev = torch.device(device)
        except RuntimeError as err:
            raise InvalidInputError(f"compute backend: {device!r} is not a torch device ({err})") from None
    if kind == "numpy" and dev.type != "cpu":
        raise InvalidInputError(
            f"the 'numpy' backend runs on the CPU; got device {str(dev)!r}: use kind='torch' for it"
        )
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise InvalidInputError(
            f"compute backend: device {str(dev)!r} asked for but torch sees no CUDA GPU here; "
            "use the 'numpy' backend or device='cpu'"
        )
    if chunk_bytes is None:
        chunk_bytes = GPU_CHUNK_BYTES if dev.type == "cuda" else CPU_CHUNK_BYTES
    if chunk_bytes < 1:
        raise InvalidInputError(f"chunk_bytes must be positive; got {chunk_bytes}")
    return Backend(kind=kind, device=dev, chunk_bytes=int(chunk_bytes))


def _from_environment() -> Backend:
    """The backend named by ``OODBENCH_BACKEND`` (``"torch:cuda:1"`` = torch on cuda:1)."""
    spec = os.environ.get("OODBENCH_BACKEND", "auto").strip() or "auto"
    kind, _, device = spec.partition(":")
    return resolve(kind, device or None)


_CURRENT: ContextVar[Backend | None] = ContextVar("oodbench_compute_backend", default=None)


def current() -> Backend:
    """The backend in force here: the innermost ``use(...)``, else the environment's default."""
    backend = _CURRENT.get()
    if backend is None:
        backend = _from_environment()
        _CURRENT.set(backend)
    return backend


@contextmanager
def use(kind: str = "auto", device: str | torch.device | None = None,
        chunk_bytes: int | None = None) -> Iterator[Backend]:
    """Run the enclosed detectors and metrics on this backend (see ``resolve``)."""
    token = _CURRENT.set(resolve(kind, device, chunk_bytes))
    try:
        yield _CURRENT.get()  # type: ignore[misc]
    finally:
        _CURRENT.reset(token)


@contextmanager
def chunked(chunk_bytes: int) -> Iterator[Backend]:
    """The current backend with another chunk size (tests force many small chunks with it)."""
    token = _CURRENT.set(replace(current(), chunk_bytes=int(chunk_bytes)))
    try:
        yield _CURRENT.get()  # type: ignore[misc]
    finally:
        _CURRENT.reset(token)
