"""The five findings of the C-OOD paper's abstract, recomputed from its own published table.

Galil, Dabbah & El-Yaniv, "A framework for benchmarking class-out-of-distribution detection
and its application to ImageNet", ICLR 2023 (arXiv 2302.11893). The abstract lists five
observations; each is checked here against ``all_paper_results.csv`` (bundled), with the
models' training regimes read from their names (:mod:`oodbench.results.model_tags`):

1. knowledge distillation vs not, over the committed pairing table
   (``_data/cood_distillation_pairs.csv``: the name rule's pairs and the explicit ones, such
   as ``resnetv2_50x1_bit_distilled`` and ``resnetv2_50x1_bitm``);
2. the ViT subset that beats every other model;
3. the best zero-shot CLIP instance's percentile among all other models, in two readings: the
   paper's (the best (CLIP model, kappa) pair over every CLIP model and kappa of the table,
   against every other model under softmax, the paper's and the official code's default) and
   like-for-like (that instance against every other model under the same kappa);
4. Spearman rank correlation of ID accuracy and of ID-AUROC with C-OOD AUROC, per level;
5. how often each confidence function (kappa) is the best one of a model, per level, and each
   kappa of the table (ODIN and MC-dropout included) against softmax on the models that have
   both.

A model's summary is its *mean C-OOD AUROC* over the 11 severity levels. Everything is computed
for one kappa, by default ``softmax`` (the official code's default confidence function,
``benchmark_model_on_cood_with_severities(..., confidence_function='softmax')``); findings 3
and 5 also cover every other kappa, and the verdict rule of each finding is printed with it. The table holds 706 model names, more than
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
from oodbench.results.model_tags import has_tag, load_pairs, load_tags

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

    ``numbers``: the table behind ``measured``; ``figure()`` draws it (report style);
    ``more``: further tables of the finding, by name (written beside ``numbers`` by
    ``oodbench paper findings --out``).
    """

    number: int
    title: str
    claim: str
    measured: str
    verdict: str
    rule: str
    numbers: pd.DataFrame
    figure: Callable[[], Figure] = field(repr=False)
    more: dict[str, pd.DataFrame] = field(default_factory=dict, repr=False)

    def text(self) -> str:
        return (f"({self.number}) {self.title}\n  paper:    \"{self.claim}\"\n"
                f"  table:    {self.measured.replace(chr(10), chr(10) + ' ' * 12)}\n  verdict:  {self.verdict} ({self.rule})")


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
def distillation(df: pd.DataFrame, pairs: pd.DataFrame, kappa: str) -> Finding:
    """Claim 1 over ``pairs`` (columns ``distilled``, ``undistilled``, ``how``: the committed
    pairing table), the pairs whose two models are published with ``kappa``."""
    curves = _curves(df, kappa)
    pairs = pairs[pairs["distilled"].isin(curves.index) & pairs["undistilled"].isin(curves.index)]
    diff = curves.loc[pairs["distilled"]].to_numpy() - curves.loc[pairs["undistilled"]].to_numpy()
    numbers = pd.DataFrame({
        "distilled": pairs["distilled"].to_numpy(), "undistilled": pairs["undistilled"].to_numpy(),
        "how": pairs["how"].to_numpy(),
        "mean_auroc_distilled": curves.loc[pairs["distilled"]].mean(axis=1).to_numpy(),
        "mean_auroc_undistilled": curves.loc[pairs["undistilled"]].mean(axis=1).to_numpy(),
        "mean_difference": diff.mean(axis=1), "levels_improved": (diff > 0).sum(axis=1),
    })
    n = len(numbers)
    improved = int((numbers["mean_difference"] > 0).sum())
    per_level = (diff > 0).mean(axis=0)
    listed = numbers[~numbers["how"].str.startswith("name rule")]["distilled"].tolist()
    measured = (f"{improved} of {n} distilled models published with an undistilled twin "
                f"({n - len(listed)} paired by name, {len(listed)} listed explicitly"
                + (f": {', '.join(listed)}" if listed else "") + ") have a higher mean C-OOD "
                "AUROC (median difference "
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
                   "supported when every pair of the committed pairing table improves its mean "
                   "AUROC, partly when most do",
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
#: the paper's default confidence function (the official code's ``confidence_function``)
PAPER_DEFAULT_KAPPA = "softmax"
READINGS = {
    "paper": "the best zero-shot CLIP instance, i.e. the (CLIP model, kappa) pair with the highest "
             "mean AUROC over the 11 levels among every CLIP model and kappa of the table, against "
             "every other model under softmax (the paper's and the official code's default kappa)",
    "like_for_like": "that CLIP instance against every other model under the same kappa",
}


def _percentile_above(value: float, others: pd.Series) -> float:
    """100 x the share of ``others`` strictly below ``value``."""
    return 100.0 * float((others < value).mean())


def clip_percentile(df: pd.DataFrame, tags: pd.DataFrame, kappa: str) -> Finding:
    """Claim 3 in both readings (``READINGS``), and per kappa the best CLIP against every other
    model under that kappa (``numbers``)."""
    clip = set(tags[has_tag(tags, "clip_zero_shot")]["model"])
    means_by_kappa = {k: _curves(df, k).mean(axis=1) for k in sorted(set(df["kappa"]))}
    rows = []
    for k, means in means_by_kappa.items():
        present = sorted(clip & set(means.index))
        if not present:
            continue
        best = means.loc[present].idxmax()
        others = means.drop(index=best)
        rows.append({"kappa": k, "best_clip": best, "mean_auroc": means[best],
                     "percentile": _percentile_above(means[best], others),
                     "n_other_models": int(others.size)})
    numbers = pd.DataFrame(rows)
    top = numbers.loc[numbers["mean_auroc"].idxmax()]
    baseline = means_by_kappa[PAPER_DEFAULT_KAPPA].drop(index=top["best_clip"], errors="ignore")
    paper_pct = _percentile_above(float(top["mean_auroc"]), baseline)
    readings = pd.DataFrame([
        {"reading": "paper", "best_clip": top["best_clip"], "clip_kappa": top["kappa"],
         "mean_auroc": top["mean_auroc"], "others_kappa": PAPER_DEFAULT_KAPPA,
         "percentile": paper_pct, "n_other_models": int(baseline.size),
         "definition": READINGS["paper"]},
        {"reading": "like_for_like", "best_clip": top["best_clip"], "clip_kappa": top["kappa"],
         "mean_auroc": top["mean_auroc"], "others_kappa": top["kappa"],
         "percentile": top["percentile"], "n_other_models": int(top["n_other_models"]),
         "definition": READINGS["like_for_like"]},
    ])
    chosen = numbers[numbers["kappa"] == paper.kappa_for(kappa).kappa].iloc[0]
    others_text = ", ".join(f"{r.kappa} {r.percentile:.1f} % ({r.best_clip})"
                            for r in numbers.itertuples())
    measured = (
        f"paper's reading ({READINGS['paper']}): {top['best_clip']} with {top['kappa']} (mean "
        f"AUROC {top['mean_auroc']:.4f}) outperforms {paper_pct:.1f} % of the {baseline.size} "
        f"other models (paper: {PAPER_CLIP_PERCENTILE:.0f} %, a difference of "
        f"{paper_pct - PAPER_CLIP_PERCENTILE:+.1f} points)\n"
        f"like-for-like ({READINGS['like_for_like']}, {top['kappa']}): "
        f"{top['percentile']:.1f} % of the {int(top['n_other_models'])} other models\n"
        f"best CLIP per kappa, every model under that kappa: {others_text}"
    )
    verdict = ("supported under the paper's reading" if abs(paper_pct - PAPER_CLIP_PERCENTILE) <= 1.0
               else "partly supported under the paper's reading (good, but not 96 %)"
               if paper_pct >= 80.0 else "not supported under the paper's reading")
    verdict += f"; like-for-like {top['percentile']:.1f} %"
    means = means_by_kappa[chosen["kappa"]]

    def draw() -> Figure:
        fig, ax = _figure(f"Mean C-OOD AUROC of {len(baseline)} models under softmax, and the "
                          "best CLIP instance", "mean AUROC over the 11 levels", "models")
        ax.hist(baseline.to_numpy(), bins=40, color="0.75", label="every other model, softmax")
        ax.axvline(top["mean_auroc"], color="C3", linewidth=1.8,
                   label=f"{top['best_clip']} with {top['kappa']} ({paper_pct:.1f} %)")
        for i, model in enumerate(sorted(clip & set(means.index), key=lambda m: -means[m])[:5]):
            ax.axvline(means[model], color=f"C{i % 10}", linewidth=0.9, linestyle=":",
                       label=f"{model}, {chosen['kappa']}")
        ax.legend(fontsize=7, frameon=False, loc="upper left")
        return fig

    return Finding(3, "Zero-shot CLIP", CLAIMS[3], measured, verdict,
                   "under the paper's reading: supported within 1 point of 96 %, partly at 80 % "
                   "or more", numbers, draw, more={"readings": readings})


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
def versus_softmax(df: pd.DataFrame) -> pd.DataFrame:
    """Each kappa of the table against softmax, on the models published with both.

    Per kappa: ``n_models`` with both; ``models_better`` (mean AUROC over the 11 levels above
    softmax's), ``share_models_better``; ``share_pairs_better`` over (model, level) pairs;
    ``median_difference`` and ``mean_difference`` of the models' mean AUROC (kappa - softmax).
    """
    curves = {k: _curves(df, k) for k in sorted(set(df["kappa"]))}
    base = curves[PAPER_DEFAULT_KAPPA]
    rows = []
    for k, wide in curves.items():
        if k == PAPER_DEFAULT_KAPPA:
            continue
        both = sorted(set(wide.index) & set(base.index))
        diff = wide.loc[both].to_numpy() - base.loc[both].to_numpy()
        mean_diff = diff.mean(axis=1)
        rows.append({"kappa": k, "versus": PAPER_DEFAULT_KAPPA, "n_models": len(both),
                     "models_better": int((mean_diff > 0).sum()),
                     "share_models_better": float((mean_diff > 0).mean()),
                     "share_pairs_better": float((diff > 0).mean()),
                     "median_difference": float(np.median(mean_diff)),
                     "mean_difference": float(mean_diff.mean())})
    return pd.DataFrame(rows)


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
    pairwise = versus_softmax(df)
    measured = (f"over {n_models} models published with {', '.join(kappas)}: best kappa overall "
                + ", ".join(f"{k} {100 * v:.0f} %" for k, v in overall.items())
                + " of (model, level) pairs; at level 0 "
                + ", ".join(f"{k} {100 * share.iloc[0][k]:.0f} %" for k in kappas)
                + "; at level 10 "
                + ", ".join(f"{k} {100 * share.iloc[-1][k]:.0f} %" for k in kappas)
                + "\nagainst softmax, every kappa of the table on the models that have both "
                  "(mean AUROC over the levels): "
                + "; ".join(f"{r.kappa} better on {r.models_better} of {r.n_models} models "
                            f"({100 * r.share_pairs_better:.0f} % of (model, level) pairs, "
                            f"median {r.median_difference:+.4f})"
                            for r in pairwise.itertuples()))
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
                   "the abstract states no direction; the comparison is recomputed", numbers, draw,
                   more={"versus_softmax": pairwise})


def findings(df: pd.DataFrame | None = None, *, kappa: str = "softmax",
             tags: pd.DataFrame | None = None, pairs: pd.DataFrame | None = None) -> list[Finding]:
    """The five abstract findings recomputed from the published table (default: the bundled
    copy), the committed model tags and the committed distillation pairs."""
    table = paper.load() if df is None else df
    tag_table = load_tags() if tags is None else tags
    pair_table = load_pairs() if pairs is None else pairs
    return [
        distillation(table, pair_table, kappa),
        vit_subset(table, tag_table, kappa),
        clip_percentile(table, tag_table, kappa),
        correlations(table, kappa),
        best_kappas(table),
    ]
