"""A training run's files: weights in safetensors, the config and progress beside them.

    <out>/model.safetensors   the network's weights (``models.load(spec, weights=...)`` reads it)
    <out>/optimizer.safetensors   optimiser tensors (momentum, Adam moments) for resuming
    <out>/method.safetensors  a method's own state beside the network, when it has one (UMAP:
                              the mask scores; DOE: the averaged weight perturbation; NPOS: the
                              MLP phi and the class queues)
    <out>/train.json          the config, epochs done, per-epoch history, optimiser scalars,
                              scheduler state, and the sha256 of both tensor files

Written at the end of every epoch as a two-phase commit, so a run killed at any moment resumes
from the last complete epoch: (1) the tensor files are written (fsynced) under pending names
``.pending-<name>``; (2) ``train.json`` is replaced atomically, naming their sha256 (the commit
point); (3) the pending files are renamed onto the final names. On reading, a final file whose
digest is not the committed one is replaced by its pending file when that one matches (a kill
between 2 and 3); a kill before 2 leaves the previous epoch's files and record, which match.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from oodbench.atomic_files import atomic_path, file_sha256, read_json, write_json
from oodbench.errors import CacheError, InvalidInputError

WEIGHTS = "model.safetensors"
OPTIMIZER = "optimizer.safetensors"
STATE = "train.json"
METHOD = "method.safetensors"


def save_tensors(path: Path, tensors: dict[str, torch.Tensor]) -> str:
    """Write ``tensors`` as safetensors atomically; returns the file's sha256."""
    from safetensors.torch import save_file

    with atomic_path(path) as tmp:
        save_file({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, os.fspath(tmp))
    return file_sha256(path)


def split_optimizer_state(state: dict[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """``optimizer.state_dict()`` -> (tensors for safetensors, JSON-able rest)."""
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for index, entry in state["state"].items():
        for name, value in entry.items():
            if isinstance(value, torch.Tensor):
                tensors[f"{index}.{name}"] = value
            else:
                scalars.setdefault(str(index), {})[name] = value
    return tensors, {"scalars": scalars, "param_groups": state["param_groups"]}


def join_optimizer_state(tensors: dict[str, torch.Tensor], rest: dict[str, Any]) -> dict[str, Any]:
    """The inverse of :func:`split_optimizer_state`."""
    state: dict[int, dict[str, Any]] = {}
    for key, value in tensors.items():
        index, _, name = key.partition(".")
        state.setdefault(int(index), {})[name] = value
    for index, entry in rest["scalars"].items():
        state.setdefault(int(index), {}).update(entry)
    return {"state": state, "param_groups": rest["param_groups"]}


def _pending(out: Path, name: str) -> Path:
    return out / f".pending-{name}"


def write_checkpoint(
    out: Path, weights: dict[str, torch.Tensor], optimizer: dict[str, Any], record: dict[str, Any],
    method: dict[str, torch.Tensor] | None = None,
) -> None:
    """Write the files of one finished epoch (the two-phase commit of the module doc)."""
    out.mkdir(parents=True, exist_ok=True)
    tensors, rest = split_optimizer_state(optimizer)
    digests = {WEIGHTS: save_tensors(_pending(out, WEIGHTS), weights),
               OPTIMIZER: save_tensors(_pending(out, OPTIMIZER), tensors)}
    if method is not None:
        digests[METHOD] = save_tensors(_pending(out, METHOD), method)
    write_json(out / STATE, {**record, "optimizer": rest, "sha256": digests})
    for name in digests:
        os.replace(_pending(out, name), out / name)


def read_checkpoint(out: Path) -> tuple[dict[str, Any], dict[str, torch.Tensor], dict[str, Any]] | None:
    """``(record, weights, optimizer state)`` of the last finished epoch, or None if none."""
    from safetensors.torch import load_file

    if not (out / STATE).is_file():
        return None
    record = read_json(out / STATE)
    for name, digest in record["sha256"].items():
        final, pending = out / name, _pending(out, name)
        if final.is_file() and file_sha256(final) == digest:
            continue
        if pending.is_file() and file_sha256(pending) == digest:  # killed before the rename
            os.replace(pending, final)
            continue
        raise CacheError(
            f"training checkpoint {final} is missing or does not match {out / STATE}; "
            f"delete {out} to start again"
        )
    weights = load_file(os.fspath(out / WEIGHTS), device="cpu")
    optimizer = join_optimizer_state(load_file(os.fspath(out / OPTIMIZER), device="cpu"),
                                     record["optimizer"])
    return record, weights, optimizer


def read_method_state(out: Path) -> dict[str, torch.Tensor]:
    """The method's tensors of the last finished epoch (after :func:`read_checkpoint` checked
    them against the record)."""
    from safetensors.torch import load_file

    return load_file(os.fspath(out / METHOD), device="cpu")


def resume_checkpoint(
    out: Path, config: dict[str, Any], resume: bool
) -> tuple[dict[str, Any], dict[str, torch.Tensor], dict[str, Any]] | None:
    """:func:`read_checkpoint` of a run to continue, or None to start; a checkpoint of another
    config is an error (``InvalidInputError`` naming the keys that differ)."""
    previous = read_checkpoint(out) if resume else None
    if previous is not None and previous[0]["config"] != config:
        changed = sorted(k for k in config if previous[0]["config"].get(k) != config[k])
        raise InvalidInputError(
            f"{out} holds a training run with another config (differs in "
            f"{', '.join(changed)}); train into another out folder, or resume=False to "
            "overwrite it"
        )
    return previous
