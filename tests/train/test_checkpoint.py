"""The checkpoint's two-phase commit: a kill at any step leaves a resumable folder."""

from __future__ import annotations

import pytest
import torch

from oodbench.errors import CacheError
from oodbench.train import checkpoint as ckpt


def write(out, value: float, epoch: int) -> None:
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.1, momentum=0.9)
    opt.state[opt.param_groups[0]["params"][0]] = {"momentum_buffer": torch.full((2,), value)}
    ckpt.write_checkpoint(out, {"w": torch.full((3,), value)}, opt.state_dict(),
                          {"epochs_done": epoch})


def test_round_trip(tmp_path):
    write(tmp_path, 1.0, 1)
    record, weights, opt = ckpt.read_checkpoint(tmp_path)
    assert record["epochs_done"] == 1 and weights["w"].tolist() == [1.0] * 3
    assert opt["state"][0]["momentum_buffer"].tolist() == [1.0, 1.0]
    assert opt["param_groups"][0]["momentum"] == 0.9
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "model.safetensors", "optimizer.safetensors", "train.json"]


def test_files_get_the_umask_permissions(tmp_path):
    """Issue 23 item 9: the safetensors files were 0600 under umask 022 (train.json 0644)."""
    import os

    old = os.umask(0o022)
    try:
        write(tmp_path, 1.0, 1)
    finally:
        os.umask(old)
    modes = {p.name: oct(p.stat().st_mode & 0o777) for p in tmp_path.iterdir()}
    assert modes == {"model.safetensors": "0o644", "optimizer.safetensors": "0o644",
                     "train.json": "0o644"}


def test_killed_before_the_commit_resumes_the_previous_epoch(tmp_path, monkeypatch):
    write(tmp_path, 1.0, 1)

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # the process dies after writing the pending tensor files

    monkeypatch.setattr(ckpt, "write_json", killed)
    with pytest.raises(KeyboardInterrupt):
        write(tmp_path, 2.0, 2)
    monkeypatch.undo()
    record, weights, _ = ckpt.read_checkpoint(tmp_path)
    assert record["epochs_done"] == 1 and weights["w"].tolist() == [1.0] * 3


def test_killed_after_the_commit_rolls_forward(tmp_path, monkeypatch):
    write(tmp_path, 1.0, 1)
    real_replace = ckpt.os.replace
    calls = []

    def replace_once(src, dst):  # the first pending -> final rename happens, then a kill
        if str(src).rsplit("/", 1)[-1].startswith(".pending-"):
            if calls:
                raise KeyboardInterrupt
            calls.append(dst)
        real_replace(src, dst)

    monkeypatch.setattr(ckpt.os, "replace", replace_once)
    with pytest.raises(KeyboardInterrupt):
        write(tmp_path, 2.0, 2)
    monkeypatch.undo()
    assert len(calls) == 1  # the weights were renamed, the optimiser file was not
    record, weights, opt = ckpt.read_checkpoint(tmp_path)
    assert record["epochs_done"] == 2 and weights["w"].tolist() == [2.0] * 3
    assert opt["state"][0]["momentum_buffer"].tolist() == [2.0, 2.0]


def test_a_damaged_file_is_reported(tmp_path):
    write(tmp_path, 1.0, 1)
    (tmp_path / "model.safetensors").write_bytes(b"garbage")
    with pytest.raises(CacheError, match="does not match"):
        ckpt.read_checkpoint(tmp_path)
