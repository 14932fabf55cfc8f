"""Where and how the forward pass runs: device, autocast precision and DataLoader workers.

``device="auto"``
    CUDA when ``torch.cuda.is_available()``, else CPU.
``amp="auto"``
    On CUDA: bfloat16 autocast (float16 on GPUs without bf16 support), with the model and the
    batches in ``channels_last`` memory format. On CPU: off (float32). ``"off"`` forces float32
    everywhere; ``"bf16"`` / ``"fp16"`` force that autocast dtype (on CPU through CPU autocast).
    The resolved precision is part of the cache key, since it changes the numbers.
``num_workers="auto"``
    CPU: 0. The forward pass already uses every core through torch's intra-op threads; worker
    processes would compete with it for the same cores, and decoding in the main process costs
    only a few percent of a CPU forward pass (see ``speed/bench_extract.py``).
    CUDA: ``min(16, cpus - 1)`` workers (the GPU then waits on JPEG decoding, not the other way
    round), 0 when there are fewer than two batches.

Memory format (:func:`uses_channels_last`)
    ``channels_last`` on CUDA with autocast (tensor cores); contiguous everywhere else. On the
    CPU, oneDNN's channels-last kernels gain little or lose (``speed/bench_memory_format.py``
    on an idle machine: 0.75x to 1.19x by family), and with them the same images extracted in
    one process and as Ray shard tasks gave different values (``tests/run/test_ray_executor.py``
    requires them equal), so the CPU stays contiguous: a result must not depend on how its
    images were split into shards and batches.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import torch

from oodbench.errors import InvalidInputError, UnknownNameError

AMP_OPTIONS = ("auto", "off", "bf16", "fp16")
_AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
PRECISION_NAMES = {None: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """``"auto"`` -> CUDA if available else CPU; anything else is checked (``"cuda"`` becomes
    the current GPU with its index, so it compares equal to the device of tensors on it)."""
    if isinstance(device, str) and device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise InvalidInputError(
            f"device {device!r} is not a torch device; use 'auto', 'cpu', 'cuda' or 'cuda:N'"
        ) from err
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise InvalidInputError(
            f"device {device!r} was asked for but torch sees no CUDA GPU; use device='cpu' "
            "(or 'auto', which picks CUDA only when it is there)"
        )
    if resolved.type == "cuda" and resolved.index is None:  # "cuda" means the current GPU
        resolved = torch.device("cuda", torch.cuda.current_device())
    return resolved


def resolve_amp(amp: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype for ``amp`` on ``device``; ``None`` means plain float32."""
    if amp not in AMP_OPTIONS:
        raise UnknownNameError("amp setting", str(amp), AMP_OPTIONS)
    if amp == "off":
        return None
    if amp == "auto":
        if device.type != "cuda":
            return None
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return _AMP_DTYPES[amp]


def precision_name(amp_dtype: torch.dtype | None) -> str:
    """``"float32"``, ``"bfloat16"`` or ``"float16"``: the name stored in the cache key."""
    return PRECISION_NAMES[amp_dtype]


@contextlib.contextmanager
def autocast(device: torch.device, amp_dtype: torch.dtype | None) -> Iterator[None]:
    """``torch.autocast`` in ``amp_dtype`` on ``device``; a no-op when ``amp_dtype`` is None."""
    if amp_dtype is None:
        yield
        return
    with torch.autocast(device_type=device.type, dtype=amp_dtype):
        yield


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run torch with ``n`` intra-op threads inside the block; the previous count is restored.

    Float32 sums of a real network can differ in the last bit between thread counts, so runs
    that must be bit-identical (the demo, a resumed or sharded extraction) fix the count.
    """
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def uses_channels_last(
    model: torch.nn.Module, device: torch.device, amp_dtype: torch.dtype | None
) -> bool:
    """Whether the forward pass runs in ``channels_last`` memory format (module docstring)."""
    return device.type == "cuda" and amp_dtype is not None


def place_model(model: torch.nn.Module, device: torch.device, channels_last: bool = False) -> None:
    """Move ``model`` to ``device`` (and channels-last), skipping moves that change nothing.

    ``Module.to`` always re-applies itself, and adapters forget their memoised weights digest
    whenever it runs; skipping no-op moves keeps a cache hit from re-hashing the weights.
    """
    tensors = [*model.parameters(), *model.buffers()]
    if any(t.device != device for t in tensors):
        model.to(device)
    if channels_last and any(
        t.dim() == 4 and not t.is_contiguous(memory_format=torch.channels_last) for t in tensors
    ):
        model.to(memory_format=torch.channels_last)  # type: ignore[call-arg]


def resolve_num_workers(num_workers: int | str, device: torch.device, n_batches: int) -> int:
    """The number of DataLoader worker processes (see the module docstring for ``"auto"``)."""
    if num_workers == "auto":
        if device.type != "cuda" or n_batches < 2:
            return 0
        return max(1, min(16, _available_cpus() - 1))
    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 0:
        raise InvalidInputError(
            f"num_workers must be 'auto' or an integer >= 0; got {num_workers!r}"
        )
    return num_workers


def _available_cpus() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1
