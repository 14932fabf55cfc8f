"""The five findings of the C-OOD paper's abstract, recomputed from its own published table.

Galil, Dabbah & El-Yaniv, "A framework for benchmarking class-out-of-distribution detection
and its application to ImageNet", ICLR 2023 (arXiv 2302.11893). The abstract lists five
observations; each is checked here against ``all_paper_results.csv`` (bundled), with the
models' training regimes read from their names (:mod:`oodbench.results.model_tags`):

1. knowledge distillation vs not, paired where a model is published in both forms;
2. the ViT subset that beats every other model;
3. the best zero-shot CLIP instance's percentile among all other models;
4. Spearman rank correlation of ID accuracy and of ID-AUROC with C-OOD AUROC, per level;
5. how often each confidence function (kappa) is the best one of a model, per level.

A model's summary is its *mean C-OOD AUROC* over the 11 severity levels. Everything is computed
for one kappa, by default ``softmax`` (the official code's default confidence function,
``benchmark_model_on_cood_with_severities(..., confidence_function='softmax')``); finding 3
also lists every other kappa, and the verdict rule of each finding is printed with it. The table holds 706 model names, more than
the abstract's 525, and the paper's own figures may use a subset or another kappa, so numbers
can differ from the paper's text; the output says by how much.

    for f in findings():
        print(f.text())
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from scipy.stats import spearmanr

from oodbench.results import paper
from oodbench.results.model_tags import has_tag, load_tags

#: the claims, in the abstract's words
CLAIMS = {
    1: "knowledge distillation consistently improves class-out-of-distribution (C-OOD) "
       "detection performance",
    2: "a subset of ViTs performs better C-OOD detection than any other model",
    3: "the language-vision CLIP model achieves good zero-shot detection performance, with its "
       "best instance outperforming 96% of all other models evaluated",
    4: "accuracy and in-distribution ranking are positively correlated to C-OOD detection",
    5: "we compare various confidence functions for C-OOD detection",
}
PAPER_CLIP_PERCENTILE = 96.0
COMMON_KAPPAS = ("softmax", "max_logit", "entropy")


@dataclass
class Finding:
    """One claim of the abstract and what the published table says about it.

    ``numbers``: the table behind ``measured``; ``figure()`` draws it (report style).
    """

    number: int
    title: str
    claim: str
    measured: str
    verdict: str
    rule: str
    numbers: pd.DataFrame
    figure: Callable[[], Figure] = field(repr=False)

    def text(self) -> str:
        return (f"({self.number}) {self.title}\n  paper:    \"{self.claim}\"\n"
                f"  table:    {self.measured}\n  verdict:  {self.verdict} ({self.rule})")


def _curves(df: pd.DataFrame, kappa: str) -> pd.DataFrame:
    """model x level AUROC for one kappa (models with all 11 levels)."""
    sub = paper.select(df, kappa, None)
    return sub.pivot_table(index="model", columns="level", values="auroc").dropna()


def _figure(title: str, xlabel: str, ylabel: str) -> tuple[Figure, Any]:
    fig = Figure(figsize=(7.6, 4.2))
    ax = fig.subplots()
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    return fig, ax


LEVEL_AXIS = "C-OOD severity level (0 = easiest, 10 = hardest)"


# -- (1) knowledge distillation -------------------------------------------------------------------
def distillation(df: pd.DataFrame, tags: pd.DataFrame, kappa: str) -> Finding:
    curves = _curves(df, kappa)
    pairs = tags[(tags["undistilled"] != "") & tags["model"].isin(curves.index)
                 & tags["undistilled"].isin(curves.index)]
    diff = curves.loc[pairs["model"]].to_numpy() - curves.loc[pairs["undistilled"]].to_numpy()
    numbers = pd.DataFrame({
        "distilled": pairs["model"].to_numpy(), "undistilled": pairs["undistilled"].to_numpy(),
        "mean_auroc_distilled": curves.loc[pairs["model"]].mean(axis=1).to_numpy(),
        "mean_auroc_undistilled": curves.loc[pairs["undistilled"]].mean(axis=1).to_numpy(),
        "mean_difference": diff.mean(axis=1), "levels_improved": (diff > 0).sum(axis=1),
    })
    n = len(numbers)
    improved = int((numbers["mean_difference"] > 0).sum())
    per_level = (diff > 0).mean(axis=0)
    measured = (f"{improved} of {n} distilled models published with an undistilled twin have a "
                f"higher mean C-OOD AUROC (median difference "
                f"{np.median(numbers['mean_difference']):+.4f}); per level, "
                f"{100 * per_level.min():.0f}-{100 * per_level.max():.0f} % of the pairs improve")
    verdict = ("supported" if n and improved == n else
               "partly supported" if improved > n / 2 else "not supported")

    def draw() -> Figure:
        fig, ax = _figure(f"Distilled minus undistilled twin, kappa = {kappa} ({n} pairs)",
                          LEVEL_AXIS, "AUROC difference")
        levels = np.arange(diff.shape[1])
        for row in diff:
            ax.plot(levels, row, color="0.65", linewidth=0.8)
        ax.plot(levels, np.median(diff, axis=0), color="C0", linewidth=2.2, marker="o",
                label="median over pairs")
        ax.axhline(0, color="0.3", linestyle=":", linewidth=1)
        ax.legend(fontsize=8, frameon=False)
        return fig

    return Finding(1, "Knowledge distillation", CLAIMS[1], measured, verdict,
                   "supported when every pair improves its mean AUROC, partly when most do",
                   numbers, draw)


# -- (2) ViTs -------------------------------------------------------------------------------------
def vit_subset(df: pd.DataFrame, tags: pd.DataFrame, kappa: str) -> Finding:
    curves = _curves(df, kappa)
    vit = set(tags[has_tag(tags, "vit")]["model"]) & set(curves.index)
    others = curves.drop(index=sorted(vit))
    best_other = others.max(axis=0)
    beats_all = [m for m in sorted(vit) if (curves.loc[m] > best_other).all()]
    rows = []
    for level in curves.columns:
        top = curves[level].idxmax()
        rows.append({"level": level, "best_model": top, "best_is_vit": top in vit,
                     "best_auroc": curves[level].max(), "best_non_vit": others[level].idxmax(),
                     "best_non_vit_auroc": best_other[level],
                     "vits_above_every_non_vit": int((curves.loc[sorted(vit), level]
                                                      > best_other[level]).sum())})
    numbers = pd.DataFrame(rows)
    top_vit = int(numbers["best_is_vit"].sum())
    measured = (f"the best model is a ViT at {top_vit} of {len(numbers)} levels; "
                f"{len(beats_all)} of {len(vit)} ViTs beat every non-ViT at every level "
                f"({', '.join(beats_all)}); the best non-ViTs are "
                f"{', '.join(dict.fromkeys(numbers['best_non_vit']))}")
    verdict = ("supported" if beats_all and top_vit == len(numbers) else
               "partly supported" if top_vit > len(numbers) / 2 else "not supported")

    def draw() -> Figure:
        fig, ax = _figure(f"ViTs that beat every other model, kappa = {kappa}", LEVEL_AXIS,
                          "AUROC")
        levels = curves.columns.to_numpy()
        for values in curves.drop(index=beats_all).to_numpy():
            ax.plot(levels, values, color="0.75", linewidth=0.5, alpha=0.4)
        ax.plot(levels, best_other.to_numpy(), color="black", linestyle="--", linewidth=1.6,
                label="best non-ViT per level")
        for i, model in enumerate(beats_all):
            ax.plot(levels, curves.loc[model].to_numpy(), color=f"C{i % 10}", linewidth=1.8,
                    label=model)
        ax.legend(fontsize=7, frameon=False, loc="lower left")
        return fig

    return Finding(2, "A subset of ViTs is best", CLAIMS[2], measured, verdict,
                   "supported when some ViTs beat every non-ViT at every level and a ViT tops "
                   "every level", numbers, draw)


# -- (3) CLIP -------------------------------------------------------------------------------------
def clip_percentile(df: pd.DataFrame, tags: pd.DataFrame, kappa: str) -> Finding:
    clip = set(tags[has_tag(tags, "clip_zero_shot")]["model"])
    rows = []
    for k in sorted(set(df["kappa"])):
        means = _curves(df, k).mean(axis=1)
        present = sorted(clip & set(means.index))
        if not present:
            continue
        best = means.loc[present].idxmax()
        others = means.drop(index=best)
        rows.append({"kappa": k, "best_clip": best, "mean_auroc": means[best],
                     "percentile": 100.0 * float((others < means[best]).mean()),
                     "n_other_models": int(others.size)})
    numbers = pd.DataFrame(rows)
    chosen = numbers[numbers["kappa"] == paper.kappa_for(kappa).kappa].iloc[0]
    pct = float(chosen["percentile"])
    others_text = ", ".join(f"{r.kappa} {r.percentile:.1f} %" for r in numbers.itertuples()
                            if r.kappa != chosen["kappa"])
    measured = (f"best zero-shot CLIP ({chosen['best_clip']}, mean AUROC "
                f"{chosen['mean_auroc']:.4f}) outperforms {pct:.1f} % of the "
                f"{chosen['n_other_models']} other models with {kappa} (paper: "
                f"{PAPER_CLIP_PERCENTILE:.0f} %, a difference of {pct - PAPER_CLIP_PERCENTILE:+.1f} "
                f"points); with the other kappas: {others_text}")
    verdict = ("supported" if abs(pct - PAPER_CLIP_PERCENTILE) <= 1.0 else
               "partly supported (good, but not 96 %)" if pct >= 80.0 else "not supported")
    means = _curves(df, kappa).mean(axis=1)

    def draw() -> Figure:
        fig, ax = _figure(f"Mean C-OOD AUROC of {len(means)} models, kappa = {kappa}",
                          "mean AUROC over the 11 levels", "models")
        ax.hist(means.to_numpy(), bins=40, color="0.75")
        for i, model in enumerate(sorted(clip & set(means.index), key=lambda m: -means[m])):
            ax.axvline(means[model], color=f"C{i % 10}", linewidth=1.4, label=model)
        ax.legend(fontsize=7, frameon=False, loc="upper left")
        return fig

    return Finding(3, "Zero-shot CLIP", CLAIMS[3], measured, verdict,
                   "supported within 1 point of 96 %, partly at 80 % or more", numbers, draw)


# -- (4) correlations -----------------------------------------------------------------------------
def correlations(df: pd.DataFrame, kappa: str) -> Finding:
    sub = paper.select(df, kappa, None)
    rows = []
    for level, at in sub.groupby("level"):
        for what in ("id_accuracy", "id_auroc"):
            rho, p = spearmanr(at[what], at["auroc"])
            rows.append({"level": int(level), "versus": what, "spearman_rho": float(rho),
                         "p_value": float(p), "n_models": int(len(at))})
    numbers = pd.DataFrame(rows)
    parts, positive_everywhere = [], True
    for what, label in (("id_accuracy", "accuracy"), ("id_auroc", "ID-AUROC")):
        r = numbers[numbers["versus"] == what]
        positive = int(((r["spearman_rho"] > 0) & (r["p_value"] < 0.05)).sum())
        positive_everywhere &= positive == len(r)
        parts.append(f"{label}: rho {r['spearman_rho'].min():+.2f} to {r['spearman_rho'].max():+.2f}"
                     f" (level 0 {r['spearman_rho'].iloc[0]:+.2f}, level 10 "
                     f"{r['spearman_rho'].iloc[-1]:+.2f}), positive with p < 0.05 at {positive} "
                     f"of {len(r)} levels")
    measured = "; ".join(parts) + f" ({numbers['n_models'].iloc[0]} models, {kappa})"
    positives = ((numbers["spearman_rho"] > 0) & (numbers["p_value"] < 0.05)).mean()
    verdict = ("supported" if positive_everywhere else
               "partly supported" if positives > 0.5 else "not supported")

    def draw() -> Figure:
        fig, ax = _figure(f"Spearman correlation with C-OOD AUROC, kappa = {kappa}", LEVEL_AXIS,
                          "Spearman rho")
        for i, (what, label) in enumerate((("id_accuracy", "ID accuracy"),
                                           ("id_auroc", "ID-AUROC (in-distribution ranking)"))):
            r = numbers[numbers["versus"] == what]
            ax.plot(r["level"], r["spearman_rho"], marker="os"[i], label=label)
        ax.axhline(0, color="0.3", linestyle=":", linewidth=1)
        ax.legend(fontsize=8, frameon=False)
        return fig

    return Finding(4, "Accuracy and ID ranking correlate with C-OOD detection", CLAIMS[4],
                   measured, verdict,
                   "supported when both correlations are positive (p < 0.05) at every level",
                   numbers, draw)


# -- (5) confidence functions ---------------------------------------------------------------------
def best_kappas(df: pd.DataFrame, kappas: tuple[str, ...] = COMMON_KAPPAS) -> Finding:
    sub = df[df["kappa"].isin(kappas)]
    wide = sub.pivot_table(index=["model", "level"], columns="kappa", values="auroc").dropna()
    best = wide.idxmax(axis=1).rename("best").reset_index()
    share = pd.crosstab(best["level"], best["best"], normalize="index").reindex(
        columns=list(kappas), fill_value=0.0)
    overall = best["best"].value_counts(normalize=True).reindex(list(kappas), fill_value=0.0)
    numbers = share.reset_index()
    n_models = wide.index.get_level_values("model").nunique()
    leader = overall.idxmax()
    measured = (f"over {n_models} models published with {', '.join(kappas)}: best kappa overall "
                + ", ".join(f"{k} {100 * v:.0f} %" for k, v in overall.items())
                + " of (model, level) pairs; at level 0 "
                + ", ".join(f"{k} {100 * share.iloc[0][k]:.0f} %" for k in kappas)
                + "; at level 10 "
                + ", ".join(f"{k} {100 * share.iloc[-1][k]:.0f} %" for k in kappas))
    verdict = f"reproduced: {leader} is most often best"

    def draw() -> Figure:
        fig, ax = _figure(f"Which kappa is best per model ({n_models} models)", LEVEL_AXIS,
                          "share of models")
        bottom = np.zeros(len(share))
        for i, k in enumerate(kappas):
            ax.bar(share.index, share[k], bottom=bottom, color=f"C{i}", label=k)
            bottom += share[k].to_numpy()
        ax.legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        return fig

    return Finding(5, "Confidence functions compared", CLAIMS[5], measured, verdict,
                   "the abstract states no direction; the comparison is recomputed", numbers, draw)


def findings(df: pd.DataFrame | None = None, *, kappa: str = "softmax",
             tags: pd.DataFrame | None = None) -> list[Finding]:
    """The five abstract findings recomputed from the published table (default: the bundled
    copy) and the committed model tags."""
    table = paper.load() if df is None else df
    tag_table = load_tags() if tags is None else tags
    return [
        distillation(table, tag_table, kappa),
        vit_subset(table, tag_table, kappa),
        clip_percentile(table, tag_table, kappa),
        correlations(table, kappa),
        best_kappas(table),
    ]
