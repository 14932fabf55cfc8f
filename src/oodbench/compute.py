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
"""

from __future__ import annotations

import os
from collections.abc import Iterator
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
        """Consecutive row slices covering ``range(n)`` whose working copies take about
        ``chunk_bytes`` (``width`` entries of ``itemsize`` bytes per row)."""
        step = max(1, self.chunk_bytes // (max(1, width) * itemsize))
        for start in range(0, n, step):
            yield slice(start, min(start + step, n))

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
