"""Training-regime tags of the C-OOD paper's published models, read from their names.

The published model names are timm model names (plus ``_torchvision``, ``_original`` and
``CLIP_`` entries), and timm encodes how a checkpoint was trained in its name: ``_in21ft1k`` /
``_in22ft1k`` (ImageNet-21k pre-training, then ImageNet-1k), ``_distilled`` / ``_dist``
(knowledge distillation from a teacher), ``_ns`` (Noisy Student), ``ssl_`` / ``swsl_``
(semi- / semi-weakly supervised), ``adv_`` / ``_ap`` (adversarial training, AdvProp), ... Each
rule below is a regular expression and the source that says what the tag means; a name gets
every tag whose rule matches. The table of tags of every published model is committed as
``_data/cood_model_tags.csv`` (written by ``scripts/make_cood_model_tags.py``) so a reviewer
can read and correct it; a test keeps it equal to what these rules give.

The distilled models and the same architecture trained without distillation are paired in a
second committed table, ``_data/cood_distillation_pairs.csv`` (``distilled``, ``undistilled``,
``how``): the pairs the name rule finds (the ``_distilled`` / ``_dist`` marker removed) and the
pairs no name rule can find, listed in ``EXPLICIT_PAIRS`` with their reason (BiT's distilled
R50x1 and the BiT-M R50x1 it is compared with).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

import pandas as pd

TAGS_FILE = "cood_model_tags.csv"
PAIRS_FILE = "cood_distillation_pairs.csv"


@dataclass(frozen=True)
class TagRule:
    """A tag, the pattern of the names that carry it, and where the meaning comes from."""

    tag: str
    pattern: str
    source: str


#: the rules, as data; a name may match several
TAG_RULES: tuple[TagRule, ...] = (
    TagRule("distillation", r"_distilled|_dist$|^levit_",
            "timm: DeiT/PiT/ResMLP '_distilled', XCiT '_dist', BiT '_bit_distilled' (Beyer et "
            "al. 2022), LeViT (trained with DeiT distillation, Graham et al. 2021)"),
    TagRule("noisy_student", r"^tf_efficientnet_.*_ns(_|$)",
            "timm: EfficientNet Noisy Student (Xie et al. 2020), self-training with a teacher "
            "on unlabeled JFT images"),
    TagRule("in21k_pretrained",
            r"in21ft1k|in22ft1k|22kft1k|_miil$|_bitm$|_bit_teacher|^beit_|_original$"
            r"|^vit_(tiny|small|base|large)_(?!.*(_sam|_rpn))(patch|r)\w*_(224|384)$"
            r"|^swin_(base|large)_",
            "timm: '_in21ft1k'/'_in22ft1k'/'_22kft1k', MIIL ImageNet-21K-P, BiT-M, BEiT, the "
            "original ViT checkpoints and timm's default (AugReg) ViT and Swin-B/L weights are "
            "pre-trained on ImageNet-21k and fine-tuned on ImageNet-1k"),
    TagRule("semi_weakly_supervised", r"^ssl_|^swsl_|^ig_|SWAG|_ns(_|$)",
            "timm: 'ssl_'/'swsl_' (Yalniz et al. 2019), 'ig_' Instagram hashtags (Mahajan et "
            "al. 2018), SWAG (Singh et al. 2022), Noisy Student"),
    TagRule("clip_zero_shot", r"^CLIP_(?!finetuned)",
            "the paper: CLIP (Radford et al. 2021) used zero-shot with ImageNet class prompts"),
    TagRule("clip_finetuned", r"^CLIP_finetuned_", "the paper: CLIP fine-tuned on ImageNet-1k"),
    TagRule("adversarial", r"^adv_|^ens_adv_|_ap$",
            "timm: adversarially trained Inception (Kurakin et al. 2018), AdvProp '_ap' "
            "(Xie et al. 2020)"),
    TagRule("sam", r"_sam(_|$)", "timm: trained with Sharpness-Aware Minimization"),
    TagRule("vit", r"^vit_", "architecture: the ViT family (Dosovitskiy et al. 2021)"),
    TagRule("torchvision", r"_torchvision$", "the torchvision checkpoint, not timm's"),
)

_DISTILLED = re.compile(r"_distilled|_dist$")


def tags_for(name: str) -> list[str]:
    """Every tag whose rule matches ``name``, in the order of ``TAG_RULES``."""
    return [rule.tag for rule in TAG_RULES if re.search(rule.pattern, name)]


def undistilled_counterpart(name: str, names: set[str]) -> str | None:
    """The same architecture trained without distillation, when it is published: ``name`` with
    its ``_distilled`` / ``_dist`` marker removed (``deit_base_distilled_patch16_224`` ->
    ``deit_base_patch16_224``, ``xcit_tiny_12_p8_224_dist`` -> ``xcit_tiny_12_p8_224``)."""
    if not _DISTILLED.search(name):
        return None
    plain = _DISTILLED.sub("", name)
    return plain if plain in names and plain != name else None


@dataclass(frozen=True)
class DistillationPair:
    """A distilled model, the same architecture trained without distillation, and why."""

    distilled: str
    undistilled: str
    how: str


#: pairs the name rule cannot find, each with its source
EXPLICIT_PAIRS: tuple[DistillationPair, ...] = (
    DistillationPair(
        "resnetv2_50x1_bit_distilled", "resnetv2_50x1_bitm",
        "explicit: BiT R50x1 distilled from a BiT-M R152x2 teacher (Beyer et al., 'Knowledge "
        "distillation: A good teacher is patient and consistent', CVPR 2022; timm "
        "resnetv2_50x1_bit.goog_distilled_in1k) against the BiT-M R50x1 trained without a "
        "teacher"),
)


def distillation_pairs(names: list[str] | set[str]) -> pd.DataFrame:
    """Every (distilled, undistilled) pair among ``names``: the name rule's, then
    ``EXPLICIT_PAIRS`` whose two models are both in ``names``; sorted by the distilled name."""
    known = set(names)
    rows = [{"distilled": n, "undistilled": twin, "how": "name rule: the distillation marker "
             "removed"} for n in sorted(known) if (twin := undistilled_counterpart(n, known))]
    rows += [{"distilled": p.distilled, "undistilled": p.undistilled, "how": p.how}
             for p in EXPLICIT_PAIRS if {p.distilled, p.undistilled} <= known]
    out = pd.DataFrame(rows, columns=["distilled", "undistilled", "how"])
    return out.sort_values("distilled", kind="stable").reset_index(drop=True)


def tag_table(names: list[str] | set[str]) -> pd.DataFrame:
    """One row per model: ``model`` and ``tags`` (``;``-separated)."""
    rows = [{"model": n, "tags": ";".join(tags_for(n))} for n in sorted(set(names))]
    return pd.DataFrame(rows, columns=["model", "tags"])


def _read_data(name: str) -> pd.DataFrame:
    path = resources.files("oodbench.results").joinpath("_data", name)
    with path.open("r", encoding="utf-8") as fh:
        return pd.read_csv(fh, dtype=str, keep_default_na=False)


def load_pairs() -> pd.DataFrame:
    """The committed distillation pairs (``_data/cood_distillation_pairs.csv``)."""
    return _read_data(PAIRS_FILE)


def load_tags() -> pd.DataFrame:
    """The committed tag table (``_data/cood_model_tags.csv``), empty strings kept as such."""
    return _read_data(TAGS_FILE)


def has_tag(tags: pd.DataFrame, tag: str) -> pd.Series:
    """A boolean per row of the tag table: whether the model carries ``tag``."""
    return tags["tags"].str.split(";").apply(lambda t: tag in t)
