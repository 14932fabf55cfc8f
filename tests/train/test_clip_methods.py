"""CMA and NPOS through oodbench.train on a tiny random CLIP: interrupted and killed runs resume
bit-identical, 2 gloo processes under torchrun equal one process, bad input fails up front."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from oodbench.data.digits import DigitsSource
from oodbench.errors import InvalidInputError
from oodbench.models.checkpoint import read_state_dict
from oodbench.models.small_cnn import SmallCNN
from oodbench.train import checkpoint as ckpt
from oodbench.train import train
from tests._tolerance import assert_same_training
from tests.train._clip_run import model, run, toy_source
from tests.train._subprocess import kill_after_first_checkpoint

METHODS = ["cma", "npos"]


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("method", METHODS)
def test_interrupted_run_resumes_bit_identical(tmp_path, monkeypatch, method):
    """The run stops (an exception) while writing its second checkpoint; running the same
    config again resumes after epoch 1 and ends with the weights, method state and losses of
    an uninterrupted run."""
    write = ckpt.write_checkpoint
    calls = []

    def fail_on_second(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        write(*args, **kwargs)

    monkeypatch.setattr(ckpt, "write_checkpoint", fail_on_second)
    with pytest.raises(KeyboardInterrupt):
        run(method, str(tmp_path / "cut"), epochs=3)
    monkeypatch.setattr(ckpt, "write_checkpoint", write)
    assert json.loads((tmp_path / "cut" / "train.json").read_text())["epochs_done"] == 1
    resumed = run(method, str(tmp_path / "cut"), epochs=3)
    straight = run(method, str(tmp_path / "straight"), epochs=3)
    assert [h["epoch"] for h in resumed.history] == [1, 2, 3]
    assert [h["loss"] for h in resumed.history] == [h["loss"] for h in straight.history]
    assert _same(read_state_dict(resumed.weights), read_state_dict(straight.weights))
    if method == "npos":
        assert _same(ckpt.read_method_state(resumed.out), ckpt.read_method_state(straight.out))
    assert _same(resumed.model.state_dict(), straight.model.state_dict())


@pytest.mark.heavy
@pytest.mark.parametrize("method", METHODS)
def test_killed_run_resumes_bit_identical(tmp_path, method):
    """A subprocess is SIGKILLed after its first checkpoint; the resumed run ends with the
    weights of an uninterrupted one."""
    epochs, out = 12, tmp_path / "killed"
    done = kill_after_first_checkpoint(["tests.train._clip_run", method, str(out), str(epochs)],
                                       out, pause=0.1, timeout=240)
    assert 1 <= done < epochs, "the kill came too late to test resuming"
    cache = out / "frozen_blocks" / "tokens.npy"
    stamp = cache.stat().st_mtime_ns if method == "npos" else None
    resumed = run(method, str(out), epochs)
    if stamp is not None:  # another process reuses the frozen blocks' cache
        assert cache.stat().st_mtime_ns == stamp
    straight = run(method, str(tmp_path / "straight"), epochs)
    assert _same(read_state_dict(resumed.weights), read_state_dict(straight.weights))
    assert [h["loss"] for h in resumed.history] == [h["loss"] for h in straight.history]


@pytest.mark.heavy
@pytest.mark.parametrize("method", METHODS)
def test_two_gloo_processes_equal_one_process(tmp_path, method, gloo_runs):
    """torchrun, 2 CPU processes on gloo, global batch 12 split 6/6 (the last, 7, split 4/3):
    the loss needs the whole batch (CMA's logits, NPOS's queues), so every rank all-gathers
    the others' embeddings with their gradients; after 3 epochs the weights (and NPOS's phi
    and queues) equal the single-process run's within float tolerance. (The torchrun launch,
    ``gloo_runs``, is shared with the other two-process tests: tests/train/_gloo_runs.py.)"""
    out = gloo_runs / method
    single = run(method, str(tmp_path / "single"), epochs=3)
    record = json.loads((out / "train.json").read_text())
    assert record["config"]["world_size"] == 2
    ddp_weights, one = read_state_dict(out / "model.safetensors"), read_state_dict(single.weights)
    initial = model(method).clip.state_dict()
    moved = [k for k in one if not torch.equal(one[k], initial[k])]
    assert moved, "training changed nothing"
    # the gradients' sums in another order, drifting through the steps (tests/_tolerance.py)
    assert_same_training(ddp_weights, one, initial)
    if method == "npos":
        a, b = ckpt.read_method_state(out), ckpt.read_method_state(single.out)
        for key in b:
            np.testing.assert_allclose(a[key], b[key], rtol=1e-4, atol=1e-6, err_msg=key)
    np.testing.assert_allclose([h["loss"] for h in record["history"]],  # as above
                               [h["loss"] for h in single.history], rtol=1e-5)
    assert [h["images"] for h in record["history"]] == [31, 31, 31]


@pytest.mark.parametrize("method", METHODS)
def test_bad_input_is_a_one_line_error_before_training(tmp_path, method):
    options = {"start_epoch": 0} if method == "npos" else {}  # one that switches on
    with pytest.raises(InvalidInputError, match=f"loss '{method}' fine-tunes a CLIP model") as err:
        train(SmallCNN(6), DigitsSource(range(6)), out=tmp_path / "x", loss=method,
              loss_options=options)
    assert "\n" not in str(err.value) and not (tmp_path / "x").exists()
    with pytest.raises(InvalidInputError, match="leave trainable at its default 'all'"):
        train(model(method), toy_source(), out=tmp_path / "y", loss=method, trainable="head",
              loss_options=options)
    assert not (tmp_path / "y").exists()


def test_npos_k_larger_than_the_queue_fails_before_training(tmp_path):
    with pytest.raises(InvalidInputError, match=r"needs k <= queue_size .*; got k=5, queue_size=4") as err:
        train(model("npos"), toy_source(), out=tmp_path / "k", loss="npos",
              loss_options={"queue_size": 4, "k": 5})
    assert "\n" not in str(err.value) and not (tmp_path / "k").exists()
    with pytest.raises(InvalidInputError, match="frozen_blocks=2 leaves none of"):
        train(model("npos"), toy_source(), out=tmp_path / "f", loss="npos",
              loss_options={"frozen_blocks": 2, "start_epoch": 0})
