"""The training-regime tags of the published C-OOD models."""

from __future__ import annotations

import pandas as pd

from oodbench.results import paper
from oodbench.results.model_tags import has_tag, load_tags, tag_table, tags_for


def test_committed_table_is_what_the_rules_give() -> None:
    """scripts/make_cood_model_tags.py wrote the committed file; rerun it when a rule changes."""
    committed = load_tags()
    pd.testing.assert_frame_equal(committed, tag_table(set(paper.load()["model"])))
    assert len(committed) == 706


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


def test_undistilled_twins() -> None:
    table = load_tags().set_index("model")
    assert table.loc["deit_base_distilled_patch16_224", "undistilled"] == "deit_base_patch16_224"
    assert table.loc["xcit_tiny_12_p8_224_dist", "undistilled"] == "xcit_tiny_12_p8_224"
    assert table.loc["xcit_tiny_12_p8_384_dist", "undistilled"] == ""  # no 384 px plain twin
    assert table.loc["deit_base_patch16_224", "undistilled"] == ""
    twins = table[table["undistilled"] != ""]
    assert twins["undistilled"].isin(table.index).all()
    assert has_tag(table.loc[twins.index].reset_index(), "distillation").all()
