"""Figures of the published C-OOD results: severity curves per model or kappa, and a user's
curve drawn over the published ones."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from oodbench.errors import InvalidInputError, UnknownNameError
from oodbench.published.cood import kappa_for
from oodbench.results.paper.protocol import levels_of
from oodbench.results.paper.queries import get, kappa_name, select


def plot_severity_curves(
    df: pd.DataFrame,
    models: Sequence[str],
    kappa: str = "max_logit",
    ax: Any = None,
    *,
    metric: str = "auroc",
    own: dict[str, pd.DataFrame] | None = None,
) -> Any:
    """AUROC against severity level for published ``models`` (the paper's Figure 1).

    ``own``: extra curves, ``{label: CoodBenchmark rows of one detector}``, drawn dashed.
    Returns the matplotlib axes.
    """
    import matplotlib.pyplot as plt

    sub = select(df, kappa, None)
    unknown = sorted(set(models) - set(sub["model"]))
    if unknown:
        raise UnknownNameError(f"published model (kappa {kappa})", unknown[0], set(sub["model"]))
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 4))
    for model in models:
        curve = sub[sub["model"] == model].sort_values("level")
        ax.plot(curve["level"], curve[metric], marker="o", label=model)
    for label, results in (own or {}).items():
        levels = levels_of(results)
        order = np.argsort(levels.to_numpy(), kind="stable")
        ax.plot(levels.to_numpy()[order], results[metric].to_numpy()[order], marker="s",
                linestyle="--", label=label)
    ax.set_xlabel("severity level (0 = easiest)")
    ax.set_ylabel(metric.upper() if metric == "auroc" else metric)
    ax.set_title(f"C-OOD severity curves, kappa = {kappa_name(df, kappa)}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return ax


def plot_model_curves(df: pd.DataFrame, model: str, *, metric: str = "auroc") -> Any:
    """Every published kappa of one model: ``metric`` against severity level (a ``Figure``)."""
    from matplotlib.figure import Figure

    rows = get(model, df=df)
    fig = Figure(figsize=(6.4, 4.0))
    ax = fig.subplots()
    for i, (k, curve) in enumerate(rows.groupby("kappa", sort=False)):
        ax.plot(curve["level"], curve[metric], marker="os^Dv"[i % 5], label=k)
    ax.set_xlabel("C-OOD severity level (0 = easiest, 10 = hardest)")
    ax.set_ylabel("AUROC" if metric == "auroc" else metric)
    ax.set_title(f"{model}: published C-OOD severity curves")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def plot_among_published(
    df: pd.DataFrame,
    model_results: pd.DataFrame,
    *,
    detector: str | None = None,
    kappa: str | None = None,
    metric: str = "auroc",
    label: str = "yours",
) -> Any:
    """One detector's severity curve drawn over every published curve of the same kappa.

    Published curves are thin grey lines (their median dashed); the user's curve is drawn on
    top, with its 95 % interval as error bars when the rows carry ``ci_low``/``ci_high`` (long
    rows) or ``<metric>_ci_low``/``<metric>_ci_high`` (wide rows). Returns a matplotlib
    ``Figure`` (no global pyplot state).
    """
    from matplotlib.figure import Figure

    names = list(dict.fromkeys(model_results["detector"].astype(str)))
    if detector is None:
        if len(names) != 1:
            raise InvalidInputError(
                f"the results hold several detectors {names}; pass detector= to choose the curve"
            )
        detector = names[0]
    mine = model_results[model_results["detector"].astype(str) == detector]
    if mine.empty:
        raise UnknownNameError("detector in the results", detector, names)
    k = kappa_for(kappa or detector).kappa
    published = select(df, k, None).pivot_table(index="model", columns="level", values=metric)
    fig = Figure(figsize=(7.6, 4.4))
    ax = fig.subplots()
    x = published.columns.to_numpy()
    for values in published.to_numpy():
        ax.plot(x, values, color="0.7", linewidth=0.5, alpha=0.35)
    ax.plot(x, np.nanmedian(published.to_numpy(), axis=0), color="0.3", linestyle="--",
            linewidth=1.4, label=f"published median ({len(published)} models)")
    levels = levels_of(mine).to_numpy()
    order = np.argsort(levels, kind="stable")
    y = mine[metric].to_numpy(dtype=float)[order]
    low, high = _interval_columns(mine, metric)
    if low is not None and high is not None:
        err = np.vstack([y - low[order], high[order] - y])
        ax.errorbar(levels[order], y, yerr=err, color="C3", marker="o", linewidth=2.2,
                    capsize=3, label=f"{label} ({detector}, 95 % CI)")
    else:
        ax.plot(levels[order], y, color="C3", marker="o", linewidth=2.2,
                label=f"{label} ({detector})")
    ax.set_xlabel("C-OOD severity level (0 = easiest, 10 = hardest)")
    ax.set_ylabel("AUROC" if metric == "auroc" else metric)
    ax.set_title(f"{label} among the published C-OOD curves, kappa = {k}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower left")
    return fig


def _interval_columns(rows: pd.DataFrame, metric: str) -> tuple[np.ndarray | None, np.ndarray | None]:
    for low, high in ((f"{metric}_ci_low", f"{metric}_ci_high"), ("ci_low", "ci_high")):
        if low in rows.columns and high in rows.columns and rows[low].notna().all():
            return rows[low].to_numpy(dtype=float), rows[high].to_numpy(dtype=float)
    return None, None
