"""The abstract's five findings, checked against independent computations on the raw file."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from oodbench.results import paper
from oodbench.results.paper_findings import CLAIMS, findings


@pytest.fixture(scope="module")
def raw() -> pd.DataFrame:
    import io

    return pd.read_csv(io.BytesIO(paper.bundled_bytes()))


@pytest.fixture(scope="module")
def results() -> dict:
    return {f.number: f for f in findings(kappa="softmax")}


def mean_auroc(raw: pd.DataFrame, kappa: str) -> pd.Series:
    return raw[raw["confidence function"] == kappa].groupby("model name")["ood-auroc"].mean()


def test_every_claim_is_printed_with_numbers(results: dict) -> None:
    assert sorted(results) == [1, 2, 3, 4, 5]
    for number, f in results.items():
        text = f.text()
        assert CLAIMS[number] in text and "verdict:" in text
        assert any(ch.isdigit() for ch in f.measured) and len(f.numbers)
        assert f.figure().axes  # every finding draws its figure


def test_distillation_pairs(raw: pd.DataFrame, results: dict) -> None:
    means = mean_auroc(raw, "softmax")
    numbers = results[1].numbers.set_index("distilled")
    expected = means["deit_base_distilled_patch16_224"] - means["deit_base_patch16_224"]
    assert numbers.loc["deit_base_distilled_patch16_224", "mean_difference"] == pytest.approx(expected)
    improved = (numbers["mean_difference"] > 0).sum()
    assert f"{improved} of {len(numbers)} distilled models" in results[1].measured
    bit = numbers.loc["resnetv2_50x1_bit_distilled"]
    assert bit["undistilled"] == "resnetv2_50x1_bitm"
    assert bit["mean_difference"] == pytest.approx(
        means["resnetv2_50x1_bit_distilled"] - means["resnetv2_50x1_bitm"])
    assert "1 listed explicitly: resnetv2_50x1_bit_distilled" in results[1].measured
    assert results[1].verdict == ("supported" if improved == len(numbers) else results[1].verdict)


def test_vit_subset(raw: pd.DataFrame, results: dict) -> None:
    sub = raw[raw["confidence function"] == "softmax"]
    best = sub.loc[sub.groupby("severity level")["ood-auroc"].idxmax(), "model name"].tolist()
    numbers = results[2].numbers
    assert numbers["best_model"].tolist() == best
    assert numbers["best_is_vit"].tolist() == [m.startswith("vit_") for m in best]
    wide = sub.pivot_table(index="model name", columns="severity level", values="ood-auroc")
    vit = [m for m in wide.index if m.startswith("vit_")]
    best_other = wide.drop(index=vit).max()
    winners = [m for m in vit if (wide.loc[m] > best_other).all()]
    assert f"{len(winners)} of {len(vit)} ViTs beat every non-ViT" in results[2].measured


def test_clip_percentile(raw: pd.DataFrame, results: dict) -> None:
    means = mean_auroc(raw, "max_logit")
    clip = [m for m in means.index if m.startswith("CLIP_") and "finetuned" not in m]
    best = means[clip].idxmax()
    expected = 100 * (means.drop(index=best) < means[best]).mean()
    row = results[3].numbers.set_index("kappa").loc["max_logit"]
    assert row["best_clip"] == best and row["percentile"] == pytest.approx(expected)
    assert "paper: 96 %" in results[3].measured


def test_clip_in_the_papers_reading_and_like_for_like(raw: pd.DataFrame, results: dict) -> None:
    """The best (CLIP model, kappa) instance of the raw file, against softmax and its own kappa."""
    zero_shot = raw[raw["model name"].str.startswith("CLIP_")
                    & ~raw["model name"].str.contains("finetuned")]
    instances = zero_shot.groupby(["model name", "confidence function"])["ood-auroc"].mean()
    (model, kappa), best = instances.idxmax(), instances.max()
    softmax = mean_auroc(raw, "softmax").drop(index=model)
    same = mean_auroc(raw, kappa).drop(index=model)
    readings = results[3].more["readings"].set_index("reading")
    assert readings.loc["paper", "best_clip"] == model
    assert readings.loc["paper", "percentile"] == pytest.approx(100 * (softmax < best).mean())
    assert readings.loc["paper", "n_other_models"] == len(softmax)
    assert readings.loc["like_for_like", "percentile"] == pytest.approx(100 * (same < best).mean())
    text = results[3].text()
    for reading in ("paper's reading", "like-for-like"):
        assert reading in text
    assert f"{100 * (softmax < best).mean():.1f} % of the {len(softmax)} other models" in text
    assert f"{100 * (same < best).mean():.1f} % of the {len(same)} other models" in text
    assert "every other model under softmax" in text and "under the same kappa" in text


def test_correlations_are_spearman(raw: pd.DataFrame, results: dict) -> None:
    at = raw[(raw["confidence function"] == "softmax") & (raw["severity level"] == 7)]
    ranks = at[["id-acc", "ood-auroc"]].rank()  # Spearman = Pearson of the (mid-)ranks
    rho = np.corrcoef(ranks["id-acc"], ranks["ood-auroc"])[0, 1]
    numbers = results[4].numbers
    got = numbers[(numbers["level"] == 7) & (numbers["versus"] == "id_accuracy")]
    # a correlation of (mid-)ranks: sums of half-integers, exact in any order, then one
    # square root and division (~1e-16)
    assert got["spearman_rho"].iloc[0] == pytest.approx(rho, abs=1e-12)


def test_best_kappa_shares(raw: pd.DataFrame, results: dict) -> None:
    sub = raw[raw["confidence function"].isin(["softmax", "max_logit", "entropy"])]
    wide = sub.pivot_table(index=["model name", "severity level"], columns="confidence function",
                           values="ood-auroc").dropna()
    level0 = wide.xs(0, level="severity level").idxmax(axis=1).value_counts(normalize=True)
    shares = results[5].numbers.set_index("level")
    for kappa, share in level0.items():
        assert shares.loc[0, kappa] == pytest.approx(share)
    assert np.allclose(shares[["softmax", "max_logit", "entropy"]].sum(axis=1), 1.0)


def test_every_kappa_against_softmax(raw: pd.DataFrame, results: dict) -> None:
    pairwise = results[5].more["versus_softmax"].set_index("kappa")
    kappas = set(raw["confidence function"]) - {"softmax"}
    assert len(pairwise) == len(kappas) == 4  # max_logit, entropy, ODIN, MC-dropout
    wide = raw.pivot_table(index="model name", columns="confidence function", values="ood-auroc",
                           aggfunc="mean")
    for paper_name in kappas:
        both = wide[[paper_name, "softmax"]].dropna()
        diff = both[paper_name] - both["softmax"]
        row = pairwise.loc[paper.kappa_for(paper_name).kappa]
        assert row["n_models"] == len(both)
        assert row["models_better"] == (diff > 0).sum()
        assert row["median_difference"] == pytest.approx(diff.median())
        assert f"better on {row['models_better']} of {len(both)} models" in results[5].measured


def test_verdicts_follow_the_numbers() -> None:
    """A synthetic table in which distillation hurts and ViTs lose."""
    rows = []
    for model, base in (("net_distilled", 0.80), ("net", 0.85), ("vit_x", 0.70), ("cnn", 0.90)):
        for level in range(11):
            rows.append({"model": model, "kappa": "softmax", "level": level,
                         "auroc": base - 0.02 * level, "id_accuracy": base, "id_auroc": base})
    df = pd.DataFrame(rows)
    tags = pd.DataFrame({"model": ["net_distilled", "net", "vit_x", "cnn"],
                         "tags": ["distillation", "", "vit", ""]})
    pairs = pd.DataFrame({"distilled": ["net_distilled"], "undistilled": ["net"],
                          "how": ["name rule: the distillation marker removed"]})
    from oodbench.results.paper_findings import distillation, vit_subset

    assert distillation(df, pairs, "softmax").verdict == "not supported"
    assert vit_subset(df, tags, "softmax").verdict == "not supported"
