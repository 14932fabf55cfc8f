"""CMA's zero-shot head as the official evaluation builds it (ma-kjh/CMA-OoDD inference.py:39-41,
70-78): ImageNet's 1000 class names of prompt.py, one template "The nice {}", each text embedding
L2-normalised, no ensemble. Re-stated here on a random-init open_clip text tower, so a changed
template, an added one or another combination fails."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch

from oodbench import losses
from oodbench.errors import InvalidInputError
from oodbench.train.cma_head import CMA_HEAD_TEMPLATES, refresh_head
from tests._clip_fixtures import tiny_clip
from tests.train._clip_run import run

#: sha256 of "\n".join(the class names of ma-kjh/CMA-OoDD prompt.py:4-249), at commit e2a665d:
#: ``Prompt_classes("imagenet")[0]`` of that file, hashed (the list is 1000 names long)
OFFICIAL_NAMES_SHA256 = "571ae1c583b4be7da87519494c52bf405a46af05d5815627c7a0dee997068b60"


def official_head(model, class_names) -> torch.Tensor:  # type: ignore[no-untyped-def]
    """inference.py:41 (``f"The nice {c}"`` per class, tokenised), :70 (``encode_text``), :74
    (``x / x.norm(dim=-1, keepdim=True)``): one unit vector per class."""
    with torch.no_grad():
        texts = model.clip.encode_text(model.tokenizer([f"The nice {c}" for c in class_names]))
    return texts / texts.norm(dim=-1, keepdim=True)


def test_the_class_names_are_the_official_ones() -> None:
    """oodbench's CLIP models default to open_clip's IMAGENET_CLASSNAMES: the same 1000 names,
    in the same order, as CMA's prompt.py."""
    import open_clip

    names = list(open_clip.IMAGENET_CLASSNAMES)
    assert hashlib.sha256("\n".join(names).encode()).hexdigest() == OFFICIAL_NAMES_SHA256
    # three of the names the CLIP notebook's list renamed (prompt.py:9, 203, 241)
    assert (names[21], names[789], names[956]) == (
        "kite (bird of prey)", "shoji screen / room divider", "cherimoya (custard apple)")


def test_the_head_is_the_official_one_template_head() -> None:
    import open_clip

    names = list(open_clip.IMAGENET_CLASSNAMES)
    model = tiny_clip(names)  # two templates of its own: an ensemble until the head is refreshed
    ensemble = model.head_weight / model.logit_scale
    refresh_head(model, "cma")
    assert CMA_HEAD_TEMPLATES == ("The nice {}",)
    assert [t("x") for t in model.templates] == ["The nice x"]
    official = official_head(model, names)
    # the same float32 embeddings normalised once (official) or twice (oodbench's renormalised
    # mean of one): a few ulps of 1, ~1e-7
    torch.testing.assert_close(model.head_weight / model.logit_scale, official, rtol=0, atol=1e-6)
    features = torch.nn.functional.normalize(torch.randn(64, official.shape[1],
                                                         generator=torch.Generator().manual_seed(0)),
                                             dim=-1)
    cosine = features @ official.T  # inference.py:78
    assert torch.equal(model.head(features).argmax(1), cosine.argmax(1))
    # the model's own two-template ensemble is another head (what this test would catch)
    assert not torch.allclose(ensemble, official, atol=1e-3)


def test_a_fine_tuned_model_gets_the_official_head_unless_told(tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert losses.create("cma").head_templates == "cma"
    trained = run("cma", str(tmp_path / "cma"), epochs=1).model
    assert [t("x") for t in trained.templates] == ["The nice x"]
    official = official_head(trained, trained.class_names)  # the fine-tuned text tower's
    torch.testing.assert_close(trained.head_weight / trained.logit_scale, official, rtol=0,
                               atol=1e-6)
    own = run("cma", str(tmp_path / "own"), epochs=1,
              loss_options={"warmup_steps": 3, "head_templates": "model"}).model
    assert [t("x") for t in own.templates] == ["a photo of a x.", "a drawing of a x."]
    assert not np.allclose(own.head_weight.detach(), trained.head_weight.detach())


def test_an_unknown_head_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="head_templates must be one of"):
        losses.create("cma", head_templates="openai")
