"""Local CLIP checkpoints for ``clip:<arch>/<tag>`` with ``weights=PATH``: full state dicts
(open_clip's, OpenAI's ``clip`` package's, oodbench's own training output, CMA's release) and
NPOS's release, which holds only the fine-tuned end of the vision tower.

* **Full**: every key of the open_clip model (OpenAI's ``clip`` package uses the same names;
  a ``model_state_dict`` / ``state_dict`` nesting and a DataParallel ``module.`` prefix are
  unwrapped by :func:`oodbench.models.checkpoint.read_state_dict`; the JIT archive's
  ``input_resolution`` / ``context_length`` / ``vocab_size`` entries are dropped). CMA's
  checkpoints (github.com/ma-kjh/CMA-OoDD, ``utils/train_utils.py`` saves
  ``{"model_state_dict": model.state_dict(), ...}`` of OpenAI's ViT-B/16) are of this kind.
* **NPOS** (github.com/deeplearning-wisc/npos, ``CLIP_based/OOD/CLIP/CLIP_ft.py``): the
  ``state_dict`` of ``CLIP_ft``: ``transformer_resblocks.block<i>.*`` (the last m vision blocks),
  ``ln_post.*``, ``proj`` and the MLP ``outlier_MLP.*``. Its blocks land on the model's last m
  vision blocks (``visual.transformer.resblocks.<L - m + i>``), ``ln_post`` and ``proj`` on the
  vision tower's; the MLP is not used at test time (the paper scores with MCM) and is left out.
  Everything else comes from the pretrained weights of the spec's tag, so the tag must be the
  one NPOS started from (``clip:ViT-B-16-quickgelu/openai``).

OpenAI's weights were trained with QuickGELU: checkpoints fine-tuned from them (CMA's, NPOS's)
belong in open_clip's ``-quickgelu`` architectures; the state dict cannot tell GELU from
QuickGELU, so a shape check cannot catch that mistake. When the shapes do not fit, the error
describes the checkpoint's architecture and names the open_clip architectures that match it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from oodbench.errors import InvalidInputError

_JIT_ENTRIES = ("input_resolution", "context_length", "vocab_size")
_NPOS_BLOCK = re.compile(r"^transformer_resblocks\.block(\d+)\.(.+)$")


def is_npos_release(state: Mapping[str, torch.Tensor]) -> bool:
    """Whether ``state`` is NPOS's ``CLIP_ft`` state dict (see the module docstring)."""
    return any(_NPOS_BLOCK.match(k) for k in state) and "visual.proj" not in state


def _blocks(state: Mapping[str, Any], prefix: str) -> int:
    pattern = re.compile(rf"^{re.escape(prefix)}(\d+)\.")
    found = {int(m.group(1)) for k in state if (m := pattern.match(k))}
    return max(found) + 1 if found else 0


def describe(state: Mapping[str, torch.Tensor]) -> dict[str, Any]:
    """What a full CLIP state dict's shapes say: embed_dim and the vision tower's width, blocks,
    patch and image size (ViT), or that it is a ResNet tower."""
    out: dict[str, Any] = {}
    if "visual.proj" in state:
        out["embed_dim"] = int(state["visual.proj"].shape[1])
    conv = state.get("visual.conv1.weight")
    if conv is not None and "visual.class_embedding" in state:
        width, patch = int(conv.shape[0]), int(conv.shape[-1])
        tokens = int(state["visual.positional_embedding"].shape[0]) - 1
        out.update(width=width, layers=_blocks(state, "visual.transformer.resblocks."),
                   patch_size=patch, image_size=round(tokens ** 0.5) * patch)
    elif any(k.startswith("visual.layer1.") for k in state):
        out["vision"] = "ResNet"
    return out


def _matching(signature: dict[str, Any]) -> list[str]:
    import open_clip

    names = []
    for name in open_clip.list_models():
        cfg = open_clip.get_model_config(name) or {}
        vision = cfg.get("vision_cfg", {})
        have = {"embed_dim": cfg.get("embed_dim"), "width": vision.get("width"),
                "layers": vision.get("layers"), "patch_size": vision.get("patch_size"),
                "image_size": vision.get("image_size")}
        if "width" in signature and all(have[k] == v for k, v in signature.items()):
            names.append(name)
    return names


def _misfit(origin: str, arch: str, model: nn.Module, signature: dict[str, Any],
            detail: str) -> InvalidInputError:
    expected = describe(model.state_dict())
    said = ", ".join(f"{k}={v}" for k, v in signature.items()) or "no CLIP vision tower"
    matches = _matching(signature)
    hint = (f"; open_clip architectures with these shapes: {', '.join(matches[:6])} (use the "
            "-quickgelu one for weights fine-tuned from OpenAI's)") if matches else ""
    return InvalidInputError(
        f"checkpoint {origin} does not fit clip:{arch} ({detail}): the checkpoint is a CLIP "
        f"with {said}, clip:{arch} has {', '.join(f'{k}={v}' for k, v in expected.items())}"
        f"{hint}")


def load_into(model: nn.Module, state: dict[str, torch.Tensor], *, origin: str, arch: str) -> None:
    """Load a full or NPOS checkpoint into the open_clip ``model`` (see the module docstring)."""
    import open_clip

    if is_npos_release(state):
        _load_npos(model, state, origin=origin, arch=arch)
        return
    state = {k: v for k, v in state.items() if k not in _JIT_ENTRIES}
    if "positional_embedding" in state and not hasattr(model, "positional_embedding"):
        state = open_clip.model.convert_to_custom_text_state_dict(state)
    target = model.state_dict()
    missing = [k for k in target if k not in state]
    unexpected = [k for k in state if k not in target]
    shapes = [k for k in target if k in state and state[k].shape != target[k].shape]
    if missing or unexpected or shapes:
        detail = "; ".join(f"{len(items)} {label}, e.g. {items[0]}" for label, items in
                           (("missing", missing), ("unexpected", unexpected),
                            ("of another shape", shapes)) if items)
        raise _misfit(origin, arch, model, describe(state), detail)
    model.load_state_dict(state)


def _load_npos(model: nn.Module, state: dict[str, torch.Tensor], *, origin: str, arch: str) -> None:
    target = model.state_dict()
    fine_tuned = _blocks({k[len("transformer_resblocks.block"):]: v for k, v in state.items()
                          if k.startswith("transformer_resblocks.block")}, "")
    layers = _blocks(target, "visual.transformer.resblocks.")
    mapped: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        if key.startswith("outlier_MLP."):
            continue
        block = _NPOS_BLOCK.match(key)
        if block:
            name = f"visual.transformer.resblocks.{layers - fine_tuned + int(block.group(1))}.{block.group(2)}"
        else:
            name = f"visual.{key}"
        mapped[name] = value
    bad = [k for k, v in mapped.items() if k not in target or target[k].shape != v.shape]
    if bad or fine_tuned > layers:
        width = int(state["proj"].shape[0]) if "proj" in state else None
        signature = {"embed_dim": int(state["proj"].shape[1]) if "proj" in state else None,
                     "width": width}
        raise _misfit(origin, arch, model, {k: v for k, v in signature.items() if v},
                      f"NPOS checkpoint of {fine_tuned} fine-tuned vision blocks; e.g. {bad[0] if bad else 'blocks'}")
    model.load_state_dict({**target, **mapped})
