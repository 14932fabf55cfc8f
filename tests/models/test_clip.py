"""CLIP zero-shot classifiers (random tiny open_clip model; no weights are fetched)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from oodbench.errors import InvalidInputError, UnknownNameError
from oodbench.models.clip import activation_mismatch, load_clip, parse_clip_spec, resolve_templates
from tests._clip_fixtures import register_tiny_clip, tiny_clip
from tests.models.checks import assert_linear_head

CLASSES = ["cat", "dog", "car"]


def _images(n: int = 4) -> torch.Tensor:
    rng = np.random.default_rng(0)
    return torch.randn(n, 3, 32, 32, generator=torch.Generator().manual_seed(int(rng.integers(99))))


def test_parse_spec():
    assert parse_clip_spec("ViT-B-16-quickgelu/openai") == ("ViT-B-16-quickgelu", "openai")
    assert parse_clip_spec("RN50") == ("RN50", None)
    with pytest.raises(InvalidInputError):
        parse_clip_spec("/openai")


def test_zero_shot_head_is_scaled_mean_of_normalised_template_embeddings():
    model = tiny_clip(CLASSES)
    clip, tok = model.clip, model.tokenizer
    with torch.no_grad():
        expected = []
        for c in CLASSES:
            e = F.normalize(clip.encode_text(tok([f"a photo of a {c}.", f"a drawing of a {c}."])).float(), dim=-1)
            expected.append(F.normalize(e.mean(0), dim=-1))
        expected_w = torch.stack(expected) * clip.logit_scale.exp()
    # float32 text embeddings of the prompts in other batches (~1e-6 relative), times 100
    torch.testing.assert_close(model.head_weight, expected_w, rtol=1e-5, atol=1e-6)
    assert model.num_classes == 3 and list(model.class_names) == CLASSES


def test_logits_are_scaled_cosines_and_linear_in_features():
    model = tiny_clip(CLASSES)
    x = _images()
    with torch.no_grad():
        out = model.forward_all(x, capture=("logits", "features", "feature_map"))
        img = model.clip.encode_image(x).float()
        text = F.normalize(model.head_weight, dim=-1)
        expected = model.clip.logit_scale.exp() * F.normalize(img, dim=-1) @ text.T
    # float32 cosines times logit_scale (100): ~1e-5 absolute at most
    torch.testing.assert_close(out["logits"], expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out["features"].norm(dim=1), torch.ones(len(x)))  # float32 norms
    assert_linear_head(out["logits"], out["features"], model.head_weight, model.head_bias)
    torch.testing.assert_close(out["feature_map"], img)  # the same encoder on the same batch


def test_text_embeddings_are_cached_on_disk(tmp_path, monkeypatch):
    monkeypatch.setenv("OODBENCH_CACHE", str(tmp_path))
    model = tiny_clip(CLASSES)
    files = list((tmp_path / "text_embeddings").glob("*.npy"))
    assert len(files) == 1  # the zero-shot head's prompts
    calls = []
    original = model.clip.encode_text
    monkeypatch.setattr(model.clip, "encode_text", lambda t: calls.append(1) or original(t))
    first = model.encode_text(["the nice zebra", "the nice car"])
    second = model.encode_text(["the nice zebra", "the nice car"])
    assert len(calls) == 1  # second call served from the cache
    torch.testing.assert_close(first, second)
    assert len(list((tmp_path / "text_embeddings").glob("*.npy"))) == 2


def test_weights_digest_depends_on_class_names():
    a, b = tiny_clip(CLASSES), tiny_clip(["cat", "dog", "bus"])
    assert a.weights_digest() != b.weights_digest()
    assert a.weights_digest() == tiny_clip(CLASSES).weights_digest()


def test_transform_is_open_clip_preprocessing():
    model = tiny_clip(CLASSES)
    x = model.transform(Image.new("RGB", (50, 40), (255, 0, 0)))
    assert tuple(x.shape) == (3, 32, 32)


def test_errors():
    register_tiny_clip()
    with pytest.raises(UnknownNameError, match="ViT-B-32"):
        load_clip("ViT-B-33/openai", pretrained=False)
    with pytest.raises(InvalidInputError, match="pretrained tag"):
        load_clip("oodbench-tiny-clip", pretrained=True)
    with pytest.raises(InvalidInputError, match="\\{\\}"):
        resolve_templates(["no placeholder"])


def _openai_archs() -> list[str]:
    import open_clip

    return [arch for arch, tag in open_clip.list_pretrained() if tag == "openai"]


def test_openai_weights_need_the_quickgelu_architectures():
    """OpenAI's weights were trained with QuickGELU: open_clip lists each of them under its plain
    architecture (built with GELU) and its ``-quickgelu`` twin; only the twin is accepted, and the
    refusal names it."""
    pairs = _openai_archs()
    plain = [a for a in pairs if not a.endswith("-quickgelu")]
    assert "ViT-B-16" in plain and "ViT-B-16-quickgelu" in pairs
    for arch in pairs:
        mismatch = activation_mismatch(arch, "openai")
        if arch in plain:
            assert f"{arch}-quickgelu" in pairs  # every plain one has its twin
            assert mismatch is not None and f"use clip:{arch}-quickgelu/openai" in mismatch
        else:
            assert mismatch is None, arch
    assert activation_mismatch("ViT-B-16", None) is None  # no tag: no weights to fit
    assert activation_mismatch("ViT-B-16", "none") is None


def test_a_gelu_architecture_with_openai_weights_is_refused_before_anything_loads(monkeypatch):
    import open_clip

    def no_build(*args, **kwargs):
        raise AssertionError("the refusal must come before the model is built or downloaded")

    monkeypatch.setattr(open_clip, "create_model_and_transforms", no_build)
    with pytest.raises(InvalidInputError, match=r"use clip:ViT-B-16-quickgelu/openai$") as err:
        load_clip("ViT-B-16/openai")
    assert "QuickGELU" in str(err.value) and "\n" not in str(err.value)
    # a checkpoint fine-tuned from OpenAI's weights too (before the file is read)
    with pytest.raises(InvalidInputError, match="ViT-B-16-quickgelu/openai"):
        load_clip("ViT-B-16/openai", weights="no-such-checkpoint.pt")


@pytest.mark.heavy
def test_vit_b_16_quickgelu_openai_builds_quickgelu_towers():
    """The spec of the published MCM (CLIP-B) rows loads (random weights: nothing downloaded)
    with QuickGELU in every block of both towers."""
    from open_clip.transformer import QuickGELU

    from oodbench.models.clip_checkpoints import describe

    model = load_clip("ViT-B-16-quickgelu/openai", pretrained=False, class_names=CLASSES,
                      templates="simple")
    assert model.spec == "clip:ViT-B-16-quickgelu/openai"
    activations = [type(m) for m in model.clip.modules()
                   if isinstance(m, (torch.nn.GELU, QuickGELU))]
    assert activations and set(activations) == {QuickGELU}
    assert describe(model.clip.state_dict()) == {"embed_dim": 512, "width": 768, "layers": 12,
                                                 "patch_size": 16, "image_size": 224}
