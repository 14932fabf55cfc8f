"""``oodbench.published.compare``: match, near-match with what differs, refusal unless asked."""

from __future__ import annotations

import importlib
import json

import pandas as pd
import pytest

from oodbench import published
from oodbench.detectors import create
from oodbench.errors import EmptyInputError
from oodbench.published.compare import display_value, row_checks

# the module (the package's name ``compare`` is the function)
compare_module = importlib.import_module("oodbench.published.compare")


def _hyper(detector: str, preset: str) -> str:
    return json.dumps(create(detector, preset=preset).hyperparams, sort_keys=True)


def _row(**over: object) -> dict[str, object]:
    """One long results row: ReAct (paper preset) on torchvision's ResNet-50 vs MOS's SUN."""
    row: dict[str, object] = {
        "model": "timm:resnet50.tv_in1k", "detector": "react",
        "hyperparams": _hyper("react", "paper"), "benchmark": "mos-imagenet", "group": "sun",
        "metric": "auroc", "value": 0.8816, "n_id": 50_000, "preset": "paper",
        "fit_data": "train", "tuning": "", "status": "ok"}
    row.update(over)
    return row


def test_a_like_for_like_row_gets_the_published_value() -> None:
    rows = pd.DataFrame([_row(), _row(metric="fpr95_id", value=0.4769)])
    out = published.compare(rows)
    assert out["status"].tolist() == ["match", "match"]
    assert out["published"].tolist() == ["88.16", "47.69"]
    assert out["published_method"].tolist() == ["ReAct (ResNet-50)"] * 2
    assert out["yours"].tolist() == ["88.16", "47.69"]
    assert (out["comparison"] == "same settings").all()


def test_a_near_match_says_exactly_what_differs_and_withholds_the_value() -> None:
    rows = pd.DataFrame([_row(model="efficientnet_lite0", n_id=300),
                         _row(metric="fpr95_ood", value=0.5)])
    out = published.compare(rows).set_index("metric")
    lite, fpr = out.loc["auroc"], out.loc["fpr95_ood"]
    assert lite["status"] == "near-match" and lite["published"] == ""
    assert ("backbone and weights: published ResNet-50 (cross-entropy (torchvision's "
            "pre-trained ResNet-50), ImageNet-1k), weights timm:resnet50.tv_in1k; yours "
            "efficientnet_lite0") in lite["comparison"]
    assert "ID test images (ImageNet-1k validation): published 50,000; yours 300" in \
        lite["comparison"]
    assert fpr["comparison"].startswith("not comparable: FPR95 convention: published "
                                        "ID-positive")
    assert "yours OOD-positive" in fpr["comparison"]
    asked = published.compare(rows, allow_mismatch=True).set_index("metric")
    assert asked.loc["auroc", "published"] == "88.16"  # shown on request, still flagged
    assert asked.loc["auroc", "status"] == "near-match"


def test_the_configuration_and_the_tuning_protocol_are_checked() -> None:
    tuning = published.load("imagenet1k-resnet50-tuning")
    openood = tuning[(tuning["method"] == "KNN") & (tuning["ood_set"] == "near")
                     & (tuning["tuning"] == "ood_val")].iloc[0]
    yours = _row(detector="knn", hyperparams=_hyper("knn", "paper"), group="near",
                 benchmark="openood-v1.5-imagenet", n_id=45_000,
                 tuning=json.dumps({"protocol": "held_out_classes"}))
    checks = {c.item: c for c in row_checks(openood, yours)}
    assert checks["detector configuration"].status == "differs"
    assert checks["detector configuration"].yours == "k=1000"  # paper k against OpenOOD's 50
    assert checks["tuning protocol"].status == "differs"
    assert checks["tuning protocol"].published.startswith(
        "tuned on an OOD validation set: OpenOOD v1.5: OpenImage-O validation split")
    assert checks["tuning protocol"].yours == "tuned on held-out ID classes (no OOD data)"
    # the same row under OpenOOD's preset and tuning protocol matches the leaderboard's 71.1
    same = _row(detector="knn", hyperparams=_hyper("knn", "openood"), group="near",
                benchmark="openood-v1.5-imagenet", n_id=45_000, value=0.711,
                tuning=json.dumps({"protocol": "ood_val"}))
    out = published.compare(pd.DataFrame([same]), tables_=["imagenet1k-resnet50-tuning"])
    assert out[["status", "published"]].values.tolist() == [["match", "71.1"]]


