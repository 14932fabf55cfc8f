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


def _mood_official_shapes(dim: int, depth: int, heads: int, img: int, classes: int
                          ) -> dict[str, tuple[int, ...]]:
    """The state dict of MOOD's fine-tuned BEiT (MOODv1/modeling_finetune.py at 06be45f), named
    and shaped from the official module: ``cls_token`` (:275), ``patch_embed.proj`` (:209), no
    ``pos_embed`` (use_abs_pos_emb off: :277-280), per block ``norm1``/``norm2`` (:165, 171),
    ``attn.qkv`` without bias plus ``q_bias``/``v_bias`` (:78-81), the per-block relative
    position table of (2W - 1)^2 + 3 rows and its index buffer (:86-110), ``attn.proj``,
    ``mlp.fc1``/``fc2`` (:51-53), ``gamma_1``/``gamma_2`` (:176), ``norm`` an Identity and
    ``fc_norm`` a LayerNorm with mean pooling (:296-297), ``head`` (:298)."""
    window = img // 16
    shapes: dict[str, tuple[int, ...]] = {"cls_token": (1, 1, dim),
                                          "patch_embed.proj.weight": (dim, 3, 16, 16),
                                          "patch_embed.proj.bias": (dim,)}
    for i in range(depth):
        block = {"norm1.weight": (dim,), "norm1.bias": (dim,), "attn.qkv.weight": (3 * dim, dim),
                 "attn.q_bias": (dim,), "attn.v_bias": (dim,),
                 "attn.relative_position_bias_table": ((2 * window - 1) ** 2 + 3, heads),
                 "attn.relative_position_index": (window * window + 1,) * 2,
                 "attn.proj.weight": (dim, dim), "attn.proj.bias": (dim,),
                 "norm2.weight": (dim,), "norm2.bias": (dim,),
                 "mlp.fc1.weight": (4 * dim, dim), "mlp.fc1.bias": (4 * dim,),
                 "mlp.fc2.weight": (dim, 4 * dim), "mlp.fc2.bias": (dim,),
                 "gamma_1": (dim,), "gamma_2": (dim,)}
        shapes.update({f"blocks.{i}.{k}": v for k, v in block.items()})
    shapes.update({"fc_norm.weight": (dim,), "fc_norm.bias": (dim,), "head.weight": (classes, dim),
                   "head.bias": (classes,)})
    return shapes


def test_moods_official_layout_loads_tensor_by_tensor(tmp_path):
    """A checkpoint written from the official module's names and shapes (not from timm's), with
    random values: every parameter lands under the same name; the index buffers (timm rebuilds
    them) are dropped."""
    shapes = _mood_official_shapes(32, 2, 2, 32, 5)
    gen = torch.Generator().manual_seed(7)
    state = {k: (torch.zeros(v, dtype=torch.long) if k.endswith("relative_position_index")
                 else torch.randn(v, generator=gen)) for k, v in shapes.items()}
    path = tmp_path / "checkpoint-best.pth"
    torch.save({"model": state, "epoch": 99, "args": argparse.Namespace(model="beit")}, path)
    loaded = load("timm:beit_base_patch16_224", weights=path,
                  **{k: v for k, v in TINY.items() if k != "pretrained"}).model
    params = loaded.state_dict()
    assert set(params) == {k for k in shapes if not k.endswith("relative_position_index")}
    for key, value in params.items():
        assert torch.equal(value, state[key]), key


def test_the_mood_spec_is_moods_beit_large():
    """``timm:beit_large_patch16_224``, the spec of MOOD's recipe, has exactly the official
    ``beit_large_patch16_224`` (modeling_finetune.py:430-434: 1024 wide, 24 blocks, 16 heads)
    names and shapes (built on the meta device: no memory), norms and pooling."""
    import timm

    with torch.device("meta"):
        model = timm.create_model("beit_large_patch16_224", pretrained=False)
    official = {k: v for k, v in _mood_official_shapes(1024, 24, 16, 224, 1000).items()
                if not k.endswith("relative_position_index")}
    assert {k: tuple(v.shape) for k, v in model.state_dict().items()} == official
    # LayerNorm eps 1e-6 (:432-433, partial(nn.LayerNorm, eps=1e-6)); mean pooling into fc_norm
    norms = [m for m in model.modules() if isinstance(m, torch.nn.LayerNorm)]
    assert norms and all(m.eps == 1e-6 for m in norms) and model.global_pool == "avg"
