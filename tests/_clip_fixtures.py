"""A tiny randomly initialised open_clip model (no weights can be fetched in tests)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import torch

TINY_ARCH = "oodbench-tiny-clip"
TINY_CONFIG = {
    "embed_dim": 32,
    "vision_cfg": {"image_size": 32, "layers": 1, "width": 64, "patch_size": 16, "head_width": 32},
    "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1},
}


def register_tiny_clip(layers: int = 1) -> str:
    """Register the tiny architecture (``layers`` vision blocks) with open_clip once; returns
    its name."""
    import open_clip

    name = TINY_ARCH if layers == 1 else f"{TINY_ARCH}-{layers}l"
    if name not in open_clip.list_models():
        folder = Path(tempfile.mkdtemp(prefix="oodbench-clip-cfg-"))
        config = {**TINY_CONFIG, "vision_cfg": {**TINY_CONFIG["vision_cfg"], "layers": layers}}
        (folder / f"{name}.json").write_text(json.dumps(config))
        open_clip.add_model_config(folder)
    return name


def tiny_clip(class_names, templates=("a photo of a {}.", "a drawing of a {}."), layers=1):
    """A random-weight tiny CLIP zero-shot classifier over ``class_names`` (seeded)."""
    from oodbench.models.clip import load_clip

    torch.manual_seed(0)
    return load_clip(f"{register_tiny_clip(layers)}/none", pretrained=False,
                     class_names=class_names, templates=list(templates))