def test_dice_and_dice_with_react_are_told_apart() -> None:
    dice = _row(detector="dice", hyperparams=_hyper("dice", "paper"), value=0.9083)
    both = _row(detector="dice", value=0.9394,
                hyperparams=json.dumps({**json.loads(_hyper("dice", "paper")),
                                        "react_percentile": 90.0}, sort_keys=True))
    out = published.compare(pd.DataFrame([dice, both]), tables_=["imagenet1k-vs-sun"])
    assert out["published_method"].tolist() == ["DICE (ResNet-50)", "DICE + ReAct (ResNet-50)"]
    assert out["status"].tolist() == ["match", "match"]


def test_cood_rows_are_compared_with_their_own_model_only() -> None:
    cood = published.load("cood")
    ref = cood[(cood["backbone"] == "vit_large_patch32_384") & (cood["detector"] == "maxlogit")
               & (cood["ood_set"] == "level_0")].iloc[0]
    mine = _row(model="timm:vit_large_patch32_384", detector="maxlogit", hyperparams="{}",
                benchmark="cood", group="level_0", value=float(ref["value"]), n_levels=11,
                n_classes=1000, preset="cood", fit_data="none")
    out = published.compare(pd.DataFrame([mine]), tables_=["cood"])
    assert out[["status", "published"]].values.tolist() == [["match", ref["value"]]]
    other = dict(mine, model="timm:some_unpublished_net")
    with pytest.raises(EmptyInputError, match="nothing to compare"):
        published.compare(pd.DataFrame([other]), tables_=["cood"])


def test_nothing_matched_says_why() -> None:
    rows = pd.DataFrame([_row(group="letters"), _row(detector="maxcosine", group="sun")])
    with pytest.raises(EmptyInputError) as err:
        published.compare(rows)
    message = str(err.value)
    assert message.startswith("nothing to compare: a comparison needs the same detector, OOD "
                              "set and metric")
    assert "maxcosine on sun (published: none)" in message
    assert "react on letters (published: far, inaturalist, near, " in message
    with pytest.raises(EmptyInputError, match=r"no published row uses your detectors \['maxnorm'\]"):
        published.compare(pd.DataFrame([_row(detector="maxnorm")]))


def test_display_value_uses_the_published_unit_and_decimals() -> None:
    assert display_value(0.8816, "%", "88.16") == "88.16"
    assert display_value(0.5, "%", "89.8") == "50.00"
    assert display_value(0.9958857884, "fraction", "0.9958857884") == "0.9958857884"


# -- the pairing rules ---------------------------------------------------------------------------
def _tuning_row(protocol: str, **over: object) -> dict[str, object]:
    """KNN on OpenOOD v1.5's near-OOD mean, torchvision's ResNet-50, OpenOOD's preset."""
    row = _row(detector="knn", hyperparams=_hyper("knn", "openood"), group="near",
               benchmark="openood-v1.5-imagenet", n_id=45_000, value=0.711, fit_data="train",
               preset="openood", tuning=json.dumps({"protocol": protocol}))
    row.update(over)
    return row


def test_tuning_protocols_are_compared_by_exact_name() -> None:
    """oodbench's held_out_classes is not the tuning paper's held_out_paper (Algorithms 1-4),
    and neither is ood_val."""
    rows = published.load("imagenet1k-resnet50-tuning")
    paper = rows[(rows["method"] == "KNN") & (rows["ood_set"] == "near")
                 & (rows["tuning"] == "held_out_paper")].iloc[0]
    for protocol, status in (("held_out_classes", "differs"), ("ood_val", "differs"),
                             ("held_out_paper", "same")):
        checks = {c.item: c for c in row_checks(paper, _tuning_row(protocol))}
        assert checks["tuning protocol"].status == status, protocol
    differs = {c.item: c for c in row_checks(paper, _tuning_row("held_out_classes"))}
    assert differs["tuning protocol"].published.startswith(
        "tuned by the tuning paper's Algorithms 1-4")
    assert differs["tuning protocol"].yours == "tuned on held-out ID classes (no OOD data)"


