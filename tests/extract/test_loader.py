"""iterate_batches and the DataLoader pieces shared with the live-model detectors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from oodbench.errors import InvalidInputError, UnknownNameError
from oodbench.extract import SkippedImagesWarning, iterate_batches
from oodbench.extract.loader import collate_skipping_failures, make_loader
from oodbench.extract.runtime import resolve_amp, resolve_device, resolve_num_workers
from tests.extract._toy import RandomImages, TinyNet


def _expected(model: TinyNet, source: RandomImages, rows) -> torch.Tensor:
    return torch.stack([model.transform(source.load(int(i))) for i in rows])


def test_batches_in_source_order_with_their_positions():
    model, source = TinyNet(), RandomImages(7)
    batches = list(iterate_batches(model, source, batch_size=3, device="cpu"))
    assert [b[1].tolist() for b in batches] == [[0, 1, 2], [3, 4, 5], [6]]
    for images, rows in batches:
        assert images.device.type == "cpu" and rows.dtype == np.int64
        torch.testing.assert_close(images, _expected(model, source, rows), rtol=0, atol=0)


def test_explicit_indices_keep_their_order():
    model, source = TinyNet(), RandomImages(9)
    batches = list(iterate_batches(model, source, batch_size=2, indices=[8, 1, 5]))
    assert [b[1].tolist() for b in batches] == [[8, 1], [5]]
    torch.testing.assert_close(batches[0][0], _expected(model, source, [8, 1]), rtol=0, atol=0)


def test_unreadable_images_are_skipped_with_one_warning():
    source = RandomImages(6, corrupt=[1, 2, 3])
    with pytest.warns(SkippedImagesWarning, match="skipped 3 of 6") as record:
        batches = list(iterate_batches(TinyNet(), source, batch_size=2))
    assert len(record) == 1
    # the batch [2, 3] had no readable image and is not yielded
    assert [b[1].tolist() for b in batches] == [[0], [4, 5]]
    assert [len(b[0]) for b in batches] == [1, 2]


def test_model_mode_is_left_alone():
    model = TinyNet().train()
    next(iterate_batches(model, RandomImages(2)))
    assert model.training


def test_bad_indices_are_an_error():
    with pytest.raises(InvalidInputError, match=r"\[0, 3\)"):
        next(iterate_batches(TinyNet(), RandomImages(3), indices=[0, 3]))
    with pytest.raises(InvalidInputError, match="batch_size"):
        next(iterate_batches(TinyNet(), RandomImages(3), batch_size=0))


def test_worker_processes_give_the_same_batches():
    model, source = TinyNet(), RandomImages(10, corrupt=[4])
    plan = [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    inline = list(make_loader(source, model.transform, plan, device=torch.device("cpu"),
                              num_workers=0))
    workers = list(make_loader(source, model.transform, plan, device=torch.device("cpu"),
                               num_workers=2))
    assert len(inline) == len(workers) == 4
    for a, b in zip(inline, workers):
        torch.testing.assert_close(a.images, b.images, rtol=0, atol=0)
        np.testing.assert_array_equal(a.indices, b.indices)
        assert a.failed == b.failed
    assert [f[0] for f in inline[1].failed] == [4]


def test_collate_rejects_images_of_different_sizes():
    items = [(torch.zeros(3, 4, 4), 0), (torch.zeros(3, 5, 5), 1)]
    with pytest.raises(InvalidInputError, match="different shapes"):
        collate_skipping_failures(items)


def test_runtime_resolution():
    assert resolve_device("cpu").type == "cpu"
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(InvalidInputError, match="not a torch device"):
        resolve_device("gpu please")
    if not torch.cuda.is_available():
        with pytest.raises(InvalidInputError, match="no CUDA"):
            resolve_device("cuda")
    cpu = torch.device("cpu")
    assert resolve_amp("auto", cpu) is None and resolve_amp("off", cpu) is None
    assert resolve_amp("bf16", cpu) is torch.bfloat16 and resolve_amp("fp16", cpu) is torch.float16
    with pytest.raises(UnknownNameError):
        resolve_amp("on", cpu)
    assert resolve_num_workers("auto", cpu, 100) == 0
    assert resolve_num_workers(3, cpu, 100) == 3
    with pytest.raises(InvalidInputError, match="num_workers"):
        resolve_num_workers(-1, cpu, 100)
