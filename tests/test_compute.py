"""oodbench.compute: choosing the backend, chunking, host/device transfers."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from oodbench import compute
from oodbench.errors import InvalidInputError
from tests._fake_device import DeviceMistake, fake_device


def test_auto_is_numpy_without_a_gpu_and_use_nests(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert compute.resolve("auto") == compute.Backend("numpy", torch.device("cpu"), compute.CPU_CHUNK_BYTES)
    assert compute.resolve("torch").device == torch.device("cpu")
    before = compute.current()
    with compute.use("torch", "cpu", chunk_bytes=100) as outer:
        assert compute.current() is outer and outer.kind == "torch"
        with compute.chunked(8) as inner:
            assert (inner.kind, inner.chunk_bytes) == ("torch", 8)
        assert compute.current() is outer
    assert compute.current() is before


def test_auto_takes_the_gpu_when_there_is_one(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    backend = compute.resolve("auto")
    assert (backend.kind, backend.device.type, backend.chunk_bytes) == ("torch", "cuda", compute.GPU_CHUNK_BYTES)


def test_environment_variable(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("OODBENCH_BACKEND", "torch:cpu")
    assert compute._from_environment() == compute.resolve("torch", "cpu")
    monkeypatch.setenv("OODBENCH_BACKEND", "numpy")
    assert compute._from_environment().kind == "numpy"


def test_bad_choices_are_named(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(InvalidInputError, match="one of"):
        compute.resolve("jax")
    with pytest.raises(InvalidInputError, match="runs on the CPU"):
        compute.resolve("numpy", "cuda")
    with pytest.raises(InvalidInputError, match="no CUDA GPU"):
        compute.resolve("torch", "cuda:1")
    with pytest.raises(InvalidInputError, match="not a torch device"):
        compute.resolve("torch", "gpu0")
    with pytest.raises(InvalidInputError, match="chunk_bytes"):
        compute.resolve("numpy", chunk_bytes=0)


def test_rows_cover_the_range_in_budgeted_chunks():
    backend = compute.resolve("numpy", chunk_bytes=4 * 10 * 7)  # 7 rows of 10 float32
    slices = list(backend.rows(50, 10))
    assert [s.stop - s.start for s in slices] == [7] * 7 + [1]
    assert np.array_equal(np.concatenate([np.arange(50)[s] for s in slices]), np.arange(50))
    assert list(backend.rows(3, 10**9)) == [slice(0, 1), slice(1, 2), slice(2, 3)]


def test_tensor_shares_writable_arrays_and_copies_read_only_ones():
    backend = compute.resolve("numpy")
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert backend.tensor(a).data_ptr() == a.ctypes.data  # no copy
    a.flags.writeable = False  # like a memory-mapped cache file
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch warns when it wraps read-only memory
        t = backend.tensor(a, torch.float64)
    assert t.dtype == torch.float64 and t.data_ptr() != a.ctypes.data
    assert compute.to_host(torch.ones(2, dtype=torch.float16)).dtype == np.float64


def test_the_stand_in_gpu_catches_device_mistakes():
    """tests/_fake_device.py is what the torch-path tests rely on: it must fail like CUDA."""
    with fake_device() as device:
        on_device = torch.ones(4).to(device) * 2
        with pytest.raises(DeviceMistake, match="same device"):
            on_device + torch.ones(4)
        with pytest.raises(DeviceMistake, match=r"\.cpu\(\)"):
            np.asarray(on_device)
        assert on_device.device == device
        np.testing.assert_array_equal(compute.to_host(on_device), [2.0] * 4)
        assert float(on_device.sum() + torch.tensor(1.0)) == 9.0  # 0-d host tensors are fine


@pytest.fixture
def two_threads():
    """torch with two intra-op threads (so that run_chunks uses its workers), restored after."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(threads)


def test_run_chunks_spreads_chunks_over_single_threaded_workers(two_threads):
    """Each chunk runs once, off the calling thread, with one intra-op thread (so no torch op
    opens a parallel region), seeing the caller's backend and grad mode; the caller keeps its
    own thread count."""
    import threading

    seen: dict[int, tuple[int, int, str, bool]] = {}
    out = np.zeros(1000)

    def fn(rows: slice) -> None:
        seen[rows.start] = (threading.get_ident(), torch.get_num_threads(),
                            str(compute.current().chunk_bytes), torch.is_grad_enabled())
        out[rows] += np.arange(rows.start, rows.stop)

    with compute.use("numpy", chunk_bytes=4 * 10 * 7), torch.no_grad():
        backend = compute.current()
        backend.run_chunks(backend.rows(1000, 10), fn)
    np.testing.assert_array_equal(out, np.arange(1000))  # every row once
    assert sorted(seen) == list(range(0, 1000, 7))
    assert {ident for ident, *_ in seen.values()}.isdisjoint({threading.get_ident()})
    assert {(threads, chunk, grad) for _, threads, chunk, grad in seen.values()} == {(1, "280", False)}
    assert torch.get_num_threads() == 2


def test_run_chunks_runs_in_order_here_with_one_thread_or_under_a_mode():
    """One torch thread, or a thread-local torch mode (the stand-in GPU's checks): in order, in
    the calling thread."""
    import threading

    threads = torch.get_num_threads()
    order: list[tuple[int, int]] = []
    fn = lambda rows: order.append((rows.start, threading.get_ident()))  # noqa: E731
    backend = compute.resolve("numpy", chunk_bytes=4 * 10 * 7)
    try:
        torch.set_num_threads(1)
        backend.run_chunks(backend.rows(100, 10), fn)
        torch.set_num_threads(2)
        with fake_device():
            backend.run_chunks(backend.rows(100, 10), fn)
    finally:
        torch.set_num_threads(threads)
    assert order == [(s, threading.get_ident()) for s in range(0, 100, 7)] * 2


def test_run_chunks_raises_a_chunks_error(two_threads):
    def fn(rows: slice) -> None:
        if rows.start == 21:
            raise ValueError("chunk 21")

    backend = compute.resolve("numpy", chunk_bytes=4 * 10 * 7)
    with pytest.raises(ValueError, match="chunk 21"):
        backend.run_chunks(backend.rows(100, 10), fn)