def test_an_id_only_metric_pairs_only_with_id_only_rows_and_shows_no_ood_group() -> None:
    """ID accuracy recorded beside the 'near' group is the ID set's: it pairs with the
    published ID-accuracy rows (whose OOD set is none) and is shown under no OOD group; an
    AUROC row never pairs with them."""
    acc = _tuning_row("ood_val", metric="id_accuracy", value=0.7618)
    out = published.compare(pd.DataFrame([acc]), tables_=["imagenet1k-resnet50-tuning"])
    assert out["group"].tolist() == [""]
    pub = published.load("imagenet1k-resnet50-tuning")
    paired = pub[(pub["method"] == out.loc[0, "published_method"]) & (pub["metric"] == "id_accuracy")]
    assert set(paired["ood_set"]) == {""} and out.loc[0, "published"] == "76.18"
    index = compare_module.candidate_index(pub)
    assert compare_module.candidates(index, _tuning_row("ood_val", group="")) is None


def test_group_kinds() -> None:
    assert [compare_module.group_kind(m, g) for m, g in (
        ("id_accuracy", "near"), ("auroc", "near"), ("auroc", "all"), ("auroc", "level_3"),
        ("auroc", "sun"))] == ["id", "average", "average", "level", "set"]


def test_the_row_shown_is_chosen_by_the_documented_rule_and_the_others_are_counted() -> None:
    """held_out_classes differs from both KNN near-OOD rows of the tuning table; the ood_val
    row is shown because fewer of its checks are unknown (the paper's row states no preset
    and no fit data), and the other candidate is counted."""
    out = published.compare(pd.DataFrame([_tuning_row("held_out_classes")]),
                            tables_=["imagenet1k-resnet50-tuning"], allow_mismatch=True)
    assert out.loc[0, "published"] == "71.1" and out.loc[0, "differs"] == "tuning protocol"
    assert out.loc[0, "others"] == 1
    # ties in differences and unknowns go to plain cross-entropy training, then to the first
    # in catalogue order
    first, second = ({"method": "first"}, []), ({"method": "second"}, [])
    pub, _ = compare_module._choose([(1, 0, 0, 7, *second), (1, 0, 0, 3, *first)])
    assert pub["method"] == "first"
    pub, _ = compare_module._choose([(1, 0, 1, 3, *first), (1, 0, 0, 7, *second)])
    assert pub["method"] == "second"
    assert compare_module.CHOICE_RULE == (
        "fewest differing checks, then fewest unknown checks, then a standard (cross-entropy) "
        "training before a special training method, then catalogue order")


def test_msp_on_another_model_is_shown_beside_a_cross_entropy_row_not_a_logitnorm_one() -> None:
    """The issue's case: an MSP row of a model in no table ties with every MSP row of OpenOOD's
    full-spectrum table (backbone and weights, benchmark differ for all); the row shown is a
    cross-entropy one, and the LogitNorm, OE, ... rows are counted in ``others``."""
    table = published.load("openood-v1.5-imagenet1k-fsood")
    msp_rows = table[(table["detector"] == "msp") & (table["metric"] == "id_accuracy")]
    assert {"cross-entropy", "LogitNorm"} <= set(msp_rows["training"])
    row = _row(model="efficientnet_lite0", detector="msp", hyperparams=_hyper("msp", "paper"),
               benchmark="cifar", group="", metric="id_accuracy", value=0.83, fit_data="",
               preset="")
    out = published.compare(pd.DataFrame([row]), tables_=["openood-v1.5-imagenet1k-fsood"])
    assert len(out) == 1 and "published ResNet50 (cross-entropy" in out.loc[0, "comparison"]
    assert out.loc[0, "others"] == len(msp_rows) - 1
    # MSP has nothing to tune: OpenOOD's "tuned on OOD val" row and an untuned one agree there
    assert "tuning protocol" not in out.loc[0, "differs"]
    assert compare_module.nothing_to_tune("msp") and not compare_module.nothing_to_tune("react")


def test_counts_cover_every_results_row() -> None:
    rows = pd.DataFrame([_row(), _row(model="efficientnet_lite0"),
                         _row(detector="msp", hyperparams=_hyper("msp", "paper"))])
    out = published.compare(rows)
    assert compare_module.counts(out) == {"rows": 3, "match": 1, "near-match": 1, "none": 1}
    assert compare_module.summary_text(out) == (
        "1 of 3 rows match; 1 has a near-match; 1 has no published counterpart")
