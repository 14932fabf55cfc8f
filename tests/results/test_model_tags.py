"""The training-regime tags of the published C-OOD models."""

from __future__ import annotations

import pandas as pd

from oodbench.results import paper
from oodbench.results.model_tags import (
    distillation_pairs,
    has_tag,
    load_pairs,
    load_tags,
    tag_table,
    tags_for,
)


def test_committed_table_is_what_the_rules_give() -> None:
    """scripts/make_cood_model_tags.py wrote the committed file; rerun it when a rule changes."""
    names = set(paper.load()["model"])
    committed = load_tags()
    pd.testing.assert_frame_equal(committed, tag_table(names))
    assert len(committed) == 706
    pd.testing.assert_frame_equal(load_pairs(), distillation_pairs(names))


def test_rules_on_known_names() -> None:
    assert tags_for("deit_base_distilled_patch16_224") == ["distillation"]
    assert tags_for("xcit_tiny_12_p8_224_dist") == ["distillation"]
    assert tags_for("tf_efficientnet_b7_ns") == ["noisy_student", "semi_weakly_supervised"]
    assert tags_for("convnext_large_384_in22ft1k") == ["in21k_pretrained"]
    assert tags_for("vit_large_patch32_384") == ["in21k_pretrained", "vit"]
    assert tags_for("vit_base_patch32_sam_224") == ["sam", "vit"]  # SAM ViTs: ImageNet-1k only
    assert tags_for("CLIP_ViT-L~14@336px") == ["clip_zero_shot"]
    assert tags_for("CLIP_finetuned_RN50x4") == ["clip_finetuned"]
    assert tags_for("adv_inception_v3") == ["adversarial"]
    assert tags_for("swsl_resnext101_32x8d") == ["semi_weakly_supervised"]
    assert tags_for("resnet50_torchvision") == ["torchvision"]
    assert tags_for("resnet50") == []


def test_distillation_pairs_are_committed_and_include_bit() -> None:
    pairs = load_pairs().set_index("distilled")
    assert pairs.loc["deit_base_distilled_patch16_224", "undistilled"] == "deit_base_patch16_224"
    assert pairs.loc["xcit_tiny_12_p8_224_dist", "undistilled"] == "xcit_tiny_12_p8_224"
    assert "xcit_tiny_12_p8_384_dist" not in pairs.index  # no 384 px plain twin is published
    # the pair no name rule finds: BiT's distilled R50x1 and BiT-M R50x1
    assert pairs.loc["resnetv2_50x1_bit_distilled", "undistilled"] == "resnetv2_50x1_bitm"
    assert pairs.loc["resnetv2_50x1_bit_distilled", "how"].startswith("explicit:")
    tags = load_tags().set_index("model")
    assert pairs["undistilled"].isin(tags.index).all()
    assert has_tag(tags.loc[pairs.index].reset_index(), "distillation").all()
    assert not has_tag(tags.loc[pairs["undistilled"]].reset_index(), "distillation").any()
