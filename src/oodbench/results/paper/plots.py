"""Figures of the published C-OOD results: severity curves per model or kappa, and a user's
curve drawn over the published ones."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from oodbench.errors import InvalidInputError, UnknownNameError
from oodbench.published.cood import PAPER_KAPPAS, kappa_for
from oodbench.results.paper.protocol import paper_positions
from oodbench.results.paper.queries import get, kappa_name, row_labels, select


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

    ``own``: extra curves, ``{label: CoodBenchmark rows of one detector}``, drawn dashed, each
    level at its place on the paper's 0..10 axis (:func:`paper_positions`).
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
    for label, results in (own or {}).items():  # at their places on the paper's 0..10 axis
        x = paper_positions(results).to_numpy()
        order = np.argsort(x, kind="stable")
        ax.plot(x[order], results[metric].to_numpy()[order], marker="s", linestyle="--",
                label=label)
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
    top (one per configuration of the detector, :func:`row_labels`), each level at its place
    on the paper's 0..10 axis (:func:`paper_positions`), with its 95 % interval as error bars
    when the rows carry ``ci_low``/``ci_high`` (long rows) or ``<metric>_ci_low``/
    ``<metric>_ci_high`` (wide rows). Returns a matplotlib ``Figure`` (no global pyplot state).
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
    fig = Figure(figsize=(7.6, 4.4))
    _panel(fig.subplots(), df, k, mine, metric, label,
           title=f"{label} among the published C-OOD curves, kappa = {k}")
    return fig


def rank_panels(
    model_results: pd.DataFrame, kappa: str | None = None
) -> tuple[dict[str, pd.DataFrame], dict[str, str]]:
    """The panels of :func:`plot_rank`: ``{published kappa: the rows drawn in it}`` (every
    detector computing that kappa, or every row with ``kappa``), and ``{detector: why it has
    no panel}`` for the detectors without a published kappa."""
    panels: dict[str, list[pd.DataFrame]] = {}
    missing: dict[str, str] = {}
    for name, rows in model_results.groupby(model_results["detector"].astype(str), sort=False):
        try:
            k = kappa_for(kappa or name).kappa
        except UnknownNameError as err:
            missing[name] = str(err)
            continue
        panels.setdefault(k, []).append(rows)
    return {k: pd.concat(parts) for k, parts in panels.items()}, missing


def plot_rank(
    df: pd.DataFrame,
    model_results: pd.DataFrame,
    *,
    kappa: str | None = None,
    metric: str = "auroc",
    label: str = "yours",
) -> Any:
    """Every detector of ``model_results`` over the published curves of its kappa, in one
    ``Figure``: a panel per published kappa (:func:`rank_panels`), drawn as
    :func:`plot_among_published` draws one. Raises ``UnknownNameError`` when no detector has a
    published kappa."""
    from matplotlib.figure import Figure

    panels, missing = rank_panels(model_results, kappa)
    if not panels:
        raise UnknownNameError("paper confidence function", next(iter(missing)),
                               {k.kappa for k in PAPER_KAPPAS} | {k.detector for k in PAPER_KAPPAS})
    columns = min(len(panels), 2)
    rows = -(-len(panels) // columns)
    fig = Figure(figsize=(7.6 * columns, 4.4 * rows))
    axes = np.atleast_1d(fig.subplots(rows, columns)).ravel()
    for ax, (k, mine) in zip(axes, panels.items()):
        _panel(ax, df, k, mine, metric, label, title=f"kappa = {k}")
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    fig.suptitle(f"{label} among the published C-OOD curves")
    fig.tight_layout()
    return fig


def _panel(ax: Any, df: pd.DataFrame, k: str, mine: pd.DataFrame, metric: str, label: str, *,
           title: str) -> None:
    """The published curves of kappa ``k`` in grey, their median dashed, and one curve of
    ``mine`` per model and detector configuration on top."""
    published = select(df, k, None).pivot_table(index="model", columns="level", values=metric)
    x = published.columns.to_numpy()
    for values in published.to_numpy():
        ax.plot(x, values, color="0.7", linewidth=0.5, alpha=0.35)
    ax.plot(x, np.nanmedian(published.to_numpy(), axis=0), color="0.3", linestyle="--",
            linewidth=1.4, label=f"published median ({len(published)} models)")
    names = row_labels(mine)
    if "model" in mine.columns and mine["model"].nunique() > 1:
        names = mine["model"].astype(str) + ": " + names
    for i, (name, rows) in enumerate(mine.groupby(names.to_numpy(), sort=False)):
        _curve(ax, rows, metric, f"{label} ({name})", f"C{(3 + i) % 10}")
    ax.set_xlabel("C-OOD severity level (0 = easiest, 10 = hardest)")
    ax.set_ylabel("AUROC" if metric == "auroc" else metric)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower left")


def _curve(ax: Any, rows: pd.DataFrame, metric: str, legend: str, color: str) -> None:
    """One configuration's levels at their places on the paper's axis (:func:`paper_positions`),
    with error bars when the rows carry their interval."""
    x = paper_positions(rows).to_numpy()
    order = np.argsort(x, kind="stable")
    y = rows[metric].to_numpy(dtype=float)[order]
    low, high = _interval_columns(rows, metric)
    if low is not None and high is not None:
        err = np.vstack([y - low[order], high[order] - y])
        ax.errorbar(x[order], y, yerr=err, color=color, marker="o", linewidth=2.2, capsize=3,
                    label=f"{legend}, 95 % CI")
    else:
        ax.plot(x[order], y, color=color, marker="o", linewidth=2.2, label=legend)


def _interval_columns(rows: pd.DataFrame, metric: str) -> tuple[np.ndarray | None, np.ndarray | None]:
    for low, high in ((f"{metric}_ci_low", f"{metric}_ci_high"), ("ci_low", "ci_high")):
        if low in rows.columns and high in rows.columns and rows[low].notna().all():
            return rows[low].to_numpy(dtype=float), rows[high].to_numpy(dtype=float)
    return None, None
