"""Loading local checkpoints safely: ``torch.load(weights_only=True)`` or safetensors, never a
full unpickle, and a strict key-and-shape check that says exactly what does not fit."""

from __future__ import annotations

import argparse
import os
import pickle
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from oodbench.errors import ClassCountMismatchError, InvalidInputError, MissingDataError

#: keys under which training scripts commonly nest the state dict
_NESTED_KEYS = ("state_dict", "model", "model_state_dict", "module")
#: classes besides tensors and containers that checkpoints may hold and weights_only may build
_SAFE_GLOBALS: list[Any] = [argparse.Namespace]


def require_weights(spec: str, weights: object, pretrained: bool, what: str, where: str) -> None:
    """Raise ``MissingDataError`` for a family whose weights oodbench neither bundles nor
    downloads, asked for pretrained weights without ``weights=PATH`` (``where``: which
    checkpoint to pass)."""
    if weights is None and pretrained:
        raise MissingDataError(
            f"{spec}: oodbench bundles no {what} weights and downloads none; pass weights=PATH "
            f"to {where}, or pretrained=False for random weights")


def read_state_dict(path: str | os.PathLike[str]) -> dict[str, torch.Tensor]:
    """The tensors of a checkpoint file on the CPU.

    ``.safetensors`` files are read with safetensors; anything else with
    ``torch.load(weights_only=True)``, which refuses pickled code (``argparse.Namespace`` is
allowed: training scripts such as BEiT's and MOOD's save their command-line arguments beside the
weights, and a Namespace holds only plain values). A state dict nested under
    ``state_dict`` / ``model`` / ``model_state_dict`` / ``module`` is unwrapped, and a
    ``module.`` prefix (DataParallel) is stripped.
    """
    file = Path(path).expanduser()
    if not file.is_file():
        raise MissingDataError(f"checkpoint {os.fspath(file)!r} does not exist")
    try:
        if file.suffix == ".safetensors":
            from safetensors.torch import load_file

            obj: object = load_file(os.fspath(file), device="cpu")
        else:
            with torch.serialization.safe_globals(_SAFE_GLOBALS):
                obj = torch.load(file, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        raise InvalidInputError(
            f"checkpoint {os.fspath(file)!r} holds Python objects that weights_only loading "
            f"refuses ({err}); re-save it as a plain state dict (torch.save(model.state_dict(), "
            "path)) or as safetensors"
        ) from err
    except Exception as err:
        raise InvalidInputError(
            f"cannot read checkpoint {os.fspath(file)!r}: {type(err).__name__}: {err}"
        ) from err
    for key in _NESTED_KEYS:
        if isinstance(obj, Mapping) and isinstance(obj.get(key), Mapping):
            obj = obj[key]
            break
    if not isinstance(obj, Mapping) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise InvalidInputError(
            f"checkpoint {os.fspath(file)!r} is not a state dict (a mapping of names to tensors)"
        )
    state = {str(k): v for k, v in obj.items()}
    if state and all(k.startswith("module.") for k in state):
        state = {k[len("module.") :]: v for k, v in state.items()}
    return state


def load_strict(model: nn.Module, state: Mapping[str, torch.Tensor], origin: str) -> None:
    """``model.load_state_dict(state)`` after checking that every key and shape matches.

    ``origin`` names the checkpoint in the error. A head of the wrong size raises
    :class:`ClassCountMismatchError` suggesting ``num_classes=``.
    """
    target = model.state_dict()
    missing = [k for k in target if k not in state]
    unexpected = [k for k in state if k not in target]
    mismatched = [
        f"{k}: checkpoint {tuple(state[k].shape)} vs model {tuple(v.shape)}"
        for k, v in target.items()
        if k in state and tuple(state[k].shape) != tuple(v.shape)
    ]
    if not (missing or unexpected or mismatched):
        model.load_state_dict(state, strict=True)
        return
    parts = []
    for label, items in (("missing", missing), ("unexpected", unexpected), ("shape", mismatched)):
        if items:
            more = f" (+{len(items) - 5} more)" if len(items) > 5 else ""
            parts.append(f"{len(items)} {label}: {', '.join(items[:5])}{more}")
    message = f"checkpoint {origin} does not fit {type(model).__name__}: " + "; ".join(parts)
    if mismatched and not (missing or unexpected):
        raise ClassCountMismatchError(
            message + ". If only the classifier differs, pass num_classes=<the checkpoint's>"
        )
    raise InvalidInputError(message + ". Check that the checkpoint is for this architecture")


def load_renamed(
    model: nn.Module,
    state: Mapping[str, torch.Tensor],
    expected: Mapping[str, str],
    origin: str,
    layout: str,
    *,
    ignored: tuple[str, ...] = (),
    optional: tuple[str, ...] = ("num_batches_tracked",),
    head: tuple[str, ...] = (),
) -> list[str]:
    """Load a checkpoint written in another code's key layout into ``model``, strictly.

    ``expected`` maps each key of the checkpoint's layout (``layout`` names it in errors) to the
    key of ``model.state_dict()`` it fills. A tensor whose shape is the model's followed by
    singleton dimensions (a 1x1 convolution used as a linear head) is reshaped. Checkpoint keys
    starting with one of ``ignored`` (parts the model does not have, e.g. a projection head) are
    dropped; keys ending with one of ``optional`` may be missing (they keep the model's values).
    Every other missing, unexpected or misshapen key raises, named as the checkpoint names it:
    :class:`ClassCountMismatchError` when only the ``head`` keys (checkpoint names) differ in
    shape, naming the checkpoint's output count, else :class:`InvalidInputError`.

    Returns the expected keys that were missing and allowed (``optional``), so a caller can
    say what kept the model's own values.
    """
    target = model.state_dict()
    loaded: dict[str, torch.Tensor] = {}
    unexpected: list[str] = []
    mismatched: list[str] = []
    for key, tensor in state.items():
        if ignored and key.startswith(ignored):
            continue
        if key not in expected:
            unexpected.append(key)
            continue
        want = target[expected[key]]
        shape, have = tuple(want.shape), tuple(tensor.shape)
        if have[: len(shape)] == shape and all(d == 1 for d in have[len(shape):]):
            loaded[expected[key]] = tensor.reshape(shape)
        else:
            mismatched.append(key)
    missing = [k for k in expected if k not in state]
    kept = [k for k in missing if optional and k.endswith(optional)]
    missing = [k for k in missing if k not in kept]
    if missing or unexpected or mismatched:
        parts = []
        shapes = [f"{k}: checkpoint {tuple(state[k].shape)} vs model "
                  f"{tuple(target[expected[k]].shape)}" for k in mismatched]
        for label, items in (("missing", missing), ("unexpected", unexpected),
                             ("shape", shapes)):
            if items:
                more = f" (+{len(items) - 5} more)" if len(items) > 5 else ""
                parts.append(f"{len(items)} {label}: {', '.join(items[:5])}{more}")
        message = (f"checkpoint {origin} does not fit the {layout} layout of "
                   f"{type(model).__name__}: " + "; ".join(parts))
        if mismatched and set(mismatched) <= set(head) and not (missing or unexpected):
            outputs = int(state[mismatched[0]].shape[0])
            raise ClassCountMismatchError(
                f"{message}. The checkpoint's head has {outputs} outputs: pass "
                f"num_classes={outputs}")
        raise InvalidInputError(message + ". Check that the checkpoint is of this architecture "
                                "and this layout")
    for key in kept:
        loaded[expected[key]] = target[expected[key]]
    model.load_state_dict(loaded, strict=True)
    return kept
