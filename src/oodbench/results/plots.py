"""Figures of a results table (matplotlib, no global pyplot state; PNG bytes for the report).

    severity_curves(table, "cood", "resnet50")     # AUROC against C-OOD level, the best highlighted
    group_heatmap(table, "openood", "resnet50")    # AUROC per detector x OOD group
    score_histogram(id_scores, {"level_0": ..})     # ID against OOD score distributions
    to_png(fig)                                     # bytes
"""

from __future__ import annotations

import io
from collections.abc import Mapping

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from oodbench.results.leaderboard import METRIC_LABELS, by_group, leaderboard

_MARKERS = "os^DvP*Xh<>p"
#: up to this many detectors, each has its own colour in the severity curves
ALL_COLOURED = 8
#: beyond that, the best this many are highlighted and the others drawn light
HIGHLIGHT = 5


def to_png(fig: Figure, dpi: int = 110) -> bytes:
    """The figure as PNG bytes."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    return buf.getvalue()


def _model_rows(
    table: pd.DataFrame, benchmark: str, model: str, metric: str
) -> tuple[pd.DataFrame, list[str]]:
    """``by_group`` rows of ``model`` (one per detector configuration) and their group columns."""
    rows = by_group(table, benchmark, metric)
    rows = rows[rows["model"] == model]
    return rows, [c for c in rows.columns if c not in ("model", "detector", "hyperparams", "label")]


def severity_curves(
    table: pd.DataFrame, benchmark: str, model: str, metric: str = "auroc"
) -> Figure | None:
    """``metric`` against C-OOD severity level for every detector of ``model``, with the 95 %
    interval of each point as an error bar where the rows carry ``ci_low``/``ci_high``.

    Up to :data:`ALL_COLOURED` detectors each get a colour and a marker; beyond that (the demo
    runs 39) the :data:`HIGHLIGHT` best by mean ``metric`` do, with their intervals, and the
    others are thin light-grey lines under them (one legend entry), so no two highlighted
    detectors share a colour and the best stay readable.
    """
    rows, levels = _model_rows(table, benchmark, model, metric)
    if rows.empty:
        return None
    bounds = {b: by_group(table, benchmark, metric, values=b).set_index(["model", "detector",
                                                                          "hyperparams"])
              for b in ("ci_low", "ci_high")}
    x = np.arange(len(levels))
    order = rows.assign(_mean=rows[levels].mean(axis=1)).sort_values("_mean", ascending=False)
    n_shown = len(order) if len(order) <= ALL_COLOURED else HIGHLIGHT
    fig = Figure(figsize=(8.2, 4.4))
    ax = fig.subplots()
    colors = _colors(n_shown)
    rest = order.iloc[n_shown:]
    for i, (_, row) in enumerate(rest.iterrows()):  # under the highlighted ones
        ax.plot(x, row[levels].to_numpy(dtype=float), color="0.78", linewidth=0.8, zorder=1,
                label=f"the other {len(rest)} detectors" if i == 0 else None)
    for i, (_, row) in enumerate(order.iloc[:n_shown].iterrows()):
        y = row[levels].to_numpy(dtype=float)
        key = (row["model"], row["detector"], row["hyperparams"])
        low, high = (bounds[b].loc[key, levels].to_numpy(dtype=float)
                     if key in bounds[b].index else np.full(len(levels), np.nan)
                     for b in ("ci_low", "ci_high"))
        err = np.vstack([y - low, high - y]) if np.isfinite(low).any() else None
        ax.errorbar(x, y, yerr=err, marker=_MARKERS[i % len(_MARKERS)], markersize=4, capsize=2,
                    elinewidth=0.8, linewidth=2.0 if i < 3 else 1.1, color=colors[i], zorder=3,
                    label=f"{i + 1}. {row['label']}" if len(rest) else row["label"])
    ax.set_xticks(x, [str(i) for i in range(len(levels))])
    ax.set_xlabel("C-OOD severity level (0 = easiest, last = hardest)")
    ax.set_ylabel(METRIC_LABELS.get(metric, metric))
    ax.set_title(f"{model}: {benchmark}")
    if metric == "auroc":
        ax.axhline(0.5, color="0.6", linestyle=":", linewidth=1)
    ax.grid(alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    if len(rest):  # the highlighted detectors first, best first; the grey entry last
        handles, labels = handles[1:] + handles[:1], labels[1:] + labels[:1]
    ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7,
              frameon=False)
    return fig


def group_heatmap(
    table: pd.DataFrame, benchmark: str, model: str, metric: str = "auroc"
) -> Figure | None:
    """A detector x OOD group grid of ``metric`` for ``model``, detectors in leaderboard order."""
    rows, groups = _model_rows(table, benchmark, model, metric)
    if rows.empty:
        return None
    board = leaderboard(table, benchmark)
    board = board[board["model"] == model]
    rows = rows.set_index(["detector", "hyperparams"]).loc[
        list(zip(board["detector"], board["hyperparams"]))].reset_index()
    values = rows[groups].to_numpy(dtype=float)
    fig = Figure(figsize=(1.2 + 1.1 * len(groups), 0.8 + 0.26 * len(rows)))
    ax = fig.subplots()
    image = ax.imshow(values, aspect="auto", cmap="viridis", vmin=np.nanmin(values),
                      vmax=np.nanmax(values))
    ax.set_xticks(range(len(groups)), groups, rotation=30, ha="right")
    ax.set_yticks(range(len(rows)), rows["label"])
    for (i, j), v in np.ndenumerate(values):
        if np.isfinite(v):
            ax.text(j, i, f"{v:.3f}", ha="center", va="center", fontsize=7,
                    color="white" if v < np.nanmean(values) else "black")
    ax.set_xlabel("OOD group")
    ax.set_ylabel("detector (best first)")
    ax.set_title(f"{model}: {METRIC_LABELS.get(metric, metric)} on {benchmark}")
    fig.colorbar(image, ax=ax, fraction=0.04, pad=0.02)
    return fig


def score_histogram(
    id_scores: np.ndarray, ood: Mapping[str, np.ndarray], *, title: str = "", bins: int = 40,
    max_groups: int = 5,
) -> Figure:
    """ID against OOD score densities on shared bins.

    At most ``max_groups`` OOD groups are drawn (evenly spaced ones, so C-OOD's easiest and
    hardest levels are always there). The bins span the 0.5-99.5 % quantiles of all scores;
    the few scores outside (distance-based scores have long tails) go to the edge bins.
    """
    names = list(ood)
    if len(names) > max_groups:
        names = [names[int(i)] for i in np.round(np.linspace(0, len(names) - 1, max_groups))]
    arrays = [np.asarray(id_scores, dtype=float)] + [np.asarray(ood[n], dtype=float) for n in names]
    finite = np.concatenate([a[np.isfinite(a)] for a in arrays])
    lo, hi = (tuple(np.quantile(finite, [0.005, 0.995])) if finite.size else (0.0, 1.0))
    hi = hi if hi > lo else lo + 1.0
    edges = np.linspace(lo, hi, bins + 1).tolist()
    arrays = [np.clip(a, lo, hi) for a in arrays]
    fig = Figure(figsize=(6.4, 3.4))
    ax = fig.subplots()
    ax.hist(arrays[0], bins=edges, density=True, color="0.75", label=f"ID (n={arrays[0].size})")
    colors = _colors(len(names))
    for i, (name, values) in enumerate(zip(names, arrays[1:])):
        ax.hist(values, bins=edges, density=True, histtype="step", linewidth=1.6,
                color=colors[i], label=f"{name} (n={values.size})")
    ax.set_xlabel("score κ (higher = more in-distribution; tails clipped to the edge bins)")
    ax.set_ylabel("density")
    ax.set_title(title)
    ax.legend(fontsize=7, frameon=False)
    ax.grid(alpha=0.3)
    return fig


def _colors(n: int) -> list[tuple[float, float, float, float]]:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(max(n, 1))]
