"""CLIP zero-shot classifiers (random tiny open_clip model; no weights are fetched)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from oodbench.errors import InvalidInputError, UnknownNameError
from oodbench.models.clip import load_clip, parse_clip_spec, resolve_templates
from tests._clip_fixtures import register_tiny_clip, tiny_clip
from tests.models.checks import assert_linear_head

CLASSES = ["cat", "dog", "car"]


def _images(n: int = 4) -> torch.Tensor:
    rng = np.random.default_rng(0)
    return torch.randn(n, 3, 32, 32, generator=torch.Generator().manual_seed(int(rng.integers(99))))


def test_parse_spec():
    assert parse_clip_spec("ViT-B-32/openai") == ("ViT-B-32", "openai")
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
