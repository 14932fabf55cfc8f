"""Local CLIP checkpoints through ``weights=``: full state dicts (oodbench's training output,
CMA's release format), NPOS's partial release, and the error for another architecture."""

from __future__ import annotations

import pytest
import torch

from oodbench import models
from oodbench.errors import InvalidInputError
from oodbench.models.checkpoint import read_state_dict
from oodbench.models.clip import load_clip
from oodbench.models.clip_checkpoints import describe, is_npos_release, load_into
from tests._clip_fixtures import register_tiny_clip, tiny_clip

CLASSES = ["cat", "dog", "car"]


def _perturbed(layers: int = 1) -> torch.nn.Module:
    clip = tiny_clip(CLASSES, layers=layers).clip
    with torch.no_grad():
        for p in clip.parameters():
            p.add_(0.01 * torch.randn_like(p))
    return clip


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_cma_release_format_loads(tmp_path):
    """CMA saves {"epoch", "model_state_dict", "optimizer_state_dict"} of OpenAI's model, here
    with DataParallel's module. prefix."""
    clip = _perturbed()
    path = tmp_path / "model_CMA_10.pt"
    torch.save({"epoch": 10, "model_state_dict": {f"module.{k}": v for k, v in
                                                  clip.state_dict().items()},
                "optimizer_state_dict": {"state": {}, "param_groups": [{"lr": 1e-5}]}}, path)
    loaded = models.load(f"clip:{register_tiny_clip()}/none", pretrained=False, weights=path,
                         class_names=CLASSES)
    assert _same(loaded.clip.state_dict(), clip.state_dict())


def test_training_output_round_trips_through_models_load(tmp_path):
    from oodbench.train.cma_head import CMA_HEAD_TEMPLATES
    from tests.train._clip_run import run

    result = run("cma", str(tmp_path / "run"), epochs=1)
    # CMA's fine-tuned head is built from its official template; loading the weights with that
    # template gives the same head
    assert [t("dog") for t in result.model.templates] == [t.format("dog") for t in CMA_HEAD_TEMPLATES]
    loaded = models.load(result.model.spec, pretrained=False, weights=result.weights,
                         class_names=CLASSES, templates=list(CMA_HEAD_TEMPLATES))
    assert _same(loaded.clip.state_dict(), result.model.clip.state_dict())
    torch.testing.assert_close(loaded.head_weight, result.model.head_weight)


def _npos_release(clip: torch.nn.Module, blocks: int) -> dict[str, torch.Tensor]:
    """CLIP_ft's state dict (DataParallel prefix): the last ``blocks`` vision blocks as
    transformer_resblocks.block<i>, ln_post, proj, and the MLP."""
    state = clip.state_dict()
    layers = len(clip.visual.transformer.resblocks)
    out = {}
    for i in range(blocks):
        prefix = f"visual.transformer.resblocks.{layers - blocks + i}."
        out.update({f"module.transformer_resblocks.block{i}.{k[len(prefix):]}": v
                    for k, v in state.items() if k.startswith(prefix)})
    out.update({f"module.ln_post.{k}": state[f"visual.ln_post.{k}"] for k in ("weight", "bias")})
    out["module.proj"] = state["visual.proj"]
    out.update({"module.outlier_MLP.0.weight": torch.zeros(32, 32),
                "module.outlier_MLP.0.bias": torch.zeros(32),
                "module.outlier_MLP.2.weight": torch.zeros(1, 32),
                "module.outlier_MLP.2.bias": torch.zeros(1)})
    return out


def test_npos_release_lands_on_the_last_blocks(tmp_path):
    fine_tuned = _perturbed(layers=2)
    path = tmp_path / "ImageNet-1k_CLIP.pt"
    torch.save(_npos_release(fine_tuned, blocks=1), path)
    state = read_state_dict(path)
    assert is_npos_release(state)
    base = tiny_clip(CLASSES, layers=2).clip
    before = {k: v.clone() for k, v in base.state_dict().items()}
    load_into(base, state, origin="npos", arch="tiny")
    after, wanted = base.state_dict(), fine_tuned.state_dict()
    for key in after:
        late = key.startswith(("visual.transformer.resblocks.1.", "visual.ln_post.")) or \
            key == "visual.proj"
        assert torch.equal(after[key], wanted[key] if late else before[key]), key
    # the rest of the weights come from the tag: without one it is an error
    with pytest.raises(InvalidInputError, match="NPOS's release .* name its tag") as err:
        load_clip(f"{register_tiny_clip(2)}/none", pretrained=False, weights=path,
                  class_names=CLASSES)
    assert "\n" not in str(err.value)


def test_another_architecture_is_a_one_line_error_naming_the_fitting_ones(tmp_path):
    from safetensors.torch import save_file

    path = tmp_path / "two_layers.safetensors"
    save_file({k: v.contiguous() for k, v in _perturbed(layers=2).state_dict().items()}, path)
    one_layer = register_tiny_clip(1)
    two_layers = register_tiny_clip(2)
    with pytest.raises(InvalidInputError) as err:
        load_clip(f"{one_layer}/none", pretrained=False, weights=path, class_names=CLASSES)
    message = str(err.value)
    assert "\n" not in message
    assert f"does not fit clip:{one_layer}" in message and "layers=2" in message
    assert f"architectures with these shapes: {two_layers}" in message
    # an NPOS release with another width
    release = tmp_path / "npos.pt"
    torch.save(_npos_release(_perturbed(layers=2), blocks=1), release)
    with pytest.raises(InvalidInputError, match="NPOS checkpoint of 1 fine-tuned vision blocks"):
        load_into(_wide_model(), read_state_dict(release), origin="npos", arch="ViT-wide")


def _wide_model() -> torch.nn.Module:
    import open_clip

    return open_clip.create_model(register_tiny_clip(2), pretrained=None,
                                  embed_dim=48)  # another projection width


def test_describe_reads_the_vision_tower():
    sig = describe(tiny_clip(CLASSES, layers=2).clip.state_dict())
    assert sig == {"embed_dim": 32, "width": 64, "layers": 2, "patch_size": 16, "image_size": 32}


@pytest.mark.heavy
def test_a_vit_b_16_checkpoint_into_vit_b_32_names_vit_b_16(tmp_path):
    """CMA's and NPOS's releases are ViT-B/16 fine-tunes: given to a ViT-B-32 the error says
    which architectures fit (random weights, nothing downloaded)."""
    import open_clip
    from safetensors.torch import save_file

    vit_b_16 = open_clip.create_model("ViT-B-16-quickgelu", pretrained=None)
    path = tmp_path / "b16.safetensors"
    save_file({k: v.contiguous() for k, v in vit_b_16.state_dict().items()}, path)
    with pytest.raises(InvalidInputError, match="ViT-B-16, ViT-B-16-quickgelu") as err:
        load_clip("ViT-B-32-quickgelu/none", pretrained=False, weights=path, class_names=CLASSES)
    assert "patch_size=16" in str(err.value) and "\n" not in str(err.value)
