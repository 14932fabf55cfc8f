"""BEiT in the timm adapter, as MOOD uses it: features = fc_norm(mean of the patch tokens), and
``weights=`` reading a checkpoint in the official BEiT / MOOD layout, on a random tiny BEiT."""

from __future__ import annotations

import argparse

import pytest
import torch

from oodbench.errors import InvalidInputError
from oodbench.models import load

TINY = dict(pretrained=False, num_classes=5, img_size=32, embed_dim=32, depth=2, num_heads=2)


def _tiny(seed: int = 0):
    torch.manual_seed(seed)
    return load("timm:beit_base_patch16_224", **TINY)


def _images(n: int = 3) -> torch.Tensor:
    return torch.randn(n, 3, 32, 32, generator=torch.Generator().manual_seed(1))


def test_features_are_mood_mean_pooled_patch_tokens_through_fc_norm():
    clf = _tiny()
    x = _images()
    with torch.no_grad():
        features = clf.features(x)
        beit = clf.model
        # MOOD's forward_features: patch tokens after the blocks, class token dropped, mean, fc_norm
        tokens = beit.patch_embed(x)
        tokens = torch.cat([beit.cls_token.expand(len(x), -1, -1), tokens], dim=1)
        rel = beit.rel_pos_bias() if beit.rel_pos_bias is not None else None
        for block in beit.blocks:
            tokens = block(tokens, shared_rel_pos_bias=rel)
        expected = beit.fc_norm(tokens[:, 1:].mean(dim=1))
        # the same float32 blocks, called one by one: ~1e-7 of features of size ~1
        torch.testing.assert_close(features, expected, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(clf.head(features), beit(x), rtol=1e-5, atol=1e-6)


def _official_checkpoint(clf, path, prefix: str = "") -> None:
    """The layout BEiT's / MOOD's utils.save_model writes: model (with the persistent
    relative_position_index buffers), optimizer, epoch, scaler and the argparse Namespace."""
    state = {prefix + k: v.clone() for k, v in clf.model.state_dict().items()}
    for name, module in clf.model.named_modules():
        index = getattr(module, "relative_position_index", None)
        if isinstance(index, torch.Tensor):
            state[f"{prefix}{name}.relative_position_index"] = index.clone()
    torch.save({"model": state, "optimizer": {"state": {}, "param_groups": []}, "epoch": 29,
                "scaler": {"scale": 65536.0}, "args": argparse.Namespace(model="beit", lr=4e-3)},
               path)


@pytest.mark.parametrize("prefix", ["", "module."])
def test_weights_read_the_official_checkpoint_layout(tmp_path, prefix):
    source, path = _tiny(seed=3), tmp_path / "checkpoint-29.pth"
    _official_checkpoint(source, path, prefix)
    loaded = load("timm:beit_base_patch16_224", weights=path,
                  **{k: v for k, v in TINY.items() if k != "pretrained"})
    for key, value in source.model.state_dict().items():
        assert torch.equal(loaded.model.state_dict()[key], value), key
    x = _images()
    with torch.no_grad():
        torch.testing.assert_close(loaded.features(x), source.features(x))


def test_official_checkpoint_of_another_architecture_is_a_clear_error(tmp_path):
    path = tmp_path / "checkpoint.pth"
    _official_checkpoint(_tiny(), path)
    with pytest.raises(InvalidInputError, match="does not fit"):
        load("timm:beit_base_patch16_224", weights=path,
             **{**{k: v for k, v in TINY.items() if k != "pretrained"}, "depth": 3})
